"""The feasibility check of a gang whose GPUs come from DRA, against the same gang with
device-plugin GPUs, measured in the same run; and the DRA gang while the cluster churns.

10,000 nodes, each with 8 GPUs: as ``nvidia.com/gpu: 8`` in its allocatable (device plugin), or
as a ResourceSlice of 8 devices (attributes, a version, a memory capacity) of a DeviceClass
with a CEL selector. The gang: 512 pods, each with one GPU (a ResourceClaimTemplate whose
request has a CEL selector on the product and the memory, or ``nvidia.com/gpu: 1``). Prints the
cold check (the first: it evaluates the selectors and builds the device table and columns), the
check after one ResourceSlice changed, and the median and p99 of later checks (without the memo
of earlier answers, as bench/fit_bench.py measures), and the DRA/device-plugin ratio.

Churn (DRA only, a quarter of the GPUs held by ResourceClaims to start with): between two
reviews one ResourceClaim is allocated, one released and one node's GPU feature discovery
timestamp label moves, as in a busy DRA cluster; the reviews' median and p99 against the same
number of reviews with nothing changing, and the mean time to apply the three events.

With ``--match``, the template's request is bound by a ``matchAttribute`` constraint on the
product name (every GPU has it: the answers are the same, the counts go per value).

    .venv/bin/python bench/dra_bench.py [--nodes 10000] [--repeat 200] [--match]
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

from policies.config import Policy, policy_from_data  # noqa: E402
from policies.engine import Context  # noqa: E402
from policies.feasibility import Verdict  # noqa: E402
from policies.rules._feasibility import feasibility  # noqa: E402
from policies.topology import ClusterSnapshot, Topology  # noqa: E402
from policies.workload import build_workload  # noqa: E402

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
PODS = 512


TIMESTAMP = "nvidia.com/gfd.timestamp"


def node(i: int, plugin: bool, stamp: int = 0) -> Obj:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if plugin:
        alloc["nvidia.com/gpu"] = "8"
    meta = {"name": f"node-{i}", "labels": {"zone": f"z{i % 3}", TIMESTAMP: str(stamp)}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"allocatable": alloc}}


def claim(number: int, i: int, j: int, allocated: bool = True) -> Obj:
    """A claim of the template's shape, allocated GPU ``j`` of node ``i`` (as the scheduler writes it)."""
    status = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": f"node-{i}", "device": f"gpu-{j}"}]}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"pod-{number}-gpu", "namespace": "ml"},
        "spec": TEMPLATE["spec"]["spec"],
        **({"status": status} if allocated else {}),
    }


def resource_slice(i: int) -> Obj:
    devices = [
        {
            "name": f"gpu-{j}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": j},
                "uuid": {"string": f"GPU-{i}-{j}"},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "driverVersion": {"version": "550.54.15"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for j in range(8)
    ]
    pool = {"name": f"node-{i}", "generation": 1, "resourceSliceCount": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"node-{i}-gpu"},
        "spec": {"driver": DRIVER, "nodeName": f"node-{i}", "pool": pool, "devices": devices},
    }


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{DRIVER}" && '
                    f'device.attributes["{DRIVER}"].type == "gpu"'
                }
            }
        ]
    },
}
REQUEST_SELECTOR = (
    f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA H100") && '
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0 && '
    f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("535.0.0"))'
)
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-h100", "namespace": "ml"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": REQUEST_SELECTOR
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        }
    },
}


def gang(dra: bool) -> Obj:
    spec: Obj = {
        "containers": [
            {
                "name": "main",
                "image": "x",
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", **({} if dra else {"nvidia.com/gpu": "1"})},
                    "limits": {} if dra else {"nvidia.com/gpu": "1"},
                },
            }
        ]
    }
    if dra:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-h100"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": PODS,
            "tasks": [{"name": "worker", "replicas": PODS, "template": {"spec": spec}}],
        },
    }


