"""Problems found in a pod spec's content alone are shared by equal pod specs (within an
object and across objects), and are still reported per object and per pod set: each
message names its own object and pod set, each path points into its own document."""

from __future__ import annotations

import copy
from typing import Any

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.findings import SpecProblem
from policies.spec_problems import pod_set_problems
from policies.workload import PodSet, Workload, build_workload


def _job(name: str, gpus: Any = 8, labels: dict[str, str] | None = None,
         node_selector: dict[str, str] | None = None, image: str = "pytorch/pytorch") -> dict[str, Any]:
    """A PyTorchJob whose Master and Worker share one pod spec."""
    spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": image,
                                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
            "spec": {"pytorchReplicaSpecs": {
                role: {"replicas": replicas, "template": {"spec": copy.deepcopy(spec)}}
                for role, replicas in (("Master", 1), ("Worker", 3))}}}


def _workload(doc: dict[str, Any]) -> Workload:
    workload = build_workload(doc)
    assert workload is not None
    return workload


def test_equal_pod_specs_are_judged_once_and_reported_per_pod_set() -> None:
    calls: list[str] = []

    def find(pod_set: PodSet, policy: Policy) -> list[SpecProblem]:
        calls.append(pod_set.name)
        return [SpecProblem(": something about its first container", "/containers/0")]

    key = ("test_spec_problems", "judged once")  # a key no rule uses, on a spec no other test has
    image = "example.com/judged-once"
    first = pod_set_problems(_workload(_job("first-job", image=image)), Policy(), key, find)
    second = pod_set_problems(_workload(_job("second-job", image=image)), Policy(), key, find)
    assert calls == ["Master"]  # the Worker and the second job share the Master's facts
    assert [(p.message, p.path) for p in first + second] == 2 * [
        ("pod set Master: something about its first container",
         "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0"),
        ("pod set Worker: something about its first container",
         "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"),
    ]


def _findings(doc: dict[str, Any], policy: Policy, rule: str) -> list[tuple[str, str]]:
    return [(f.message, f.path) for f in evaluate(doc, policy).findings if f.rule == rule]


def test_a_remembered_spec_problem_names_each_object() -> None:
    policy = Policy()
    for name in ("half-a", "half-b"):  # the second is answered from the facts of the first
        found = [f for f in evaluate(_job(name, gpus="500m"), policy).findings if f.rule == "GG503"]
        assert [str(f.object) for f in found] == [f"PyTorchJob ml/{name}"] * 2  # the finding names it
        assert [(f.message, f.path) for f in found] == [
            (f"pod set {role} container pytorch: nvidia.com/gpu limits 500m is "
             "fractional; GPUs are whole devices",
             f"/spec/pytorchReplicaSpecs/{role}/template/spec/containers/0/resources/limits/nvidia.com~1gpu")
            for role in ("Master", "Worker")]


def test_spec_problems_follow_the_policy() -> None:
    """The same pod spec under two policies: facts of one never answer for the other."""
    taint = {"tolerations": [{"key": "example.com/cp", "operator": "Exists"}]}
    doc = _job("cp")
    for role in ("Master", "Worker"):
        doc["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"].update(copy.deepcopy(taint))
    assert _findings(copy.deepcopy(doc), Policy(), "GG106") == []
    custom = policy_from_data({"controlPlaneTaint": "example.com/cp"})
    assert [path for _, path in _findings(copy.deepcopy(doc), custom, "GG106")] == [
        f"/spec/pytorchReplicaSpecs/{role}/template/spec/tolerations/0" for role in ("Master", "Worker")]
    assert _findings(copy.deepcopy(doc), Policy(), "GG106") == []


def test_gpu_product_declared_by_spec_or_by_workload_label() -> None:
    policy = Policy()
    unpinned = _findings(_job("unpinned"), policy, "GG104")
    assert [m for m, _ in unpinned] == [
        f"pod set {role} requests 8 nvidia.com/gpu per pod but pins no GPU product: "
        "set nodeSelector nvidia.com/gpu.product (or the workload label)" for role in ("Master", "Worker")]
    product = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert _findings(_job("by-spec", node_selector=product), policy, "GG104") == []
    # the same pod spec as the unpinned job (its facts are warm), pinned by the workload label
    assert _findings(_job("by-label", labels=product), policy, "GG104") == []
    assert _findings(_job("unpinned-again"), policy, "GG104") == unpinned
