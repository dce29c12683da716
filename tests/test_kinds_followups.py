"""Follow-ups of the kinds of 2026 (issue 19): GG304 judges each queue system's names by its
own rules (YuniKorn's are paths, not object names), KAI GPU shares are GPU pods for the usage
rules (never for the resource rules), and the usage defaults of the new kinds."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from feasibility_helpers import gpu_node, node, snapshot

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.feasibility.questions import _scheduler_queues, _volcano_queue
from policies.findings import Severity
from policies.gpu import gpu_pod_sets, is_gpu_pod_set, is_gpu_share, is_gpu_workload
from policies.kinds import COMMON_QUEUES
from policies.rules.gg304_queue_name_format import yunikorn_queue_problem
from policies.usage import steered_pod_sets, workload_usage
from policies.workload import Workload, build_workload

POLICY = Policy()
USAGE_LABEL = "maip.mxsf.io/usage"
USAGE_KEY = "maip.mxsf.io/node.usage"
GPU = "nvidia.com/gpu"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def built(doc: dict[str, Any]) -> Workload:
    w = build_workload(doc)
    assert w is not None
    return w


def findings(doc: dict[str, Any], rule: str, policy: Policy = POLICY,
             clusters: list[Any] | None = None) -> list[tuple[Severity, str, str]]:
    """(severity, message, path) of ``rule``'s findings on ``doc``."""
    return [(f.severity, f.message, f.path) for f in evaluate(doc, policy, clusters).findings
            if f.rule == rule]


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        scheduler: str | None = "yunikorn", gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "cuda"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec}


# -- GG304: each system's names by its own rules -----------------------------------------------

@pytest.mark.parametrize(("labels", "annotations"), [
    ({}, {"scheduling.volcano.sh/queue-name": "ML_Team"}),          # Volcano Queue: an object
    ({"kueue.x-k8s.io/queue-name": "Team-A"}, {}),                  # Kueue LocalQueue: an object
    ({"kai.scheduler/queue": "team_a"}, {}),                        # KAI Queue: an object
])
def test_object_queue_names_must_be_dns_subdomains(labels: dict[str, str],
                                                   annotations: dict[str, str]) -> None:
    found = findings(pod(labels, annotations, scheduler=None), "GG304")
    assert [severity for severity, _, _ in found] == [Severity.ERROR], found
    assert "DNS-1123 subdomain" in found[0][1]


def test_yunikorn_queue_sources_are_judged_by_system() -> None:
    assert sum(s.system == "yunikorn" for s in COMMON_QUEUES) == 3
    w = built(pod({"queue": "my_special_queue"}, {"yunikorn.apache.org/queue": "root.Team_A"}))
    assert {(q.name, q.system, q.path) for q in w.queues} == {
        ("my_special_queue", "yunikorn", "/metadata/labels/queue"),
        ("root.Team_A", "yunikorn", "/metadata/annotations/yunikorn.apache.org~1queue")}


@pytest.mark.parametrize("name", [
    "my_special_queue", "root.Team_A", "root.sandbox", "root", "root.a-b.c_d", "root.x:y#z/w@v",
    "team.with.dots",           # not under root: one queue "team_dot_with_dot_dots"
    "a" * 63, "root." + "a" * 58,
])
def test_yunikorn_queue_paths_pass(name: str) -> None:
    assert yunikorn_queue_problem(name) == ""
    assert findings(pod({"queue": name}), "GG304") == []


@pytest.mark.parametrize(("name", "says"), [
    ("root..team", "empty part"),
    ("root.team.", "empty part"),
    ("root.team a", "character other than"),
    ("root.t\u00e9am", "character other than"),
    ("root." + "a" * 65, "65 characters long"),
    ("a" * 65, "65 characters long"),
    (".".join(["ab"] * 14), "once each '.' is '_dot_'"),   # 41 characters, 106 once expanded
    ("team!", "character other than"),
])
def test_yunikorn_queue_paths_that_can_never_be_used_warn(name: str, says: str) -> None:
    assert says in yunikorn_queue_problem(name)
    found = findings(pod(annotations={"yunikorn.apache.org/queue": name}), "GG304")
    assert len(found) == 1, found
    severity, message, path = found[0]
    assert severity == Severity.WARNING  # YuniKorn's placement rules decide: never a denial
    assert says in message and "not a YuniKorn queue path" in message
    assert path == "/metadata/annotations/yunikorn.apache.org~1queue"


def test_yunikorn_reads_one_queue_in_its_order() -> None:
    """The canonical label, else the annotation, else the label ``queue``: only the one
    YuniKorn reads is judged."""
    bad = "root..x"
    assert findings(pod({"yunikorn.apache.org/queue": "root.ok", "queue": bad},
                        {"yunikorn.apache.org/queue": bad}), "GG304") == []
    assert findings(pod({"queue": bad}, {"yunikorn.apache.org/queue": "root.ok"}), "GG304") == []
    found = findings(pod({"queue": bad}), "GG304")
    assert [path for _, _, path in found] == ["/metadata/labels/queue"]
    found = findings(pod({"yunikorn.apache.org/queue": bad}), "GG304")
    assert [path for _, _, path in found] == ["/metadata/labels/yunikorn.apache.org~1queue"]