def _dra_objects(n: int) -> list[Obj]:
    held = [claim(k, k // 2, k % 2) for k in range(2 * n)]     # 2 of each node's 8 GPUs
    return [DEVICE_CLASS, TEMPLATE, *(resource_slice(i) for i in range(n)), *held]


def measure(n: int, repeat: int, dra: bool) -> tuple[float, list[float], float, float]:
    """(seconds to build the topology, seconds per warm check, seconds of the cold check,
    seconds of the check after one ResourceSlice changed)."""
    objects: list[Obj] = [node(i, not dra) for i in range(n)]
    if dra:
        objects += _dra_objects(n)
    start = time.perf_counter()
    topo = Topology.from_objects(objects, Policy())
    built = time.perf_counter() - start
    gc.collect()
    gc.freeze()
    check = _checker(topo, dra)
    start = time.perf_counter()
    result = check()
    cold = time.perf_counter() - start
    assert result is not None and result.verdict == Verdict.FITS, result
    times = [_timed(check) for _ in range(repeat)]
    one_slice = 0.0
    if dra:
        changed = resource_slice(n // 2)
        changed["spec"]["pool"]["generation"] = 2
        topo.apply("MODIFIED", changed)
        one_slice = _timed(check)
    gc.unfreeze()
    return built, times, cold, one_slice


def _checker(topo: Topology, dra: bool) -> Any:
    snapshot = ClusterSnapshot("bench", topo)
    workload = build_workload(gang(dra))
    # a budget the cold check fits in: it is measured, not cut short
    policy = policy_from_data({"feasibility": {"budgetMilliseconds": 60_000}})

    def check() -> Any:
        topo.outcome_memo = None  # the check itself, not the memo of answers
        return feasibility(workload, Context(policy=policy, clusters=[snapshot]))

    return check


def _timed(check: Any) -> float:
    start = time.perf_counter()
    check()
    return time.perf_counter() - start


def churn(n: int, repeat: int, seed: int = 7) -> tuple[list[float], list[float], float]:
    """(seconds per review with nothing changing, seconds per review with a claim allocated, one
    released and a node's label moved before each, mean seconds to apply those three events)."""
    rng = random.Random(seed)
    topo = Topology.from_objects([*(node(i, False) for i in range(n)), *_dra_objects(n)], Policy())
    gc.collect()
    gc.freeze()
    check = _checker(topo, True)
    assert check().verdict == Verdict.FITS
    quiet = [_timed(check) for _ in range(repeat)]
    held = list(range(2 * n))          # claim numbers allocated now (device k % 2 of node k // 2)
    number = 2 * n
    busy, applying = [], []
    for review in range(repeat):
        start = time.perf_counter()
        i = rng.randrange(n)
        topo.apply("ADDED", claim(number, i, 2 + review % 6))                   # a pod starts
        gone = held.pop(rng.randrange(len(held)))
        topo.apply("DELETED", claim(gone, gone // 2, gone % 2))                 # a pod ends
        topo.apply("MODIFIED", node(rng.randrange(n), False, stamp=review + 1))  # GFD's timestamp
        applying.append(time.perf_counter() - start)
        number += 1
        start = time.perf_counter()
        result = check()
        busy.append(time.perf_counter() - start)
        assert result is not None and result.verdict == Verdict.FITS, result
    gc.unfreeze()
    return quiet, busy, statistics.mean(applying)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--match", action="store_true", help="a matchAttribute constraint on the product")
    args = parser.parse_args()
    if args.match:
        TEMPLATE["spec"]["spec"]["devices"]["constraints"] = [
            {"requests": ["gpu"], "matchAttribute": f"{DRIVER}/productName"}]
    print(f"{'GPUs':>14} {'nodes':>7} {'build s':>8} {'cold ms':>8} {'1 slice ms':>10} {'median ms':>10} "
          f"{'p99 ms':>8}")
    medians = {}
    for dra in (False, True):
        built, times, cold, one_slice = measure(args.nodes, args.repeat, dra)
        label = "DRA" if dra else "device plugin"
        medians[label] = statistics.median(times)
        print(
            f"{label:>14} {args.nodes:>7} {built:>8.1f} {cold * 1e3:>8.1f} "
            f"{one_slice * 1e3 if dra else float('nan'):>10.1f} {medians[label] * 1e3:>10.2f} "
            f"{percentile(times, 0.99) * 1e3:>8.2f}",
            flush=True,
        )
    print(f"DRA / device plugin (median): {medians['DRA'] / medians['device plugin']:.2f}x")
    quiet, busy, applying = churn(args.nodes, args.repeat)
    print(f"{'DRA reviews':>14} {'median ms':>10} {'p99 ms':>8} {'max ms':>8}")
    for label, times in (("no churn", quiet), ("churn", busy)):
        print(f"{label:>14} {statistics.median(times) * 1e3:>10.2f} {percentile(times, 0.99) * 1e3:>8.2f} "
              f"{max(times) * 1e3:>8.2f}")
    print(f"churn: a claim allocated, one released, one node label moved before each review "
          f"(applying them: {applying * 1e3:.2f} ms)")
    print(f"goal: a {PODS}-pod DRA gang check on {args.nodes:,} nodes under 5 ms (median and p99)")


if __name__ == "__main__":
    main()
