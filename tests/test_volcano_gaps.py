"""Volcano gaps of issue 19: partition policies set the task's gang minimum, PodGroups are
judged against their queue (state and capability)."""

from __future__ import annotations

from typing import Any

from policies.workload import build_workload
from tests.feasibility_helpers import (
    container,
    feasibility_findings,
    node,
    podgroup,
    queue,
    run,
    snapshot,
)


def _job(replicas: int, partition: dict[str, Any] | None, cpu: str = "4") -> dict[str, Any]:
    task: dict[str, Any] = {"name": "worker", "replicas": replicas,
                            "template": {"spec": {"containers": [container(cpu, "1Gi")]}}}
    if partition is not None:
        task["partitionPolicy"] = partition
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"queue": "default", "tasks": [task]}}


def test_partition_policy_sets_the_task_minimum() -> None:
    workload = build_workload(_job(8, {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 1}))
    assert workload is not None
    assert workload.gang_min == 2 and workload.pod_sets[0].gang_count == 2
    # minPartitions defaults to 0: the webhook fills minAvailable 0
    workload = build_workload(_job(8, {"totalPartitions": 4, "partitionSize": 2}))
    assert workload is not None and workload.pod_sets[0].gang_count == 0
    # an explicit minAvailable wins
    doc = _job(8, {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 1})
    doc["spec"]["tasks"][0]["minAvailable"] = 6
    workload = build_workload(doc)
    assert workload is not None and workload.pod_sets[0].gang_count == 6


def test_partitioned_job_that_fits_its_minimum_is_not_never() -> None:
    # room for two 4-CPU pods: the 8-pod task without partitions never fits, with a
    # partition minimum of 2 pods it does
    cluster = [snapshot([node("n1", {"cpu": "8", "memory": "64Gi"}), queue("default")])]
    assert "GG403" in feasibility_findings(run(_job(8, None), cluster))
    partitioned = _job(8, {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 1})
    assert "GG403" not in feasibility_findings(run(partitioned, cluster))


def _podgroup(queue_name: str, cpu: str) -> dict[str, Any]:
    doc = podgroup("pg", queue_name, {"cpu": cpu, "memory": "1Gi"})
    doc.pop("status")
    return doc


def test_podgroup_queue_closed_or_missing() -> None:
    cluster = [snapshot([node("n1", {"cpu": "64", "memory": "64Gi"}), queue("default"),
                         queue("shut", state="Closed")])]
    assert "GG306" in feasibility_findings(run(_podgroup("shut", "1"), cluster))
    assert "GG306" in feasibility_findings(run(_podgroup("nowhere", "1"), cluster))
    assert "GG306" not in feasibility_findings(run(_podgroup("default", "1"), cluster))


def test_podgroup_min_resources_against_queue_capability() -> None:
    cluster = [snapshot([node("n1", {"cpu": "64", "memory": "64Gi"}),
                         queue("small", capability={"cpu": "4", "memory": "8Gi"})])]
    found = feasibility_findings(run(_podgroup("small", "8"), cluster))
    assert "GG402" in found and found["GG402"][0].startswith("error"), found
    assert "GG402" not in feasibility_findings(run(_podgroup("small", "2"), cluster))
