"""Issue 17: valid manifests get no false findings (nulls, GPU model pins, CPU-only
members), GG504 always says why, GG306 runs without nodes, and the ExtendedResourceToleration
admission plugin (GKE) is known in the linter and the webhook's engine."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from lint.cli import Report, lint_main, lint_text
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.feasibility import extended_resources
from policies.names import is_extended_resource


def findings(text: str, policy: Policy | None = None, clusters: Any = None) -> list[tuple[str, str]]:
    report = Report()
    lint_text(textwrap.dedent(text), "t.yaml", policy or Policy(), report, clusters)
    assert report.internal_errors == 0
    return [(f.finding.rule, f.finding.message) for f in report.findings]


def rules(text: str, policy: Policy | None = None, clusters: Any = None) -> set[str]:
    return {rule for rule, _ in findings(text, policy, clusters)}


# -- nulls ------------------------------------------------------------------------------------

NULLS = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: nulls
  labels:
  annotations: {note: null}
spec:
  template:
    metadata:
      labels: {app: x, tier: null}
      annotations:
    spec:
      restartPolicy: Never
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100}
      containers:
      - name: main
        image: trainer
        resources:
          requests: {cpu: null, memory: ~, nvidia.com/gpu: 1}
          limits: {nvidia.com/gpu: 1, memory: null}
"""


def test_null_labels_annotations_and_quantities_are_valid() -> None:
    found = rules(NULLS)
    assert not found & {"GG002", "GG504"}, found


def test_null_label_value_reads_as_unset_but_a_number_is_still_gg002() -> None:
    assert "GG002" in rules(NULLS.replace("tier: null", "tier: 1"))


@pytest.mark.parametrize("value", ['""', "2 GB", "[1]", "{a: 1}", "true", ".inf"])
def test_gg504_message_is_never_empty_and_names_the_resource(value: str) -> None:
    found = [m for r, m in findings(NULLS.replace("cpu: null", f"cpu: {value}")) if r == "GG504"]
    assert found, value
    for message in found:
        detail = message.split(":", 1)[1]
        assert detail.strip() and "requests.cpu" in message, message


# -- GPU model pins (GG104) ------------------------------------------------------------------

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {maip.mxsf.io/usage: inference}
  annotations: {}
spec:
  nodeSelector: {}
  containers:
  - name: main
    image: x
    resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize("label", ["cloud.google.com/gke-accelerator", "node.kubernetes.io/instance-type",
                                   "nvidia.com/gpu.product", "karpenter.k8s.aws/instance-gpu-name"])
def test_gg104_accepts_a_model_pinned_by_a_node_label(label: str) -> None:
    assert "GG104" in rules(POD)
    assert "GG104" not in rules(POD.replace("nodeSelector: {}", f"nodeSelector: {{{label}: some-gpu}}"))
    expression = f"{{key: {label}, operator: In, values: [a, b]}}"
    affinity = (f"affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: "
                f"{{nodeSelectorTerms: [{{matchExpressions: [{expression}]}}]}}}}}}")
    assert "GG104" not in rules(POD.replace("nodeSelector: {}", affinity))


def test_gg104_accepts_the_hami_annotation_on_the_pod_template() -> None:
    assert "GG104" not in rules(POD.replace("annotations: {}", "annotations: {nvidia.com/use-gputype: A100}"))
    deployment = """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: d}
    spec:
      template:
        metadata: {annotations: {nvidia.com/use-gputype: A100}}
        spec:
          containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
    """
    assert "GG104" not in rules(deployment)
    assert "GG104" in rules(deployment.replace("nvidia.com/use-gputype: A100", "other: A100"))


def test_gg104_pin_list_is_in_the_policy_and_extendable() -> None:
    custom = policy_from_data({"gpu": {"modelPins": {"nodeLabels": ["example.com/gpu-model"],
                                                     "annotations": ["example.com/gpu"]}}})
    assert "GG104" not in rules(POD.replace("nodeSelector: {}", "nodeSelector: {example.com/gpu-model: x}"),
                                custom)
    assert "GG104" not in rules(POD.replace("annotations: {}", "annotations: {example.com/gpu: x}"), custom)
    # the list replaces the default one, as every list of the policy file does
    instance_type = POD.replace("nodeSelector: {}", "nodeSelector: {node.kubernetes.io/instance-type: x}")
    assert "GG104" in rules(instance_type, custom)
    # the product labels of gpu.resources always pin
    product = POD.replace("nodeSelector: {}", "nodeSelector: {nvidia.com/gpu.product: x}")
    assert "GG104" not in rules(product, custom)


# -- CPU-only members (GG101/GG104) ----------------------------------------------------------

MPIJOB = """\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: mpi}
spec:
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers: [{name: launcher, image: x, resources: {limits: {cpu: 1}}}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: worker, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
"""


def test_cpu_only_mpi_launcher_is_not_asked_for_gpu_usage() -> None:
    found = findings(MPIJOB)
    gg101 = [m for r, m in found if r == "GG101"]
    assert gg101 and all("Launcher" not in m for m in gg101), gg101
    assert all("Launcher" not in m for r, m in found if r == "GG104")
    assert "GG103" not in {r for r, _ in found}  # MPIJob defaults to training (usage.defaults)


