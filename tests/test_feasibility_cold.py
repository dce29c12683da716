"""The feasibility check's derived data equals the straightforward computation.

The check derives per-eligibility blocks of the resource matrices (shared by every job
shape of one placement), capacities, one capacity array for every shape whose capacity
is one number on all eligible nodes, offers and supernode slots. Each is held here to
the plain computation on the arrays, on random clusters and extreme values. (That a warm
check says what a cold one says is tests/test_memo_switch.py's, for every memo at once.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from feasibility_helpers import USAGE, Obj, node, pod, queue, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.config import Policy, policy_from_data
from policies.feasibility import FitQuestion, capacity, fit_question, packing, questions
from policies.feasibility import supernodes as gpu_groups
from policies.rules._feasibility import Reported as Outcome
from policies.rules._feasibility import check_cluster
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
ZONES = ["a", "b", "c"]
POLICIES = [Policy(), policy_from_data({"gpu": {"supernodeLabels": [CLIQUE, "rack"]}}),
            policy_from_data({"feasibility": {"autoscaling": True}})]


def as_tuple(out: Outcome) -> tuple[Any, ...]:
    """Everything an outcome says, rows and witness included."""
    rows = [(r.pod_set, r.count, r.eligible, r.fits_now, r.fits_empty) for r in out.rows]
    return (out.cluster, out.verdict, out.rule, out.message, out.path, out.witness, out.severity, rows,
            out.notes)


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    """GPU and CPU nodes in cliques of 2-4, usage taints, zones, some cordoned; running
    pods. ``uniform``: every GPU node alike (capacities become one number per shape)."""
    uniform = draw(st.booleans())
    per_clique = draw(st.integers(2, 4))
    objects: list[Obj] = []
    count = draw(st.integers(2, 14))
    for i in range(count):
        gpu = i % 3 != 2
        usage = "training" if gpu else "general"
        if uniform:
            alloc = {"cpu": "64", "memory": "512Gi"}
        else:
            alloc = {"cpu": str(draw(st.integers(0, 64))), "memory": f"{draw(st.integers(0, 512))}Gi"}
        if gpu:
            alloc[GPU] = "8" if uniform else str(draw(st.sampled_from([0, 4, 8])))
        labels = {USAGE: usage, "zone": draw(st.sampled_from(ZONES)), "rack": f"r{i // 5}"}
        if gpu:
            labels[CLIQUE] = f"c{i // per_clique}"
        taints = [{"key": USAGE, "value": usage, "effect": "NoSchedule"}] if gpu else []
        if draw(st.integers(0, 9)) == 0:
            taints.append({"key": "dedicated", "value": "x", "effect": "NoExecute"})
        objects.append(node(f"n{i}", alloc, labels, taints, unschedulable=draw(st.integers(0, 12)) == 0))
    for j in range(draw(st.integers(0, 12))):
        requests = {"cpu": str(draw(st.integers(0, 40))), "memory": f"{draw(st.integers(0, 300))}Gi"}
        if draw(st.booleans()):
            requests[GPU] = str(draw(st.integers(1, 8)))
        objects.append(pod(f"p{j}", f"n{draw(st.integers(0, count - 1))}", requests, namespace="x"))
    objects += [queue("root"), queue("q1", {"cpu": str(draw(st.integers(50, 900)))}, parent="root")]
    return objects


@st.composite
def jobs(draw: st.DrawFn) -> Obj:
    """A Volcano Job of 1-3 tasks (rigid or flexible gang, maybe GPU groups, maybe a
    queue), its tasks sharing a template's placement or not; sometimes a Deployment."""
    gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
    group = draw(st.sampled_from([None, gpus, 2 * gpus, 4 * gpus])) if gpus else None
    shared_spec: Obj = {}
    if draw(st.booleans()):
        shared_spec["tolerations"] = [{"key": USAGE, "operator": "Equal", "value": "training",
                                       "effect": "NoSchedule"}]
    tasks: list[Obj] = []
    for t in range(draw(st.integers(1, 3))):
        requests = {"cpu": f"{draw(st.integers(1, 40_000))}m", "memory": f"{draw(st.integers(1, 300))}Gi"}
        if gpus and (t > 0 or draw(st.booleans())):
            requests[GPU] = str(gpus)
        spec: Obj = {"schedulerName": "volcano", **shared_spec,
                     "containers": [{"name": "m", "image": "x",
                                     "resources": {"requests": requests, "limits": dict(requests)}}]}
        if draw(st.integers(0, 3)) == 0:
            spec["nodeSelector"] = {"zone": draw(st.sampled_from(ZONES))}
        if draw(st.integers(0, 4)) == 0:
            spec["tolerations"] = [{"operator": "Exists"}]
        template: Obj = {"spec": spec}
        if group:
            template["metadata"] = {"annotations": {"metax-tech.com/gpu-group-size": str(group)}}
        tasks.append({"name": f"t{t}", "replicas": draw(st.integers(1, 6)), "template": template})
    if draw(st.integers(0, 5)) == 0:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"},
                "spec": {"replicas": tasks[0]["replicas"], "template": tasks[0]["template"]}}
    total = sum(t["replicas"] for t in tasks)
    job: Obj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "g", "namespace": "x"},
                "spec": {"schedulerName": "volcano", "tasks": tasks,
                         "minAvailable": draw(st.integers(1, total)) if draw(st.booleans()) else total}}
    if draw(st.booleans()):
        job["spec"]["queue"] = "q1"
    return job


