"""Edge cases across the rules and the linter pipeline: odd values, odd documents."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from lint.cli import Report, lint_text
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.findings import Severity
from policies.groups import group_sizes, parse_group_size
from policies.workload import build_workload


def lint(text: str, policy: Policy | None = None) -> Report:
    report = Report()
    lint_text(text, "edge.yaml", policy or Policy(), report)
    return report


def rules(report: Report) -> set[str]:
    return {f.finding.rule for f in report.findings}


def pytorchjob(master_annotations: str = "", worker_annotations: str = "", workers: int = 7,
               gpus: str = "8", resources: str = "limits", scheduler: str = "volcano",
               metadata_annotations: str = "") -> str:
    def template(annotations: str) -> str:
        meta = f"metadata: {{annotations: {{{annotations}}}}}\n        " if annotations else ""
        return (f"template:\n        {meta}spec:\n          schedulerName: {scheduler}\n"
                f"          containers:\n          - name: pytorch\n            image: alpine\n"
                f"            resources: {{{resources}: {{metax-tech.com/gpu: {gpus}}}}}\n")
    meta = f"\n  annotations: {{{metadata_annotations}}}" if metadata_annotations else ""
    return f"""apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: demo
  namespace: ml{meta}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      {template(master_annotations)}    Worker:
      replicas: {workers}
      {template(worker_annotations)}"""


G32 = "metax-tech.com/gpu-group-size: '32'"
GROUP_RULES = {"GG201", "GG202", "GG203", "GG204", "GG205"}


# -- GPU groups -----------------------------------------------------------------------

def test_seed_pytorchjob_passes_every_group_rule() -> None:
    report = lint(pytorchjob(master_annotations=G32))
    assert not rules(report) & GROUP_RULES


def test_seed_with_six_workers_fails_gg202_with_the_numbers() -> None:
    report = lint(pytorchjob(master_annotations=G32, workers=6))
    messages = [f.finding.message for f in report.findings if f.finding.rule == "GG202"]
    assert messages == ["metax-tech.com/gpu-group-size 32 does not divide the job's "
                        "56 GPUs (1x8 Master + 6x8 Worker)"]
    located = next(f for f in report.findings if f.finding.rule == "GG202")
    assert located.finding.path == "/spec/pytorchReplicaSpecs/Master/template/metadata/annotations/" \
                                   "metax-tech.com~1gpu-group-size"
    assert located.line == 11  # the template metadata line of Master


SEEDS = Path(__file__).resolve().parent.parent / "examples" / "workloads"


@pytest.mark.parametrize(("name", "replicas"), [
    ("valid-pytorchjob-gpu-group.yaml", "replicas: 7"),
    ("valid-volcano-job-gpu-group.yaml", "replicas: 7"),
    ("valid-elasticjob-gpu-group.yaml", "replicas: 8"),
    ("valid-pytorchjob-atomic-group.yaml", "replicas: 3"),
])
def test_seed_000_examples_pass_every_group_rule_and_fail_gg202_with_six_workers(name: str,
                                                                                replicas: str) -> None:
    text = (SEEDS / name).read_text(encoding="utf-8")
    assert not rules(lint(text)) & GROUP_RULES
    assert replicas in text
    assert "GG202" in rules(lint(text.replace(replicas, "replicas: 6")))


@pytest.mark.parametrize(("raw", "value"), [
    ("32", 32), ("+8", 8), ("032", 32), (16, 16),
    ("0", None), ("-8", None), ("16.5", None), ("32 GPUs", None), ("", None), (" 32", None), (True, None),
    (0, None), (None, None), (32.0, None),
])
def test_parse_group_size(raw: object, value: int | None) -> None:
    assert parse_group_size(raw) == value


def test_numeric_string_annotations_and_atomic_size() -> None:
    report = lint(pytorchjob(master_annotations=f"{G32}, metax-tech.com/atomic-gpu-group-size: '16'"))
    assert not rules(report) & GROUP_RULES
    w = build_workload(yaml.safe_load(pytorchjob(master_annotations=f"{G32}, "
                                                 "metax-tech.com/atomic-gpu-group-size: '16'")))
    assert w is not None
    spec = group_sizes(w, Policy())
    assert spec is not None
    assert (spec.size, spec.atomic, spec.total_gpus, spec.groups) == (32, 16, 64, 2)
    assert spec.breakdown() == "1x8 Master + 7x8 Worker"


def test_unquoted_integer_annotation_is_an_invalid_object() -> None:
    # Annotation values are strings in the Kubernetes API: an unquoted 32 is refused.
    report = lint(pytorchjob(master_annotations="metax-tech.com/gpu-group-size: 32"))
    assert "GG002" in rules(report)
    gg002 = next(f for f in report.findings if f.finding.rule == "GG002")
    assert "quote it" in gg002.finding.message


def test_gpus_requested_only_in_requests_count_for_groups_and_fail_gg501() -> None:
    report = lint(pytorchjob(master_annotations=G32, resources="requests"))
    assert "GG501" in rules(report)
    assert not rules(report) & {"GG202", "GG203"}  # g = 8 still comes from the requests


def test_gpus_only_in_limits_are_the_request() -> None:
    w = build_workload(yaml.safe_load(pytorchjob(master_annotations=G32)))
    assert w is not None
    assert w.pod_sets[0].requests == {"metax-tech.com/gpu": 8}


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"master_annotations": "metax-tech.com/gpu-group-size: '-32'"}, "GG201"),
    ({"master_annotations": f"{G32}, metax-tech.com/atomic-gpu-group-size: half"}, "GG201"),
    ({"master_annotations": f"{G32}, metax-tech.com/atomic-gpu-group-size: '12'"}, "GG203"),
    ({"master_annotations": f"{G32}, metax-tech.com/atomic-gpu-group-size: '64'"}, "GG203"),
    ({"master_annotations": G32, "scheduler": "default-scheduler"}, "GG204"),
    ({"master_annotations": G32, "worker_annotations": "metax-tech.com/gpu-group-size: '16'"}, "GG205"),
    ({"metadata_annotations": G32}, "GG205"),
    ({"master_annotations": "metax-tech.com/gpu-group-size: '12'"}, "GG202"),
])
def test_group_rule_failures(kwargs: dict[str, str], expected: str) -> None:
    assert expected in rules(lint(pytorchjob(**kwargs)))  # type: ignore[arg-type]


def test_group_on_a_non_pytorch_kind_is_a_warning_only() -> None:
    text = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: plain}
spec:
  tasks:
  - name: worker
    replicas: 4
    template:
      metadata: {annotations: {metax-tech.com/gpu-group-size: "16"}}
      spec:
        containers: [{name: w, image: busybox, resources: {limits: {metax-tech.com/gpu: 8}}}]
"""
    found = [(f.finding.rule, str(f.finding.severity)) for f in lint(text).findings
             if f.finding.rule == "GG204"]
    assert found == [("GG204", "warning")]


