"""Cost of the Kueue verdict on a large cluster.

10,000 GPU nodes (two GPU types, blocks of 128 nodes of a type, the usage taint) and Kueue's objects: 100
ClusterQueues in hierarchical cohorts (a root, 4 org cohorts, 20 team cohorts of 5 queues each;
quotas with borrowing and lending limits), three ResourceFlavors (two with node labels, one of
them with a Topology of blocks and hosts) and a LocalQueue. Checks a 64-pod gang of 8 GPUs per
pod (with ``podset-required-topology`` on the blocks, so every part of the Kueue verdict runs)
through the LocalQueue, and the same workload without the queue label, on two snapshots built
alike in one run, and prints per review:

- cold: the first check of a fresh snapshot (it builds the eligibility masks, the quota tree and
  the other derived data later checks reuse);
- warm: the median over repeated checks, each without the memo of earlier answers;
- the ratio of the Kueue workload's times to the plain one's.

    .venv/bin/python bench/kueue_bench.py [--nodes 10000] [--repeat 200]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policies.config import Policy  # noqa: E402
from policies.engine import Context  # noqa: E402
from policies.feasibility import Verdict  # noqa: E402
from policies.rules._feasibility import feasibility  # noqa: E402
from policies.topology import ClusterSnapshot, Topology  # noqa: E402
from policies.workload import build_workload  # noqa: E402

Obj = dict[str, Any]
POOL = "maip.mxsf.io/node.usage"
TYPE = "gpu.example.com/type"
BLOCK = "cloud.example.com/block"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
KUEUE = "kueue.x-k8s.io/v1beta2"


def make_node(i: int) -> Obj:
    kind = "h100" if i % 2 else "a100"
    labels = {HOST: f"node-{i}", POOL: "training", TYPE: kind, BLOCK: f"{kind}-b{i // 256}"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": labels},
            "spec": {"taints": [{"key": POOL, "value": "training", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}}}


def kueue_objects() -> list[Obj]:
    """Flavors, a Topology, 25 cohorts in three levels and 100 ClusterQueues, one LocalQueue."""
    objs: list[Obj] = [
        {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": "blocks"},
         "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": HOST}]}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "a100"},
         "spec": {"nodeLabels": {TYPE: "a100"}}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "h100"},
         "spec": {"nodeLabels": {TYPE: "h100"}, "topologyName": "blocks"}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "cpu"}},
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "team", "namespace": "ml"},
         "spec": {"clusterQueue": "cq-0"}},
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "root"}, "spec": {}}]
    for org in range(4):
        objs.append({"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": f"org-{org}"},
                     "spec": {"parentName": "root"}})
    for team in range(20):
        objs.append({"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": f"team-{team}"},
                     "spec": {"parentName": f"org-{team % 4}"}})
    for q in range(100):
        def gpus(nominal: int) -> list[Obj]:
            return [{"name": GPU, "nominalQuota": nominal, "borrowingLimit": 2 * nominal,
                     "lendingLimit": nominal // 2}]
        objs.append({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": f"cq-{q}"},
                     "spec": {"cohortName": f"team-{q // 5}", "namespaceSelector": {}, "resourceGroups": [
                         {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "cpu", "resources": [
                             {"name": "cpu", "nominalQuota": 2000},
                             {"name": "memory", "nominalQuota": "20Ti"}]}]},
                         {"coveredResources": [GPU], "flavors": [
                             {"name": "a100", "resources": gpus(400)},
                             {"name": "h100", "resources": gpus(400)}]}]}})
    return objs


def job(queue: bool) -> Obj:
    """A PyTorchJob gang (Volcano schedules it) of 1 + 63 pods of 8 GPUs, required in one block."""
    resources = {"cpu": "8", "memory": "64Gi", GPU: "8"}

    def replica(count: int) -> Obj:
        return {"replicas": count, "template": {
            "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}},
            "spec": {"schedulerName": "volcano", "nodeSelector": {POOL: "training"},
                     "tolerations": [{"key": POOL, "value": "training", "effect": "NoSchedule"}],
                     "containers": [{"name": "pytorch", "image": "x",
                                     "resources": {"requests": resources, "limits": resources}}]}}}

    labels = {"kueue.x-k8s.io/queue-name": "team"} if queue else {}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "labels": labels},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(63)}}}


def measure(nodes: int, repeat: int, queue: bool, policy: Policy) -> tuple[float, float, str]:
    """(cold seconds, warm median seconds, verdict) on a fresh snapshot."""
    objects = [make_node(i) for i in range(nodes)] + kueue_objects()
    topo = Topology.from_objects(copy.deepcopy(objects), policy)
    gc.collect()
    snapshot = ClusterSnapshot("bench", topo)
    workload = build_workload(job(queue))
    assert workload is not None

    def check() -> Any:
        topo.outcome_memo = None    # the check itself, not the memo of earlier answers
        return feasibility(workload, Context(policy=policy, clusters=[snapshot]))

    start = time.perf_counter()
    result = check()
    cold = time.perf_counter() - start
    assert result is not None and result.verdict in (Verdict.FITS, Verdict.WAITS), result
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        check()
        times.append(time.perf_counter() - start)
    return cold, statistics.median(times), result.verdict.value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    policy = Policy()
    plain = measure(args.nodes, args.repeat, False, policy)
    kueue = measure(args.nodes, args.repeat, True, policy)
    print(f"{args.nodes} nodes, 100 ClusterQueues in 25 cohorts, 64-pod gang (required topology)")
    print(f"{'':>10} {'cold ms':>9} {'warm ms':>9}  verdict")
    for name, (cold, warm, verdict) in (("no queue", plain), ("Kueue", kueue)):
        print(f"{name:>10} {cold * 1e3:>9.2f} {warm * 1e3:>9.3f}  {verdict}")
    print(f"{'ratio':>10} {kueue[0] / plain[0]:>9.2f} {kueue[1] / plain[1]:>9.2f}")


if __name__ == "__main__":
    main()
