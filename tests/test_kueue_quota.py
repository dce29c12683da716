"""Kueue quota: LocalQueue -> ClusterQueue -> flavors, nominal quota, borrowing and lending
limits in (hierarchical) cohorts, as Kueue's flavor assigner decides admission
(policies/feasibility/kueue.py over policies/topology/kueue.py)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from feasibility_helpers import USAGE, feasibility_findings, node, snapshot

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.feasibility.kueue import _tree
from policies.topology import Topology

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta1"
GPU = "nvidia.com/gpu"


def gpu_nodes(count: int = 4, gpus: int = 8) -> list[Obj]:
    return [node(f"n{i}", {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}, {USAGE: "training"})
            for i in range(count)]


def flavor(name: str) -> Obj:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}}


def local_queue(name: str = "team", cq: str = "cq-a", namespace: str = "ml") -> Obj:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def quota(resource: str, nominal: int | str, borrowing: int | None = None, lending: int | None = None) -> Obj:
    found: Obj = {"name": resource, "nominalQuota": nominal}
    if borrowing is not None:
        found["borrowingLimit"] = borrowing
    if lending is not None:
        found["lendingLimit"] = lending
    return found


def cluster_queue(name: str, flavors: dict[str, list[Obj]], cohort: str | None = None,
                  covered: tuple[str, ...] = ("cpu", "memory", GPU), used: dict[str, int] | None = None,
                  version: str = KUEUE, **spec: Any) -> Obj:
    groups = [{"coveredResources": list(covered),
               "flavors": [{"name": f, "resources": r} for f, r in flavors.items()]}]
    body: Obj = {"resourceGroups": groups, **spec}
    if cohort is not None:
        body["cohortName" if version.endswith("v1beta2") else "cohort"] = cohort
    found: Obj = {"apiVersion": version, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}
    if used:
        found["status"] = {"flavorsReservation": [
            {"name": f, "resources": [{"name": GPU, "total": str(v)}]} for f, v in used.items()]}
    return found


def cohort(name: str, parent: str | None = None, flavors: dict[str, list[Obj]] | None = None) -> Obj:
    spec: Obj = {}
    if parent is not None:
        spec["parentName"] = parent
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": [GPU], "flavors": [
            {"name": f, "resources": r} for f, r in flavors.items()]}]
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def full(gpus: int, borrowing: int | None = None, lending: int | None = None) -> list[Obj]:
    return [quota("cpu", 1000), quota("memory", "10Ti"), quota(GPU, gpus, borrowing, lending)]


def job(gpus: int, pods: int = 1, queue: str = "team", extra: Obj | None = None) -> Obj:
    """A PyTorchJob gang: Kueue admits all its pods at once."""
    limits = {GPU: gpus, **(extra or {})}

    def replica(count: int) -> Obj:
        return {"replicas": count, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": limits}}]}}}

    specs = {"Master": replica(1)}
    if pods > 1:
        specs["Worker"] = replica(pods - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"pytorchReplicaSpecs": specs}}


def findings(doc: Obj, objects: list[Obj], policy: Policy | None = None) -> dict[str, list[str]]:
    pol = policy or Policy()
    return feasibility_findings(evaluate(doc, pol, [snapshot([*gpu_nodes(), *objects], pol)]))


SHARED = [flavor("a100"), local_queue(),
          cluster_queue("cq-a", {"a100": full(4, borrowing=4)}, cohort="shared"),
          cluster_queue("cq-b", {"a100": full(12, lending=2)}, cohort="shared")]


def test_quota_beyond_what_the_cluster_queue_can_ever_borrow_is_never() -> None:
    """cq-a: 4 of its own, borrowing at most 4, from a cohort where cq-b lends at most 2: 6 at most
    (Kueue's potentialAvailable), though the nodes hold 32 GPUs."""
    assert "GG402" not in findings(job(6), SHARED)
    found = findings(job(7), SHARED)["GG402"]
    assert found == ["error: insufficient quota for nvidia.com/gpu in flavor `a100`: 7 asked by pod set "
                     "Master > maximum capacity 6 of ClusterQueue `cq-a`"]
    # a gang of 2 x 4: each pod set fits, the whole does not
    assert findings(job(4, pods=2), SHARED)["GG402"] == [
        "error: 8 nvidia.com/gpu asked in all, ClusterQueue `cq-a` can ever admit 6 over its flavors (a100)"]


def test_without_a_cohort_only_the_nominal_quota() -> None:
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})]
    assert "GG402" not in findings(job(4), alone)
    assert "GG402" in findings(job(5), alone)


def test_a_pod_set_takes_one_flavor_of_a_group_but_the_gang_may_split() -> None:
    two = [flavor("a100"), flavor("h100"), local_queue(),
           cluster_queue("cq-a", {"a100": full(4), "h100": full(4)})]
    assert "GG402" in findings(job(5), two), "no one flavor holds 5"
    assert "GG402" not in findings(job(4, pods=2), two), "master on a100, worker on h100"
    assert "GG402" in findings(job(5, pods=2), two), "the master alone fits no flavor"


