"""Derived data the feasibility check keeps on the topology between reviews (cluster
totals, empty-cluster supernode slots and resource offers, supernode layouts) follows
node and pod events: a cached answer never outlives what it was computed from."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from feasibility_helpers import Obj, gpu_node, node, pod, pytorch_job, run

from policies.config import Policy, policy_from_data
from policies.engine import Context
from policies.feasibility import Verdict
from policies.rules._feasibility import feasibility
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

CLIQUE = "nvidia.com/gpu.clique"
GPU = "metax-tech.com/gpu"


def cluster(cliques: int, per_clique: int) -> list[Obj]:
    return [gpu_node(f"gpu-{c}-{i}", labels={CLIQUE: f"clique-{c}"})
            for c in range(cliques) for i in range(per_clique)]


def check(doc: Obj, topo: Topology, pol: Policy | None = None) -> Any:
    """The feasibility outcome of the (mutated) workload on ``topo``; a fresh context
    each time, so only the topology's own caches carry over."""
    pol = pol or Policy()
    clusters = [ClusterSnapshot("c", topo)]
    result = run(doc, clusters, pol)
    workload = result.workload if result.mutated is None else build_workload(result.mutated)
    assert workload is not None
    found = feasibility(workload, Context(policy=pol, clusters=clusters))
    assert found is not None
    return found.outcomes[0]


def test_cluster_total_follows_allocatable_cordon_and_node_set() -> None:
    topo = Topology.from_objects([node("a", {"cpu": "4"}), node("b", {"cpu": "8"})])
    cpu = topo.res_index["cpu"]
    assert int(topo.cluster_total()[cpu]) == 12_000
    with pytest.raises(ValueError):
        topo.cluster_total()[cpu] = 0  # shared between reviews: read-only
    topo.apply("MODIFIED", node("a", {"cpu": "6"}))
    assert int(topo.cluster_total()[cpu]) == 14_000
    topo.apply("MODIFIED", node("b", {"cpu": "8"}, unschedulable=True))
    assert int(topo.cluster_total()[cpu]) == 6_000
    assert int(topo.cluster_total(include_cordoned=True)[cpu]) == 14_000
    topo.apply("ADDED", node("c", {"cpu": "1"}))
    topo.apply("DELETED", node("a", {"cpu": "6"}))
    assert int(topo.cluster_total()[cpu]) == 1_000
    assert int(topo.cluster_total(include_cordoned=True)[cpu]) == 9_000


def test_supernode_slots_follow_a_label_change() -> None:
    # 4 nodes of 8 GPUs in two cliques of 2: a 32-GPU group fits no supernode ...
    topo = Topology.from_objects(cluster(2, 2))
    job = pytorch_job(3, 8, group=32)
    first = check(job, topo)
    assert (first.verdict, first.rule) == (Verdict.NEVER, "GG405")
    assert check(job, topo).rule == "GG405"  # cached, same answer
    # ... until the second clique's nodes join the first
    for i in range(2):
        topo.apply("MODIFIED", gpu_node(f"gpu-1-{i}", labels={CLIQUE: "clique-0"}))
    assert check(job, topo).verdict == Verdict.FITS


def test_supernode_slots_follow_an_allocatable_change() -> None:
    topo = Topology.from_objects(cluster(1, 4))
    job = pytorch_job(3, 8, group=32)
    assert check(job, topo).verdict == Verdict.FITS
    topo.apply("MODIFIED", gpu_node("gpu-0-3", gpus=4, labels={CLIQUE: "clique-0"}))
    shrunk = check(job, topo)
    assert shrunk.verdict == Verdict.NEVER and shrunk.rule in ("GG403", "GG405"), shrunk.message
    topo.apply("MODIFIED", gpu_node("gpu-0-3", gpus=8, labels={CLIQUE: "clique-0"}))
    assert check(job, topo).verdict == Verdict.FITS


def test_resource_offers_follow_an_allocatable_change() -> None:
    # two 4-GPU pods per node fit; the gang's 24 GPUs need all three nodes' GPUs
    topo = Topology.from_objects([gpu_node(f"n{i}") for i in range(3)])
    job = pytorch_job(5, 4)
    assert check(job, topo).verdict == Verdict.FITS
    topo.apply("MODIFIED", gpu_node("n2", gpus=6))
    short = check(job, topo)
    assert (short.verdict, short.rule) == (Verdict.NEVER, "GG403")
    assert "22" in short.message, short.message   # the offer it reports is today's
    topo.apply("MODIFIED", gpu_node("n2", gpus=8))
    assert check(job, topo).verdict == Verdict.FITS


