"""``gpugate audit`` of a large cluster snapshot: why is each pending gang pending, will it ever run?

A seeded synthetic cluster (default 10,000 nodes, 100,000 bound running pods, 1,000 pending
gangs) is written as a JSON ``List`` to a file, as ``gpugate snapshot`` or ``kubectl get -o
json`` writes one, and read back the way a user's ``gpugate audit --cluster FILE`` reads it.

- Nodes in four pools: H100 and A100 training nodes (8 GPUs, tainted and labelled for training),
  L40S inference nodes (8 GPUs, tainted for inference), CPU nodes; supernode cliques of 8,
  zones; 1% cordoned (draining nodes that still run pods).
- Running pods under their real owners: two DaemonSets (every node, every GPU node), Volcano
  PyTorchJobs with Running PodGroups filling 99% of the H100 nodes, Kueue-admitted PyTorchJobs
  and batch Jobs (their Workloads admitted, their ClusterQueues' reservations to match), batch
  Jobs on the A100 nodes, Deployments -> ReplicaSets of 1-GPU inference pods, Deployments and
  batch Jobs of CPU pods. Volcano Queues; Kueue ResourceFlavors, ClusterQueues, LocalQueues.
- Pending gangs of four families in turn: batch Jobs whose pods are not scheduled; Volcano Jobs
  whose PodGroup is Pending (no pods yet); Kubeflow PyTorchJobs partly placed (some pods bound,
  the rest not; default scheduler, or a Volcano PodGroup Inqueue); batch Jobs suspended under a
  Kueue LocalQueue with a Workload not admitted. Each is made to never run, to wait or to fit now
  (a third each), with requests varied: the verdicts are printed against what was meant.

Timed in one run: the load (``audit.sources.from_snapshot``: the file read, parsed and the
topology built, as ``gpugate audit --cluster FILE`` does, the garbage collector off while it
runs), the audit (``policies.audit.audit``, with the background scan of every other subject
unless ``--no-scan``) and the total; as the baseline, ``json.loads`` of the same text (with the
collector on, as a plain program runs it, and off). Prints the time per pending gang, the
verdict counts, the peak RSS of the process (the generator runs in a child process, so that its
objects are not counted) and, with ``--tracemalloc`` (slower), what the load and the audit
allocate.

    .venv/bin/python bench/audit_bench.py [--nodes 10000] [--pods 100000] [--gangs 1000]
        [--no-scan] [--gc-off] [--tracemalloc] [--profile 30] [--keep FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import multiprocessing
import os
import pstats
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import percentile, rss_mib  # noqa: E402

from audit.sources import from_snapshot  # noqa: E402
from policies.audit import VERDICTS, Audit, GangVerdict, audit  # noqa: E402
from policies.config import Policy  # noqa: E402
from policies.workload import object_ref  # noqa: E402

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
USAGE = "maip.mxsf.io/node.usage"
PRODUCT = "nvidia.com/gpu.product"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
H100, A100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"

FAMILIES = ("batch Job", "Volcano Job", "PyTorchJob partly placed", "Kueue Job")
INTENTS = ("never", "waits", "fits")
KUEUE_TEAMS = 4
H100_BUSY = 0.99        # share of the H100 nodes running a gang pod (all 8 GPUs)
A100_BUSY = 0.5         # share of the A100 nodes running one or two 4-GPU pods
L40S_FILL = 7           # 1-GPU inference pods per L40S node (of 8 GPUs)
H100_QUOTA, H100_ADMITTED = 64, 7   # GPUs of each team's H100 ClusterQueue; 8-GPU pods admitted
# Each Kueue team's LocalQueues, by name: the flavor of its ClusterQueue (team-N-<name>).
KUEUE_QUEUES = {"h100": "h100", "h100-spot": "h100", "a100": "a100"}
MAX_PODS_PER_NODE = 100  # of the CPU pool (allocatable pods: 110)
NOT_PENDING = "not pending"
FINDING = "(finding subjects)"     # the time an audit takes before it judges the first subject
# A Kueue Job the quota admits whose flavor's nodes are busy, other nodes its flavor's
# tolerations open are free: Kueue pins the pods to the flavor's nodes (its nodeLabels).
FLAVOR_NODES_BUSY = "more 8-GPU pods than free H100 nodes, its flavor's; quota free"


@dataclass(frozen=True)
class Pool:
    """Nodes of one kind: their share of the cluster, GPU product ("" none), size, usage taint."""

    name: str
    share: float
    product: str
    cpu: int
    memory_gi: int
    taint: str


POOLS = (
    Pool("h100", 0.4, H100, 190, 2000, "training"),
    Pool("a100", 0.2, A100, 126, 1000, "training"),
    Pool("l40s", 0.2, L40S, 62, 500, "inference"),
    Pool("cpu", 0.2, "", 62, 250, ""),
)


@dataclass
class Shape:
    """What the pods of a pending gang ask for, and why it is meant to get its verdict."""

    pods: int
    requests: dict[str, str]
    selector: dict[str, str]
    tolerations: list[Obj]
    why: str


@dataclass
class Generated:
    """A synthetic cluster and what its pending gangs were made to get."""

    items: list[Obj]
    # str(ObjectRef) of each pending gang -> (family, verdict meant, why)
    intended: dict[str, tuple[str, str, str]]
    running_pods: int = 0
    gang_pods: int = 0          # pods of the pending gangs (bound or not)
    free: dict[str, int] = field(default_factory=dict)   # pool -> schedulable nodes with no GPU in use

    def as_list(self) -> Obj:
        return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": self.items}


def stamp(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def toleration(usage: str) -> Obj:
    return {"key": USAGE, "operator": "Equal", "value": usage, "effect": "NoSchedule"}


def requests(gpus: int, cpu: int | str, memory_gi: int | str) -> dict[str, str]:
    found = {"cpu": str(cpu), "memory": memory_gi if isinstance(memory_gi, str) else f"{memory_gi}Gi"}
    if gpus:
        found[GPU] = str(gpus)
    return found


def pod_spec(asks: dict[str, str], selector: dict[str, str] | None = None,
             tolerations: list[Obj] | None = None, scheduler: str = "") -> Obj:
    spec: Obj = {"containers": [{"name": "main", "image": "registry.example.com/app:1.4",
                                 "resources": {"requests": dict(asks), "limits": dict(asks)}}],
                 "restartPolicy": "Never"}
    if selector:
        spec["nodeSelector"] = dict(selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if scheduler:
        spec["schedulerName"] = scheduler
    return spec


class _Generator:
    """Builds the cluster: nodes first, then queues, running workloads and pending gangs."""

    def __init__(self, nodes: int, pods: int, gangs: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.out = Generated([], {})
        self.node_count, self.pod_budget, self.gang_count = nodes, pods, gangs
        self.pools: dict[str, list[str]] = {}
        self.cordoned: set[str] = set()
        self.h100_busy: list[str] = []      # nodes a gang pod takes whole, in the order taken
        self.a100_busy: list[str] = []
        self.h100_schedulable = 0
        # (team namespace, LocalQueue) -> what its admitted workloads reserve, in scheduler units
        self.kueue_reserved: dict[tuple[str, str], dict[str, int]] = {}
        self.unschedulable = ""     # what the scheduler says of a pending pod
        self.serial = 0

    # -- objects ----------------------------------------------------------------------------
    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self, length: int = 5) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))

    def add(self, api_version: str, kind: str, name: str, namespace: str | None = None, *,
            owner: Obj | None = None, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, age: float = 0.0, **body: Any) -> Obj:
        meta: Obj = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        meta["uid"] = self.uid()
        meta["creationTimestamp"] = stamp(age or self.rng.uniform(600, 40_000))
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": True, "blockOwnerDeletion": True}]
        obj = {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}
        self.out.items.append(obj)
        return obj

    def pod(self, owner: Obj, name: str, spec: Obj, node: str | None, *, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, age: float = 0.0) -> Obj:
        """A pod of ``owner``: bound and running on ``node``, or pending and unschedulable."""
        spec = {**spec, "nodeName": node} if node else dict(spec)
        if node:
            status: Obj = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                              {"type": "Ready", "status": "True"}]}
        else:
            status = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": self.unschedulable}]}
        return self.add("v1", "Pod", name, owner["metadata"]["namespace"], owner=owner, labels=labels,
                        annotations=annotations, age=age, spec=spec, status=status)

    def name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial:05d}"

    # -- nodes and queues -------------------------------------------------------------------
    def nodes(self) -> None:
        counts = [round(p.share * self.node_count) for p in POOLS]
        counts[-1] = self.node_count - sum(counts[:-1])
        for pool, count in zip(POOLS, counts, strict=True):
            self.pools[pool.name] = [f"{pool.name}-{k:05d}" for k in range(count)]
        h100, a100 = list(self.pools["h100"]), list(self.pools["a100"])
        self.rng.shuffle(h100)
        self.rng.shuffle(a100)
        self.h100_busy = h100[: round(H100_BUSY * len(h100))]
        self.a100_busy = a100[: round(A100_BUSY * len(a100))]
        # Draining nodes still run their pods: only busy GPU nodes and inference/CPU nodes are cordoned.
        drainable = [*self.h100_busy, *self.a100_busy, *self.pools["l40s"], *self.pools["cpu"]]
        self.cordoned = set(self.rng.sample(drainable, min(len(drainable), self.node_count // 100)))
        # Gangs that must keep their pods (partly placed ones) take uncordoned nodes first.
        self.h100_busy.sort(key=lambda n: n in self.cordoned)
        for pool in POOLS:
            for k, name in enumerate(self.pools[pool.name]):
                self.node(pool, k, name)
        busy = set(self.h100_busy) | set(self.a100_busy)
        self.out.free = {p: sum(n not in busy and n not in self.cordoned for n in self.pools[p])
                         for p in ("h100", "a100")}
        self.h100_schedulable = sum(n not in self.cordoned for n in self.pools["h100"])
        gpu_busy = len(self.h100_busy) + len(self.pools["l40s"])
        self.unschedulable = (f"0/{self.node_count} nodes are available: {gpu_busy} Insufficient {GPU}, "
                              f"{self.node_count - gpu_busy} node(s) didn't match Pod's node affinity/"
                              f"selector. preemption: 0/{self.node_count} nodes are available: No "
                              "preemption victims found for incoming pod.")

    def node(self, pool: Pool, k: int, name: str) -> None:
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "node.kubernetes.io/instance-type": f"{pool.name}.{'48' if pool.product else '16'}xlarge",
                  "topology.kubernetes.io/zone": f"zone-{k % 3}", USAGE: pool.taint or "general"}
        allocatable = {"cpu": str(pool.cpu), "memory": f"{pool.memory_gi}Gi", "pods": "110",
                       "ephemeral-storage": "3500Gi"}
        if pool.product:
            labels |= {PRODUCT: pool.product, "nvidia.com/gpu.count": "8",
                       "nvidia.com/gpu.clique": f"{pool.name}-clique-{k // 8}"}
            allocatable[GPU] = "8"
        taints = [{"key": USAGE, "value": pool.taint, "effect": "NoSchedule"}] if pool.taint else []
        spec: Obj = {"providerID": f"aws:///zone-{k % 3}/i-{k:017x}"}
        if name in self.cordoned:
            spec["unschedulable"] = True
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        self.add("v1", "Node", name, labels=labels, spec=spec, age=200_000,
                 status={"allocatable": allocatable, "capacity": allocatable,
                         "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]})

    def queues(self) -> None:
        """Volcano Queues (``research`` capped at 64 GPUs) and Kueue's flavors and LocalQueues; the
        ClusterQueues come last, with the reservations of the workloads admitted."""
        for name, capability in (("default", None), ("training", None), ("inference", None),
                                 ("research", {GPU: "64"})):
            spec: Obj = {"weight": 1, "reclaimable": True}
            if capability:
                spec["capability"] = capability
            self.add(VOLCANO, "Queue", name, spec=spec, status={"state": "Open"}, age=300_000)
        for flavor, product in (("h100", H100), ("a100", A100)):
            self.add(KUEUE, "ResourceFlavor", flavor, age=300_000,
                     spec={"nodeLabels": {PRODUCT: product}, "tolerations": [toleration("training")]})
        for team in range(KUEUE_TEAMS):
            for queue in KUEUE_QUEUES:
                self.add(KUEUE, "LocalQueue", queue, f"team-{team}", age=300_000,
                         spec={"clusterQueue": f"team-{team}-{queue}"})

    def cluster_queues(self) -> None:
        """Per team: ``h100`` has 8 GPUs left after its running job, ``h100-spot`` the whole H100
        pool's and ``a100`` room for any pending Kueue Job; CPU and memory in proportion."""
        for team in range(KUEUE_TEAMS):
            for queue, flavor in KUEUE_QUEUES.items():
                reserved = self.kueue_reserved.get((f"team-{team}", queue), {})
                gpus = {"h100": H100_QUOTA, "h100-spot": 8 * len(self.pools["h100"]),
                        "a100": reserved.get(GPU, 0) + 256}[queue]
                spec: Obj = {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                             "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [
                                 {"name": flavor, "resources": [
                                     {"name": "cpu", "nominalQuota": 32 * gpus},
                                     {"name": "memory", "nominalQuota": f"{256 * gpus}Gi"},
                                     {"name": GPU, "nominalQuota": gpus}]}]}]}
                if queue == "a100":
                    spec["cohort"] = "a100-shared"
                status = {"flavorsReservation": [{"name": flavor, "resources": [
                    {"name": r, "total": f"{v}m" if r == "cpu" else str(v)}
                    for r, v in sorted(reserved.items())]}]}
                self.add(KUEUE, "ClusterQueue", f"team-{team}-{queue}", spec=spec, status=status,
                         age=300_000)

    def reserve(self, namespace: str, queue: str, asks: dict[str, str], pods: int) -> None:
        """What a workload admitted through ``queue`` reserves of its ClusterQueue's quota."""
        units = self.kueue_reserved.setdefault((namespace, queue), {})
        cpu = int(asks["cpu"]) * 1000 * pods            # millicores: whole cores asked here
        memory = int(asks["memory"].removesuffix("Gi")) * 2**30 * pods
        for r, v in (("cpu", cpu), ("memory", memory), (GPU, int(asks.get(GPU, "0")) * pods)):
            units[r] = units.get(r, 0) + v

    def workload(self, owner: Obj, pod_sets: list[Obj], queue: str, admitted_to: str | None) -> None:
        """Kueue's Workload of ``owner``: admitted to ClusterQueue ``admitted_to``, or waiting for quota."""
        job, flavor = owner["metadata"]["name"], KUEUE_QUEUES[queue]
        if admitted_to:
            flavors = {GPU: flavor, "cpu": flavor, "memory": flavor}
            status: Obj = {"admission": {"clusterQueue": admitted_to, "podSetAssignments": [
                {"name": s["name"], "count": s["count"], "flavors": flavors} for s in pod_sets]},
                "conditions": [{"type": t, "status": "True", "reason": t}
                               for t in ("QuotaReserved", "Admitted")]}
        else:
            status = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                      "message": f"couldn't assign flavors to pod set {pod_sets[0]['name']}: "
                                                 f"insufficient unused quota for {GPU} in flavor {flavor}"}]}
        self.add(KUEUE, "Workload", f"{owner['kind'].lower()}-{job}-{self.suffix()}",
                 owner["metadata"]["namespace"], owner=owner,
                 labels={"kueue.x-k8s.io/job-uid": owner["metadata"]["uid"]},
                 spec={"queueName": queue, "podSets": pod_sets}, status=status)

    # -- running workloads ------------------------------------------------------------------
    def take(self, count: int) -> int:
        """``count`` running pods, or what is left of the budget."""
        count = max(0, min(count, self.pod_budget - self.out.running_pods))
        self.out.running_pods += count
        return count

    def daemonsets(self) -> None:
        gpu_nodes = [n for p in POOLS if p.product for n in self.pools[p.name]]
        every = [n for p in POOLS for n in self.pools[p.name]]
        for name, namespace, nodes, asks in (
                ("node-exporter", "monitoring", every, requests(0, "100m", "128Mi")),
                ("dcgm-exporter", "gpu-operator", gpu_nodes, requests(0, "200m", "512Mi"))):
            spec = pod_spec(asks, tolerations=[{"operator": "Exists"}])
            spec["restartPolicy"] = "Always"
            ds = self.add("apps/v1", "DaemonSet", name, namespace, age=300_000,
                          spec={"selector": {"matchLabels": {"app": name}},
                                "template": {"metadata": {"labels": {"app": name}}, "spec": spec}})
            for node in nodes[: self.take(len(nodes))]:
                self.pod(ds, f"{name}-{self.suffix()}", spec, node, labels={"app": name})

    def pytorch_job(self, name: str, namespace: str, pods: int, spec: Obj, *, worker_spec: Obj | None = None,
                    volcano_queue: str = "", labels: dict[str, str] | None = None, age: float = 0.0) -> Obj:
        def replica(count: int, template: Obj) -> Obj:
            return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": template}}

        master = {**spec, "containers": [{**spec["containers"][0], "name": "pytorch"}]}
        worker_template = worker_spec or spec
        worker = {**worker_template, "containers": [{**worker_template["containers"][0], "name": "pytorch"}]}
        replicas = {"Master": replica(1, master)}
        if pods > 1:
            replicas["Worker"] = replica(pods - 1, worker)
        run_policy: Obj = {"cleanPodPolicy": "None"}
        if volcano_queue:
            run_policy["schedulingPolicy"] = {"minAvailable": pods, "queue": volcano_queue}
        return self.add("kubeflow.org/v1", "PyTorchJob", name, namespace, labels=labels, age=age,
                        spec={"runPolicy": run_policy, "pytorchReplicaSpecs": replicas})

    def pytorch_pods(self, job: Obj, nodes: list[str | None], group: str = "") -> None:
        """The job's pods, the Master first, on ``nodes`` (None: not scheduled)."""
        replicas = job["spec"]["pytorchReplicaSpecs"]
        name, age = job["metadata"]["name"], job_age(job)
        for i, node in enumerate(nodes):
            kind, index = ("Master", 0) if i == 0 else ("Worker", i - 1)
            labels = {"training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/replica-type": kind.lower(),
                      "training.kubeflow.org/replica-index": str(index)}
            annotations = {"scheduling.k8s.io/group-name": group} if group else None
            self.pod(job, f"{name}-{kind.lower()}-{index}", replicas[kind]["template"]["spec"], node,
                     labels=labels, annotations=annotations, age=age)

    def podgroup(self, owner: Obj, name: str, pods: int, asks: dict[str, str], queue: str, phase: str,
                 conditions: list[Obj] | None = None) -> None:
        total = {r: str(int(v.removesuffix("Gi")) * pods) + ("Gi" if v.endswith("Gi") else "")
                 for r, v in asks.items()}
        status: Obj = {"phase": phase, "conditions": conditions or []}
        if phase == "Running":
            status["running"] = pods
        self.add(VOLCANO, "PodGroup", name, owner["metadata"]["namespace"], owner=owner,
                 spec={"minMember": pods, "minResources": total, "queue": queue,
                       "priorityClassName": "training"}, status=status)

    def kueue_running(self) -> None:
        """Each Kueue team runs one admitted H100 PyTorchJob: its ClusterQueue has 8 GPUs left."""
        for team in range(KUEUE_TEAMS):
            namespace = f"team-{team}"
            asks = requests(8, 64, 512)
            # admitted: Kueue wrote its flavor's node labels and tolerations into the templates
            flavored = pod_spec(asks, {PRODUCT: H100}, [toleration("training")])
            job = self.pytorch_job(self.name("pretrain"), namespace, H100_ADMITTED, flavored,
                                   labels={QUEUE_LABEL: "h100"})
            nodes = [self.h100_busy.pop(0) for _ in range(self.take(H100_ADMITTED))]
            pod_sets = [{"name": "master", "count": 1, "template": {"spec": flavored}},
                        {"name": "worker", "count": H100_ADMITTED - 1, "template": {"spec": flavored}}]
            self.workload(job, pod_sets, "h100", f"{namespace}-h100")
            self.reserve(namespace, "h100", asks, H100_ADMITTED)
            self.pytorch_pods(job, list(nodes))

    def volcano_training(self) -> None:
        """The rest of the busy H100 nodes: Volcano gangs of 4-32 pods of 8 GPUs, Running."""
        if self.take(len(self.h100_busy)) < len(self.h100_busy):
            raise ValueError("--pods too few to fill the H100 pool: raise --pods or lower --nodes")
        while self.h100_busy:
            count = min(len(self.h100_busy), self.rng.randint(4, 32))
            nodes, self.h100_busy = self.h100_busy[:count], self.h100_busy[count:]
            asks = requests(8, self.rng.choice((48, 64, 96)), self.rng.choice((512, 768, 1024)))
            spec = pod_spec(asks, {PRODUCT: H100}, [toleration("training")], "volcano")
            namespace = self.rng.choice(("research", "ml-platform", "llm"))
            job = self.pytorch_job(self.name("llm"), namespace, count, spec, volcano_queue="training")
            group = job["metadata"]["name"]
            self.podgroup(job, group, count, asks, "training", "Running")
            self.pytorch_pods(job, list(nodes), group)

    def batch_job(self, name: str, namespace: str, pods: int, spec: Obj, *,
                  labels: dict[str, str] | None = None, suspend: bool = False, age: float = 0.0) -> Obj:
        template_labels = {"batch.kubernetes.io/job-name": name}
        body: Obj = {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"metadata": {"labels": template_labels}, "spec": spec}}
        if suspend:
            body["suspend"] = True
        return self.add("batch/v1", "Job", name, namespace, labels=labels, age=age, spec=body,
                        status={} if suspend else {"active": pods})

    def job_pods(self, job: Obj, nodes: list[str | None]) -> None:
        name = job["metadata"]["name"]
        labels = {"batch.kubernetes.io/job-name": name,
                  "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
        spec, age = job["spec"]["template"]["spec"], job_age(job)
        for node in nodes:
            self.pod(job, f"{name}-{self.suffix()}", spec, node, labels=labels, age=age)

    def a100_jobs(self) -> None:
        """Batch Jobs of 4-GPU pods on half the A100 nodes (one or two pods a node); every third
        admitted by Kueue."""
        slots = [n for n in self.a100_busy for _ in range(self.rng.choice((1, 2)))]
        slots = slots[: self.take(len(slots))]
        while slots:
            count = min(len(slots), self.rng.randint(1, 4))
            nodes, slots = slots[:count], slots[count:]
            asks = requests(4, self.rng.choice((16, 24, 32)), self.rng.choice((128, 256)))
            kueue = self.serial % 3 == 0
            namespace = f"team-{self.rng.randrange(KUEUE_TEAMS)}" if kueue else "batch"
            spec = pod_spec(asks, {PRODUCT: A100}, [toleration("training")])
            job = self.batch_job(self.name("finetune"), namespace, count, spec,
                                 labels={QUEUE_LABEL: "a100"} if kueue else None)
            if kueue:
                self.workload(job, [{"name": "main", "count": count, "template": {"spec": spec}}], "a100",
                              f"{namespace}-a100")
                self.reserve(namespace, "a100", asks, count)
            self.job_pods(job, list(nodes))

    def deployment(self, name: str, namespace: str, replicas: int, spec: Obj, nodes: list[str]) -> None:
        """A Deployment, its ReplicaSet and its pods on ``nodes``."""
        app = {"app": name}
        spec = {**spec, "restartPolicy": "Always"}
        deploy = self.add("apps/v1", "Deployment", name, namespace, labels=app,
                          spec={"replicas": replicas, "selector": {"matchLabels": app},
                                "template": {"metadata": {"labels": app}, "spec": spec}},
                          status={"replicas": replicas, "readyReplicas": replicas})
        pod_hash = self.suffix(10)
        labels = {**app, "pod-template-hash": pod_hash}
        rs = self.add("apps/v1", "ReplicaSet", f"{name}-{pod_hash}", namespace, owner=deploy, labels=labels,
                      spec={"replicas": replicas, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": spec}},
                      status={"replicas": replicas, "readyReplicas": replicas})
        for node in nodes:
            self.pod(rs, f"{rs['metadata']['name']}-{self.suffix()}", spec, node, labels=labels)

    def inference(self) -> None:
        """Deployments of 1-GPU pods, spread over the L40S nodes, 7 of 8 GPUs taken."""
        nodes = self.pools["l40s"]
        slots = [n for _ in range(L40S_FILL) for n in nodes]
        slots = slots[: self.take(len(slots))]
        while slots:
            count = min(len(slots), self.rng.randint(2, 12))
            placed, slots = slots[:count], slots[count:]
            asks = requests(1, self.rng.choice((4, 6, 8)), self.rng.choice((24, 32, 48)))
            spec = pod_spec(asks, {USAGE: "inference"}, [toleration("inference")])
            namespace = self.rng.choice(("serving", "search", "ads"))
            self.deployment(self.name("serve"), namespace, count, spec, placed)

    def cpu_workloads(self) -> None:
        """The rest of the pods: Deployments and batch Jobs of CPU pods, round-robin on the CPU nodes."""
        nodes = self.pools["cpu"]
        left = self.pod_budget - self.out.running_pods
        if not nodes or left <= 0:
            return
        per_node = -(-left // len(nodes))
        if per_node > MAX_PODS_PER_NODE:
            raise ValueError(f"{left} CPU pods on {len(nodes)} CPU nodes: over {MAX_PODS_PER_NODE} a node; "
                             "lower --pods or raise --nodes")
        slots = [nodes[i % len(nodes)] for i in range(self.take(left))]
        cores = [c for c in ("100m", "250m", "500m", "1", "2") if _millis(c) * per_node <= 60_000] or ["100m"]
        while slots:
            count = min(len(slots), self.rng.randint(1, 20))
            placed, slots = slots[:count], slots[count:]
            asks = requests(0, self.rng.choice(cores), self.rng.choice(("256Mi", "512Mi", "1Gi", "2Gi")))
            namespace = f"app-{self.rng.randrange(40)}"
            if self.rng.random() < 0.7:
                self.deployment(self.name("web"), namespace, count, pod_spec(asks), placed)
            else:
                spec = pod_spec(asks)
                self.job_pods(self.batch_job(self.name("etl"), namespace, count, spec), list(placed))

    # -- pending gangs ----------------------------------------------------------------------
    def shape(self, intent: str, gang: bool) -> Shape:
        """Pods of 8 H100 GPUs more than the free nodes (waits), A100 pods the free nodes hold
        (fits), or a never of a kind picked at random."""
        rng, free_h, free_a = self.rng, self.out.free["h100"], self.out.free["a100"]
        h100_sched = self.h100_schedulable
        gpus = rng.choice((1, 2, 4, 8))
        fits = Shape(rng.randint(1, max(1, min(16, free_a))), requests(gpus, gpus * rng.choice((4, 8, 12)),
                                                                       gpus * rng.choice((32, 64, 96))),
                     {PRODUCT: A100}, [toleration("training")], "free A100 nodes hold it")
        waits = Shape(rng.randint(free_h + 1, max(free_h + 1, min(h100_sched, free_h + 32))),
                      requests(8, rng.choice((32, 48, 64, 96)), rng.choice((256, 512, 1024))),
                      {PRODUCT: H100}, [toleration("training")], "more 8-GPU pods than free H100 nodes")
        nevers = [
            Shape(rng.randint(1, 4), requests(16, 64, 512), {PRODUCT: H100}, [toleration("training")],
                  "16 GPUs a pod"),
            Shape(rng.randint(1, 8), requests(8, 64, 512), {PRODUCT: "NVIDIA-B200"}, [toleration("training")],
                  "no node of the product"),
            Shape(rng.randint(1, 8), requests(8, 64, 512), {PRODUCT: H100}, [],
                  "training taint not tolerated"),
            Shape(rng.randint(1, 4), requests(4, 256, 512), {PRODUCT: A100}, [toleration("training")],
                  "more CPU than any node"),
        ]
        if gang:
            nevers.append(Shape(h100_sched + rng.randint(1, 16), requests(8, 64, 512), {PRODUCT: H100},
                                [toleration("training")], "more 8-GPU pods than H100 nodes"))
        return {"fits": fits, "waits": waits, "never": rng.choice(nevers)}[intent]

    def meant(self, obj: Obj, family: str, intent: str, why: str) -> None:
        self.out.intended[str(object_ref(obj))] = (family, intent, why)

    def pending_batch_job(self, intent: str) -> None:
        shape = self.shape(intent, gang=False)
        age = self.rng.uniform(5, 3000)
        namespace = self.rng.choice(("research", "vision", "speech"))
        job = self.batch_job(self.name("train"), namespace, shape.pods,
                             pod_spec(shape.requests, shape.selector, shape.tolerations), age=age)
        self.job_pods(job, [None] * shape.pods)
        self.out.gang_pods += shape.pods
        self.meant(job, "batch Job", intent, shape.why)

    def pending_volcano_job(self, intent: str) -> None:
        """A Volcano Job whose PodGroup is Pending: Volcano makes no pods before it is Inqueue."""
        shape = self.shape(intent, gang=True)
        queue = "training"
        if intent == "never" and self.rng.random() < 0.3:    # over the research queue's 64-GPU capability
            shape = Shape(self.rng.randint(9, 16), requests(8, 64, 512), {PRODUCT: A100},
                          [toleration("training")], "over the Volcano queue's capability")
            queue = "research"
        spec = pod_spec(shape.requests, shape.selector, shape.tolerations)
        tasks = [{"name": "master", "replicas": 1, "template": {"spec": spec}}]
        if shape.pods > 1:
            tasks.append({"name": "worker", "replicas": shape.pods - 1, "template": {"spec": spec}})
        name = self.name("vcjob")
        job = self.add("batch.volcano.sh/v1alpha1", "Job", name, self.rng.choice(("research", "llm")),
                       age=self.rng.uniform(5, 3000),
                       spec={"schedulerName": "volcano", "queue": queue, "minAvailable": shape.pods,
                             "maxRetry": 3, "plugins": {"env": [], "svc": []},
                             "policies": [{"event": "PodEvicted", "action": "RestartJob"}], "tasks": tasks},
                       status={"state": {"phase": "Pending"}, "minAvailable": shape.pods})
        message = (f"{shape.pods}/{shape.pods} tasks in gang unschedulable: pod group is not ready, "
                   f"{shape.pods} minAvailable")
        self.podgroup(job, f"{name}-{job['metadata']['uid']}", shape.pods, shape.requests, queue, "Pending",
                      [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                        "message": message, "lastTransitionTime": stamp(1)}])
        self.meant(job, "Volcano Job", intent, shape.why)

    def partial_plan(self, intent: str) -> tuple[int, int, dict[str, str] | None, str]:
        """(pods bound, pods in all, workers' requests if not the Master's, why) of a partly placed gang."""
        rng, free_h = self.rng, self.out.free["h100"]
        bound = rng.randint(1, 4)
        plans: dict[str, Callable[[], tuple[int, int, dict[str, str] | None, str]]] = {
            "fits": lambda: (bound, bound + rng.randint(1, max(1, min(8, free_h))), None,
                             "its bound pods + free H100 nodes hold it"),
            "waits": lambda: (bound, free_h + bound + rng.randint(1, 16), None,
                              "more 8-GPU pods than its nodes + free H100 nodes"),
            # not "more pods than the pool": the training operator would make thousands of pods
            "never": lambda: (1, rng.randint(2, 8), requests(16, 64, 512), "workers ask 16 GPUs a pod"),
        }
        return plans[intent]()

    def pending_pytorch_job(self, intent: str) -> None:
        """A PyTorchJob with its first pods bound (the Master first) and the rest not: under the
        default scheduler (no gang), or with a Volcano PodGroup Inqueue, every other one."""
        rng = self.rng
        bound, pods, worker_asks, why = self.partial_plan(intent)
        asks = requests(8, rng.choice((48, 64, 96)), rng.choice((512, 1024)))
        volcano = self.serial % 2 == 0
        scheduler = "volcano" if volcano else ""
        spec = pod_spec(asks, {PRODUCT: H100}, [toleration("training")], scheduler)
        worker_spec = pod_spec(worker_asks or asks, {PRODUCT: H100}, [toleration("training")], scheduler)
        job = self.pytorch_job(self.name("pretrain"), rng.choice(("research", "llm")), pods, spec,
                               worker_spec=worker_spec, volcano_queue="training" if volcano else "",
                               age=rng.uniform(5, 3000))
        group = ""
        if volcano:
            group = job["metadata"]["name"]
            self.podgroup(job, group, pods, worker_asks or asks, "training", "Inqueue")
        if len(self.h100_busy) < bound:
            raise ValueError("too few busy H100 nodes for the partly placed gangs: raise --nodes")
        nodes: list[str | None] = [self.h100_busy.pop(0) for _ in range(bound)]
        self.pytorch_pods(job, nodes + [None] * (pods - bound), group)
        self.out.gang_pods += pods
        self.meant(job, "PyTorchJob partly placed", intent, why)

    def kueue_plan(self, intent: str) -> tuple[str, int, int, str]:
        """(LocalQueue, pods, GPUs a pod, why) of a Kueue Job (the H100 ClusterQueues have 8 GPUs
        unreserved)."""
        rng, free_h, free_a = self.rng, self.out.free["h100"], self.out.free["a100"]
        plans: dict[str, Callable[[], tuple[str, int, int, str]]] = {
            "fits": lambda: ("a100", rng.randint(1, max(1, min(8, free_a))), rng.choice((1, 2, 4, 8)),
                             "A100 quota and free nodes hold it"),
            "waits": lambda: rng.choice((
                ("h100", rng.randint(2, H100_QUOTA // 8), 8,
                 f"within the {H100_QUOTA}-GPU quota, above the {H100_QUOTA - 8 * H100_ADMITTED} unreserved"),
                ("h100-spot", rng.randint(free_h + 1, max(free_h + 1, min(free_h + free_a, free_h + 32))), 8,
                 FLAVOR_NODES_BUSY))),
            "never": lambda: rng.choice((
                ("h100", rng.randint(H100_QUOTA // 8 + 1, 16), 8, f"over the {H100_QUOTA}-GPU quota"),
                ("h100", rng.randint(1, 4), 16, "16 GPUs a pod"))),
        }
        return plans[intent]()

    def pending_kueue_job(self, intent: str) -> None:
        """A batch Job suspended under a LocalQueue; its pod template leaves the nodes to the flavor."""
        rng = self.rng
        team = f"team-{rng.randrange(KUEUE_TEAMS)}"
        queue, pods, gpus, why = self.kueue_plan(intent)
        asks = requests(gpus, gpus * rng.choice((4, 8)), gpus * rng.choice((32, 64)))
        spec = pod_spec(asks)
        job = self.batch_job(self.name("sweep"), team, pods, spec, labels={QUEUE_LABEL: queue}, suspend=True,
                             age=rng.uniform(5, 3000))
        self.workload(job, [{"name": "main", "count": pods, "template": {"spec": spec}}], queue, None)
        self.meant(job, "Kueue Job", intent, why)

    def pending(self) -> None:
        makers: dict[str, Callable[[str], None]] = {
            "batch Job": self.pending_batch_job, "Volcano Job": self.pending_volcano_job,
            "PyTorchJob partly placed": self.pending_pytorch_job, "Kueue Job": self.pending_kueue_job}
        for i in range(self.gang_count):
            makers[FAMILIES[i % len(FAMILIES)]](INTENTS[(i // len(FAMILIES)) % len(INTENTS)])

    def build(self) -> Generated:
        self.nodes()
        self.queues()
        self.daemonsets()
        self.kueue_running()
        self.pending()
        self.volcano_training()
        self.a100_jobs()
        self.inference()
        self.cpu_workloads()
        self.cluster_queues()
        # a List as kubectl prints one kind after another
        order = {kind: i for i, kind in enumerate(dict.fromkeys(o["kind"] for o in self.out.items))}
        self.out.items.sort(key=lambda o: order[o["kind"]])
        return self.out


def job_age(job: Obj) -> float:
    created = datetime.strptime(job["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    created = created.replace(tzinfo=UTC)
    return max(1.0, (NOW - created).total_seconds() / 60 - 1)


def _millis(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def generate(nodes: int = 10_000, pods: int = 100_000, gangs: int = 1_000, seed: int = 1) -> Generated:
    """The synthetic cluster (deterministic for a seed)."""
    return _Generator(nodes, pods, gangs, seed).build()


# -- the measurement -------------------------------------------------------------------------


def _write(path: str, nodes: int, pods: int, gangs: int,
           seed: int) -> tuple[dict[str, tuple[str, str, str]], int, int, dict[str, int], int]:
    """In a child process: write the snapshot; what the parent needs to know of it."""
    made = generate(nodes, pods, gangs, seed)
    with open(path, "w") as fh:
        fh.write(json.dumps(made.as_list()))    # json.dump encodes in pure Python: 10x slower
    return made.intended, made.running_pods, made.gang_pods, made.free, len(made.items)


@dataclass
class Stage:
    """One timed step: wall and CPU seconds (CPU time: the figure a loaded machine moves least)."""

    name: str
    seconds: float
    cpu_seconds: float
    rss_mib: float

    def row(self) -> str:
        return f"{self.name:<10} {self.seconds:>8.2f} {self.cpu_seconds:>8.2f} {self.rss_mib:>8.0f}"


def stage(name: str, started: tuple[float, float]) -> Stage:
    """The stage from ``started`` (:func:`clocks`) to now."""
    wall, cpu = clocks()
    return Stage(name, wall - started[0], cpu - started[1], rss_mib(os.getpid()))


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024     # KiB on Linux


def run_audit(path: str, policy: Policy, scan: bool,
              trace: bool) -> tuple[Audit, list[Stage], dict[str, float], list[tuple[str, float]]]:
    """Load, audit: the stages' times, tracemalloc figures (MiB) and each judged subject's time."""
    stages: list[Stage] = []
    traced: dict[str, float] = {}
    judged: list[tuple[str, float]] = []

    if trace:
        tracemalloc.start()
    started = clocks()
    source = from_snapshot(path, policy)
    stages.append(stage("load", started))
    if trace:
        live, peak = tracemalloc.get_traced_memory()
        traced["load: live after"], traced["load: peak"] = live / 2**20, peak / 2**20
        tracemalloc.reset_peak()
    objects, snapshot = source.objects, source.snapshot
    last = [0.0]

    def on_subjects(count: int) -> None:
        last[0] = time.perf_counter()
        judged.append((FINDING, last[0] - started[0]))

    def progress(ref: str) -> None:
        now = time.perf_counter()
        judged.append((ref, now - last[0]))
        last[0] = now

    started = clocks()
    result = audit(objects, snapshot, policy, scan=scan, progress=progress, on_subjects=on_subjects)
    stages.append(stage("audit", started))
    if trace:
        live, peak = tracemalloc.get_traced_memory()
        traced["audit: live after"], traced["audit: peak"] = live / 2**20, peak / 2**20
        tracemalloc.stop()
    return result, stages, traced, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000, help="bound running pods")
    parser.add_argument("--gangs", type=int, default=1_000, help="pending gangs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scan", action=argparse.BooleanOptionalAction, default=True,
                        help="judge the other subjects with the lint rules too (the background scan)")
    parser.add_argument("--tracemalloc", action="store_true", help="what build and audit allocate (slower)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile parse + build + audit, print the top N by cumulative time")
    parser.add_argument("--gc-off", action="store_true",
                        help="the cyclic garbage collector off while measuring (the baseline too), as a "
                             "front end could: what its passes over the parsed objects cost")
    parser.add_argument("--keep", metavar="FILE", help="write the snapshot here and keep it")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpugate-audit-bench-") as tmp:
        measure(args, args.keep or str(Path(tmp) / "cluster.json"))


def measure(args: argparse.Namespace, path: str) -> None:
    """Write the snapshot to ``path``, then measure its audit."""
    started = time.perf_counter()
    # the generator's objects live in a child process: the peak RSS below is the audit's
    with multiprocessing.get_context("fork").Pool(1) as pool:
        intended, running, gang_pods, free, count = pool.apply(
            _write, (path, args.nodes, args.pods, args.gangs, args.seed))
    generated = time.perf_counter() - started
    raw = Path(path).read_bytes()
    print(f"snapshot: {args.nodes} nodes, {running} running pods, {args.gangs} pending gangs "
          f"({gang_pods} pods), {count} objects, {len(raw) / 2**20:.0f} MiB JSON "
          f"(generated in {generated:.1f} s; free H100 nodes {free['h100']}, A100 {free['a100']})")

    if args.gc_off:
        gc.disable()
    baseline_started = clocks()
    baseline = json.loads(raw)
    loads = stage("json.loads", baseline_started)
    del baseline
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    baseline_started = clocks()
    baseline = json.loads(raw)
    loads_quiet = stage("json.loads", baseline_started)
    del baseline, raw
    if enabled:
        gc.enable()
    gc.collect()

    policy = Policy()
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    result, stages, traced, judged = run_audit(path, policy, args.scan, args.tracemalloc)
    if profiler is not None:
        profiler.disable()
    gc.enable()
    total = Stage("total", sum(s.seconds for s in stages), sum(s.cpu_seconds for s in stages), rss_peak_mib())

    print(f"\n{'stage':<10} {'wall s':>8} {'CPU s':>8} {'RSS MiB':>8}   (RSS after the stage)")
    print(loads.row() + "   baseline: the same text, nothing else")
    print(loads_quiet.row() + "   ... with the garbage collector off")
    for s in stages:
        print(s.row())
    print(total.row() + f"   {total.seconds / loads.seconds:.1f}x json.loads ("
          f"{total.seconds / loads_quiet.seconds:.1f}x with the collector off); RSS here: the peak"
          + ("; garbage collector off" if args.gc_off else ""))
    for name, mib in traced.items():
        print(f"  tracemalloc {name}: {mib:.0f} MiB")

    report(result, intended, judged)
    print(f"\ngoal: {args.nodes} nodes, {args.pods} pods, {args.gangs} pending gangs audited from a snapshot "
          f"in under 10 s: {total.seconds:.1f} s{' (profiled: slower)' if profiler else ''}")
    if profiler is not None:
        print()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)


def report(result: Audit, intended: dict[str, tuple[str, str, str]], judged: list[tuple[str, float]]) -> None:
    """Per-subject times, verdicts against what was meant, causes."""
    setup = [t for ref, t in judged if ref == FINDING]
    gang_times = [t for ref, t in judged if ref in intended]
    scan_times = [t for ref, t in judged if ref not in intended and ref != FINDING]
    print(f"\nfinding subjects: {sum(setup):.2f} s; subjects judged: {len(gang_times)} pending, "
          f"{len(scan_times)} scanned")
    for name, times in (("pending gang", gang_times), ("scanned", scan_times)):
        if times:
            print(f"  per {name:<13} mean {statistics.fmean(times) * 1e3:7.2f} ms  median "
                  f"{statistics.median(times) * 1e3:7.2f} ms  p99 {percentile(times, 0.99) * 1e3:7.2f} ms  "
                  f"max {max(times) * 1e3:7.1f} ms  sum {sum(times):6.2f} s")

    counts = result.counts()
    print("\nverdicts: " + ", ".join(f"{v} {counts[v]}" for v in VERDICTS))
    got = gang_verdicts(result)
    table: dict[tuple[str, str], dict[str, int]] = {}
    for ref, (family, intent, _why) in intended.items():
        row = table.setdefault((family, intent), {})
        verdict = got[ref].verdict if ref in got else NOT_PENDING
        row[verdict] = row.get(verdict, 0) + 1
    print(f"  {'family':<26} {'meant':<6} " + " ".join(f"{c:>7}" for c in VERDICTS) + f"  {NOT_PENDING}")
    for (family, intent), row in sorted(table.items()):
        print(f"  {family:<26} {intent:<6} " + " ".join(f"{row.get(c, 0):>7}" for c in VERDICTS)
              + f"  {row.get(NOT_PENDING, 0):>11}")
    others = sorted(ref for ref in got if ref not in intended)
    if others:
        print(f"  pending beyond the generated gangs: {len(others)} (first: {others[0]})")
    print("\nby cause:")
    for (verdict, cause), n in sorted(result.by_cause().items(), key=lambda kv: -kv[1]):
        print(f"  {verdict:<7} {cause:<28} {n:>5}")
    mismatched = [(ref, meant, got[ref]) for ref, meant in intended.items()
                  if ref in got and got[ref].verdict != meant[1]]
    if mismatched:
        print(f"\nnot as meant: {len(mismatched)}; the first of each (family, meant, got):")
    shown: set[tuple[str, str, str]] = set()
    for ref, (family, intent, why), gang in mismatched:
        if (family, intent, gang.verdict) not in shown:
            shown.add((family, intent, gang.verdict))
            print(f"  meant {intent} ({why}), got {gang.verdict}: {ref}: {gang.reason[:200]}")


def gang_verdicts(result: Audit) -> dict[str, GangVerdict]:
    """The verdict on each pending subject, by str(ObjectRef)."""
    return {str(e.subject.ref): e.gang for e in result.entries if e.gang is not None}

if __name__ == "__main__":
    main()
