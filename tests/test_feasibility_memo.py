"""The feasibility memo: an answer kept on the topology is the answer a fresh check gives.

A review asks the topology a :class:`FitQuestion` (everything the check reads of the
workload and the policy); between topology changes the outcome is a function of the
question, so jobs of one shape share one answer. These tests hold the memo to that:
every kind of change invalidates, the memo is bounded, and what a caller gets is its own
to edit. (That memoised verdicts equal fresh ones through random events is
tests/test_memo_switch.py's, for every memo at once.)
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import pytest
from feasibility_helpers import (
    USAGE,
    Obj,
    gpu_node,
    node,
    pod,
    podgroup,
    pytorch_job,
    question_of,
    queue,
    run,
)

from policies.config import Policy, policy_from_data
from policies.engine import Context
from policies.feasibility import FitQuestion, OutcomeMemo, Verdict
from policies.rules._feasibility import Reported as Outcome
from policies.rules._feasibility import check_cluster, feasibility
from policies.topology import ClusterSnapshot, Topology

GPU = "metax-tech.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
ACCEL = "example.com/accel"


def submitted(doc: Obj, pol: Policy) -> Obj:
    """The object as /validate sees it: after the mutating webhook (usage tolerations and
    affinity), so that the GPU nodes' usage taints are tolerated."""
    return run(doc, None, pol).mutated or doc


def as_tuple(out: Outcome) -> tuple[Any, ...]:
    """Everything an outcome says, rows and witness included."""
    rows = [(r.pod_set, r.count, r.eligible, r.fits_now, r.fits_empty) for r in out.rows]
    return (out.cluster, out.verdict, out.rule, out.message, out.path, out.witness, out.severity, rows,
            out.notes)


def memo_of(topo: Topology) -> OutcomeMemo:
    return OutcomeMemo.of(topo)


# -- cluster objects --------------------------------------------------------------------------


def quota_tree(cpu: int, namespace: str) -> Obj:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "tree", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", "max": {"cpu": 1000},
                              "children": [{"name": "team", "max": {"cpu": cpu},
                                            "namespaces": [namespace]}]}}}


def hypernode(name: str, tier: int, selector: Obj) -> Obj:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "members": [{"type": "Node", "selector": selector}]}}


# -- hits ---------------------------------------------------------------------------------


def gpu_cluster(nodes: int = 8) -> list[Obj]:
    return [gpu_node(f"gpu-{i}", labels={CLIQUE: f"clique-{i // 4}"}) for i in range(nodes)] + [
        queue("research", {GPU: "64"})]


def test_jobs_differing_only_in_name_and_uid_share_one_answer() -> None:
    pol = Policy()
    topo = Topology.from_objects(gpu_cluster())
    clusters = [ClusterSnapshot("c", topo)]
    first = pytorch_job(3, 8, group=16, queue_name="research", name="sweep-1")
    second = copy.deepcopy(first)
    second["metadata"].update(name="sweep-2", uid="5b0c6a2e-0000-4000-8000-000000000002",
                              labels={"sweep": "lr-0.02"})
    assert question_of(first, pol) == question_of(second, pol)
    assert hash(question_of(first, pol)) == hash(question_of(second, pol))
    a = run(first, clusters, pol)
    assert (memo_of(topo).hits, memo_of(topo).misses) == (0, 1)
    b = run(second, clusters, pol)
    assert (memo_of(topo).hits, memo_of(topo).misses) == (1, 1)
    assert [(f.rule, f.message.replace("sweep-1", "sweep-2")) for f in a.findings] == \
        [(f.rule, f.message) for f in b.findings]
    assert b.workload is not None
    found = feasibility(b.workload, Context(policy=pol, clusters=clusters))
    assert memo_of(topo).hits == 2
    assert found is not None and found.verdict == Verdict.FITS and found.outcomes[0].witness


