"""Feasibility check and topology event costs on synthetic clusters.

For 1,000 / 10,000 / 50,000 nodes with 10 running pods per node, checks a 512-pod gang
of two pod sets (256 parameter servers on CPU, 256 GPU workers, with tolerations and a
node selector) and prints:

- check time (median and p99 over repeated checks, each without the memo of earlier
  answers; the first, cold check separately: it builds the eligibility masks and other
  derived data that later checks reuse);
- the ratio to a straightforward pure-Python implementation (a loop over nodes per pod
  set, same verdict) measured in the same run;
- the cost of applying one pod event (bind + delete) and one node event (a heartbeat
  MODIFIED, and a label change) to the snapshot.

    .venv/bin/python bench/fit_bench.py [--sizes 1000,10000,50000] [--repeat 200]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import percentile  # noqa: E402

from policies.config import Policy  # noqa: E402
from policies.engine import Context  # noqa: E402
from policies.feasibility import Verdict  # noqa: E402
from policies.quantity import parse_quantity, scheduler_units  # noqa: E402
from policies.rules._feasibility import feasibility  # noqa: E402
from policies.topology import ClusterSnapshot, Topology  # noqa: E402
from policies.workload import build_workload  # noqa: E402

Obj = dict[str, Any]
POOL = "maip.mxsf.io/node.usage"


def make_node(i: int, rng: random.Random) -> Obj:
    gpu = i % 2 == 0
    pool = "training" if gpu else "general"
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpu:
        alloc["nvidia.com/gpu"] = "8"
    labels = {
        "kubernetes.io/hostname": f"node-{i}",
        POOL: pool,
        "topology.kubernetes.io/zone": f"z{i % 3}",
        "nvidia.com/gpu.clique": f"clique-{i // 8}",
    }
    taints = [{"key": POOL, "value": pool, "effect": "NoSchedule"}] if gpu else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i}", "labels": labels},
        "spec": {"taints": taints, "unschedulable": rng.random() < 0.01},
        "status": {"allocatable": alloc},
    }


def make_pod(node_name: str, j: int, gpu: bool) -> Obj:
    requests = {"cpu": "2", "memory": "16Gi"}
    if gpu and j == 0:
        requests["nvidia.com/gpu"] = "4"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{node_name}-p{j}", "namespace": "load"},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": requests, "limits": requests}}
            ],
        },
        "status": {"phase": "Running"},
    }


def gang() -> Obj:
    """512 pods in two pod sets: 256 CPU parameter servers + 256 one-GPU workers."""
    tolerate = [{"key": POOL, "operator": "Equal", "value": "training", "effect": "NoSchedule"}]

    def task(name: str, requests: dict[str, str], selector: dict[str, str], tolerations: list[Obj]) -> Obj:
        return {
            "name": name,
            "replicas": 256,
            "template": {
                "spec": {
                    "nodeSelector": selector,
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {"requests": requests, "limits": requests},
                        }
                    ],
                }
            },
        }

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 512,
            "tasks": [
                task("ps", {"cpu": "4", "memory": "32Gi"}, {POOL: "general"}, []),
                task(
                    "worker",
                    {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    {POOL: "training"},
                    tolerate,
                ),
            ],
        },
    }


def build(n: int) -> tuple[Topology, list[Obj], float]:
    rng = random.Random(n)
    nodes = [make_node(i, rng) for i in range(n)]
    pods = [make_pod(f"node-{i}", j, i % 2 == 0) for i in range(n) for j in range(10)]
    start = time.perf_counter()
    topo = Topology.from_objects([*nodes, *pods], Policy())
    return topo, nodes, time.perf_counter() - start


# -- the straightforward implementation: a Python loop over nodes -------------------------


def naive_prepare(nodes: list[Obj], pods: list[Obj]) -> list[dict[str, Any]]:
    """Per node: allocatable and free resources (dicts), labels, hard taints, cordon; built
    outside the timing, as a straightforward snapshot would keep them."""
    table = {}
    for node in nodes:
        alloc = {r: scheduler_units(r, parse_quantity(v)) for r, v in node["status"]["allocatable"].items()}
        table[node["metadata"]["name"]] = {
            "alloc": alloc,
            "free": dict(alloc),
            "labels": node["metadata"]["labels"],
            "unschedulable": node["spec"]["unschedulable"],
            "taints": [t for t in node["spec"]["taints"] if t["effect"] in ("NoSchedule", "NoExecute")],
        }
    for pod in pods:
        entry = table[pod["spec"]["nodeName"]]["free"]
        for r, v in pod["spec"]["containers"][0]["resources"]["requests"].items():
            entry[r] -= scheduler_units(r, parse_quantity(v))
        entry["pods"] -= 1
    return list(table.values())


def naive_check(nodes: list[dict[str, Any]], job: Obj) -> str:
    """The same questions as the engine, one node at a time: per pod set, which nodes are
    eligible and how many pods fit each empty and now (the never-proof and the explain
    table need every node), then a first-fit placement in the free resources."""
    free = [dict(n["free"]) for n in nodes]
    requests = []
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        request = {
            r: scheduler_units(r, parse_quantity(v))
            for r, v in spec["containers"][0]["resources"]["requests"].items()
        }
        request["pods"] = 1
        eligible = []
        fits_empty = fits_now = 0
        for node, room in zip(nodes, free, strict=True):
            ok = (
                not node["unschedulable"]
                and all(node["labels"].get(k) == v for k, v in spec.get("nodeSelector", {}).items())
                and all(
                    any(
                        t.get("key") == taint["key"] and t.get("value") == taint["value"]
                        for t in spec.get("tolerations", [])
                    )
                    for taint in node["taints"]
                )
            )
            eligible.append(ok)
            if ok:
                fits_empty += max(0, min(node["alloc"].get(r, 0) // v for r, v in request.items()))
                fits_now += max(0, min(room.get(r, 0) // v for r, v in request.items()))
        if fits_empty < task["replicas"]:
            return "never"
        requests.append((task["replicas"], request, eligible))
    for replicas, request, eligible in requests:
        left = replicas
        for ok, room in zip(eligible, free, strict=True):
            if not ok or left == 0:
                continue
            take = min(max(0, min(room.get(r, 0) // v for r, v in request.items())), left)
            for r, v in request.items():
                room[r] -= take * v
            left -= take
        if left:
            return "waits"
    return "fits"


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def event_costs(topo: Topology, n: int, events: int = 2000) -> tuple[float, float, float]:
    """Seconds per pod event (bind, delete), node heartbeat, node label change."""
    rng = random.Random(1)
    pods = [make_pod(f"node-{rng.randrange(n)}", 100 + k, False) for k in range(events)]
    start = time.perf_counter()
    for p in pods:
        topo.apply("ADDED", p)
    for p in pods:
        topo.apply("DELETED", p)
    pod_event = (time.perf_counter() - start) / (2 * events)
    beats = [make_node(rng.randrange(n), random.Random(0)) for _ in range(events)]
    for b in beats:  # the same node as before, as a kubelet status update sends it
        b["spec"]["unschedulable"] = topo.unschedulable[topo.node_index[b["metadata"]["name"]]].item()
    start = time.perf_counter()
    for b in beats:
        topo.apply("MODIFIED", b)
    heartbeat = (time.perf_counter() - start) / events
    for b in beats:
        b["metadata"]["labels"] = {**b["metadata"]["labels"], "bench/changed": "yes"}
    start = time.perf_counter()
    for b in beats:
        topo.apply("MODIFIED", b)
    relabel = (time.perf_counter() - start) / events
    return pod_event, heartbeat, relabel


def measure(n: int, repeat: int, policy: Policy, job: Obj) -> str:
    workload = build_workload(job)
    assert workload is not None
    topo, nodes, build_seconds = build(n)
    # A long-lived process keeps the snapshot for hours: move it out of the cyclic
    # collector's generations, as the webhook should after its initial list.
    gc.collect()
    gc.freeze()
    snapshot = ClusterSnapshot("bench", topo)

    def check() -> Any:
        # The check itself, not the memo of answers: forget earlier answers, keep the
        # derived data as a server would.
        topo.outcome_memo = None
        return feasibility(workload, Context(policy=policy, clusters=[snapshot]))

    start = time.perf_counter()
    result = check()
    cold = time.perf_counter() - start
    assert result is not None and result.verdict == Verdict.FITS, result
    times = timed(check, repeat)
    naive_nodes = naive_prepare(
        nodes, [make_pod(f"node-{i}", j, i % 2 == 0) for i in range(n) for j in range(10)]
    )
    assert naive_check(naive_nodes, job) == "fits"
    naive = timed(lambda: naive_check(naive_nodes, job), max(5, repeat // 20))
    pod_event, heartbeat, relabel = event_costs(topo, n)
    median = statistics.median(times)
    naive_median = statistics.median(naive)
    return (
        f"{n:>7} {topo.counts()['Pod']:>8} {build_seconds:>8.1f} {cold * 1e3:>8.2f} "
        f"{median * 1e3:>10.2f} {percentile(times, 0.99) * 1e3:>8.2f} {naive_median * 1e3:>9.1f} "
        f"{naive_median / median:>8.0f}x {pod_event * 1e6:>13.1f} {heartbeat * 1e6:>11.1f} "
        f"{relabel * 1e6:>14.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(
        f"{'nodes':>7} {'pods':>8} {'build s':>8} {'cold ms':>8} {'median ms':>10} {'p99 ms':>8} "
        f"{'naive ms':>9} {'speed-up':>9} {'pod event us':>13} {'node hb us':>11} {'node label us':>14}"
    )
    for n in (int(s) for s in args.sizes.split(",")):
        print(measure(n, args.repeat, Policy(), gang()), flush=True)
    print("goal: a 512-pod gang check on 10,000 nodes under 5 ms (cold and p99)")


if __name__ == "__main__":
    main()