def test_group_on_a_bare_pod_is_on_the_pod() -> None:
    text = """apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {metax-tech.com/gpu-group-size: "8"}}
spec:
  schedulerName: volcano
  containers: [{name: m, resources: {limits: {metax-tech.com/gpu: 8}}}]
"""
    found = rules(lint(text))
    assert "GG205" not in found and "GG202" not in found
    assert "GG204" in found  # a Pod is not a PyTorch job: warning
    assert "GG202" in rules(lint(text.replace('"8"', '"16"')))


def test_group_annotation_key_comes_from_the_policy() -> None:
    policy = policy_from_data({"gpu": {"groupSizeAnnotation": "example.com/group"}})
    text = pytorchjob(master_annotations="example.com/group: '32'", workers=6)
    assert "GG202" in rules(lint(text, policy))
    assert "GG202" not in rules(lint(text))


def test_fractional_gpus_do_not_crash_group_rules() -> None:
    report = lint(pytorchjob(master_annotations=G32, gpus="0.5"))
    assert "GG503" in rules(report)
    assert not any("internal error" in f.finding.message for f in report.findings)


def test_init_container_gpus() -> None:
    text = """apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - {name: warmup, image: cuda, resources: {requests: {nvidia.com/gpu: 2}}}
  containers:
  - {name: main, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}
"""
    report = lint(text)
    gg501 = [f for f in report.findings if f.finding.rule == "GG501"]
    assert len(gg501) == 1
    assert gg501[0].finding.path == "/spec/initContainers/0/resources/requests/nvidia.com~1gpu"
    w = build_workload(yaml.safe_load(text))
    assert w is not None and w.pod_sets[0].requests == {"nvidia.com/gpu": Fraction(2)}


def test_negative_gpu_is_gg503() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n" \
           "spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: -1}}}]}\n"
    assert "GG503" in rules(lint(text))


def test_request_equal_to_limit_in_another_spelling_is_fine() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: m, resources: " \
           "{requests: {nvidia.com/gpu: '1'}, limits: {nvidia.com/gpu: 1000m}}}]}\n"
    assert not rules(lint(text)) & {"GG501", "GG502", "GG503"}


# -- queues and schedulers ------------------------------------------------------------

RAY = """apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: rc, labels: {{{labels}}}}}
spec:
  headGroupSpec:
    template: {{spec: {{containers: [{{name: h, image: ray}}]}}}}
"""


