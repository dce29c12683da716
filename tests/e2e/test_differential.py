"""Differential test: gpugate's feasibility verdicts against the real kube-scheduler (1.28).

Seeded random scenarios (``GPUGATE_DIFF_SEED``, ``GPUGATE_DIFF_SCENARIOS``; both printed) each
make a few fake nodes (random cpu, memory, ``nvidia.com/gpu``, ``pods``, ephemeral-storage and
other extended-resource capacities, labels, NoSchedule / NoExecute / PreferNoSchedule taints,
cordons) and random workloads: single Pods and gangs (requests, limits-only containers, init
containers, odd quantities, nodeSelector, required node affinity with every operator and
``matchFields``, tolerations). gpugate judges each workload against a snapshot of exactly its
scenario's empty nodes, read from the API server by the code of ``gpugate snapshot``
(:func:`webhook.watch.snapshot_objects`); then its pods, unchanged, go alone to the default
scheduler, which binds them one by one, and each is waited for until bound or
``PodScheduled=False/Unschedulable``.

What gpugate is asked: a single pod as the bare Pod a user submits; a gang as a Volcano Job, the
gang kind whose pod sets are exactly the pods submitted here (one task per template,
``minAvailable`` all its pods, or one fewer for a flexible gang), read through the kinds table as
in admission. Volcano does not run here, so its pods go to kube-scheduler as bare Pods with the
same specs; the snapshot holds only nodes and pods, so no Volcano queue takes part: the verdict
is about the nodes alone, which is what kube-scheduler checks too.

Asserted: a pod called "never" is never bound, a pod called "fits" is bound; a gang called
"never" never has ``minAvailable`` of its pods bound at once; a gang called "fits" gets that
many bound. kube-scheduler places pods greedily one at a time, so for a gang of mixed pods it
may miss a placement that exists (a pod taking the room another needed): then gpugate's witness
placement goes again, each pod pinned (``matchFields metadata.name``) to its witness node, and
must be bound whole, which proves the "fits" as the scheduler's own filters see it. A gang of
one template needs no such rerun: each pod takes room only from its own node, so the greedy
order binds as many as any placement can. "waits" and "unknown" assert nothing (counted).

Scenarios use disjoint node sets (a label of their own in every pod's nodeSelector) and run side
by side, one workload per scenario at a time; each round's pods are deleted before the next, and
the nodes at the end. Not generated: pod (anti-)affinity, topology spread, host ports, volumes,
priorities, which gpugate does not model (they can make a "fits" wrong, never a "never").
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from policies.config import Policy
from policies.feasibility import Outcome, Verdict, evaluate
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload
from webhook.kube import RESOURCES
from webhook.watch import snapshot_objects

from .conftest import Session
from .kube import GPU, TEST_KEY, wait_until

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("GPUGATE_DIFF_SEED", "20260"))
SCENARIOS = int(os.environ.get("GPUGATE_DIFF_SCENARIOS", "20"))
POLICY = Policy()
K = "diff.gpugate.io/"          # prefix of the scenarios' own label and taint keys
FPGA = "example.com/fpga"
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
WORKLOAD_LABEL = "diff.gpugate.io/workload"

Obj = dict[str, Any]


# -- scenarios ----------------------------------------------------------------------------------

@dataclass
class FakeNode:
    name: str
    labels: dict[str, str]
    capacity: dict[str, str]
    taints: list[str]
    cordoned: bool

    def describe(self) -> str:
        labels = {k.removeprefix(K): v for k, v in self.labels.items() if k != TEST_KEY}
        taints = [t.removeprefix(K) for t in self.taints]
        return (f"{self.name}: {json.dumps(self.capacity)} labels {json.dumps(labels)} taints {taints}"
                + (" cordoned" if self.cordoned else ""))


@dataclass
class Case:
    """One workload: the document gpugate judges and the bare Pods kube-scheduler gets."""

    name: str
    gang: bool
    document: Obj
    pods: list[Obj]
    need: int                                                   # pods that must run together
    outcome: Outcome | None = None
    verdict: Verdict = Verdict.UNKNOWN
    bound: dict[str, str] = field(default_factory=dict)        # pod -> node, as the scheduler chose
    pinned: list[Obj] | None = None                             # the witness placement's pods, pinned
    pinned_bound: dict[str, str] | None = None                  # pod -> node, pinned to the witness
    why: dict[str, str] = field(default_factory=dict)           # pod -> the scheduler's message

    def describe(self) -> str:
        specs = [json.dumps(p["spec"], separators=(",", ":")) for p in self.pods]
        pods = "; ".join(f"{specs.count(s)} x {s}" for s in dict.fromkeys(specs))
        message = self.outcome.message if self.outcome is not None else ""
        return (f"{'gang' if self.gang else 'pod'} {self.name} (needs {self.need} of {len(self.pods)} "
                f"together): gpugate {self.verdict.value} ({message}); kube-scheduler bound {self.bound} "
                f"(witness pinned: {self.pinned_bound}); unschedulable: {self.why}; pods: {pods}")


@dataclass
class Scenario:
    index: int
    nodes: list[FakeNode]
    cases: list[Case]

    def describe(self) -> str:
        return (f"scenario {self.index} (GPUGATE_DIFF_SEED={SEED}):\n    "
                + "\n    ".join(n.describe() for n in self.nodes))


def _maybe(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _node(rng: random.Random, name: str, group: str) -> FakeNode:
    labels = {TEST_KEY: group, K + "pool": rng.choice("ab")}
    if _maybe(rng, 0.6):
        labels[K + "product"] = rng.choice(["h100", "a100"])
    if _maybe(rng, 0.6):
        labels[K + "rank"] = str(rng.randint(0, 9))
    capacity = {"cpu": rng.choice(["2", "4", "8", "16", "7500m"]),
                "memory": rng.choice(["4Gi", "16Gi", "32Gi", "64Gi", "30000Mi", "16318412Ki"]),
                "pods": rng.choice(["110", "110", "110", "2", "3"])}
    gpus = rng.choice([None, 0, 1, 2, 4, 8, 8])
    if gpus is not None:
        capacity[GPU] = str(gpus)
    if _maybe(rng, 0.15):
        capacity["ephemeral-storage"] = "20Gi"
    if _maybe(rng, 0.1):
        capacity[FPGA] = "1"
    # at most one taint per (key, effect): the API server refuses duplicates
    taints: list[str] = []
    for options in ([f"{K}gpu=present:NoSchedule"],
                    [f"{K}dedicated=infer:NoSchedule", f"{K}dedicated=train:NoSchedule"],
                    [f"{K}maint:NoExecute"], [f"{K}soft=yes:PreferNoSchedule"], [f"{K}bare:NoSchedule"]):
        if _maybe(rng, 0.08):
            taints.append(rng.choice(options))
    return FakeNode(name, labels, capacity, taints, cordoned=_maybe(rng, 0.15))


TOLERATIONS = [
    {"key": K + "gpu", "operator": "Exists"},
    {"key": K + "gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": K + "gpu", "operator": "Equal", "value": "absent"},
    {"key": K + "dedicated", "operator": "Equal", "value": "infer"},
    {"key": K + "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"},
    {"key": K + "maint", "operator": "Exists", "effect": "NoExecute"},
    {"key": K + "bare", "operator": "Equal", "value": "", "effect": "NoSchedule"},
    {"key": K + "soft", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def _expression(rng: random.Random, nodes: list[FakeNode]) -> Obj:
    kind = rng.randrange(7)
    if kind == 0:
        return {"key": K + "pool", "operator": "In", "values": rng.choice([["a"], ["b"], ["a", "b"], ["c"]])}
    if kind == 1:
        return {"key": K + "pool", "operator": "NotIn", "values": [rng.choice("ab")]}
    if kind == 2:
        return {"key": K + "product", "operator": rng.choice(["Exists", "DoesNotExist"])}
    if kind == 3:
        return {"key": K + "product", "operator": "In", "values": [rng.choice(["h100", "a100"])]}
    if kind == 4:
        return {"key": K + "rank", "operator": rng.choice(["Gt", "Lt"]), "values": [str(rng.randint(0, 9))]}
    # kubernetes.io/hostname (a label) or metadata.name (a field, in matchFields)
    key = HOSTNAME if kind == 5 else "metadata.name"
    return {"key": key, "operator": rng.choice(["In", "NotIn"]), "values": [rng.choice(nodes).name]}


def _affinity(rng: random.Random, nodes: list[FakeNode]) -> Obj:
    terms = []
    for _ in range(rng.choice([1, 1, 2])):
        term: Obj = {}
        for _ in range(rng.choice([1, 1, 2])):
            e = _expression(rng, nodes)
            part = "matchFields" if e["key"] == "metadata.name" else "matchExpressions"
            term.setdefault(part, []).append(e)
        terms.append(term)
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}


def _container(rng: random.Random, name: str, gpu: bool) -> Obj:
    plain: dict[str, str] = {}
    if _maybe(rng, 0.9):
        plain["cpu"] = rng.choice(["100m", "250m", "0.5", "1", "1500m", "1.001", "2", "3"])
    if _maybe(rng, 0.8):
        plain["memory"] = rng.choice(["256Mi", "512M", "1Gi", "1G", "1.5Gi", "3Gi", "8Gi", "20Gi"])
    if _maybe(rng, 0.05):
        plain["ephemeral-storage"] = "30Gi"
    extended: dict[str, str] = {}
    if gpu:
        extended[GPU] = str(rng.choice([0, 1, 1, 2, 2, 4, 8]))
    if _maybe(rng, 0.03):
        extended[FPGA] = "1"
    # extended resources: limits must be set and equal any request; cpu and memory: requests
    # alone, limits alone (the API server defaults requests from them) or both
    style = rng.choice(["requests", "limits", "both"])
    resources: Obj = {"limits": dict(extended)} if extended else {}
    if style in ("requests", "both"):
        resources["requests"] = {**plain, **extended}
    if style in ("limits", "both"):
        resources.setdefault("limits", {}).update(plain)
    return {"name": name, "image": "busybox:1.36", "resources": resources}


def _pod_spec(rng: random.Random, group: str, nodes: list[FakeNode], strict: float = 1.0) -> Obj:
    """A random pod spec on the scenario's nodes; ``strict`` scales the odds of each placement
    constraint (gangs get fewer, so that a fair share of them fits)."""
    containers = [_container(rng, "main", _maybe(rng, 0.65))]
    if _maybe(rng, 0.2):
        containers.append(_container(rng, "side", _maybe(rng, 0.2)))
    spec: Obj = {"containers": containers, "nodeSelector": {TEST_KEY: group}}
    if _maybe(rng, 0.15):
        spec["initContainers"] = [_container(rng, "init", _maybe(rng, 0.3))]
    if _maybe(rng, 0.25 * strict):
        spec["nodeSelector"][K + "pool"] = rng.choice("aaabbc")
    if _maybe(rng, 0.1 * strict):
        spec["nodeSelector"][K + "product"] = rng.choice(["h100", "a100"])
    if _maybe(rng, 0.2 * strict):
        spec["affinity"] = _affinity(rng, nodes)
    if _maybe(rng, 0.5):
        spec["tolerations"] = copy.deepcopy(rng.sample(TOLERATIONS, rng.choice([1, 1, 2, 3])))
    spec["terminationGracePeriodSeconds"] = 0
    return spec


def _pod(namespace: str, case: str, name: str, spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {WORKLOAD_LABEL: case}},
            "spec": copy.deepcopy(spec)}


def _gang(rng: random.Random, name: str, namespace: str, group: str, nodes: list[FakeNode]) -> Case:
    """A Volcano Job of one or two tasks, and the bare Pods its job controller would make."""
    mixed = _maybe(rng, 0.5)
    tasks = [(f"t{t}", rng.choice([1, 2, 3] if mixed else [2, 3, 4]), _pod_spec(rng, group, nodes, 0.4))
             for t in range(2 if mixed else 1)]
    pods = [_pod(namespace, name, f"{name}-{task}-{i}", spec) for task, replicas, spec in tasks
            for i in range(replicas)]
    # flexible sometimes: any minAvailable of the pods will do
    need = len(pods) - 1 if len(pods) > 2 and _maybe(rng, 0.25) else len(pods)
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"schedulerName": "volcano", "minAvailable": need,
                    "tasks": [{"name": task, "replicas": replicas, "template": {"spec": spec}}
                              for task, replicas, spec in tasks]}}
    return Case(name, True, job, pods, need)


def _scenario(index: int, run: str, namespace: str) -> Scenario:
    rng = random.Random(f"{SEED}-{index}")
    group = f"diff-{run}-{index}"
    nodes = [_node(rng, f"{group}-n{k}", group) for k in range(rng.choice([2, 3, 3, 4]))]
    cases: list[Case] = []
    for k in range(rng.choice([5, 6, 7])):
        name = f"s{index}-p{k}"
        pod = _pod(namespace, name, name, _pod_spec(rng, group, nodes))
        cases.append(Case(name, False, pod, [pod], 1))
    cases += [_gang(rng, f"s{index}-g{k}", namespace, group, nodes) for k in range(rng.choice([2, 3]))]
    rng.shuffle(cases)
    return Scenario(index, nodes, cases)


def _taint(text: str) -> Obj:
    """``key=value:Effect`` or ``key:Effect`` (the form of ``cluster node --taint``) as a taint."""
    rest, effect = text.rsplit(":", 1)
    key, _, value = rest.partition("=")
    return {"key": key, "value": value, "effect": effect}


def _make_node(e2e: Session, node: FakeNode) -> None:
    """The fake Ready node ``cluster node`` makes (shared/kube/cluster ``cmd_node``: its default
    capacity and labels, a Ready condition, capacity = allocatable), through the client in three
    requests instead of a bash script with curl: a hundred nodes in seconds, not a minute."""
    labels = {HOSTNAME: node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **node.labels}
    taints = [_taint(t) for t in node.taints]
    body: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": labels},
                 "spec": {"taints": taints, "unschedulable": node.cordoned}}
    created = e2e.api.create(body)
    assert created.ok, (node.name, created)
    # the API server adds node.kubernetes.io/not-ready on create, which only a kubelet would lift
    patched = e2e.api.patch(body, {"spec": {"taints": taints}})
    assert patched.ok, (node.name, patched)
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti", **node.capacity}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node (no kubelet)"}
    status = {"capacity": capacity, "allocatable": capacity, "conditions": [ready],
              "addresses": [{"type": "Hostname", "address": node.name}]}
    patched = e2e.api.patch(body, {"status": status}, subresource="status")
    assert patched.ok, (node.name, patched)


# -- gpugate's side ------------------------------------------------------------------------------

def _snapshots(e2e: Session, scenarios: list[Scenario]) -> dict[int, ClusterSnapshot]:
    """Each scenario's nodes (and the pods on them: none yet) as ``gpugate snapshot`` reads them."""
    objects = snapshot_objects(e2e.api_client, [r for r in RESOURCES if r.kind in ("Node", "Pod")])
    out = {}
    for s in scenarios:
        names = {n.name for n in s.nodes}
        mine = [o for o in objects if (o["kind"] == "Node" and o["metadata"]["name"] in names)
                or (o["kind"] == "Pod" and (o.get("spec") or {}).get("nodeName") in names)]
        assert sum(o["kind"] == "Node" for o in mine) == len(names), f"scenario {s.index}: nodes missing"
        out[s.index] = ClusterSnapshot(f"scenario-{s.index}", Topology.from_objects(mine, POLICY))
    return out


