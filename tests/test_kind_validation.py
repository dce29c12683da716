"""GG601 (kind-invalid) as the engine runs it: on UPDATE only for kinds whose own webhook
judges updates with the same checks, and messages that fit what kubectl shows."""

from __future__ import annotations

import copy
from typing import Any

from policies.config import Policy
from policies.engine import evaluate
from policies.kinds import KINDS


def _gg601(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> list[str]:
    return [f.message for f in evaluate(doc, Policy(), previous=previous).findings if f.rule == "GG601"]


def _volcano_job(replicas: int, partition: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "d"},
            "spec": {"queue": "default", "minAvailable": 1, "tasks": [
                {"name": "w", "replicas": replicas, "partitionPolicy": partition,
                 "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}]}}


def test_create_only_checks_are_not_run_on_update() -> None:
    partition = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 1}
    stored, scaled = _volcano_job(4, partition), _volcano_job(6, partition)
    # on CREATE, 6 replicas in 2 partitions of 2 is refused by Volcano's webhook ...
    assert _gg601(scaled), "the partition check should refuse this on CREATE"
    # ... which does not run that check when the job is scaled (validateJobUpdate)
    assert _gg601(scaled, previous=stored) == []


def test_kinds_that_judge_updates_alike_are_judged_on_update() -> None:
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": "d"},
               "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                   {"name": "ray-head", "image": "rayproject/ray"}]}}},
                        "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0,
                                              "maxReplicas": 2, "template": {"spec": {"containers": [
                                                  {"name": "ray-worker", "image": "rayproject/ray"}]}}}]}}
    changed = copy.deepcopy(cluster)
    changed["spec"]["workerGroupSpecs"][0]["minReplicas"] = 3   # above maxReplicas
    assert _gg601(changed, previous=cluster), "KubeRay validates updates as it validates creates"


def test_every_validator_named_by_the_kinds_table_exists() -> None:
    from policies.validation import validator

    for spec in KINDS:
        if spec.validate:
            assert callable(validator(spec.validate)), spec.label
