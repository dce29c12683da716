"""KubeRay checks the ported upstream tables (``tests/parity/kuberay.yaml``) do not exercise:
CRD schema enums and requirements, the upgrade strategy of a RayJob's or RayService's
RayCluster, and gate-dependent fields that must pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policies.validation import kuberay

HEAD = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}}


def cluster(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
            "spec": {"headGroupSpec": copy.deepcopy(HEAD), **spec}}


def job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"},
            "spec": {"rayClusterSpec": {"headGroupSpec": copy.deepcopy(HEAD)}, **spec}}


def messages(doc: dict[str, Any]) -> list[str]:
    validate = {"RayCluster": kuberay.raycluster, "RayJob": kuberay.rayjob, "RayService": kuberay.rayservice}
    return [refusal.message for refusal in validate[doc["kind"]](doc)]


@pytest.mark.parametrize(("spec", "says"), [
    ({"authOptions": {"mode": "password"}}, "authOptions.mode 'password' is not one of"),
    ({"autoscalerOptions": {"version": "v3"}}, "autoscalerOptions.version 'v3'"),
    ({"autoscalerOptions": {"upscalingMode": "Fast"}}, "upscalingMode 'Fast'"),
    ({"gcsFaultToleranceOptions": {"backend": "etcd"}}, "backend 'etcd'"),
    ({"managedBy": "someone-else"}, "managedBy 'someone-else'"),
    ({"networkPolicy": {"mode": "AllowAll"}}, "networkPolicy.mode 'AllowAll'"),
    ({"workerGroupSpecs": [{"template": HEAD["template"]}]}, "groupName is missing"),
])
def test_schema_refusals(spec: dict[str, Any], says: str) -> None:
    assert any(says in message for message in messages(cluster(**spec)))


def test_deletion_rule_enums_and_schema() -> None:
    doc = job(deletionStrategy={"deletionRules": [
        {"policy": "DeleteEverything", "condition": {"jobStatus": "SUCCEEDED"}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "STOPPED"}},
    ]})
    found = messages(doc)
    assert any("'DeleteEverything' is not one of" in message for message in found)
    assert any("'STOPPED' is not one of" in message for message in found)


def test_embedded_upgrade_strategy_is_refused_on_the_created_cluster() -> None:
    doc = job()
    doc["spec"]["rayClusterSpec"]["upgradeStrategy"] = {"type": "Recreate"}
    assert any("created by a RayJob" in message for message in messages(doc))


def test_gated_fields_alone_pass() -> None:
    """Fields whose use depends on an operator feature gate gpugate cannot see are not refused."""
    worker = {"groupName": "w", "suspend": True, "template": HEAD["template"]}
    assert messages(cluster(networkPolicy={"mode": "DenyAll"}, tlsOptions={"enabled": True},
                            gcsFaultToleranceOptions={"backend": "rocksdb"},
                            historyServerOptions={"collectorOptions": {
                                "image": "collector", "env": [{"name": "STORAGE_BACKEND", "value": "S3"},
                                                              {"name": "S3_REGION", "value": "r"}]}},
                            workerGroupSpecs=[worker])) == []
    assert messages(job(shutdownAfterJobFinishes=True, deletionStrategy={
        "onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteSelf"}})) == []


def test_wrong_types_never_raise() -> None:
    for value in (None, 3, "x", [], {"headGroupSpec": 1, "workerGroupSpecs": {"a": 1}}):
        for kind, field in (("RayCluster", "spec"), ("RayJob", "spec"), ("RayService", "spec")):
            doc = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "x", "annotations": value},
                   field: value}
            messages(doc)
            doc[field] = {"rayClusterSpec": value, "rayClusterConfig": value, "deletionStrategy": value,
                          "clusterSelector": value, "upgradeStrategy": value, "headGroupSpec": value,
                          "workerGroupSpecs": [value], "networkPolicy": value, "autoscalerOptions": value}
            messages(doc)


def test_managed_by_of_a_job() -> None:
    assert any("managedBy 'me'" in message for message in messages(job(managedBy="me")))
    assert messages(job(managedBy="kueue.x-k8s.io/multikueue")) == []