def test_raycluster_with_queue_label_and_no_scheduler_label_is_not_an_error() -> None:
    # KubeRay with --batch-scheduler=volcano schedules it through Volcano anyway.
    assert not rules(lint(RAY.format(labels="volcano.sh/queue-name: q"))) & {"GG301", "GG302", "GG303"}


def test_ray_scheduler_label_other_than_volcano_with_queue() -> None:
    found = rules(lint(RAY.format(labels="volcano.sh/queue-name: q, ray.io/scheduler-name: yunikorn")))
    assert "GG302" in found


def test_pod_with_queue_label_is_gg301() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {volcano.sh/queue-name: q}}\n" \
           "spec: {schedulerName: volcano, containers: [{name: m}]}\n"
    assert "GG301" in rules(lint(text))
    ok = text.replace("labels: {volcano.sh/queue-name: q}",
                      "annotations: {scheduling.volcano.sh/queue-name: q}")
    assert not rules(lint(ok)) & {"GG301", "GG302"}


def test_pytorchjob_queue_without_scheduler_name_is_not_judged() -> None:
    # training-operator with gang scheduling fills an empty schedulerName itself.
    text = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: q}
spec:
  runPolicy: {schedulingPolicy: {queue: team}}
  pytorchReplicaSpecs:
    Worker: {replicas: 2, template: {spec: {containers: [{name: w, image: b}]}}}
"""
    assert not rules(lint(text)) & {"GG302", "GG307"}
    explicit = text.replace("containers:", "schedulerName: default-scheduler, containers:")
    assert "GG302" in rules(lint(explicit))


def test_queue_name_too_long() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {scheduling.volcano.sh/queue-name: " \
           + "a" * 254 + "}}\nspec: {schedulerName: volcano, containers: [{name: m}]}\n"
    gg304 = [f.finding.message for f in lint(text).findings if f.finding.rule == "GG304"]
    assert gg304 and "254 characters" in gg304[0]


def test_rayjob_submitter_scheduler_is_not_mixed() -> None:
    text = """apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rj}
spec:
  submitterPodTemplate: {spec: {schedulerName: default-scheduler, containers: [{name: s, image: ray}]}}
  rayClusterSpec:
    headGroupSpec:
      template: {spec: {schedulerName: volcano, containers: [{name: h, image: ray}]}}
    workerGroupSpecs:
    - groupName: w
      replicas: 2
      template: {spec: {schedulerName: volcano, containers: [{name: w, image: ray}]}}
