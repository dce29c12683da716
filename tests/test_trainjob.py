"""Kubeflow Trainer v2 (policies/kinds.py rows, policies/derived.py, policies/references.py):
a TrainJob's training pods derived from ``numNodes`` and ``resourcesPerNode``, with and
without its runtime in the same file; runtimes' templates judged but never placed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from feasibility_helpers import feasibility_findings, node, snapshot

from lint.cli import Report, lint_text
from policies import references
from policies.config import Policy, policy_from_data
from policies.derived import TOLERATE_ALL
from policies.engine import evaluate
from policies.workload import ShapeError, Workload, build_workload

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def trainjob(nodes: int | None = 2, gpus: int | None = 16, *, runtime: str = "torch-distributed",
             kind: str | None = "ClusterTrainingRuntime", namespace: str | None = "ml", **spec: Any) -> Obj:
    trainer: Obj = {"image": "pytorch/pytorch:2.7"}
    if nodes is not None:
        trainer["numNodes"] = nodes
    if gpus is not None:
        trainer["resourcesPerNode"] = {"limits": {GPU: gpus, "cpu": "8", "memory": "64Gi"}}
    ref: Obj = {"name": runtime}
    if kind is not None:
        ref |= {"apiGroup": "trainer.kubeflow.org", "kind": kind}
    meta: Obj = {"name": "llm"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
            "spec": {"runtimeRef": ref, "trainer": trainer, **spec}}


def runtime(name: str = "torch-distributed", kind: str = "ClusterTrainingRuntime", *,
            namespace: str | None = None, num_nodes: int | None = 1, pod_spec: Obj | None = None,
            label: bool = True, job_name: str = "node") -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    job_meta = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}} if label else {}
    spec: Obj = {"template": {"spec": {"replicatedJobs": [
        {"name": "dataset-initializer", "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "x"}]}}}}},
        {"name": job_name, "template": {"metadata": job_meta, "spec": {"template": {"spec": pod_spec or {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.7"}]}}}}},
    ]}}}
    if num_nodes is not None:
        spec["mlPolicy"] = {"numNodes": num_nodes, "torch": {}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def node_spec(image: str = "x", **extra: Any) -> Obj:
    """A runtime's trainer pod spec: the ``node`` container and ``extra`` fields."""
    return {"containers": [{"name": "node", "image": image}], **extra}


def built(doc: Obj, *others: Obj) -> Workload:
    """``doc``'s workload, with ``others`` (and ``doc``) as the file it is in, when given."""
    refs = references.References.of([doc, *others]) if others else None
    with references.scope(refs):
        found = build_workload(doc)
    assert found is not None
    return found


def gpu_nodes(count: int = 2, gpus: int = 8, **kwargs: Any) -> Any:
    return snapshot([node(f"gpu-{i}", {"cpu": "96", "memory": "1000Gi", GPU: str(gpus)}, **kwargs)
                     for i in range(count)])


def judged(doc: Obj, *others: Obj, cluster: Any = None, policy: Policy | None = None) -> dict[str, list[str]]:
    refs = references.References.of([doc, *others]) if others else None
    with references.scope(refs):
        result = evaluate(doc, policy or Policy(), [cluster or gpu_nodes()])
    if doc["kind"] == "TrainJob":
        assert not result.patch, "a derived pod set is never patched"
    return feasibility_findings(result)


def errors(found: dict[str, list[str]]) -> dict[str, list[str]]:
    return {rule: [m for m in messages if m.startswith("error")] for rule, messages in found.items()
            if any(m.startswith("error") for m in messages)}


# -- without the runtime: what is certain ------------------------------------------------------

def test_trainjob_alone_derives_num_nodes_pods_of_resources_per_node() -> None:
    w = built(trainjob(3, 8))
    assert w.pod_sets == [], "no pod template of its own: nothing to patch or point into"
    [pods] = w.derived
    assert (pods.name, pods.replicas, pods.gang_count, pods.path) == ("node", 3, 3, "/spec/trainer")
    assert pods.spec == {"containers": [{"name": "node", "resources": {
        "limits": {GPU: 8, "cpu": "8", "memory": "64Gi"}}}], "tolerations": [TOLERATE_ALL]}
    assert w.gang_pod_sets == [pods] and w.total_replicas == 3 and w.gang_min == 3
    assert pods.requests[GPU] == 8