def test_yunikorn_keys_are_read_only_where_yunikorn_schedules() -> None:
    """The label ``queue`` is anyone's: under another scheduler it names no YuniKorn queue."""
    for scheduler in (None, "volcano", "kai-scheduler"):
        assert findings(pod({"queue": "root..x"}, scheduler=scheduler), "GG304") == []


@pytest.mark.parametrize(("object_labels", "flagged"), [
    ({"ray.io/scheduler-name": "yunikorn"}, True),
    # KubeRay writes the object's label over the pods' label ``queue``: the template's is not read
    ({"ray.io/scheduler-name": "yunikorn", "yunikorn.apache.org/queue": "root.good"}, False),
])
def test_a_controller_may_replace_the_template_queue_label(object_labels: dict[str, str],
                                                           flagged: bool) -> None:
    doc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
           "metadata": {"name": "r", "labels": object_labels},
           "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {
               "metadata": {"labels": {"queue": "root..bad"}},
               "spec": {"containers": [{"name": "h", "image": "ray"}]}}}}}
    found = findings(doc, "GG304")
    assert [path for _, _, path in found] == (["/spec/headGroupSpec/template/metadata/labels/queue"]
                                               if flagged else [])


def test_yunikorn_queue_on_a_deployment_template() -> None:
    doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
           "spec": {"replicas": 2, "template": {
               "metadata": {"annotations": {"yunikorn.apache.org/queue": "root.a..b"}},
               "spec": {"schedulerName": "yunikorn", "containers": [{"name": "c", "image": "x"}]}}}}
    found = findings(doc, "GG304")
    where = "/spec/template/metadata/annotations/yunikorn.apache.org~1queue"
    assert [path for _, _, path in found] == [where]


def test_the_corpus_yunikorn_examples_get_no_gg304(corpus_dir: Path) -> None:
    paths = [p for p in corpus_dir.rglob("*.yaml") if "yunikorn" in p.read_text(errors="replace")]
    assert any("my_special_queue" in p.read_text() for p in paths)
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            assert not [f for f in evaluate(doc, POLICY).findings if f.rule == "GG304"], path


def test_other_readers_of_the_queues_pick_by_system() -> None:
    """A YuniKorn queue is no Volcano, Kueue or KAI queue: GG302 and feasibility's queue
    checks leave it alone; GG305 counts it as a queue named."""
    w = built(pod({"queue": "root.team"}, gpus=1))
    assert _volcano_queue(w) is None and _scheduler_queues(w, POLICY) == ((), ())
    assert findings(pod({"queue": "root.team"}, gpus=1), "GG302") == []
    require = policy_from_data({"queues": {"require": True}}, "p.yaml")
    assert findings(pod({"queue": "root.team"}, gpus=1), "GG305", require) == []
    assert findings(pod(gpus=1), "GG305", require)


# -- KAI GPU shares are GPU pods for the usage rules -------------------------------------------

SHARES = [{"gpu-fraction": "0.5"}, {"gpu-memory": "2000"}]


def share_pod(annotation: dict[str, str], labels: dict[str, str] | None = None,
              scheduler: str = "kai-scheduler") -> dict[str, Any]:
    return pod({"kai.scheduler/queue": "default-queue", **(labels or {})}, annotation, scheduler)


@pytest.mark.parametrize("annotation", SHARES)
def test_a_kai_share_is_a_gpu_workload(annotation: dict[str, str]) -> None:
    w = built(share_pod(annotation))
    assert is_gpu_share(w.pod_sets[0]) and is_gpu_pod_set(w.pod_sets[0], POLICY)
    assert is_gpu_workload(w, POLICY) and gpu_pod_sets(w, POLICY) == w.pod_sets


@pytest.mark.parametrize("scheduler", ["default-scheduler", "volcano", "yunikorn"])
def test_share_annotations_mean_nothing_to_other_schedulers(scheduler: str) -> None:
    w = built(share_pod(SHARES[0], scheduler=scheduler))
    assert not is_gpu_workload(w, POLICY)
    assert findings(share_pod(SHARES[0], scheduler=scheduler), "GG103") == []  # out of scope