@st.composite
def events(draw: st.DrawFn, nodes: list[Obj]) -> tuple[str, Obj]:
    """A pod bound or deleted, or a node relabelled (another zone) or cordoned."""
    what = draw(st.integers(0, 3))
    if what == 0:
        requests = {"cpu": str(draw(st.integers(0, 16))), GPU: str(draw(st.integers(0, 4)))}
        return "ADDED", pod(f"e{draw(st.integers(0, 5))}", draw(st.sampled_from(nodes))["metadata"]["name"],
                            requests, namespace="x")
    if what == 1:
        return "DELETED", pod(f"p{draw(st.integers(0, 11))}", None, {}, namespace="x")
    changed = dict(draw(st.sampled_from(nodes)))
    meta, spec = changed["metadata"], changed["spec"]
    if what == 2:
        changed["metadata"] = {**meta, "labels": {**meta["labels"], "zone": draw(st.sampled_from(ZONES))}}
    else:
        changed["spec"] = {**spec, "unschedulable": not spec.get("unschedulable", False)}
    return "MODIFIED", changed


def outcome(doc: Obj, snapshot: ClusterSnapshot, pol: Policy, memo: bool = False) -> Outcome | None:
    workload = build_workload(run(doc, None, pol).mutated or doc)   # as /validate sees it
    assert workload is not None
    question = fit_question(workload, pol)
    return None if question is None else check_cluster(question, snapshot, pol, memo=memo)


# -- the shortcuts against the straightforward computations --------------------------------