def test_trainjob_alone_without_num_nodes_or_resources_is_one_bare_pod() -> None:
    w = built(trainjob(None, None))
    [pods] = w.derived
    assert pods.replicas == 1
    assert pods.spec["containers"] == [{"name": "node"}]


def test_trainjob_fields_of_the_wrong_type_are_gg002() -> None:
    with pytest.raises(ShapeError) as wrong:
        built(trainjob("two", 8))  # type: ignore[arg-type]
    assert wrong.value.path == "/spec/trainer/numNodes"
    doc = trainjob(2, 8)
    doc["spec"]["trainer"]["resourcesPerNode"] = "lots"
    with pytest.raises(ShapeError) as wrong:
        built(doc)
    assert wrong.value.path == "/spec/trainer/resourcesPerNode"


def test_two_nodes_of_16_gpus_never_fit_8_gpu_nodes() -> None:
    found = judged(trainjob(2, 16))
    assert "GG403" in errors(found), found
    assert any("16" in m for m in found["GG403"])


def test_two_nodes_of_8_gpus_fit_8_gpu_nodes() -> None:
    assert errors(judged(trainjob(2, 8))) == {}


def test_trainjob_alone_ignores_taints_it_cannot_know_it_tolerates() -> None:
    # Every node tainted: the runtime may tolerate it, so alone the TrainJob is not refused.
    tainted = gpu_nodes(taints=[{"key": "gpu", "value": "only", "effect": "NoSchedule"}])
    assert errors(judged(trainjob(2, 8), cluster=tainted)) == {}


def test_trainjob_gpu_with_usage_policy_injects_nothing() -> None:
    policy = policy_from_data({"usage": {"scope": "all"}})
    doc = trainjob(2, 8)
    result = evaluate(doc, policy, None)
    assert result.patch == [] and result.mutated is None


# -- with its runtime in the same file -----------------------------------------------------------

def test_runtime_in_the_same_file_gives_the_template() -> None:
    rt = runtime(pod_spec={"containers": [{"name": "node", "image": "x"}, {"name": "sidecar", "image": "y",
                           "resources": {"requests": {"cpu": "2"}}}], "nodeSelector": {"pool": "a100"}})
    w = built(trainjob(2, 8), rt)
    [pods] = w.derived
    assert [c["name"] for c in pods.spec["containers"]] == ["node", "sidecar"]
    assert pods.spec["containers"][0]["resources"] == {"limits": {GPU: 8, "cpu": "8", "memory": "64Gi"}}
    assert pods.spec["nodeSelector"] == {"pool": "a100"}, "no patches: the runtime's placement holds"
    assert "tolerations" not in pods.spec
    assert pods.requests["cpu"] == 10  # the node's 8 and the sidecar's 2


def test_runtime_document_order_does_not_matter() -> None:
    rt = runtime(pod_spec={"containers": [{"name": "node", "image": "x"}], "nodeSelector": {"pool": "h100"}})
    job = trainjob(2, 8)
    for order in ([rt, job], [job, rt]):
        with references.scope(references.References.of(order)):
            w = build_workload(job)
        assert w is not None and w.derived[0].spec["nodeSelector"] == {"pool": "h100"}


def test_num_nodes_from_the_runtime_when_the_trainjob_sets_none() -> None:
    assert built(trainjob(None, 8), runtime(num_nodes=4)).derived[0].replicas == 4
    assert built(trainjob(None, 8), runtime(num_nodes=None)).derived[0].replicas == 1
    assert built(trainjob(2, 8), runtime(num_nodes=4)).derived[0].replicas == 2


def test_the_step_is_the_labelled_job_or_the_one_named_node() -> None:
    labelled = runtime(job_name="trainer-x", pod_spec={"containers": [{"name": "node", "image": "z"}]})
    assert built(trainjob(2, 8), labelled).derived[0].spec["containers"][0]["image"] == "z"
    named = runtime(label=False, pod_spec={"containers": [{"name": "node", "image": "n"}]})
    assert built(trainjob(2, 8), named).derived[0].spec["containers"][0]["image"] == "n"
    neither = runtime(label=False, job_name="other")
    assert built(trainjob(2, 8), neither).derived[0].spec["tolerations"] == [TOLERATE_ALL]