def test_gg103_doc_agrees_with_the_mpijob_default() -> None:
    from policies.rules import gg103_usage_declared

    assert Policy().usage["defaults"]["MPIJob"] == "training"
    assert "MPIJob without the label" not in (gg103_usage_declared.__doc__ or "")
    assert "MPIJob" in (gg103_usage_declared.__doc__ or "")


# -- snapshots: GG306 without nodes, the ExtendedResourceToleration plugin -------------------

def snapshot(tmp_path: Path, items: list[dict[str, Any]], name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def queue(name: str, state: str = "Open") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1}, "status": {"state": state}}


def gpu_node(name: str, labels: dict[str, str], taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


VCJOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vj, labels: {maip.mxsf.io/usage: training}}
spec:
  schedulerName: volcano
  queue: QUEUE
  minAvailable: 1
  tasks:
  - name: t
    replicas: 1
    template:
      spec:
        nodeSelector: {nvidia.com/gpu.product: X}
        containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def lint_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    import json

    code = lint_main([*args, "--format", "json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("queue_name", "state", "expected"), [("missing", "Open", "GG306"),
                                                               ("closed", "Closed", "GG306"),
                                                               ("open", "Open", "GG406")])
def test_gg306_runs_when_the_snapshot_has_queues_but_no_nodes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], queue_name: str, state: str,
        expected: str) -> None:
    cluster = snapshot(tmp_path, [queue("default"), queue("open"), queue("closed", "Closed")])
    job = tmp_path / "job.yaml"
    job.write_text(VCJOB.replace("QUEUE", queue_name))
    _, data = lint_json([str(job), "--cluster", cluster], capsys)
    found = {f["rule"] for f in data["findings"]}
    assert expected in found, data["findings"]
    if expected == "GG306":
        assert "GG406" not in found


GKE_LABELS = {"cloud.google.com/gke-nodepool": "gpu-pool", "cloud.google.com/gke-accelerator": "nvidia-l4",
              "maip.mxsf.io/node.usage": "training", "nvidia.com/gpu.product": "X"}
GKE_TAINTS = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
              {"key": "maip.mxsf.io/node.usage", "value": "training", "effect": "NoSchedule"},
              {"key": "nvidia.com/gpu.product", "value": "X", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("setting", "gke", "expect_gg403"), [
    ("auto", True, False), ("auto", False, True), (True, False, False), (False, True, True)])
def test_extended_resource_toleration_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             setting: Any, gke: bool, expect_gg403: bool) -> None:
    labels = dict(GKE_LABELS) if gke else {k: v for k, v in GKE_LABELS.items() if "google" not in k}
    cluster = snapshot(tmp_path, [gpu_node("n1", labels, GKE_TAINTS), queue("default")])
    job = tmp_path / "job.yaml"
    job.write_text(VCJOB.replace("queue: QUEUE", "queue: default"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"platform": {"extendedResourceToleration": setting}}))
    _, data = lint_json([str(job), "--cluster", cluster, "--config", str(policy)], capsys)
    assert ("GG403" in {f["rule"] for f in data["findings"]}) is expect_gg403, data["findings"]


def test_plugin_tolerates_only_noschedule_taints_keyed_by_a_requested_resource(tmp_path: Path) -> None:
    from lint.cluster import load_clusters

    on = policy_from_data({"platform": {"extendedResourceToleration": True}})
    off = policy_from_data({"platform": {"extendedResourceToleration": False}})
    noexecute = [{**t, "effect": "NoExecute"} if t["key"] == "nvidia.com/gpu" else t for t in GKE_TAINTS]
    job = yaml.safe_load(VCJOB.replace("queue: QUEUE", "queue: default"))
    for taints, policy, never in ((GKE_TAINTS, on, False), (GKE_TAINTS, off, True), (noexecute, on, True)):
        path = snapshot(tmp_path, [gpu_node("n1", GKE_LABELS, taints), queue("default")],
                        f"c{id(taints)}-{id(policy)}.yaml")
        clusters = load_clusters([path], policy)
        found = {f.rule for f in evaluate(job, policy, clusters).findings}
        assert ("GG403" in found) is never, (taints, found)
    # Two policies on one snapshot never share an answer (memo, eligibility caches).
    path = snapshot(tmp_path, [gpu_node("n1", GKE_LABELS, GKE_TAINTS), queue("default")], "shared.yaml")
    clusters = load_clusters([path], on)
    for _ in range(2):
        assert "GG403" not in {f.rule for f in evaluate(job, on, clusters).findings}
        assert "GG403" in {f.rule for f in evaluate(job, off, clusters).findings}


def test_extended_resource_names_follow_kubernetes() -> None:
    assert is_extended_resource("nvidia.com/gpu") and is_extended_resource("example.com/foo")
    for native in ("cpu", "memory", "hugepages-2Mi", "kubernetes.io/foo", "requests.nvidia.com/gpu",
                   "ephemeral-storage"):
        assert not is_extended_resource(native), native
    spec = {"containers": [{"resources": {"requests": {"cpu": 1, "example.com/a": 0}}}],
            "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "overhead": {"example.com/overhead": 1}}
    assert extended_resources(spec) == ("example.com/a", "nvidia.com/gpu")


def test_policy_schema_knows_the_new_options() -> None:
    from policies.config import PolicyError

    with pytest.raises(PolicyError):
        policy_from_data({"platform": {"extendedResourceToleration": "sometimes"}})
    with pytest.raises(PolicyError):
        policy_from_data({"gpu": {"modelPins": {"labels": []}}})