def test_pod_events_move_the_verdict_both_ways() -> None:
    # Nothing derived from the free resources is cached: a pod binding makes the gang
    # wait, its deletion makes it fit again.
    topo = Topology.from_objects(cluster(2, 4))
    job = pytorch_job(3, 8, group=32)
    fits = check(job, topo)
    assert fits.verdict == Verdict.FITS
    busy = [pod(f"busy-{c}", f"gpu-{c}-0", {GPU: "1"}) for c in range(2)]
    for p in busy:
        topo.apply("ADDED", p)
    waits = check(job, topo)
    assert (waits.verdict, waits.rule) == (Verdict.WAITS, "GG404"), waits.message
    topo.apply("DELETED", busy[1])
    again = check(job, topo)
    assert again.verdict == Verdict.FITS
    assert set().union(*(set(on) for on in again.witness.values())) == {f"gpu-1-{i}" for i in range(4)}


def test_overlapping_supernodes_are_not_laid_out_as_disjoint() -> None:
    objects = cluster(2, 2)
    objects[0]["metadata"]["labels"]["rack"] = "r0"
    objects[2]["metadata"]["labels"]["rack"] = "r0"
    topo = Topology.from_objects(objects)
    alone = topo.supernodes((CLIQUE,))
    assert topo.supernode_layout(alone).disjoint
    both = topo.supernodes((CLIQUE, "rack"))
    layout = topo.supernode_layout(both)
    assert not layout.disjoint
    assert layout.members.tolist() == [0, 1, 2, 3, 0, 2]
    assert layout.owner.tolist() == [0, 0, 1, 1, 2, 2]
    totals = topo.supernode_totals(np.array([1, 2, 4, 8]), both)
    assert totals.tolist() == [3, 12, 5]


def test_overlapping_supernodes_still_place_each_unit_inside_one() -> None:
    # clique-0 and rack r0 share gpu-0-0; a witness never counts one node twice
    objects = cluster(2, 2)
    for o in objects[:1] + objects[2:]:
        o["metadata"]["labels"]["rack"] = "r0"
    pol = policy_from_data({"gpu": {"supernodeLabels": [CLIQUE, "rack"]}})
    topo = Topology.from_objects(objects, pol)
    outcome = check(pytorch_job(3, 8, group=16), topo, pol)
    assert outcome.verdict == Verdict.FITS
    placed = [(name, n) for on in outcome.witness.values() for name, n in on.items()]
    assert sorted(name for name, _ in placed) == sorted(f"gpu-{c}-{i}" for c in range(2) for i in range(2))
    assert all(n == 1 for _, n in placed)


def test_free_resources_follow_node_replacement_and_pod_phase() -> None:
    # A node that goes away and comes back finds its bound pods again; a pod that
    # finishes frees what it held.
    topo = Topology.from_objects([*cluster(1, 4), pod("busy", "gpu-0-0", {GPU: "8"})])
    job = pytorch_job(3, 8, group=32)
    assert check(job, topo).verdict == Verdict.WAITS
    topo.apply("DELETED", gpu_node("gpu-0-0", labels={CLIQUE: "clique-0"}))
    assert check(job, topo).verdict == Verdict.NEVER
    topo.apply("ADDED", gpu_node("gpu-0-0", labels={CLIQUE: "clique-0"}))
    assert check(job, topo).verdict == Verdict.WAITS
    topo.apply("MODIFIED", pod("busy", "gpu-0-0", {GPU: "8"}, phase="Succeeded"))
    assert check(job, topo).verdict == Verdict.FITS


def test_capacity_now_is_shared_between_reviews_until_a_pod_event() -> None:
    topo = Topology.from_objects(cluster(1, 4))
    job = pytorch_job(3, 8, group=32)
    check(job, topo)
    cached = topo.cache[("now",)][1]
    check(job, topo)
    assert topo.cache[("now",)][1] is cached      # a second review reuses it
    topo.apply("ADDED", pod("p", "gpu-0-1", {"cpu": "1"}))
    check(job, topo)
    assert topo.cache[("now",)][1] is not cached  # a pod event does not


def test_the_derived_data_cache_is_bounded_in_bytes_and_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs of ever new shapes leave per-node arrays behind: the cache keeps the newest
    within its byte budget, and a value it still holds is still found."""
    import policies.topology as topology

    monkeypatch.setattr(topology, "CACHE_BYTES", 1_000_000)
    monkeypatch.setattr(topology, "CACHE_ENTRIES", 50)
    topo = Topology()
    for i in range(200):
        topo.remember(("shape", i), (0,), np.zeros(10_000, dtype=np.int64))   # 80 KB each
        assert topo.cache_bytes <= 1_000_000
    assert 1 <= len(topo.cache) <= 1_000_000 // 80_000
    assert topo.cached(("shape", 199), (0,)) is not None                       # the newest stays
    assert topo.cached(("shape", 0), (0,)) is None                             # the oldest went
    for i in range(200):
        topo.remember(("small", i), (0,), i)
    assert len(topo.cache) <= 50
    assert topo.cache_bytes == sum(entry[2] for entry in topo.cache.values())