@pytest.mark.parametrize("patch", [
    {"runtimePatches": [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}]},
    {"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "tolerations": []}]},
    {"podTemplateOverrides": [{"targetJobs": [{"name": "node"}]}]},
    {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},   # Kueue patches the runtime when it admits
])
def test_patches_make_the_runtime_placement_untrusted(patch: Obj) -> None:
    rt = runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}, affinity={"nodeAffinity": {}},
                                    nodeName="n1"))
    job = trainjob(2, 8, **{k: v for k, v in patch.items() if k != "labels"})
    if "labels" in patch:
        job["metadata"]["labels"] = patch["labels"]
    spec = built(job, rt).derived[0].spec
    assert "nodeSelector" not in spec and "affinity" not in spec and "nodeName" not in spec
    assert spec["tolerations"] == [TOLERATE_ALL]


def test_runtime_selector_that_no_node_matches_never_fits_unless_patched() -> None:
    rt = runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}))
    assert "GG403" in errors(judged(trainjob(2, 8), rt))
    patched = trainjob(2, 8, runtimePatches=[{"manager": "me", "trainingRuntimeSpec": {}}])
    assert errors(judged(patched, rt)) == {}


def test_namespaced_runtime_is_found_in_the_trainjob_namespace_only() -> None:
    rt = runtime("team-rt", "TrainingRuntime", namespace="ml", pod_spec={
        "containers": [{"name": "node", "image": "mine"}]})
    assert built(trainjob(2, 8, runtime="team-rt", kind="TrainingRuntime"), rt).derived[0] \
        .spec["containers"][0]["image"] == "mine"
    elsewhere = trainjob(2, 8, runtime="team-rt", kind="TrainingRuntime", namespace="other")
    assert built(elsewhere, rt).derived[0].spec["tolerations"] == [TOLERATE_ALL]


def test_cluster_runtime_is_found_from_any_namespace_and_is_the_default_kind() -> None:
    rt = runtime(pod_spec={"containers": [{"name": "node", "image": "c"}]}, namespace="ignored")
    spec = built(trainjob(2, 8, kind=None, namespace="x"), rt).derived[0].spec
    assert spec["containers"][0]["image"] == "c"


def test_two_runtimes_of_one_name_resolve_to_nothing() -> None:
    a = runtime(pod_spec={"containers": [{"name": "node", "image": "a"}]})
    b = runtime(pod_spec={"containers": [{"name": "node", "image": "b"}]})
    assert built(trainjob(2, 8), a, b).derived[0].spec["tolerations"] == [TOLERATE_ALL]


def test_without_a_scope_nothing_is_resolved() -> None:
    rt = runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}))
    assert references.current() is None
    assert built(trainjob(2, 8)).derived[0].spec["tolerations"] == [TOLERATE_ALL]
    assert rt  # (in the file but not in scope: the webhook's case)


# -- the runtimes: templates, not pods -----------------------------------------------------------

@pytest.mark.parametrize("kind", ["ClusterTrainingRuntime", "TrainingRuntime"])
def test_runtime_templates_are_judged_but_not_placed(kind: str) -> None:
    rt = runtime(kind=kind, namespace="ml" if kind == "TrainingRuntime" else None, pod_spec={
        "containers": [{"name": "node", "image": "x", "resources": {"limits": {GPU: 16}}}]})
    w = built(rt)
    assert [(p.name, p.replicas, p.gang_count) for p in w.pod_sets] == [
        ("dataset-initializer", 0, 0), ("node", 0, 0)]
    assert w.pod_sets[1].path == "/spec/template/spec/replicatedJobs/1/template/spec/template"
    assert w.derived == [] and w.total_replicas == 0
    assert errors(judged(rt)) == {}, "a 16-GPU template is no pod: the TrainJob sets the resources"


def test_runtime_template_spec_checks_still_apply() -> None:
    rt = runtime(pod_spec={"containers": [{"name": "node", "image": "x",
                                           "resources": {"limits": {"cpu": "lots"}}}]})
    report = Report()
    lint_text(yaml.safe_dump(rt), "rt.yaml", Policy(), report)
    assert "GG504" in {f.finding.rule for f in report.findings}