def test_a_different_shape_is_a_different_question() -> None:
    pol = Policy()
    base = pytorch_job(3, 8, group=16, queue_name="research")
    variants = [pytorch_job(3, 8, group=32, queue_name="research"),
                pytorch_job(4, 8, group=16, queue_name="research"),
                pytorch_job(3, 8, group=16, queue_name="other"),
                pytorch_job(3, 4, group=16, queue_name="research")]
    namespaced = copy.deepcopy(base)
    namespaced["metadata"]["namespace"] = "elsewhere"
    tolerant = copy.deepcopy(base)
    worker = tolerant["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["tolerations"] = [{"operator": "Exists"}]
    asked = question_of(base, pol)
    for other in [*variants, namespaced, tolerant]:
        assert question_of(other, pol) != asked
    assert question_of(base, policy_from_data({"feasibility": {"autoscaling": True}})) != asked


def test_the_same_question_under_another_policy_is_not_answered_from_the_memo() -> None:
    topo = Topology.from_objects(gpu_cluster())
    snapshot = ClusterSnapshot("c", topo)
    job = submitted(pytorch_job(3, 8, group=16, queue_name="research"), Policy())
    check_cluster(question_of(job, Policy()), snapshot, Policy())
    check_cluster(question_of(job, Policy()), snapshot, Policy())   # equal policy, another load
    assert memo_of(topo).hits == 0
    pol = Policy()
    check_cluster(question_of(job, pol), snapshot, pol)
    check_cluster(question_of(job, pol), snapshot, pol)
    assert memo_of(topo).hits == 1


def test_fleet_members_get_their_own_names_from_one_topology() -> None:
    pol = Policy()
    topo = Topology.from_objects(gpu_cluster())
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    one = check_cluster(asked, ClusterSnapshot("east", topo), pol)
    two = check_cluster(asked, ClusterSnapshot("west", topo), pol)
    assert (one.cluster, two.cluster) == ("east", "west") and memo_of(topo).hits == 1
    assert as_tuple(one)[1:] == as_tuple(two)[1:]


# -- invalidation ----------------------------------------------------------------------------

# (event, object, does the answer change): every kind of change the topology reads.
CHANGES: list[tuple[str, str, Obj]] = [
    ("pod bound", "ADDED", pod("busy", "gpu-0", {GPU: "8"})),
    ("pod finished", "MODIFIED", pod("running", "gpu-1", {GPU: "1"}, phase="Succeeded")),
    ("pod deleted", "DELETED", pod("running", "gpu-1", {GPU: "1"})),
    ("node added", "ADDED", gpu_node("gpu-new", labels={CLIQUE: "clique-0"})),
    ("node deleted", "DELETED", gpu_node("gpu-7")),
    ("supernode label", "MODIFIED", gpu_node("gpu-7", labels={CLIQUE: "clique-0"})),
    ("selector label", "MODIFIED", {**gpu_node("gpu-7"), "metadata": {  # the usage taint stays
        "name": "gpu-7", "labels": {USAGE: "inference", CLIQUE: "clique-1"}}}),
    ("usage pool", "MODIFIED", gpu_node("gpu-7", usage="inference", labels={CLIQUE: "clique-1"})),
    ("taint", "MODIFIED", {**gpu_node("gpu-7", labels={CLIQUE: "clique-1"}),
                           "spec": {"taints": [{"key": "broken", "effect": "NoExecute"}]}}),
    ("cordon", "MODIFIED", {**gpu_node("gpu-7", labels={CLIQUE: "clique-1"}),
                            "spec": {"unschedulable": True, "taints": gpu_node("x")["spec"]["taints"]}}),
    ("allocatable", "MODIFIED", gpu_node("gpu-7", gpus=4, labels={CLIQUE: "clique-1"})),
    ("queue capability", "MODIFIED", queue("research", {GPU: "8"})),
    ("queue closed", "MODIFIED", queue("research", {GPU: "64"}, state="Closed")),
    ("queue added", "ADDED", queue("other", {GPU: "8"})),
    ("queue deleted", "DELETED", queue("spare")),
    ("podgroup added", "ADDED", podgroup("pg", "research", {GPU: "40"})),
    ("podgroup phase", "MODIFIED", podgroup("held", "research", {GPU: "8"}, phase="Completed")),
    ("podgroup deleted", "DELETED", podgroup("held", "research", {GPU: "8"})),
    ("quota tree", "ADDED", quota_tree(4, "kubeflow")),
    ("hypernode", "ADDED", hypernode("h0", 1, {"regexMatch": {"pattern": "gpu-[0-1]$"}})),
    ("hypernode deleted", "DELETED", hypernode("h9", 2, {"exactMatch": {"name": "gpu-0"}})),
]


def change_cluster() -> list[Obj]:
    return [*gpu_cluster(), pod("running", "gpu-1", {GPU: "1"}), queue("spare"),
            podgroup("held", "research", {GPU: "8"}), hypernode("h9", 2, {"exactMatch": {"name": "gpu-0"}})]


@pytest.mark.parametrize(("what", "event", "obj"), CHANGES, ids=[c[0] for c in CHANGES])
def test_every_change_invalidates(what: str, event: str, obj: Obj) -> None:
    pol = Policy()
    topo = Topology.from_objects(change_cluster())
    snapshot = ClusterSnapshot("c", topo)
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    assert check_cluster(asked, snapshot, pol).verdict == Verdict.FITS
    before = topo.state_versions((CLIQUE, *asked.label_keys))
    topo.apply(event, obj)
    assert topo.state_versions((CLIQUE, *asked.label_keys)) != before
    memo = memo_of(topo)
    hits = memo.hits
    after = check_cluster(asked, snapshot, pol)
    assert memo.hits == hits, f"{what}: answered from before the change"
    assert as_tuple(after) == as_tuple(check_cluster(asked, snapshot, pol, memo=False))


def test_a_change_to_nothing_keeps_the_answer() -> None:
    pol = Policy()
    topo = Topology.from_objects(change_cluster())
    snapshot = ClusterSnapshot("c", topo)
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    check_cluster(asked, snapshot, pol)
    # heartbeats, status refreshes, and a label nobody selects on
    for event, obj in [("MODIFIED", gpu_node("gpu-3", labels={CLIQUE: "clique-0"})),
                       ("MODIFIED", pod("running", "gpu-1", {GPU: "1"})),
                       ("MODIFIED", queue("research", {GPU: "64"})),
                       ("MODIFIED", podgroup("held", "research", {GPU: "8"})),
                       ("MODIFIED", {**hypernode("h9", 2, {"exactMatch": {"name": "gpu-0"}}),
                                     "status": {"nodeCount": 1}}),
                       ("DELETED", hypernode("never-seen", 1, {})),
                       ("MODIFIED", gpu_node("gpu-3", labels={CLIQUE: "clique-0", "feature/ts": "1"})),
                       ("DELETED", pod("never-seen", "gpu-1", {GPU: "1"}))]:
        topo.apply(event, obj)
    check_cluster(asked, snapshot, pol)
    assert memo_of(topo).hits == 1


def test_relist_that_drops_objects_invalidates() -> None:
    pol = Policy()
    topo = Topology.from_objects(change_cluster())
    snapshot = ClusterSnapshot("c", topo)
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    check_cluster(asked, snapshot, pol)
    for kind in ("Pod", "PodGroup", "Queue", "Node"):
        before = topo.state_versions()
        topo.replace_all(kind, [o for o in change_cluster() if o["kind"] == kind][:-1])
        assert topo.state_versions() != before, kind
    hits = memo_of(topo).hits
    after = check_cluster(asked, snapshot, pol)
    assert memo_of(topo).hits == hits
    assert as_tuple(after) == as_tuple(check_cluster(asked, snapshot, pol, memo=False))


# -- what is never kept, and the bound ------------------------------------------------------------


def test_out_of_budget_answers_are_never_kept_and_a_spent_budget_stays_gg406() -> None:
    pol = Policy()
    topo = Topology.from_objects(gpu_cluster())
    snapshot = ClusterSnapshot("c", topo)
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    spent = time.monotonic() - 1
    out = check_cluster(asked, snapshot, pol, spent)
    assert (out.verdict, out.rule) == (Verdict.UNKNOWN, "GG406") and len(memo_of(topo)) == 0
    assert check_cluster(asked, snapshot, pol).verdict == Verdict.FITS
    assert len(memo_of(topo)) == 1
    # with the answer kept, a budget already spent still gets what it got before
    again = check_cluster(asked, snapshot, pol, spent)
    assert (again.verdict, again.rule) == (Verdict.UNKNOWN, "GG406")


def test_no_nodes_is_not_kept() -> None:
    pol = Policy()
    topo = Topology.from_objects([queue("research")])
    asked = question_of(pytorch_job(1, 8, queue_name="research"), pol)
    assert check_cluster(asked, ClusterSnapshot("c", topo), pol).rule == "GG406"
    assert len(memo_of(topo)) == 0


def test_the_memo_is_a_bounded_lru() -> None:
    pol = Policy()
    topo = Topology.from_objects([node(f"n{i}", {"cpu": "64"}) for i in range(2)])
    topo.outcome_memo = OutcomeMemo(size=3)
    snapshot = ClusterSnapshot("c", topo)

    def asked(cpu: int) -> FitQuestion:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "x"},
               "spec": {"template": {"spec": {"containers": [
                   {"name": "m", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}]}}}}
        return question_of(job, pol)

    memo = memo_of(topo)
    for cpu in (1, 2, 3):
        check_cluster(asked(cpu), snapshot, pol)
    check_cluster(asked(1), snapshot, pol)      # 1 is now the most recently used
    assert memo.hits == 1
    check_cluster(asked(4), snapshot, pol)      # evicts 2, the least recently used
    assert len(memo) == 3
    check_cluster(asked(1), snapshot, pol)
    assert memo.hits == 2
    check_cluster(asked(2), snapshot, pol)
    assert memo.hits == 2 and len(memo) == 3


