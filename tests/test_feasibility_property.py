"""Soundness of the feasibility engine against brute force on small random clusters.

A ``never`` blocks someone's job, so the engine must never say ``never`` where an exact
search finds a placement on the empty cluster, and every ``fits`` witness must be a
valid placement in the free resources now. Eligibility and packing are re-implemented
here independently and naively (per pod, per node, in plain Python).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.config import Policy
from policies.engine import Context
from policies.feasibility import Verdict
from policies.rules._feasibility import feasibility
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

RESOURCES = ["cpu", "memory", "example.com/accel"]
TAINT_KEYS = ["dedicated", "gpu"]
LABEL_KEYS = {"zone": ["a", "b"], "gen": ["1", "3", "x"]}
Obj = dict[str, Any]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Obj], list[str]]:
    resources = RESOURCES[: draw(st.integers(1, 3))]
    objects: list[Obj] = []
    for i in range(draw(st.integers(1, 6))):
        alloc = {r: str(draw(st.integers(0, 6))) for r in resources}
        alloc["pods"] = str(draw(st.integers(1, 4)))
        labels = {k: draw(st.sampled_from(v)) for k, v in LABEL_KEYS.items() if draw(st.booleans())}
        taints = [
            {
                "key": k,
                "value": draw(st.sampled_from(["x", "y"])),
                "effect": draw(st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])),
            }
            for k in TAINT_KEYS
            if draw(st.integers(0, 3)) == 0
        ]
        spec: Obj = {"taints": taints} if taints else {}
        if draw(st.integers(0, 6)) == 0:
            spec["unschedulable"] = True
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"n{i}", "labels": labels},
                "spec": spec,
                "status": {"allocatable": alloc},
            }
        )
        for j in range(draw(st.integers(0, 2))):
            requests = {r: str(draw(st.integers(0, 3))) for r in resources}
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}-{j}", "namespace": "x"},
                    "spec": {
                        "nodeName": f"n{i}",
                        "containers": [{"name": "m", "image": "x", "resources": {"requests": requests}}],
                    },
                    "status": {"phase": draw(st.sampled_from(["Running", "Running", "Succeeded"]))},
                }
            )
    return objects, resources


@st.composite
def expressions(draw: st.DrawFn) -> Obj:
    key = draw(st.sampled_from(list(LABEL_KEYS)))
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if operator in ("Gt", "Lt"):
        return {"key": "gen", "operator": operator, "values": [draw(st.sampled_from(["0", "2", "4"]))]}
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    return {
        "key": key,
        "operator": operator,
        "values": draw(st.lists(st.sampled_from(LABEL_KEYS[key]), min_size=1, max_size=2)),
    }


@st.composite
def gangs(draw: st.DrawFn, resources: list[str]) -> Obj:
    tasks = []
    total = 0
    for t in range(draw(st.integers(1, 3))):
        replicas = draw(st.integers(1, min(3, 8 - total)))
        total += replicas
        spec: Obj = {
            "containers": [
                {
                    "name": "m",
                    "image": "x",
                    "resources": {"requests": {r: str(draw(st.integers(0, 3))) for r in resources}},
                }
            ]
        }
        tolerations = draw(
            st.lists(
                st.sampled_from(
                    [
                        {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"},
                        {"key": "dedicated", "operator": "Exists"},
                        {"key": "gpu", "operator": "Equal", "value": "y"},
                        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
                        {"operator": "Exists"},
                    ]
                ),
                max_size=2,
            )
        )
        if tolerations:
            spec["tolerations"] = tolerations
        if draw(st.integers(0, 3)) == 0:
            spec["nodeSelector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 2)) == 0:
            terms = [
                {"matchExpressions": draw(st.lists(expressions(), min_size=1, max_size=2))}
                for _ in range(draw(st.integers(1, 2)))
            ]
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            }
        tasks.append({"name": f"t{t}", "replicas": replicas, "template": {"spec": spec}})
        if total >= 8:
            break
    min_available = draw(st.integers(1, total)) if draw(st.booleans()) else total
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "g", "namespace": "x"},
        "spec": {"schedulerName": "volcano", "minAvailable": min_available, "tasks": tasks},
    }


# -- the naive reference ------------------------------------------------------------------


def tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint["value"]:
            return True
    return False


def matches(expr: Obj, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if not labels.get(key, "").isdigit():
        return False
    return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])


def eligible(spec: Obj, node: Obj) -> bool:
    # kube-scheduler's NodeUnschedulable filter: a cordon is tolerated as this taint would be
    cordon = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}
    if node["spec"].get("unschedulable") and not tolerated(cordon, spec.get("tolerations", [])):
        return False
    for taint in node["spec"].get("taints", []):
        if taint["effect"] != "PreferNoSchedule" and not tolerated(taint, spec.get("tolerations", [])):
            return False
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    affinity = spec.get("affinity")
    if affinity:
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        return any(all(matches(e, labels) for e in term["matchExpressions"]) for term in terms)
    return True


def units(resource: str, text: str) -> int:
    return int(text) * (1000 if resource == "cpu" else 1)


def free_resources(objects: list[Obj], empty: bool) -> dict[str, dict[str, int]]:
    free = {}
    for o in objects:
        if o["kind"] == "Node":
            free[o["metadata"]["name"]] = {r: units(r, v) for r, v in o["status"]["allocatable"].items()}
    if not empty:
        for o in objects:
            if o["kind"] == "Pod" and o["status"]["phase"] == "Running":
                left = free[o["spec"]["nodeName"]]
                for r, v in o["spec"]["containers"][0]["resources"]["requests"].items():
                    left[r] -= units(r, v)
                left["pods"] -= 1
    return free


def pod_request(task: Obj) -> dict[str, int]:
    requests = task["template"]["spec"]["containers"][0]["resources"]["requests"]
    out = {r: units(r, v) for r, v in requests.items() if units(r, v) > 0}
    out["pods"] = 1
    return out


def placeable(pods: list[tuple[dict[str, int], list[str]]], free: dict[str, dict[str, int]]) -> bool:
    """Exact search: each pod (request, eligible nodes) onto a node with room."""

    def fits(i: int) -> bool:
        if i == len(pods):
            return True
        request, nodes = pods[i]
        for name in nodes:
            left = free[name]
            if all(left.get(r, 0) >= v for r, v in request.items()):
                for r, v in request.items():
                    left[r] -= v
                ok = fits(i + 1)
                for r, v in request.items():
                    left[r] += v
                if ok:
                    return True
        return False

    return fits(0)


def brute_force_fits(job: Obj, objects: list[Obj], empty: bool) -> bool:
    nodes = [o for o in objects if o["kind"] == "Node"]
    tasks = job["spec"]["tasks"]
    per_task = [
        (pod_request(t), [n["metadata"]["name"] for n in nodes if eligible(t["template"]["spec"], n)])
        for t in tasks
    ]
    need = job["spec"]["minAvailable"]
    total = sum(t["replicas"] for t in tasks)
    # rigid gang: every replica; flexible: any counts summing to minAvailable
    if need >= total:
        count_vectors = [tuple(t["replicas"] for t in tasks)]
    else:
        count_vectors = [
            c for c in itertools.product(*(range(t["replicas"] + 1) for t in tasks)) if sum(c) == need
        ]
    for counts in count_vectors:
        pods = [per_task[i] for i, c in enumerate(counts) for _ in range(c)]
        if placeable(pods, free_resources(objects, empty)):
            return True
    return False


def witness_valid(job: Obj, objects: list[Obj], witness: dict[str, dict[str, int]]) -> bool:
    """Every placed pod on an eligible node, and every resource the placed pods request
    within what the node has free now."""
    nodes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Node"}
    free = free_resources(objects, empty=False)
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    touched: dict[str, set[str]] = {}
    placed = 0
    for task_name, on in witness.items():
        task = tasks[task_name]
        request = pod_request(task)
        if sum(on.values()) > task["replicas"]:
            return False
        for name, count in on.items():
            if count and not eligible(task["template"]["spec"], nodes[name]):
                return False
            for r, v in request.items():
                free[name][r] -= v * count
            touched.setdefault(name, set()).update(request)
            placed += count
    return placed >= job["spec"]["minAvailable"] and all(
        free[name].get(r, 0) >= 0 for name, requested in touched.items() for r in requested
    )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_engine_never_contradicts_brute_force(data: st.DataObject) -> None:
    objects, resources = data.draw(clusters())
    job = data.draw(gangs(resources))
    policy = Policy()
    workload = build_workload(job)
    assert workload is not None
    ctx = Context(policy=policy, clusters=[ClusterSnapshot("c", Topology.from_objects(objects, policy))])
    result = feasibility(workload, ctx)
    assert result is not None
    outcome = result.outcomes[0]
    if outcome.verdict == Verdict.NEVER:
        assert not brute_force_fits(job, objects, empty=True), f"false rejection: {outcome.message}"
    if outcome.verdict == Verdict.FITS:
        assert outcome.witness is not None
        assert witness_valid(job, objects, outcome.witness), f"invalid witness {outcome.witness}"


# -- GPU groups: units of G (or A) GPUs must each sit inside one supernode -----------------

GPU = "metax-tech.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"


@st.composite
def group_cases(draw: st.DrawFn) -> tuple[list[Obj], Obj, int, int]:
    """(objects, job, g, unit): nodes with GPUs in up to 3 supernodes (some in none), and a
    gang of GPU pods of g GPUs each with a group size of ``unit`` GPUs."""
    objects: list[Obj] = []
    for i in range(draw(st.integers(1, 6))):
        labels = {}
        clique = draw(st.sampled_from(["s0", "s1", "s2", None]))
        if clique:
            labels[CLIQUE] = clique
        alloc = {"cpu": str(draw(st.integers(1, 8))), "memory": str(draw(st.integers(1, 8))),
                 GPU: str(draw(st.integers(0, 4))), "pods": "8"}
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"n{i}", "labels": labels},
                "spec": {},
                "status": {"allocatable": alloc},
            }
        )
        if draw(st.integers(0, 2)) == 0:
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}", "namespace": "x"},
                    "spec": {
                        "nodeName": f"n{i}",
                        "containers": [
                            {
                                "name": "m",
                                "image": "x",
                                "resources": {"requests": {GPU: str(draw(st.integers(1, 2))), "cpu": "1"}},
                            }
                        ],
                    },
                    "status": {"phase": "Running"},
                }
            )
    g = draw(st.integers(1, 2))
    unit = g * draw(st.integers(1, 3))
    tasks: list[Obj] = []
    for t in range(draw(st.integers(1, 2))):
        # CPU and memory both vary: pod sets limited by different resources can share a
        # node where neither fits twice, which a bound on supernode slots must allow for.
        request = {GPU: str(g), "cpu": str(draw(st.integers(0, 4))), "memory": str(draw(st.integers(0, 4)))}
        tasks.append(
            {
                "name": f"t{t}",
                "replicas": draw(st.integers(1, 3)),
                "template": {
                    "metadata": {"annotations": {"metax-tech.com/gpu-group-size": str(unit)}},
                    "spec": {
                        "containers": [
                            {"name": "m", "image": "x", "resources": {"requests": request, "limits": request}}
                        ]
                    },
                },
            }
        )
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "g", "namespace": "x"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": sum(t["replicas"] for t in tasks),
            "tasks": tasks,
        },
    }
    return objects, job, g, unit


def groups_fit_empty(objects: list[Obj], job: Obj, g: int, unit: int) -> bool:
    """Exact search on the empty cluster: all pods placed, and at least T // unit units of
    unit // g GPU pods formed from pods sharing a supernode."""
    nodes = [o for o in objects if o["kind"] == "Node"]
    clique = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE) for n in nodes}
    pods = [
        (pod_request(t), [n["metadata"]["name"] for n in nodes])
        for t in job["spec"]["tasks"]
        for _ in range(t["replicas"])
    ]
    per_unit = unit // g
    needed = len(pods) * g // unit
    free = free_resources(objects, empty=True)
    where: list[str] = []

    def search(i: int) -> bool:
        if i == len(pods):
            counts: dict[str, int] = {}
            for name in where:
                if clique[name]:
                    counts[clique[name]] = counts.get(clique[name], 0) + 1
            return sum(c // per_unit for c in counts.values()) >= needed
        request, names = pods[i]
        for name in names:
            left = free[name]
            if all(left.get(r, 0) >= v for r, v in request.items()):
                for r, v in request.items():
                    left[r] -= v
                where.append(name)
                ok = search(i + 1)
                where.pop()
                for r, v in request.items():
                    left[r] += v
                if ok:
                    return True
        return False

    return search(0)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_cases())