def reference_offers(active: list[tuple[Any, np.ndarray]], free: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per column: what ``free`` offers over the nodes where a pod of some set using it fits."""
    out: dict[int, tuple[int, int]] = {}
    for col in sorted({c for s, _ in active for c in s.cols.tolist()}):
        usable = np.zeros(free.shape[0], dtype=bool)
        for s, cap in active:
            if col in s.cols.tolist():
                usable |= cap > 0
        out[col] = (int(np.maximum(free[usable, col], 0).sum()), int(usable.sum()))
    return out


def drawn_check(data: st.DataObject) -> tuple[Topology, FitQuestion, list[Any], Any, dict[Any, Any]] | None:
    """A random cluster, policy and job, and what the check starts from: (topology,
    question, sets, free resources now, their known-capacity cache); None when the job
    asks nothing of the cluster."""
    objects = data.draw(clusters())
    pol = data.draw(st.sampled_from(POLICIES))
    doc = data.draw(jobs())
    topo = Topology.from_objects(objects)
    workload = build_workload(run(doc, None, pol).mutated or doc)
    assert workload is not None
    question = fit_question(workload, pol)
    if question is None:
        return None
    free_now, known = capacity._now(topo)
    return topo, question, capacity._sets(topo, question.demands), free_now, known


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_capacities_offers_and_supernode_slots_equal_the_straightforward_ones(data: st.DataObject) -> None:
    drawn = drawn_check(data)
    if drawn is None:
        return
    topo, question, sets, free_now, known = drawn
    alloc = topo.alloc[: topo.slots]
    for _ in range(3):
        # Computed on the whole matrices, then on the eligible rows' blocks (built the
        # second time), then from the blocks kept: what job shapes of one template see.
        for key in [k for k in topo.cache if k[0] in ("capacity", "offers", "supernode-slots")]:
            del topo.cache[key]
        known.clear()
        empty = [capacity._empty_capacity(topo, s) for s in sets]
        now = [capacity._now_capacity(topo, known, s, free_now) for s in sets]
        for s, cap_empty, cap_now in zip(sets, empty, now, strict=True):
            assert cap_empty.tolist() == s.capacity(alloc).tolist()
            assert cap_now.tolist() == s.capacity(free_now).tolist()
        for caps, free, is_empty in ((empty, alloc, True), (now, free_now, False)):
            active = list(zip(sets, caps, strict=True))
            assert dict(packing._offers(topo, active, free, is_empty)) == reference_offers(active, free)
        plan = gpu_groups._group_plan(question, sets)
        supernodes = topo.supernodes(question.supernode_labels)
        if plan is not None and supernodes:
            # per node: one kind of pod takes its capacity; kinds of pods add up, within
            # the node's free GPUs
            kinds = {sets[i].key: now[i] for i in plan.gpu_sets}
            pods = np.sum(list(kinds.values()), axis=0)
            if len(kinds) > 1:
                gpus = np.maximum(free_now[:, topo.res_index[plan.resource]], 0)
                pods = np.minimum(pods, gpus // plan.per_pod)
            expected = [int(pods[rows].sum()) // plan.pods_per_unit for _, rows in supernodes]
            got = gpu_groups._supernode_slots(topo, sets, plan, now, supernodes, question.supernode_labels,
                                               free_now)
            assert got.tolist() == expected


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=40), st.data())
@settings(max_examples=150, deadline=None)
def test_block_capacity_is_exact_on_extreme_values(values: list[int], data: st.DataObject) -> None:
    """Negative free values (overcommitted nodes), huge ones, requests saturated at 2**62."""
    topo = Topology.from_objects([node(f"n{i}", {"cpu": "1"}) for i in range(len(values))])
    n = topo.slots
    matrix = np.zeros((n, len(topo.resources)), dtype=np.int64)
    for col in range(matrix.shape[1]):
        matrix[:, col] = data.draw(st.permutations(values)) if col % 2 else values
    amounts = {"cpu": data.draw(st.sampled_from([1, 3, 1000, 2**61, 2**63])), "pods": 1,
               "memory": data.draw(st.integers(1, 2**41))}
    demand = questions.Demand("s", "/spec", 1, tuple(amounts.items()), 1, 1, "[]", {})
    (s,) = capacity._sets(topo, [demand])
    assert capacity._block(topo, s, matrix, "test", (0,)) is None     # built when asked again
    block = capacity._block(topo, s, matrix, "test", (0,))
    assert block is not None
    got = capacity._block_capacity(topo, s, block, "test", (0,))
    assert got.tolist() == s.capacity(matrix).tolist()


# -- GPU group placements shared between job shapes ------------------------------------------


@st.composite
def gpu_cliques(draw: st.DrawFn) -> list[Obj]:
    """Cliques of 8-GPU nodes, some GPUs and CPUs already taken."""
    objects: list[Obj] = []
    per_clique = draw(st.integers(2, 4))
    count = per_clique * draw(st.integers(2, 5))
    for i in range(count):
        labels = {USAGE: "training", CLIQUE: f"c{i // per_clique}"}
        taints = [{"key": USAGE, "value": "training", "effect": "NoSchedule"}]
        objects.append(node(f"g{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"}, labels, taints))
    for j in range(draw(st.integers(0, 6))):
        requests = {"cpu": str(draw(st.integers(0, 40))), GPU: str(draw(st.integers(0, 8)))}
        objects.append(pod(f"p{j}", f"g{draw(st.integers(0, count - 1))}", requests, namespace="x"))
    return objects


@st.composite
def group_jobs(draw: st.DrawFn, gpus: int, group: int) -> Obj:
    """A master and workers of one template (one capacity), GPU groups of ``group``: the
    CPU request drawn from a few values, so that shapes share capacities or do not."""
    requests = {"cpu": str(draw(st.sampled_from([1, 8, 30, 60]))), "memory": "1Gi", GPU: str(gpus)}
    container = {"name": "m", "image": "x", "resources": {"requests": requests, "limits": requests}}
    template: Obj = {"metadata": {"annotations": {"metax-tech.com/gpu-group-size": str(group)}},
                     "spec": {"schedulerName": "volcano", "containers": [container]}}
    workers = draw(st.integers(1, 15))
    tasks = [{"name": "master", "replicas": 1, "template": template},
             {"name": "worker", "replicas": workers, "template": template}]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "g", "namespace": "x"},
            "spec": {"schedulerName": "volcano", "tasks": tasks, "minAvailable": 1 + workers}}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_group_placements_are_shared_only_by_shapes_of_equal_capacities(data: st.DataObject) -> None:
    objects = data.draw(gpu_cliques())
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    gpus = data.draw(st.sampled_from([1, 2, 4, 8]))
    group = gpus * data.draw(st.sampled_from([1, 2, 4]))
    family = group_jobs(gpus, group)
    warm = ClusterSnapshot("c", Topology.from_objects(objects))
    cold = ClusterSnapshot("c", Topology.from_objects(objects))
    for step in range(data.draw(st.integers(1, 4))):
        for doc in data.draw(st.lists(family, min_size=1, max_size=3)):
            outcome(doc, warm, POLICIES[0])
        if step:
            requests = {"cpu": str(data.draw(st.integers(0, 40))), GPU: str(data.draw(st.integers(0, 8)))}
            event = pod(f"e{step}", data.draw(st.sampled_from(names)), requests, namespace="x")
            warm.topology.apply("ADDED", event)
            cold.topology.apply("ADDED", event)
    target = data.draw(family)
    warm_out, cold_out = outcome(target, warm, POLICIES[0]), outcome(target, cold, POLICIES[0])
    assert warm_out is not None and cold_out is not None
    assert as_tuple(warm_out) == as_tuple(cold_out)
