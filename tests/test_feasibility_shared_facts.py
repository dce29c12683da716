"""What every job shape of a template shares is kept on the topology, and always right.

A job of a never-seen shape (another CPU request per pod) reuses what does not depend on
its requests: the queue's limits and holdings (:func:`policies.feasibility.queues._queue_facts`),
the supernode slots a uniform capacity gives (:func:`policies.feasibility.supernodes._uniform_slots`)
and the witness worked out from a kept group placement. These tests change what each of
them is computed from between checks and demand the answer a topology built afresh from
the same objects gives, and that nothing a caller gets is shared with the next one.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from feasibility_helpers import Obj, podgroup, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_feasibility_cold import POLICIES, as_tuple, clusters, jobs, outcome

from policies.config import Policy
from policies.feasibility import fit_question
from policies.feasibility import supernodes as gpu_groups
from policies.rules._feasibility import Reported, check_cluster
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

QUEUES = ["q1", "q2", "gone"]


def identity(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


@st.composite
def queue_events(draw: st.DrawFn) -> tuple[str, Obj]:
    """A queue added, changed (capability, guarantee, state, parent) or deleted, or a pod
    group coming or going in one."""
    name = draw(st.sampled_from(QUEUES[:2]))
    if draw(st.integers(0, 2)) == 0:
        held = {"cpu": str(draw(st.integers(0, 400))), "nvidia.com/gpu": str(draw(st.integers(0, 16)))}
        group = podgroup(f"pg{draw(st.integers(0, 3))}", name, held,
                         phase=draw(st.sampled_from(["Running", "Inqueue", "Pending"])), namespace="x")
        return draw(st.sampled_from(["ADDED", "DELETED"])), group
    capability = {"cpu": str(draw(st.integers(10, 900)))} if draw(st.booleans()) else None
    guarantee = {"cpu": str(draw(st.integers(1, 300)))} if draw(st.booleans()) else None
    state = draw(st.sampled_from(["Open", "Open", "Closed"]))
    parent = draw(st.sampled_from([None, "root", "q1"]))
    if parent == name:
        parent = "root"
    changed = queue(name, capability, state=state, parent=parent, guarantee=guarantee)
    return draw(st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"])), changed


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_queue_facts_follow_every_queue_and_pod_group_change(data: st.DataObject) -> None:
    objects = data.draw(clusters())
    pol = data.draw(st.sampled_from(POLICIES))
    current = {identity(o): o for o in objects}
    snapshot = ClusterSnapshot("c", Topology.from_objects(objects))
    docs = data.draw(st.lists(jobs(), min_size=1, max_size=3))
    for doc in docs:
        if doc["kind"] == "Job":
            doc["spec"]["queue"] = data.draw(st.sampled_from(QUEUES))
    for _ in range(data.draw(st.integers(1, 5))):
        for doc in docs:
            warm = outcome(doc, snapshot, pol)
            fresh = outcome(doc, ClusterSnapshot("c", Topology.from_objects(list(current.values()))), pol)
            assert (warm is None) == (fresh is None)
            if warm is not None and fresh is not None:
                assert as_tuple(warm) == as_tuple(fresh)
        event, obj = data.draw(queue_events())
        snapshot.topology.apply(event, obj)
        if event == "DELETED":
            current.pop(identity(obj), None)
        else:
            current[identity(obj)] = obj


def gpu_cluster(cliques: int, per_clique: int, used_cpu: int) -> list[Obj]:
    """GPU nodes alike (8 GPUs, 128 CPUs), in cliques, each running a pod of ``used_cpu``
    CPUs: a capacity that is one number per shape, GPU-bound for small CPU requests."""
    objects: list[Obj] = []
    for i in range(cliques * per_clique):
        labels = {"nvidia.com/gpu.clique": f"c{i // per_clique}"}
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": f"n{i:03d}", "labels": labels},
                        "spec": {}, "status": {"allocatable": {"cpu": "128", "memory": "1000Gi",
                                                               "nvidia.com/gpu": "8", "pods": "110"}}})
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "x"},
                        "spec": {"nodeName": f"n{i:03d}", "containers": [
                            {"name": "m", "resources": {"requests": {"cpu": str(used_cpu)}}}]},
                        "status": {"phase": "Running"}})
    return objects


def group_job(cpu_millis: int, pods: int, group: int, names: tuple[str, str] = ("master", "worker")) -> Obj:
    template: dict[str, Any] = {
        "metadata": {"annotations": {"metax-tech.com/gpu-group-size": str(group)}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "m", "image": "x", "resources": {
            "requests": {"cpu": f"{cpu_millis}m", "nvidia.com/gpu": "8"},
            "limits": {"cpu": f"{cpu_millis}m", "nvidia.com/gpu": "8"}}}]}}
    tasks = [{"name": names[0], "replicas": 1, "template": copy.deepcopy(template)},
             {"name": names[1], "replicas": pods - 1, "template": copy.deepcopy(template)}]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "g", "namespace": "x"},
            "spec": {"schedulerName": "volcano", "minAvailable": pods, "tasks": tasks}}


def checked(doc: Obj, snapshot: ClusterSnapshot, pol: Policy) -> Reported:
    workload = build_workload(doc)
    assert workload is not None
    question = fit_question(workload, pol)
    assert question is not None
    return check_cluster(question, snapshot, pol, memo=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cliques=st.integers(1, 6), per_clique=st.integers(1, 4), used=st.integers(0, 120),
       pods=st.integers(1, 24), group=st.sampled_from([8, 16, 32, 64]),
       cpus=st.lists(st.integers(1, 16_000), min_size=2, max_size=6, unique=True),
       names=st.sampled_from([("master", "worker"), ("a", "b")]))
def test_shapes_sharing_a_placement_get_the_fresh_answer_and_their_own_witness(
        cliques: int, per_clique: int, used: int, pods: int, group: int, cpus: list[int],
        names: tuple[str, str]) -> None:
    pol = POLICIES[1]   # supernodes by the clique label
    objects = gpu_cluster(cliques, per_clique, used)
    snapshot = ClusterSnapshot("c", Topology.from_objects(objects))
    for cpu in cpus:
        doc = group_job(cpu, pods, group, names)
        warm = checked(doc, snapshot, pol)
        fresh = checked(doc, ClusterSnapshot("c", Topology.from_objects(objects)), pol)
        assert as_tuple(warm) == as_tuple(fresh)
        if warm.witness:
            # The caller owns what it gets: editing it changes no later answer.
            for nodes in warm.witness.values():
                nodes.clear()
            warm.witness.clear()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=st.lists(st.integers(0, 64), min_size=1, max_size=40), uniform=st.integers(1, 2**20),
       pods_per_unit=st.integers(1, 64), units=st.integers(1, 200))
def test_groups_never_with_a_known_summary_says_what_it_says_without(
        members: list[int], uniform: int, pods_per_unit: int, units: int) -> None:
    slots = uniform * np.array(members, dtype=np.int64) // pods_per_unit
    plan = gpu_groups._Groups(unit=8 * pods_per_unit, per_pod=8, pods_per_unit=pods_per_unit, units=units,
                               gpu_sets=[0], resource="nvidia.com/gpu", size=8 * pods_per_unit,
                               atomic_explicit=False, path="/x")
    topo = Topology.from_objects(gpu_cluster(len(members), 1, 0))
    supernodes = [(f"clique c{i}", np.array([i], dtype=np.intp)) for i in range(len(members))]
    alloc = topo.alloc[: topo.slots]
    summary = (int(np.argmax(slots)), int(slots.sum()))
    assert gpu_groups._groups_never(topo, plan, alloc, supernodes, slots, summary) == \
        gpu_groups._groups_never(topo, plan, alloc, supernodes, slots)