def test_gpu_group_verdicts_never_contradict_brute_force(case: tuple[list[Obj], Obj, int, int]) -> None:
    objects, job, g, unit = case
    policy = Policy()
    workload = build_workload(job)
    assert workload is not None
    ctx = Context(policy=policy, clusters=[ClusterSnapshot("c", Topology.from_objects(objects, policy))])
    result = feasibility(workload, ctx)
    assert result is not None
    outcome = result.outcomes[0]
    if outcome.verdict == Verdict.NEVER:
        assert not groups_fit_empty(objects, job, g, unit), (
            f"false rejection: {outcome.rule} {outcome.message}"
        )
    if outcome.verdict == Verdict.FITS and outcome.rule == "":
        assert outcome.witness is not None
        assert witness_valid(job, objects, outcome.witness), f"invalid witness {outcome.witness}"
        has_supernodes = any(o["kind"] == "Node" and CLIQUE in o["metadata"]["labels"] for o in objects)
        if has_supernodes:
            clique = {
                o["metadata"]["name"]: o["metadata"]["labels"].get(CLIQUE)
                for o in objects
                if o["kind"] == "Node"
            }
            counts: dict[str, int] = {}
            for on in outcome.witness.values():
                for name, c in on.items():
                    if clique[name]:
                        counts[clique[name]] = counts.get(clique[name], 0) + c
            pods = sum(t["replicas"] for t in job["spec"]["tasks"])
            assert sum(c // (unit // g) for c in counts.values()) >= pods * g // unit


def test_gpu_pods_of_different_shapes_share_a_node() -> None:
    """A CPU-heavy and a memory-heavy pod of 4 GPUs each fit one 8-GPU node together though
    neither fits it twice: a group of 8 GPUs can form in a one-node supernode. Taking the
    best single shape per node as the slot bound once rejected this job (GG405)."""
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {CLIQUE: f"s{i}"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "100", "memory": "100", GPU: "8", "pods": "8"}},
        }
        for i in range(2)
    ]

    def task(name: str, cpu: str, memory: str) -> Obj:
        request = {GPU: "4", "cpu": cpu, "memory": memory}
        return {
            "name": name,
            "replicas": 1,
            "template": {
                "metadata": {"annotations": {"metax-tech.com/gpu-group-size": "8"}},
                "spec": {"containers": [{"name": "m", "image": "x",
                                         "resources": {"requests": request, "limits": request}}]},
            },
        }

    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mixed", "namespace": "x"},
        "spec": {"schedulerName": "volcano", "minAvailable": 2,
                 "tasks": [task("cpu-heavy", "60", "10"), task("memory-heavy", "10", "60")]},
    }
    assert groups_fit_empty(nodes, job, 4, 8)
    policy = Policy()
    workload = build_workload(job)
    assert workload is not None
    ctx = Context(policy=policy, clusters=[ClusterSnapshot("c", Topology.from_objects(nodes, policy))])
    result = feasibility(workload, ctx)
    assert result is not None
    outcome = result.outcomes[0]
    assert outcome.verdict == Verdict.FITS, f"{outcome.rule} {outcome.message}"
    assert outcome.witness is not None and witness_valid(job, nodes, outcome.witness)