# -- the corpus: nothing refused ------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kubeflow__trainer"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no corpus")
@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")) if CORPUS.is_dir() else [],
                         ids=lambda p: p.name)
def test_trainer_corpus_gets_no_error_with_or_without_its_runtimes(path: Path) -> None:
    text = path.read_text()
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    runtimes = [yaml.safe_load(p.read_text()) for p in sorted(CORPUS.glob("manifests__base__runtimes__*"))]
    for refs in (None, references.References.of([*docs, *runtimes])):
        for doc in docs:
            with references.scope(refs):
                result = evaluate(doc, Policy(), [gpu_nodes()])
            bad = [(f.rule, f.message) for f in result.findings if str(f.severity) == "error"]
            assert not bad, f"{path.name}: {bad}"
    report = Report()
    lint_text(textwrap.dedent(text), path.name, Policy(), report)
    assert report.internal_errors == 0
    assert not [f for f in report.findings if str(f.finding.severity) == "error"]


def test_the_linter_resolves_the_runtime_from_the_same_file_in_any_order() -> None:
    """`gpugate lint` judges each object with the file's runtimes at hand (first or last),
    and the same TrainJob alone in another file in the same process is judged alone."""
    rt = runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}))
    job = trainjob(2, 8)

    def gg403(*docs: Obj) -> list[str]:
        report = Report()
        lint_text(yaml.safe_dump_all(list(docs)), "f.yaml", Policy(), report, [gpu_nodes()])
        return [loc.finding.rule for loc in report.findings if loc.finding.rule == "GG403"]

    assert gg403(rt, job) == ["GG403"] and gg403(job, rt) == ["GG403"]
    assert gg403(job) == []


def test_the_linter_resolves_the_runtime_from_another_file_of_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpugate lint job.yaml runtimes/` judges the TrainJob with the runtime of the other file;
    the TrainJob linted alone is judged on what it says (no runtime, no verdict on placement)."""
    from lint.cli import lint_main

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(trainjob(2, 8)))
    (tmp_path / "runtimes").mkdir()
    (tmp_path / "runtimes" / "torch.yaml").write_text(
        yaml.safe_dump(runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}))))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(
        [node(f"gpu-{i}", {"cpu": "96", "memory": "1000Gi", GPU: "8"}) for i in range(2)]))

    def rules(*paths: Path) -> set[str]:
        lint_main([*map(str, paths), "--cluster", str(cluster), "--format", "json", "--fail-on", "never"])
        return {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}

    assert "GG403" in rules(tmp_path / "job.yaml", tmp_path / "runtimes")
    assert "GG403" not in rules(tmp_path / "job.yaml")


def test_the_cluster_runtime_of_the_snapshot_is_the_trainjobs_runtime() -> None:
    """A TrainJob judged against one member cluster (the webhook's live view, `--cluster`)
    is judged with the runtime that cluster has; a runtime given with the TrainJob wins."""
    rt = runtime(pod_spec=node_spec(nodeSelector={"pool": "nowhere"}))
    nodes = [node(f"gpu-{i}", {"cpu": "96", "memory": "1000Gi", GPU: "8"}) for i in range(2)]
    with_runtime = snapshot([*nodes, rt])
    found = evaluate(trainjob(2, 8), Policy(), [with_runtime]).findings
    assert "GG403" in {f.rule for f in found}
    assert "GG403" not in {f.rule for f in evaluate(trainjob(2, 8), Policy(), [snapshot(nodes)]).findings}
    # the runtime of the linted files comes first (a fixed runtime about to be applied)
    fitting = runtime(pod_spec=node_spec())
    with references.scope(references.References.of([fitting])):
        assert "GG403" not in {f.rule for f in evaluate(trainjob(2, 8), Policy(), [with_runtime]).findings}
    # a runtime deleted from the cluster is forgotten
    with_runtime.topology.apply("DELETED", rt)
    assert "GG403" not in {f.rule for f in evaluate(trainjob(2, 8), Policy(), [with_runtime]).findings}