def test_a_hit_is_the_callers_to_edit() -> None:
    """A hit is not a deep copy: the explain rows are frozen and shared, the containers
    are the caller's. Whatever a caller does to what it was handed, the memo keeps the
    answer it had."""
    pol = Policy()
    topo = Topology.from_objects(gpu_cluster())
    snapshot = ClusterSnapshot("c", topo)
    asked = question_of(submitted(pytorch_job(3, 8, group=16, queue_name="research"), pol), pol)
    first = check_cluster(asked, snapshot, pol)
    expected = copy.deepcopy(as_tuple(first))
    assert first.witness is not None and first.rows
    first.cluster = "edited"
    first.witness["Worker"]["gpu-0"] = 99
    first.witness["Extra"] = {"gpu-1": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.rows[0].count = 0         # type: ignore[misc]
    first.rows[0] = dataclasses.replace(first.rows[0], count=0)
    first.notes.append("edited")
    second = check_cluster(asked, snapshot, pol)
    assert as_tuple(second) == expected and memo_of(topo).hits == 1
    assert second.witness is not None
    second.witness["Master"].clear()
    second.rows.pop()
    second.notes.append("edited")
    second.verdict = Verdict.NEVER
    second.message = "edited"
    third = check_cluster(asked, snapshot, pol)
    assert as_tuple(third) == expected and memo_of(topo).hits == 2
    # Two hits share no container: editing one leaves the other as it was.
    fourth = check_cluster(asked, snapshot, pol)
    assert third.witness is not None and fourth.witness is not None
    assert third.witness is not fourth.witness and third.rows is not fourth.rows
    assert all(third.witness[k] is not fourth.witness[k] for k in third.witness)
    assert third.notes is not fourth.notes
