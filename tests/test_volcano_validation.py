"""Volcano checks the ported upstream tables (``tests/parity/volcano.yaml``) do not exercise:
the CRD schemas' minimums, enums and patterns, names too long for their pods, the mpi plugin's
argument forms, Go-only number and regex syntax that must pass, and queue amounts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policies.validation import volcano

TASK = {"name": "worker", "replicas": 2,
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}


def job(tasks: list[dict[str, Any]] | None = None, name: str = "train", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"tasks": tasks if tasks is not None else [copy.deepcopy(TASK)], **spec}}


def task(**fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(TASK), **fields}


H, W = "volcano.sh/hierarchy", "volcano.sh/hierarchy-weights"


def queue(annotations: dict[str, str] | None = None, name: str = "team", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


def hypernode(members: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "s0"},
            "spec": {"tier": 1, "members": members, **spec}}


def messages(doc: dict[str, Any]) -> list[str]:
    validate = {"Job": volcano.job, "Queue": volcano.queue, "HyperNode": volcano.hypernode,
                "PodGroup": volcano.podgroup}
    return [refusal.message for refusal in validate[doc["kind"]](doc)]


@pytest.mark.parametrize(("doc", "says"), [
    (job(minAvailable=-1), "spec.minAvailable -1 is less than 0"),
    (job(maxRetry=-2), "spec.maxRetry -2 is less than 0"),
    (job(minSuccess=0), "spec.minSuccess 0 is less than 1"),
    (job(ttlSecondsAfterFinished=-5), "ttlSecondsAfterFinished -5"),
    (job([task(name="Worker")]), "'Worker' is not a lowercase RFC 1123 label"),
    (job([task(minAvailable=-1)]), "spec.tasks[0].minAvailable -1 is less than 0"),
    (job([task(topologyPolicy="numa")]), "topologyPolicy 'numa' is not one of"),
    (job([task(topologyPolicy="single-numa-node")]), "cpu 0 is not a whole number of CPUs"),
    (job(networkTopology={"mode": "strict"}), "networkTopology mode 'strict'"),
    (job(volumes=[{"mountPath": "/a:b", "volumeClaimName": "data"}]), "contains ':'"),
    (job(volumes=[{"mountPath": "/data", "volumeClaimName": "Data"}]), "'Data' is not a valid claim name"),
    (job(volumes=[{"mountPath": "/data", "volumeClaimName": "data", "volumeClaim": {}}]),
     "sets both volumeClaim and volumeClaimName"),
    (job(name="a" * 60), "is not a valid qualified name of at most 63 characters"),
    (job(name="a" * 70), "metadata.name (70 characters)"),
    (job(plugins={"mpi": ["-master", "launcher"]}), "names master task 'launcher'"),
    (job(plugins={"mpi": []}), "names master task 'master'"),
    (job([task(policies=[{"events": "PodFailed", "action": "RestartPod"}])]),
     "events is a string, not a list"),
    (job([task(policies=[{"event": "PodRunning", "action": "RestartPod"}])]), "is not one users may set"),
    (job([task(name="a", dependsOn={"name": ["b", "b"]}), task(name="b")]), "directed acyclic graph"),
    (job([task(replicas=4, partitionPolicy={"totalPartitions": 2})]), "partitionSize is not set"),
])
def test_job_refusals(doc: dict[str, Any], says: str) -> None:
    assert any(says in message for message in messages(doc)), messages(doc)


@pytest.mark.parametrize("doc", [
    job([task(name="")]),                                       # named default0 by the mutating webhook
    job([task(name=""), task(name="")]),                        # default0, default1
    job(minAvailable=0, maxRetry=0),
    job(name="a" * 50),                                         # pod name a...a-worker-0 is 59 characters
    job(plugins={"mpi": ["--master=worker"], "svc": [], "ssh": []}),
    job(plugins={"mpi": ["--master", "worker", "--port=2222"]}),
    job([task(name="master")], plugins={"mpi": []}),
    job(plugins={"mpi": ["--gpus=8"]}),                         # a parse error: not guessed at
    job([task(name="a", dependsOn={"name": []}), task(name="b", dependsOn={"name": ["a"]})]),
    job([task(topologyPolicy="none")]),
    job([task(topologyPolicy="restricted",
              template={"spec": {"containers": [{"name": "m", "image": "i",
                                                  "resources": {"limits": {"cpu": "2000m"}}}]}})]),
    job(volumes=[{"mountPath": "/data", "volumeClaim": {"accessModes": ["ReadWriteOnce"]}}]),
    job([task(replicas=4, minAvailable=4, partitionPolicy={"totalPartitions": 2, "partitionSize": 2})]),
    job(networkTopology={"mode": "soft", "highestTierAllowed": 0}),
    job(policies=[{"event": "*", "action": "RestartJob"}, {"exitCode": 3, "action": "AbortJob"}]),
    job(policies=[{"events": ["PodFailed", "PodFailed"], "action": "RestartJob"}]),
    job(minAvailable="two"),                                    # a wrong type is GG002's
])
def test_job_passes(doc: dict[str, Any]) -> None:
    assert messages(doc) == []


@pytest.mark.parametrize(("doc", "says"), [
    (queue(weight=70000), "spec.weight 70000 is outside 1..65535"),
    (queue(weight=-1), "spec.weight -1"),
    (queue(capability={"nvidia.com/gpu": "1.5"}), "1.5 is not a whole number"),
    (queue(capability={"pods": "2.5"}), "is not a whole number"),
    (queue(dequeueStrategy="lifo"), "dequeueStrategy 'lifo'"),
    (queue({H: "root/a", W: "1/1_0"}), "'1_0' is not a number"),
    (queue({H: "root/a", W: "1/1e400"}), "is not a number"),
    (queue({H: "root/a", W: "1/-Inf"}), "is not above 0"),
    (queue({H: "root/a"}), "has 1 weights for the 2 parts"),
    (queue({H: "root/a", W: "1/"}), "weight '' is not a number"),
])
def test_queue_refusals(doc: dict[str, Any], says: str) -> None:
    assert any(says in message for message in messages(doc)), messages(doc)


@pytest.mark.parametrize("doc", [
    queue(weight=0),                                            # 0 is unset: defaulted to 1
    queue(capability={"cpu": "1.5", "memory": "1.5Gi", "example.kubernetes.io/x": "0.5"}),
    queue(deserved={"cpu": "4"}, guarantee={"resource": {"cpu": "4"}}, capability={"cpu": "4"}),
    queue(parent="root", name="root"),
    queue({H: "root/a", W: "1/0x1p-2"}),  # Go reads hex floats
    queue({H: "root/a", W: "1/NaN"}),     # NaN <= 0 is false
    queue({H: "a/b", W: "1.5/2e1"}),
    queue(capability={"cpu": None, "memory": "bad"}),           # unset, and unparseable (GG504's)
])
def test_queue_passes(doc: dict[str, Any]) -> None:
    assert messages(doc) == []


@pytest.mark.parametrize(("doc", "says"), [
    (hypernode([{"type": "Node", "selector": {}}]), "sets 0 of exactMatch"),
    (hypernode([{"type": "Node", "selector": {"exactMatch": {"name": "n"}, "labelMatch": {}}}]),
     "sets 2 of"),
    (hypernode([{"type": "Rack", "selector": {"exactMatch": {"name": "n"}}}]), "type 'Rack'"),
    (hypernode([{"selector": {"exactMatch": {"name": "n"}}}]), "type is not set"),
    (hypernode([{"type": "Node", "selector": {"exactMatch": {"name": "Node_1"}}}]),
     "is not a DNS subdomain"),
    (hypernode([{"type": "Node", "selector": {"regexMatch": {"pattern": ""}}}]), "pattern is not set"),
    (hypernode([{"type": "Node", "selector": {"regexMatch": {"pattern": "a**"}}}]),
     "not a valid regular expression"),
    (hypernode([{"type": "Node", "selector": {"exactMatch": {"name": "n"}}}], tier=-1), "spec.tier -1"),
])
def test_hypernode_refusals(doc: dict[str, Any], says: str) -> None:
    assert any(says in message for message in messages(doc)), messages(doc)


@pytest.mark.parametrize("pattern", [r"node-\d+", r"\pL+", r"(?i)NODE-.*", r"a\z", r"[[:alpha:]]+",
                                     r"\x{41}"])
def test_hypernode_go_regex_passes(pattern: str) -> None:
    assert messages(hypernode([{"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}])) == []


def test_podgroup_refusals() -> None:
    doc = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg"},
           "spec": {"minMember": -1, "subGroupPolicy": [{"name": "p", "subGroupSize": 0,
                                                          "networkTopology": {"mode": "hard"}}]}}
    found = messages(doc)
    assert any("spec.minMember -1" in m for m in found) and any("subGroupSize 0" in m for m in found), found
