"""Builders for cluster objects and workloads used by the feasibility tests."""

from __future__ import annotations

import time
from typing import Any

from policies.config import Policy, policy_from_data
from policies.engine import Evaluation, evaluate
from policies.feasibility import FitQuestion, fit_question
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

Obj = dict[str, Any]
USAGE = "maip.mxsf.io/node.usage"


def node(
    name: str,
    alloc: dict[str, Any],
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> Obj:
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": {"pods": "110", **alloc}},
    }


def gpu_node(
    name: str,
    gpus: int = 8,
    resource: str = "metax-tech.com/gpu",
    usage: str = "training",
    labels: dict[str, str] | None = None,
) -> Obj:
    """A GPU node labelled and tainted for its usage pool (seed 003), as GG101 expects."""
    return node(
        name,
        {"cpu": "128", "memory": "1000Gi", resource: str(gpus)},
        {USAGE: usage, **(labels or {})},
        [{"key": USAGE, "value": usage, "effect": "NoSchedule"}],
    )


def pod(
    name: str,
    node_name: str | None,
    requests: dict[str, Any],
    namespace: str = "default",
    phase: str = "Running",
) -> Obj:
    spec: Obj = {"containers": [{"name": "main", "image": "x", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


def queue(
    name: str,
    capability: dict[str, Any] | None = None,
    state: str = "Open",
    parent: str | None = None,
    guarantee: dict[str, Any] | None = None,
) -> Obj:
    spec: Obj = {"weight": 1}
    if capability is not None:
        spec["capability"] = capability
    if parent:
        spec["parent"] = parent
    if guarantee:
        spec["guarantee"] = {"resource": guarantee}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": state},
    }


def podgroup(
    name: str,
    queue_name: str,
    min_resources: dict[str, Any],
    phase: str = "Running",
    namespace: str = "default",
) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 1, "minResources": min_resources, "queue": queue_name},
        "status": {"phase": phase},
    }


def snapshot(
    objects: list[Obj], policy: Policy | None = None, name: str = "c1", updated_at: float | None = None
) -> ClusterSnapshot:
    return ClusterSnapshot(name, Topology.from_objects(objects, policy), updated_at)


def container(cpu: str | int, memory: str) -> Obj:
    requests = {"cpu": cpu, "memory": memory}
    return {"name": "main", "image": "x", "resources": {"requests": requests, "limits": requests}}


def ray_cluster(
    name: str, worker_cpu: str = "1", queue_name: str = "kuberay-test-queue", workers: int = 2
) -> Obj:
    """The seed-001 RayCluster: head 1 CPU / 2Gi, workers 1 CPU / 1Gi."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": "test",
            "labels": {"ray.io/scheduler-name": "volcano", "volcano.sh/queue-name": queue_name},
        },
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("1", "2Gi")]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "worker",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [container(worker_cpu, "1Gi")]}},
                }
            ],
        },
    }


def pytorch_job(
    workers: int,
    gpus: int,
    group: int | None = None,
    atomic: int | None = None,
    resource: str = "metax-tech.com/gpu",
    queue_name: str | None = None,
    name: str = "pytorch-demo",
) -> Obj:
    """Seed 000: Master 1 x g + Worker n x g GPUs, G on the Master template."""
    annotations: dict[str, str] = {}
    if group is not None:
        annotations["metax-tech.com/gpu-group-size"] = str(group)
    if atomic is not None:
        annotations["metax-tech.com/atomic-gpu-group-size"] = str(atomic)

    def template(with_annotations: bool) -> Obj:
        t: Obj = {
            "spec": {
                "schedulerName": "volcano",
                "containers": [
                    {"name": "pytorch", "image": "alpine:3.19", "resources": {"limits": {resource: gpus}}}
                ],
            }
        }
        if with_annotations and annotations:
            t["metadata"] = {"annotations": annotations}
        return t

    job: Obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "kubeflow"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template(True)},
                "Worker": {"replicas": workers, "restartPolicy": "Never", "template": template(True)},
            }
        },
    }
    if queue_name:
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": queue_name}}
    return job


def run(
    doc: Obj,
    clusters: list[ClusterSnapshot] | None,
    policy: Policy | None = None,
    deadline: float | None = None,
) -> Evaluation:
    """``doc`` judged against ``clusters``. With the default policy, the verdict is not left to
    the wall clock (the 200 ms budget on a machine busy with other tests): a minute; a test of
    the budget gives its own policy or deadline."""
    if deadline is None and policy is None:
        deadline = time.monotonic() + 60
    return evaluate(doc, policy or Policy(), clusters, deadline=deadline)


def feasibility_findings(result: Evaluation) -> dict[str, list[str]]:
    """Rule id -> ["severity: message"] for the feasibility rules."""
    out: dict[str, list[str]] = {}
    for f in result.findings:
        if f.rule in ("GG306", "GG402", "GG403", "GG404", "GG405", "GG406"):
            out.setdefault(f.rule, []).append(f"{f.severity}: {f.message}")
    return out


def policy(**feasibility: Any) -> Policy:
    return policy_from_data({"feasibility": feasibility})


def question_of(doc: Obj, pol: Policy) -> FitQuestion:
    """The question ``doc`` asks of a cluster under ``pol`` (it must ask one)."""
    workload = build_workload(doc)
    assert workload is not None
    found = fit_question(workload, pol)
    assert found is not None
    return found