def _judge(case: Case, snapshot: ClusterSnapshot) -> None:
    workload = build_workload(case.document)
    assert workload is not None, case.name
    # a deadline of a minute: the verdict must not depend on how busy the machine is
    answer = evaluate(workload, POLICY, [snapshot], deadline=time.monotonic() + 60)
    assert answer is not None and answer.outcomes, case.name
    case.verdict, case.outcome = answer.verdict, answer.outcomes[0]


def _pinned(spec: Obj, node: str) -> Obj:
    """``spec`` that only ``node`` may take: every required node selector term narrowed to it."""
    spec = copy.deepcopy(spec)
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(REQUIRED, {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term.setdefault("matchFields", []).append({"key": "metadata.name", "operator": "In",
                                                   "values": [node]})
    required["nodeSelectorTerms"] = terms
    return spec


def _witness_pods(case: Case) -> list[Obj]:
    """The pods of gpugate's witness placement, each pinned to its node in it."""
    assert case.outcome is not None and case.outcome.witness is not None, case.name
    slots = {task: [n for n, count in nodes.items() for _ in range(count)]
             for task, nodes in case.outcome.witness.items()}
    out = []
    for pod in case.pods:
        task = pod["metadata"]["name"].removeprefix(case.name + "-").split("-")[0]
        if slots.get(task):
            out.append({**pod, "spec": _pinned(pod["spec"], slots[task].pop())})
    assert len(out) >= case.need, f"{case.name}: the witness {case.outcome.witness} places {len(out)} pods"
    return out


# -- the scheduler's side ------------------------------------------------------------------------

def _state(pod: Obj) -> tuple[str, str] | None:
    """("bound", node) or ("unschedulable", message) once the scheduler decided; else None."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return "bound", node
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (c.get("type"), c.get("status"), c.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
            return "unschedulable", str(c.get("message", ""))
    return None


def _schedule(e2e: Session, namespace: str, pods: list[Obj]) -> dict[str, tuple[str, str]]:
    """Create ``pods``, wait until the scheduler decided each, delete them all; pod -> state."""
    with ThreadPoolExecutor(4) as pool:
        for pod, created in zip(pods, pool.map(e2e.api.create, pods), strict=True):
            assert created.ok, (pod["metadata"]["name"], created)
    names = {p["metadata"]["name"] for p in pods}
    states: dict[str, tuple[str, str]] = {}

    def decided() -> bool:
        for pod in e2e.api.list("v1", "Pod", namespace):
            state = _state(pod)
            if state is not None and pod["metadata"]["name"] in names:
                states[pod["metadata"]["name"]] = state
        return len(states) == len(names)

    done = wait_until(decided, 60, 0.1)
    # bound pods would hang in Terminating without a kubelet: grace period 0
    deleted = e2e.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                              query=[("gracePeriodSeconds", "0")])
    assert deleted.ok, deleted
    assert wait_until(lambda: not e2e.api.list("v1", "Pod", namespace), 30, 0.1), "pods not deleted"
    assert done, f"kube-scheduler decided {len(states)} of {len(names)} pods in 60 s"
    return states


def _one_template(case: Case) -> bool:
    return len({json.dumps(p["spec"], sort_keys=True) for p in case.pods}) == 1


def _run_rounds(e2e: Session, namespace: str, scenarios: list[Scenario]) -> list[str]:
    """Every scenario's workloads, one per scenario at a time (a witness rerun right after its
    workload's turn); the disagreements, described."""
    queues = {s.index: [(case, False) for case in s.cases] for s in scenarios}
    problems: list[str] = []
    while any(queues.values()):
        turn = [(index, *queue.pop(0)) for index, queue in queues.items() if queue]
        for _, case, pinned in turn:
            if pinned:
                case.pinned = _witness_pods(case)
        states = _schedule(e2e, namespace, [p for _, case, pinned in turn
                                            for p in (case.pinned or [] if pinned else case.pods)])
        for index, case, pinned in turn:
            mine = [p["metadata"]["name"] for p in (case.pinned or [] if pinned else case.pods)]
            bound = {name: states[name][1] for name in mine if states[name][0] == "bound"}
            if pinned:
                case.pinned_bound = bound
            else:
                case.bound = bound
                case.why = {name: states[name][1] for name in mine if states[name][0] != "bound"}
                if case.verdict is Verdict.FITS and len(bound) < case.need and not _one_template(case):
                    queues[index].insert(0, (case, True))  # the greedy order missed: the witness
                    continue
            if _disagrees(case):
                problems.append(f"{scenarios[index].describe()}\n  {case.describe()}")
    return problems


def _disagrees(case: Case) -> bool:
    if case.verdict is Verdict.NEVER:
        return len(case.bound) >= case.need
    if case.verdict is Verdict.FITS and len(case.bound) < case.need:
        return case.pinned is None or len(case.pinned_bound or {}) < len(case.pinned)
    return False


# -- the test ------------------------------------------------------------------------------------

def test_verdicts_agree_with_kube_scheduler(e2e: Session, ignored_namespace: str) -> None:
    started = time.monotonic()
    namespace = ignored_namespace  # gpugate's webhook must not change or refuse the pods
    print(f"\ndifferential: GPUGATE_DIFF_SEED={SEED} GPUGATE_DIFF_SCENARIOS={SCENARIOS}")
    scenarios = [_scenario(i, namespace.rsplit("-", 1)[-1], namespace) for i in range(SCENARIOS)]
    nodes = [n for s in scenarios for n in s.nodes]
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda node: _make_node(e2e, node), nodes))
        snapshots = _snapshots(e2e, scenarios)
        for s in scenarios:
            for case in s.cases:
                _judge(case, snapshots[s.index])
        judged = time.monotonic()
        problems = _run_rounds(e2e, namespace, scenarios)
    finally:
        for node in nodes:
            e2e.api.request("DELETE", f"/api/v1/nodes/{node.name}")
    print(_summary(scenarios, len(nodes), judged - started, time.monotonic() - judged))
    assert not problems, "gpugate and kube-scheduler disagree:\n" + "\n".join(problems)


def _summary(scenarios: list[Scenario], nodes: int, setup: float, rounds: float) -> str:
    cases = [c for s in scenarios for c in s.cases]
    verdicts = Counter(f"{'gang' if c.gang else 'pod'} {c.verdict.value}" for c in cases)
    outcomes: Counter[str] = Counter()
    for c in cases:
        together = len(c.bound) >= c.need
        if c.verdict is Verdict.FITS:
            outcomes["fits and bound" if together else "fits, bound via the witness"
                     if not _disagrees(c) else "FITS BUT NOT BOUND"] += 1
        elif c.verdict is Verdict.NEVER:
            outcomes["never and not bound" if not together else "NEVER BUT BOUND"] += 1
        else:
            outcomes[f"{c.verdict.value} ({'bound' if together else 'not bound'})"] += 1
    return (f"differential: {len(scenarios)} scenarios, {nodes} nodes, {len(cases)} workloads "
            f"({sum(len(c.pods) for c in cases)} pods); verdicts: "
            + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) + "; against kube-scheduler: "
            + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + f"; nodes and verdicts {setup:.1f} s, scheduling {rounds:.1f} s")