def test_hierarchical_cohorts_lend_up_and_borrow_down() -> None:
    """A root cohort with quota of its own, a child cohort lending at most 2 of its subtree."""
    objects = [flavor("a100"), local_queue(),
               cohort("root", flavors={"a100": [quota(GPU, 8)]}),
               cohort("team", parent="root"),
               cluster_queue("cq-a", {"a100": full(2)}, cohort="team"),
               cluster_queue("cq-b", {"a100": full(4, lending=1)}, cohort="root")]
    # cq-a: 2 + everything up the tree: root 8 + cq-b lends 1 -> 11
    assert "GG402" not in findings(job(11), objects)
    assert "GG402" in findings(job(12), objects)


def test_uncovered_resource_is_never_unless_kueue_excludes_it() -> None:
    fpga = job(1, extra={"example.com/fpga": 1})
    objects = [*SHARED, node("fpga-0", {"cpu": "8", "memory": "16Gi", "example.com/fpga": "4"},
                             {USAGE: "training"})]
    assert findings(fpga, objects)["GG402"] == [
        "error: resource example.com/fpga unavailable in ClusterQueue `cq-a`: no resource group covers "
        "it, so Kueue never admits the workload"]
    excluded = policy_from_data({"queues": {"kueueExcludeResourcePrefixes": ["example.com/"]}})
    assert "GG402" not in findings(fpga, objects, excluded)


def test_waits_for_quota_held_by_admitted_workloads() -> None:
    busy = [*SHARED[:2], cluster_queue("cq-a", {"a100": full(4, borrowing=4)}, cohort="shared",
                                       used={"a100": 4}), SHARED[3]]
    found = findings(job(4), busy)
    assert "GG402" not in found
    assert found["GG404"] == ["warning: waits for quota in ClusterQueue `cq-a`: 4 nvidia.com/gpu asked "
                              "(pod set Master), 2 free now in the best flavor"]
    assert "GG404" not in findings(job(2), busy)


@pytest.mark.parametrize("objects, says", [
    ([flavor("a100"), local_queue(cq="gone"), cluster_queue("cq-a", {"a100": full(4)})],
     "Kueue LocalQueue `team` points at ClusterQueue `gone`, which does not exist"),
    ([flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)}, stopPolicy="Hold")],
     "ClusterQueue `cq-a` is stopped"),
    ([flavor("h100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})],
     "ResourceFlavor `a100` does not exist"),
])
def test_kueue_holds_the_workload(objects: list[Obj], says: str) -> None:
    found = findings(job(1), objects)
    assert "GG402" not in found and any(says in m for m in found["GG306"])


def test_v1beta2_field_names_and_cycles() -> None:
    beta2 = [flavor("a100"), local_queue(),
             cluster_queue("cq-a", {"a100": [quota("cpu", 1000), quota("memory", "10Ti"), quota(GPU, 4)]},
                           cohort="shared", version="kueue.x-k8s.io/v1beta2"),
             cluster_queue("cq-b", {"a100": full(4)}, cohort="shared", version="kueue.x-k8s.io/v1beta2")]
    assert "GG402" not in findings(job(8), beta2)
    assert "GG402" in findings(job(9), beta2)
    cycle = [*beta2, cohort("shared", parent="loop"), cohort("loop", parent="shared")]
    assert "GG402" not in findings(job(9), cycle), "a cohort cycle: Kueue admits nothing there, not judged"


def test_quota_changes_move_the_answer() -> None:
    policy = Policy()
    cluster = snapshot([*gpu_nodes(), *SHARED], policy)
    assert "GG402" in feasibility_findings(evaluate(job(7), policy, [cluster]))
    cluster.topology.apply("MODIFIED", cluster_queue(
        "cq-b", {"a100": full(12, lending=4)}, cohort="shared"))
    assert "GG402" not in feasibility_findings(evaluate(job(7), policy, [cluster]))


# -- brute force: never means no flavor assignment fits the potential quota -----------------------------

def _potentials(objects: list[Obj], flavors: list[str]) -> dict[str, int]:
    topo = Topology.from_objects(objects)
    tree = _tree(topo)
    assert tree is not None
    return {f: tree.potential(tree.queues["cq-a"], (f, GPU)) for f in flavors}


def test_never_only_when_no_assignment_fits_brute_force() -> None:
    rng = random.Random(1126)
    for _ in range(150):
        flavors = [f"f{i}" for i in range(rng.randint(1, 3))]
        objects: list[Obj] = [local_queue(), *(flavor(f) for f in flavors)]
        for q in range(rng.randint(1, 3)):
            borrowing = rng.choice([None, 0, 2, 6]) if q == 0 else None
            quotas = {f: full(rng.randint(0, 8), borrowing, rng.choice([None, 0, 3])) for f in flavors}
            in_cohort = rng.choice([None, "c"]) if q == 0 else "c"
            objects.append(cluster_queue("cq-a" if q == 0 else f"cq-{q}", quotas, cohort=in_cohort))
        sets = [rng.randint(1, 8) for _ in range(rng.randint(1, 2))]   # GPUs of master, of the worker
        doc = job(sets[0], pods=len(sets))
        if len(sets) == 2:
            doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
                "limits": {GPU: sets[1]}}
        potential = _potentials(objects, flavors)
        fits = any(all(sum(g for g, f in zip(sets, choice, strict=True) if f == fl) <= potential[fl]
                       for fl in flavors)
                   for choice in itertools.product(flavors, repeat=len(sets)))
        never = "GG402" in findings(doc, objects)
        assert not (never and fits), (objects, sets, potential)