"""
    assert "GG307" not in rules(lint(text))


def test_queue_required_only_when_the_policy_says_so() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n" \
           "spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}\n"
    assert "GG305" not in rules(lint(text))
    required = policy_from_data({"queues": {"require": True}})
    assert "GG305" in rules(lint(text, required))
    cpu_only = text.replace("nvidia.com/gpu: 1", "cpu: 1")
    assert "GG305" not in rules(lint(cpu_only, required))


def test_pod_group_min_member_is_not_compared_with_one_pod() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: " \
           "{scheduling.volcano.sh/group-min-member: '4'}}\nspec: {containers: [{name: m}]}\n"
    assert "GG401" not in rules(lint(text))


# -- odd documents --------------------------------------------------------------------

def test_unknown_kinds_are_silently_ignored() -> None:
    report = lint("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
                  "spec: {replicas: many, containers: 3}\n")
    assert report.findings == [] and report.documents == 1 and report.skipped == 0


@pytest.mark.parametrize("text", [
    "- a\n- b\n",                         # a list
    "just a string\n",                    # a scalar
    "42\n",
    "image: {tag: latest}\nreplicaCount: 2\n",   # a Helm values file
    "kind: Pod\nmetadata: {name: x}\n",   # no apiVersion
    "apiVersion: v1\nmetadata: {name: x}\n",     # no kind
    "apiVersion: 1\nkind: Pod\n",         # apiVersion not a string
])
def test_non_objects_are_skipped_and_counted(text: str) -> None:
    report = lint(text)
    assert report.findings == []
    assert (report.documents, report.skipped) == (1, 1)


def test_multi_document_file_counts_skipped_documents() -> None:
    report = lint("replicaCount: 2\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                  "spec: {containers: [{name: m}]}\n---\n- x\n")
    assert (report.documents, report.skipped) == (3, 2)


@pytest.mark.parametrize(("text", "path"), [
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: two}\n", "/spec/replicas"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: {name: m}}\n", "/spec/containers"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {tier: 1}}\nspec: {containers: []}\n",
     "/metadata/labels/tier"),
    ("apiVersion: v1\nkind: Pod\nmetadata: [a]\n", "/metadata"),
    ("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: {tasks: {a: 1}}\n",
     "/spec/tasks"),
    ("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: {queue: 7}\n",
     "/spec/queue"),
    ("apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: r}\n"
     "spec: {workerGroupSpecs: [{groupName: w, numOfHosts: '2', template: {}}]}\n",
     "/spec/workerGroupSpecs/0/numOfHosts"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
     "spec: {containers: [{name: m, resources: {limits: [1]}}]}\n", "/spec/containers/0/resources/limits"),
])
def test_wrongly_typed_fields_are_gg002(text: str, path: str) -> None:
    report = lint(text)
    assert [f.finding.rule for f in report.findings] == ["GG002"]
    assert report.findings[0].finding.path == path


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    report = lint(text)
    assert report.findings == [] and report.files == 1 and report.documents == 0


@pytest.mark.parametrize("text", ["---\n", "---\n---\n", "--- null\n"])
def test_explicitly_empty_documents_are_skipped(text: str) -> None:
    report = lint(text)
    assert report.findings == [] and report.files == 1 and report.documents == report.skipped


def test_invalid_yaml_is_gg001_with_position() -> None:
    report = lint("apiVersion: v1\nkind: Pod\nmetadata:\n  labels: {a: [b\n")
    assert [f.finding.rule for f in report.findings] == ["GG001"]
    assert report.findings[0].line >= 4


def test_inline_suppression() -> None:
    text = pytorchjob(master_annotations=G32, workers=6)
    assert "GG202" in rules(lint(text))
    suppressed = text.replace("namespace: ml",
                              "namespace: ml\n  annotations: {gpugate.io/ignore: 'GG202, GG104'}")
    assert not rules(lint(suppressed)) & {"GG202", "GG104"}


@pytest.mark.parametrize("doc", [None, 3, "x", [], [{"apiVersion": "v1"}],
                                 {"apiVersion": "v1", "kind": "Pod", "spec": None, "metadata": None}])
def test_evaluate_never_raises(doc: object) -> None:
    result = evaluate(doc, Policy())
    assert not any("internal error" in f.message for f in result.findings)


# -- real manifests (../shared/corpus) ------------------------------------------------

QUEUE_AND_GROUP_RULES = {"GG201", "GG202", "GG203", "GG204", "GG205", "GG301", "GG302", "GG303", "GG304",
                         "GG307", "GG401", "GG501", "GG502", "GG503"}


# Findings in the corpus that are right: (file relative to the corpus, rule) -> why. Kept
# small and explicit: each entry is an upstream example the API server or the scheduler
# would really refuse, not a rule being let off.
TRUE_CORPUS_FINDINGS: dict[tuple[str, str], str] = {
    ("kubernetes-sigs__kueue/site__static__examples__serving-workloads__sample-leaderworkerset-tas.yaml",
     "GG501"): "the worker requests nvidia.com/gpu 1 with no limit: the API server refuses such pods",
}


def test_real_queue_manifests_raise_no_false_alarm(corpus_dir: Path) -> None:
    # Volcano's and KubeRay's own examples name queues the way their controllers read them.
    files = [p for p in corpus_dir.rglob("*.yaml") if "queue-name" in p.read_text(errors="replace")]
    assert files
    expected = set(TRUE_CORPUS_FINDINGS)
    seen: set[tuple[str, str]] = set()
    for path in files:
        report = Report()
        lint_text(path.read_bytes(), path.name, Policy(), report)
        name = path.relative_to(corpus_dir).as_posix()
        wrong = []
        for f in report.findings:
            if f.finding.rule not in QUEUE_AND_GROUP_RULES or f.finding.severity < Severity.WARNING:
                continue
            if (name, f.finding.rule) in expected:
                seen.add((name, f.finding.rule))
            else:
                wrong.append(f"{f.finding.rule}: {f.finding.message}")
        assert not wrong, f"{name}: {wrong}"
    # An entry whose file left the corpus is dropped silently; one still there must still fire
    # (else the rule changed, and the entry is stale).
    present = {key for key in expected if (corpus_dir / key[0]).is_file()}
    assert present <= seen, f"true findings no longer found: {sorted(present - seen)}"


def test_volcano_own_invalid_min_available_example_is_gg401(corpus_dir: Path) -> None:
    path = corpus_dir / "volcano-sh__volcano" / "example__invalid_jobs__minAvailable-webhook-deny.yaml"
    if not path.is_file():
        pytest.skip("example not in this corpus")
    report = Report()
    lint_text(path.read_bytes(), path.name, Policy(), report)
    assert "GG401" in rules(report)
