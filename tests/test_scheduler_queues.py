"""Queues of schedulers other than Volcano, against a cluster snapshot: a Kueue LocalQueue or
KAI queue not created yet is a wait (GG306 warning: Kueue and KAI hold the workload until it
exists), a KAI queue whose limit (its own or an ancestor's) is below the gang's minimum
never admits it (GG402), and nothing is judged where the snapshot shows no queue of that
system."""

from __future__ import annotations

import json
from typing import Any

from policies.topology import Topology
from tests.feasibility_helpers import container, feasibility_findings, gpu_node, run, snapshot


def _job(labels: dict[str, str], gpus: int = 8, pods: int = 2, scheduler: str = "") -> dict[str, Any]:
    main = container("4", "8Gi")
    for section in ("requests", "limits"):
        main["resources"][section]["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"containers": [main], "restartPolicy": "Never"}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a",
                         "labels": {**labels, "maip.mxsf.io/usage": "training"}},
            "spec": {"parallelism": pods, "completions": pods,
                     "template": {"metadata": {"labels": dict(labels)}, "spec": spec}}}


def _nodes() -> list[dict[str, Any]]:
    return [gpu_node(f"n{i}", 8, "nvidia.com/gpu") for i in range(4)]


def local_queue(name: str, namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": "cq"}}


def kai_queue(name: str, gpu_limit: float = -1, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": -1, "limit": gpu_limit, "overQuotaWeight": 1},
                                          "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


KUEUE = {"kueue.x-k8s.io/queue-name": "team-a-queue"}
KAI = {"kai.scheduler/queue": "research"}


def test_missing_local_queue_is_a_wait_not_a_rejection() -> None:
    cluster = [snapshot([*_nodes(), local_queue("other")])]
    found = feasibility_findings(run(_job(KUEUE), cluster))
    assert list(found) == ["GG306"] and found["GG306"][0].startswith("warning"), found
    assert "LocalQueue `team-a-queue` does not exist in namespace `team-a`" in found["GG306"][0]
    assert not feasibility_findings(run(_job(KUEUE), [snapshot([*_nodes(), local_queue("team-a-queue")])]))
    # the same name in another namespace is not this namespace's queue
    other_ns = [snapshot([*_nodes(), local_queue("team-a-queue", "team-b")])]
    assert "GG306" in feasibility_findings(run(_job(KUEUE), other_ns))


def test_no_kueue_in_the_snapshot_judges_nothing() -> None:
    assert not feasibility_findings(run(_job(KUEUE), [snapshot(_nodes())]))


def test_kai_queue_limit_never_holds_the_gang() -> None:
    # a batch Job is no gang: one pod of 8 GPUs is its minimum
    cluster = [snapshot([*_nodes(), kai_queue("parent", gpu_limit=4),
                         kai_queue("research", parent="parent")])]
    found = feasibility_findings(run(_job(KAI, scheduler="kai-scheduler"), cluster))
    assert "GG402" in found and found["GG402"][0].startswith("error"), found
    assert "limit of KAI queue `parent` is 4" in found["GG402"][0]
    # within the limit: fits
    roomy = [snapshot([*_nodes(), kai_queue("parent", gpu_limit=8), kai_queue("research", parent="parent")])]
    assert not feasibility_findings(run(_job(KAI, scheduler="kai-scheduler"), roomy))


def test_kai_queue_label_ignored_unless_kai_schedules_the_pods() -> None:
    cluster = [snapshot([*_nodes(), kai_queue("research", gpu_limit=1)])]
    assert not feasibility_findings(run(_job(KAI), cluster))


def test_missing_kai_queue_is_a_wait() -> None:
    cluster = [snapshot([*_nodes(), kai_queue("default-queue")])]
    found = feasibility_findings(run(_job(KAI, scheduler="kai-scheduler"), cluster))
    assert list(found) == ["GG306"] and found["GG306"][0].startswith("warning"), found


def test_kai_limits_follow_the_parents_and_cut_cycles() -> None:
    topo = Topology.from_objects([kai_queue("a", gpu_limit=4, parent="b"),
                                  kai_queue("b", gpu_limit=2, parent="a")])
    assert topo.kai_limits("a")["nvidia.com/gpu"] == (2, "b")
    assert topo.kai_limits("missing") == {}


def _pytorchjob(scheduler: str, task_groups: bool) -> dict[str, Any]:
    main = container("4", "8Gi")
    main["name"] = "pytorch"
    for section in ("requests", "limits"):
        main["resources"][section]["nvidia.com/gpu"] = "8"
    template: dict[str, Any] = {"spec": {"schedulerName": scheduler, "containers": [main]}}
    if task_groups:
        # YuniKorn's gang: 8 placeholders of 8 GPUs (the pool's label, so that gpugate gives
        # them the pool's tolerations), which must all be placed first; Hard: never or fail
        groups = [{"name": "pt", "minMember": 8, "labels": {"maip.mxsf.io/usage": "training"},
                   "minResource": {"nvidia.com/gpu": "8", "cpu": "4", "memory": "8Gi"}}]
        template["metadata"] = {"labels": {"applicationId": "p"}, "annotations": {
            "yunikorn.apache.org/task-groups": json.dumps(groups),
            "yunikorn.apache.org/task-group-name": "pt",
            "yunikorn.apache.org/schedulingPolicyParameters": "gangSchedulingStyle=Hard"}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "p", "namespace": "team-a", "labels": {"maip.mxsf.io/usage": "training"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 7, "template": template}}}}


def test_yunikorn_without_task_groups_places_pods_one_by_one() -> None:
    """8 pods of 8 GPUs on 4 nodes: a gang never fits; YuniKorn without task groups places
    them one by one (some run, the rest wait): a warning, never a rejection. With task groups
    its gang is their placeholders (8 of 8 GPUs): Hard, they never all fit."""
    cluster = [snapshot(_nodes())]
    found = feasibility_findings(run(_pytorchjob("yunikorn", task_groups=False), cluster))
    assert all(not message.startswith("error") for messages in found.values() for message in messages), found
    gang = feasibility_findings(run(_pytorchjob("yunikorn", task_groups=True), cluster))
    assert "GG403" in gang and gang["GG403"][0].startswith("error"), gang
