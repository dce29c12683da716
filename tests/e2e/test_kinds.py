"""Ray workloads with CPU-only members, their controller-made submitter Job, and the README's
install check, on a cluster laid out per the README's node pool convention."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .conftest import Session
from .kube import REPO, USAGE_KEY, canonical
from .objects import CPU_KEY, owned_by, ray_cluster, ray_job, steered
from .steps import rules

pytestmark = pytest.mark.e2e


def _pools_and_cpu_nodes(e2e: Session, group: str) -> None:
    """Two training GPU nodes (label and taint of pool and product) and two CPU nodes that
    belong to no usage pool (neither label nor taint)."""
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-gpu-{i}", group)
        e2e.cluster.node(f"{group}-cpu-{i}", {CPU_KEY: group})
    e2e.wait_nodes_synced()


def test_raycluster_cpu_head_is_not_steered(crds: Session, namespace: str) -> None:
    e2e, ns, group = crds, namespace, namespace
    _pools_and_cpu_nodes(e2e, group)
    submitted = ray_cluster(ns, "rc", group)
    created = e2e.api.create(submitted)
    assert created.status == 201, created
    assert not {"GG402", "GG403", "GG404", "GG405"} & rules(created), created
    stored = e2e.api.read(submitted)
    head = stored["spec"]["headGroupSpec"]["template"]["spec"]
    assert canonical(head) == canonical(submitted["spec"]["headGroupSpec"]["template"]["spec"]), (
        "the CPU-only head template was changed")
    assert steered(stored["spec"]["workerGroupSpecs"][0]["template"]["spec"])
    assert created.warnings == [], created.warnings


def test_rayjob_and_its_submitter_job(crds: Session, namespace: str) -> None:
    """The RayJob is admitted (its submitter, which tolerates every taint, gives GG106 once);
    the batch Job KubeRay makes for the submitter passes without a denial, warning or patch."""
    e2e, ns, group = crds, namespace, namespace
    _pools_and_cpu_nodes(e2e, group)
    submitted = ray_job(ns, "rj", group)
    created = e2e.api.create(submitted)
    assert created.status == 201, created
    assert rules(created) == {"GG106"}, created.warnings
    stored = e2e.api.read(submitted)
    submitter = stored["spec"]["submitterPodTemplate"]
    assert canonical(submitter) == canonical(submitted["spec"]["submitterPodTemplate"]), "submitter steered"
    assert canonical(stored["spec"]["rayClusterSpec"]["headGroupSpec"]) == canonical(
        submitted["spec"]["rayClusterSpec"]["headGroupSpec"]), "head steered"
    assert steered(stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"])

    # what KubeRay's RayJob controller creates (ray-operator: createNewK8sJob)
    job = owned_by({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": "rj", "namespace": ns,
                                 "labels": {"ray.io/originated-from-crd": "RayJob",
                                            "ray.io/originated-from-cr-name": "rj",
                                            "app.kubernetes.io/created-by": "kuberay-operator"}},
                    "spec": {"backoffLimit": 2, "template": submitter}}, stored)
    before = e2e.gate.counters()
    made = e2e.api.create(job)
    delta = e2e.gate.counters() - before
    assert made.status == 201, made
    assert made.warnings == [], made.warnings
    assert delta.reviews(kind="Job", endpoint="validate") >= 1, "gpugate not called"
    assert delta.reviews(kind="Job", verdict="patched") == 0
    template = made.body["spec"]["template"]["spec"]
    assert template.get("affinity") is None
    assert template.get("tolerations") == submitter["spec"]["tolerations"]


def test_install_check_pytorchjob_gang_dry_run(crds: Session, namespace: str) -> None:
    """README "Install on a cluster", step 3: `kubectl create --dry-run=server -f
    examples/workloads/valid-pytorchjob-gang.yaml` goes through both webhooks, on a cluster
    laid out per the README's taint convention (pools labelled and tainted, GPU nodes tainted
    with their product, CPU nodes in no pool)."""
    e2e, ns, group = crds, namespace, namespace
    _pools_and_cpu_nodes(e2e, group)
    e2e.cluster.gpu_node(f"{group}-inference", group, pool="inference")
    e2e.wait_nodes_synced()
    document = yaml.safe_load(Path(REPO / "examples/workloads/valid-pytorchjob-gang.yaml").read_text())
    document["metadata"]["namespace"] = ns
    before = e2e.gate.counters()
    answer = e2e.api.create(document, dry_run=True)
    delta = e2e.gate.counters() - before
    assert delta.reviews(kind="PyTorchJob", endpoint="mutate", verdict="patched") == 1
    assert delta.reviews(kind="PyTorchJob", endpoint="validate") == 1
    print("warnings:", answer.warnings)
    assert answer.status == 201, answer
    for role in ("Master", "Worker"):
        spec = answer.body["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        assert steered(spec) and any(t.get("key") == USAGE_KEY for t in spec["tolerations"])