@pytest.mark.parametrize("annotation", SHARES)
def test_a_share_pod_gets_the_usage_affinity_and_tolerations(annotation: dict[str, str]) -> None:
    """Steered like any GPU pod (GG101): the same patch as a pod requesting one GPU."""
    share = share_pod(annotation, {USAGE_LABEL: "inference"})
    whole = share_pod({}, {USAGE_LABEL: "inference"})
    whole["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    patch = evaluate(share, POLICY).patch
    assert patch and patch == evaluate(whole, POLICY).patch
    spec = jsonpatch.apply_patch(share, patch)["spec"]
    terms = spec["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["inference", "hybrid"]
    assert {t["value"] for t in spec["tolerations"] if t["key"] == USAGE_KEY} == {"inference", "hybrid"}
    assert findings(jsonpatch.apply_patch(share, patch), "GG101") == []  # once patched: nothing to add


def test_a_share_pod_without_usage_is_gg103_and_a_deployment_defaults() -> None:
    assert findings(share_pod(SHARES[0]), "GG103")
    doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
           "spec": {"template": {"metadata": {"annotations": SHARES[1]},
                                 "spec": {"schedulerName": "kai-scheduler",
                                          "containers": [{"name": "c", "image": "x"}]}}}}
    assert findings(doc, "GG103") == []
    assert workload_usage(built(doc), POLICY)[0] == "inference"
    assert evaluate(doc, POLICY).patch  # steered to the inference pools


def test_only_the_share_pod_sets_of_a_workload_are_steered() -> None:
    """A CPU-only member (here a plain worker without the annotation) is left where the
    scheduler puts it, as beside a pod requesting GPUs."""
    doc = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "serve", "namespace": "ml"},
           "spec": {"leaderWorkerTemplate": {
               "size": 2,
               "leaderTemplate": {"spec": {"schedulerName": "kai-scheduler",
                                           "containers": [{"name": "c", "image": "x"}]}},
               "workerTemplate": {"metadata": {"annotations": SHARES[0]},
                                  "spec": {"schedulerName": "kai-scheduler",
                                           "containers": [{"name": "c", "image": "x"}]}}}}}
    w = built(doc)
    assert [p.name for p in steered_pod_sets(w, POLICY)] == ["worker"]
    paths = {op["path"] for op in evaluate(doc, POLICY).patch}
    assert paths and all(p.startswith("/spec/leaderWorkerTemplate/workerTemplate/spec") for p in paths)


def test_the_workload_product_label_pins_a_share_pod() -> None:
    """GG102: a product named on the workload is tolerated by its share pods too."""
    doc = share_pod(SHARES[0], {USAGE_LABEL: "training", "nvidia.com/gpu.product": "NVIDIA-H20"})
    spec = jsonpatch.apply_patch(doc, evaluate(doc, POLICY).patch)["spec"]
    assert {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-H20",
            "effect": "NoSchedule"} in spec["tolerations"]


@pytest.mark.parametrize("annotation", SHARES)
def test_a_share_is_never_a_resource_finding(annotation: dict[str, str]) -> None:
    """The resource rules read resources: a share requests none, so no GG403 (on GPU nodes,
    or on nodes reporting no GPU), GG501 or GG503; and the steered pod still fits."""
    doc = share_pod(annotation, {USAGE_LABEL: "training"})
    cpu = node("cpu-0", {"cpu": "16", "memory": "64Gi"})
    for gpus in (8, 0):
        clusters = [snapshot([gpu_node("gpu-0", gpus, GPU), cpu])]
        found = {f.rule for f in evaluate(copy.deepcopy(doc), POLICY, clusters).findings
                 if f.severity >= Severity.ERROR}
        assert not {"GG403", "GG404", "GG501", "GG502", "GG503"} & found, found


# -- usage defaults of the new kinds ------------------------------------------------------------

@pytest.mark.parametrize(("kind", "usage"), [
    ("JobSet", "training"), ("HyperPodPyTorchJob", "training"), ("TrainJob", "training"),
    ("LeaderWorkerSet", "inference"),
])
def test_usage_defaults_of_the_new_kinds(kind: str, usage: str) -> None:
    from policies.rules import gg103_usage_declared

    assert POLICY.usage["defaults"][kind] == usage
    assert kind in (gg103_usage_declared.__doc__ or "")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert f"{kind}: {usage}" in readme


@pytest.mark.parametrize(("doc", "usage"), [
    ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
      "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
          "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}}}]}},
     "training"),
    ({"apiVersion": "sagemaker.amazonaws.com/v1", "kind": "HyperPodPyTorchJob", "metadata": {"name": "h"},
      "spec": {"replicaSpecs": [{"name": "pods", "replicas": 2, "template": {"spec": {
          "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}]}},
     "training"),
    ({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
      "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
          "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}}},
     "inference"),
])
def test_new_kinds_without_the_label_are_steered_by_their_default(doc: dict[str, Any], usage: str) -> None:
    assert workload_usage(built(doc), POLICY)[0] == usage
    assert findings(doc, "GG103") == []
    patched = jsonpatch.apply_patch(doc, evaluate(doc, POLICY).patch)
    assert findings(patched, "GG101") == []
    assert f"{USAGE_KEY}" in yaml.safe_dump(patched) and f"value: {usage}" in yaml.safe_dump(patched)
