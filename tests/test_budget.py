"""A pathological gang is answered within the feasibility budget.

100,000 pods in 200 pod sets against 50,000 nodes: the feasibility check stops at
``feasibility.budgetMilliseconds`` and reports GG406 (info, never a rejection); every
other rule still runs. Timing is only bounded generously (10x the budget on top of
what the other rules take for the same object, measured in the same run) to catch a
hang, never to grade speed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from feasibility_helpers import gpu_node
from webhook_helpers import ServedWebhook, decode_patch, post_review, review_for

from policies.config import Policy, policy_from_data
from policies.engine import Evaluation, evaluate
from policies.topology import ClusterSnapshot, Topology
from webhook.app import PolicySource, StaticTopology, Webhook

GPU = "metax-tech.com/gpu"
NODES = 50_000
POD_SETS = 200
PODS_PER_SET = 500
VERDICTS = {"GG402", "GG403", "GG404", "GG405"}


def pathological_gang(gpu_limit_missing: bool = False) -> dict[str, Any]:
    """200 tasks x 500 pods, 1 GPU each: fits on paper (400,000 GPUs), so only a real
    placement over 50,000 nodes could decide it; each task excludes one zone, so no two
    adjacent tasks see the same nodes."""
    tasks = []
    for i in range(POD_SETS):
        resources: dict[str, Any] = {"limits": {GPU: "1", "cpu": f"{1 + i % 5}", "memory": f"{1 + i % 3}Gi"}}
        if gpu_limit_missing and i == 0:
            resources = {"requests": {GPU: "1", "cpu": "1"}}  # GG501: the API server would refuse the pods
        tasks.append({"name": f"t{i}", "replicas": PODS_PER_SET, "template": {"spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "NotIn", "values": [f"z{i % 7}"]}]}]}}},
            "containers": [{"name": "main", "image": "trainer:1", "resources": resources}]}}})
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "huge", "namespace": "ml", "labels": {"maip.mxsf.io/usage": "training"}},
            "spec": {"schedulerName": "volcano", "minAvailable": POD_SETS * PODS_PER_SET, "tasks": tasks}}


@pytest.fixture(scope="module")
def clusters() -> list[ClusterSnapshot]:
    nodes = [gpu_node(f"n{i}", resource=GPU,
                      labels={"zone": f"z{i % 7}", "nvidia.com/gpu.clique": f"c{i // 16}"})
             for i in range(NODES)]
    return [ClusterSnapshot("big", Topology.from_objects(nodes, Policy()))]


def _timed(doc: Any, policy: Policy, clusters: Any, budget_ms: int | None) -> tuple[Evaluation, float]:
    started = time.monotonic()
    deadline = None if budget_ms is None else started + budget_ms / 1000
    evaluation = evaluate(doc, policy, clusters, deadline=deadline)
    return evaluation, time.monotonic() - started


@pytest.mark.parametrize("budget_ms", [20, 200])
def test_budget_runs_out_into_gg406_and_the_other_rules_still_run(clusters: list[ClusterSnapshot],
                                                                    budget_ms: int) -> None:
    job = pathological_gang()
    policy = policy_from_data({"feasibility": {"budgetMilliseconds": budget_ms}})
    # what the rules other than feasibility take for this object, on this machine, now
    without, rest_seconds = _timed(job, policy, None, None)
    evaluation, seconds = _timed(job, policy, clusters, budget_ms)

    rules = {f.rule for f in evaluation.findings}
    unknown = [f for f in evaluation.findings if f.rule == "GG406"]
    assert unknown and f"budget ({budget_ms} ms) ran out" in unknown[0].message, evaluation.findings
    assert str(unknown[0].severity) == "info"
    assert not rules & VERDICTS  # nothing proven, nothing rejected
    assert {f.rule for f in without.findings} <= rules  # every other rule reported as before
    assert evaluation.patch == without.patch and evaluation.patch  # the usage mutation still happened
    assert seconds < rest_seconds + 10 * budget_ms / 1000, (seconds, rest_seconds)


def test_a_generous_budget_decides_the_same_gang(clusters: list[ClusterSnapshot]) -> None:
    """The GG406 above is the budget's doing: with time enough the check reaches a verdict."""
    job = pathological_gang()
    policy = policy_from_data({"feasibility": {"budgetMilliseconds": 60_000}})
    evaluation, _ = _timed(job, policy, clusters, 60_000)
    assert not [f for f in evaluation.findings if f.rule == "GG406" and "budget" in f.message]
    assert not {f.rule for f in evaluation.findings} & {"GG402", "GG403", "GG405"}  # it fits: 1 GPU per pod


def test_pathological_gang_through_the_server(clusters: list[ClusterSnapshot]) -> None:
    """Over TLS: the review comes back (uid echoed), denied only for what the static rules
    prove (GG501), patched by /mutate, and feasibility counted as GG406."""
    budget_ms = 200
    policy = policy_from_data({"feasibility": {"budgetMilliseconds": budget_ms}})
    webhook = Webhook(policy=PolicySource(policy=policy), topology=StaticTopology(clusters))
    job = pathological_gang(gpu_limit_missing=True)
    with ServedWebhook(webhook=webhook) as hook:
        _, rest_seconds = _timed(job, webhook.policy.policy, None, None)
        started = time.monotonic()
        status, answer = post_review(hook, "validate", review_for(job, uid="huge-1"))
        seconds = time.monotonic() - started
        assert status == 200 and answer["response"]["uid"] == "huge-1"
        response = answer["response"]
        assert response["allowed"] is False
        message = response["status"]["message"]
        assert "GG501" in message and not any(rule in message for rule in VERDICTS)
        assert seconds < 2 * rest_seconds + 10 * budget_ms / 1000 + 1.0, (seconds, rest_seconds)

        status, answer = post_review(hook, "mutate", review_for(job, uid="huge-2"))
        assert status == 200 and answer["response"]["allowed"] is True and decode_patch(answer["response"])

        registry = webhook.metrics.registry
        counted = registry.get_sample_value("gpugate_review_findings_total",
                                            {"endpoint": "validate", "kind": "Job", "rule": "GG406",
                                             "severity": "info"})
        assert counted == 1.0
