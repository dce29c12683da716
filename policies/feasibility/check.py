"""One member cluster: :func:`check_cluster` answers a :class:`FitQuestion` from the
topology alone, within a deadline, and keeps recent answers in the topology's
:class:`OutcomeMemo`.

Verdicts: ``fits`` (a witness placement in the free resources now, and the queue has
room); ``waits`` (it fits the empty cluster and the full queue, not what is free now);
``never`` (a *necessary* condition fails: a ``never`` blocks someone's job, so it is
always a proof); ``unknown`` (nothing proven either way: no nodes, budget spent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from policies.config import Policy
from policies.labelselectors import selects_namespace
from policies.memo import StampedMemo
from policies.topology import ClusterSnapshot, Topology

from .capacity import _capacity_sum, _empty_capacity_of, _full, _now, _now_capacity_of, _Set, _sets
from .devices import DevicePlan, device_plan, devices_never, is_device_column
from .kueue import SetNeed, flavor_tolerations, with_tolerations
from .nodes import runs_extended_toleration
from .outcomes import Cause, ExplainRow, Outcome, Verdict
from .packing import _Caps, _necessary, _place, _place_flexible, _sparse, _witness
from .questions import FitQuestion, _policy_token
from .queues import (
    _flexible_need,
    _gang_total,
    _queue_checks,
    _quota_checks,
    _scheduler_queue_checks,
    kueue_namespace_hold,
    kueue_pinned_masks,
)
from .shares import shares_never
from .specs import GKE_NODE_LABELS
from .supernodes import (
    _empty_supernode_slots_of,
    _group_plan,
    _groups_never,
    _place_groups,
    _supernode_slots,
    _unit_label,
)

__all__ = ["OutcomeMemo", "check_cluster", "MEMO_ENTRIES"]


class _OutOfTime(Exception):
    pass


MEMO_ENTRIES = 256


class OutcomeMemo(StampedMemo):
    """Outcomes of questions already asked of one topology (a :class:`policies.memo.StampedMemo`).

    Key: (:class:`FitQuestion`, the policy's token). The question holds everything the
    check reads of the workload and the policy, and the versions
    (:meth:`Topology.state_versions`, plus the supernodes' when GPU groups are checked)
    move on every change of anything the snapshot holds, so an entry whose versions still
    match is the answer a fresh check would give; the topology's stamp
    (:meth:`Topology.state_stamp`) answers without working the versions out again while
    nothing at all has changed. Outcomes that depend on time (unknown: budget spent, stale
    or empty topology) are never kept.

    Not thread-safe, like the topology itself: the webhook applies watch events and
    evaluates reviews on its event-loop thread, the linter has one thread.
    """

    def __init__(self, size: int = MEMO_ENTRIES) -> None:
        super().__init__(size)

    @classmethod
    def of(cls, topo: Topology) -> OutcomeMemo:
        memo = topo.outcome_memo
        if not isinstance(memo, cls):
            memo = topo.outcome_memo = cls()
        return memo


def _memo_versions(topo: Topology, question: FitQuestion) -> tuple[Any, ...]:
    """What the answer to ``question`` depends on in ``topo``: every counter but the
    labels of keys neither its eligibility nor its supernodes read."""
    versions = topo.state_versions(question.label_keys)
    if question.extended_toleration == "auto":  # the answer depends on whether the nodes are GKE's
        versions = (*versions, *topo.versions(GKE_NODE_LABELS)[3:])
    if question.scheduler_queues and topo.cluster_queues:  # Kueue's flavors and topologies read labels
        versions = (*versions, *topo.versions(topo.kueue_label_keys())[3:])
    if question.placeholders is not None:  # YuniKorn's placeholders: their eligibility too
        versions = (*versions, *_memo_versions(topo, question.placeholders))
    if question.groups is not None:
        return (*versions, topo.supernode_versions(question.supernode_labels))
    return versions


def _copy_outcome(out: Outcome, cluster: str) -> Outcome:
    """A copy for ``cluster`` that shares nothing mutable with ``out`` (the rows are
    frozen): what the memo keeps, and what a caller gets from it, to edit as it likes."""
    witness = out.witness
    if witness is not None:
        witness = {name: nodes.copy() for name, nodes in witness.items()}
    return Outcome(cluster, out.verdict, out.cause, out.message, out.path, witness, list(out.rows),
                   list(out.notes), out.facts)


def check_cluster(question: FitQuestion, snapshot: ClusterSnapshot, policy: Policy,
                  deadline: float | None = None, *, memo: bool = True) -> Outcome:
    """The verdict for one member cluster. ``memo``: answer a question asked before of
    the topology as it is now from the topology's memo (see :class:`OutcomeMemo`)."""
    if question.kueue_namespaces:
        return _check_kueue_namespace(question, snapshot, policy, deadline, memo)
    out = _check_kept(question, snapshot, policy, deadline, memo)
    if out.verdict is Verdict.FITS or (out.verdict is Verdict.WAITS and out.cause is not Cause.QUEUE_ABSENT):
        # after the memo: it hangs on the namespace's labels, which have no version
        held = kueue_namespace_hold(question.scheduler_queues, snapshot.topology, question.namespace,
                                    question.queue_admitted)
        if held is not None:
            held.cluster = snapshot.name
            return held
    return out


def _check_kept(question: FitQuestion, snapshot: ClusterSnapshot, policy: Policy,
                deadline: float | None, memo: bool) -> Outcome:
    """:func:`check_cluster`'s answer from what the cluster holds, kept in the topology's memo."""
    topo = snapshot.topology

    def tick() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _OutOfTime

    # DRA claims become device columns of the topology first: building them moves its versions.
    try:
        devices = device_plan(question, topo, tick)
    except _OutOfTime:
        return _budget_spent(policy, snapshot.name)
    # A budget already spent gets the same unknown answer with or without the memo (tick() below).
    key: tuple[Any, ...] | None = None
    versions: tuple[Any, ...] = ()
    stamp = 0
    if memo and (deadline is None or time.monotonic() <= deadline):
        key = (question, _policy_token(policy))
        table = OutcomeMemo.of(topo)
        stamp = topo.state_stamp()
        known = table.current(key, stamp)
        if known is None:
            versions = _memo_versions(topo, question)
            known = table.get(key, versions, stamp)
        if known is not None:
            return _copy_outcome(known, snapshot.name)

    try:
        out = _with_devices(_check_with_placeholders(question, topo, tick, devices), devices)
    except _OutOfTime:
        out = _budget_spent(policy, "")
    if key is not None and out.verdict != Verdict.UNKNOWN:
        # The caller owns what it gets (it sets ``cluster``; front ends may edit rows):
        # the memo keeps a copy of its own.
        OutcomeMemo.of(topo).put(key, versions, _copy_outcome(out, ""), stamp)
    out.cluster = snapshot.name
    return out


def _check_kueue_namespace(question: FitQuestion, snapshot: ClusterSnapshot, policy: Policy,
                           deadline: float | None, memo: bool) -> Outcome:
    """A question whose Kueue queue counts only if Kueue manages its namespace, which hangs on
    labels of the namespace other than its name (:attr:`FitQuestion.kueue_namespaces`): asked as
    Kueue sees it, from the namespace's labels in the snapshot. Where the snapshot holds no such
    Namespace, asked both ways, and answered only where both answers agree."""
    namespace = question.namespace or ""
    managed = dataclasses.replace(question, kueue_namespaces=())

    def ignored() -> FitQuestion:
        return dataclasses.replace(managed, scheduler_queues=tuple(q for q in question.scheduler_queues
                                                                   if q.system != "kueue"),
                                   kueue_excluded=(), kueue_pods=(), kueue_topology=())

    kueues = selects_namespace(question.kueue_namespaces, namespace,
                               snapshot.topology.namespace_labels.get(namespace))
    if kueues is not None:
        return check_cluster(managed if kueues else ignored(), snapshot, policy, deadline, memo=memo)
    through = check_cluster(managed, snapshot, policy, deadline, memo=memo)
    without = check_cluster(ignored(), snapshot, policy, deadline, memo=memo)
    if through.verdict == without.verdict:
        if through.cause != without.cause:  # the same verdict for reasons of each world's own: both said
            through.message = (f"{through.message} (if Kueue manages namespace `{namespace}`; if not: "
                               f"{without.message})")
        return through
    if through.verdict == Verdict.UNKNOWN:
        return through
    if without.verdict == Verdict.UNKNOWN:
        return without
    queue = next(q for q in question.scheduler_queues if q.system == "kueue")
    return Outcome(snapshot.name, Verdict.UNKNOWN, Cause.KUEUE_NAMESPACE_UNKNOWN,
                   f"whether Kueue manages namespace `{namespace}` hangs on its labels "
                   f"(queues.kueueManagedJobsNamespaceSelector), and the cluster snapshot holds no such "
                   f"Namespace: {through.verdict.value} through Kueue LocalQueue `{queue.name}` "
                   f"({through.message}), {without.verdict.value} without Kueue", queue.path,
                   facts={"namespace": namespace, "queue": queue.name, "through": through.verdict.value,
                          "without": without.verdict.value})


def _budget_spent(policy: Policy, cluster: str) -> Outcome:
    budget = policy.feasibility.get("budgetMilliseconds")
    return Outcome(cluster, Verdict.UNKNOWN, Cause.BUDGET_SPENT, f"feasibility budget ({budget} ms) ran out",
                   facts={"budget_ms": budget})


def _check_declared(question: FitQuestion, topo: Topology) -> Outcome:
    """A gang with no pods of its own (a Volcano or KAI PodGroup): what its queue and quota say
    of the minimum it declares; nothing is placed, so nothing more is proven."""
    need = dict(question.declared)
    queue = _queue_checks(question.queue, topo, need, question.autoscaling, question.own,
                          question.queue_admitted)
    if queue is None and question.scheduler_queues:  # a KAI PodGroup's queue
        queue = _scheduler_queue_checks(question.scheduler_queues, topo, need, question.namespace,
                                        question.queue_admitted)
    if queue is not None:
        return queue
    quota = _quota_checks(question.namespace, topo, need)
    if quota is not None:
        return quota
    return Outcome("", Verdict.FITS, Cause.FITS, "fits")


def _with_devices(out: Outcome, devices: DevicePlan | None) -> Outcome:
    """``out`` with what the DRA counts cannot say: a "never" stands (the counts are upper
    bounds), any other answer is unknown when a claim could not be read or evaluated, and a
    fit whose counts are only bounds says so."""
    if devices is None or out.verdict is Verdict.NEVER:
        return out
    if devices.unknown and out.verdict is not Verdict.UNKNOWN:
        reasons = "; ".join(devices.unknown)
        return Outcome("", Verdict.UNKNOWN, Cause.DEVICES_UNKNOWN,
                       f"DRA devices not counted ({reasons}): {out.verdict.value} on everything else",
                       out.path, rows=out.rows,
                       facts={"reasons": devices.unknown, "otherwise": out.verdict.value})
    if devices.notes and out.verdict is Verdict.FITS:
        out.notes = [*out.notes, *(f"DRA: {note}" for note in devices.notes)]
    return out


def _check(question: FitQuestion, topo: Topology, tick: Any, devices: DevicePlan | None = None) -> Outcome:
    """The verdict, from the question and the topology alone (nothing else to read)."""
    if topo.n_nodes == 0:
        # Queues are known without nodes: a missing or closed queue is proven all the same.
        queue = _queue_checks(question.queue, topo, {}, question.autoscaling, question.own,
                              question.queue_admitted) if topo.queues else None
        if queue is not None and queue.verdict == Verdict.NEVER:
            return queue
        other = _scheduler_queue_checks(question.scheduler_queues, topo, {}, question.namespace,
                                        question.queue_admitted) if question.scheduler_queues else None
        if other is not None and other.verdict == Verdict.NEVER:
            return other
        return Outcome("", Verdict.UNKNOWN, Cause.EMPTY_SNAPSHOT, "the cluster snapshot has no nodes")
    if not question.demands:
        return _check_declared(question, topo)
    demands = question.demands if devices is None else devices.demands
    extra = flavor_tolerations(question.scheduler_queues, topo, question.namespace) \
        if question.scheduler_queues else ()
    if extra:  # Kueue adds its flavors' tolerations to the pods it admits
        demands = tuple(with_tolerations(d, extra) for d in demands)
    autoscaling = question.autoscaling
    sets = _sets(topo, demands, runs_extended_toleration(question.extended_toleration, topo))
    hard = [d.hard for d in demands]
    want = [d.want for d in demands]
    flexible = question.flexible_min
    n = topo.slots
    alloc = topo.alloc[:n]
    free_now, known_now = _now(topo)
    own = topo.own_usage(question.own) if question.own else None
    if own is not None:
        # an UPDATE: what the object's own pods hold is free for it (never cached)
        free_now = free_now + own[:n]
        free_now.setflags(write=False)
    # One pass over the nodes per distinct pod set (eligibility and request): replicas of
    # one template share it, and hundreds of sets must not outrun the budget.
    now_by_key: dict[Any, np.ndarray] = {}
    empty_by_key: dict[Any, np.ndarray] = {}
    uniform_now: dict[Any, int | None] = {}
    uniform_empty: dict[Any, int | None] = {}
    sums: dict[Any, tuple[int, int]] = {}
    caps_now, caps_empty = [], []
    for s in sets:
        if s.key not in now_by_key:
            tick()
            if own is None:
                now_by_key[s.key], uniform_now[s.key] = _now_capacity_of(topo, known_now, s, free_now)
            else:
                now_by_key[s.key], uniform_now[s.key] = s.capacity(free_now), None
            # Sets of one key (eligibility and request) have one capacity: worked out once.
            empty_by_key[s.key], uniform_empty[s.key] = _empty_capacity_of(topo, s)
            sums[s.key] = (_capacity_sum(now_by_key[s.key], uniform_now[s.key], s.elig.count),
                           _capacity_sum(empty_by_key[s.key], uniform_empty[s.key], s.elig.count))
        caps_now.append(now_by_key[s.key])
        caps_empty.append(empty_by_key[s.key])
    rows = [ExplainRow(d.name, d.want, s.elig.count, *sums[s.key])
            for d, s in zip(demands, sets, strict=True)]

    def outcome(verdict: Verdict, cause: Cause, message: str, path: str = "", **facts: Any) -> Outcome:
        return Outcome("", verdict, cause, message, path, rows=rows, facts=facts)

    hard_need = _flexible_need(sets, flexible) if flexible else _gang_total(sets, hard)
    if devices is not None:  # device columns are no queue's or quota's resources
        hard_need = {r: v for r, v in hard_need.items() if not is_device_column(r)}
    queue = _queue_checks(question.queue, topo, hard_need, autoscaling, question.own, question.queue_admitted)
    set_needs: list[SetNeed] = []
    if question.scheduler_queues and (queue is None or queue.verdict != Verdict.NEVER):
        tas = question.kueue_topology or (None,) * len(demands)
        # Kueue's quota is asked for the pods it admits at once (the whole workload, for kinds
        # it admits whole); the nodes still need only what any run needs.
        admits = list(question.kueue_pods) or hard
        set_needs = [SetNeed(d.name, d.path, {r: v * k for r, v in d.units
                                              if r != "pods" and v * k and not is_device_column(r)},
                             h, q.placement, s, t)
                     for q, d, h, k, s, t in zip(question.demands, demands, hard, admits, sets, tas,
                                                 strict=True)]
        kueue_need = hard_need if not question.kueue_pods else \
            {r: v for r, v in _gang_total(sets, admits).items() if not is_device_column(r)}
        other = _scheduler_queue_checks(question.scheduler_queues, topo, hard_need, question.namespace,
                                        question.queue_admitted, set_needs, question.kueue_excluded,
                                        autoscaling, kueue_need)
        if other is not None and (queue is None or other.verdict == Verdict.NEVER):
            queue = other
    if queue is not None and queue.verdict == Verdict.NEVER:
        queue.rows = rows
        return queue
    quota = _quota_checks(question.namespace, topo, hard_need)
    if quota is not None:
        quota.rows = rows
        return quota
    tick()
    share = shares_never(question.shares, topo) if question.shares else None
    if share is not None:
        share.rows = rows
        if autoscaling and share.facts["kind"] == "memory":  # a node with larger devices may come
            return outcome(Verdict.WAITS, Cause.WAITS_FOR_NEW_NODES,
                           f"{share.message}; waits for new nodes (feasibility.autoscaling)", share.path)
        return share

    # Empty cluster: necessary conditions (a proof when they fail).
    device_proof = devices_never(topo, devices, sets, hard) if devices is not None and not flexible else None
    if device_proof is not None:
        if autoscaling:
            return outcome(Verdict.WAITS, Cause.WAITS_FOR_NEW_NODES,
                           f"{device_proof[0]}; waits for new nodes (feasibility.autoscaling)",
                           device_proof[1])
        return outcome(Verdict.NEVER, Cause.NODES_NEVER_HOLD, device_proof[0], device_proof[1],
                       **device_proof[2])
    proof = _necessary(topo, sets, hard, alloc, flexible, "even when empty", caps_empty,
                       [sums[s.key][1] for s in sets], [_full(uniform_empty[s.key]) for s in sets])
    if proof is not None:
        if autoscaling:
            return outcome(Verdict.WAITS, Cause.WAITS_FOR_NEW_NODES,
                           f"{proof[0]}; waits for new nodes (feasibility.autoscaling)", proof[1])
        return outcome(Verdict.NEVER, Cause.NODES_NEVER_HOLD, *proof)
    tick()
    groups = question.groups
    supernode_labels = question.supernode_labels
    supernodes = topo.supernodes(supernode_labels) if groups is not None else []
    plan = _group_plan(question, sets) if supernodes else None
    notes: list[str] = []
    if groups is not None and not supernodes:
        notes.append("the cluster has no supernode labels or tier-1 HyperNodes: GPU groups not checked")
    if plan is not None and plan.units:
        slots_empty = _empty_supernode_slots_of(topo, sets, plan, caps_empty, supernodes, supernode_labels,
                                                alloc, uniform_empty[sets[plan.gpu_sets[0]].key])
        reason = _groups_never(topo, plan, alloc, supernodes, slots_empty[0],
                               (slots_empty[1], slots_empty[2]) if len(slots_empty) == 3 else None)
        if reason is not None:
            unit: dict[str, Any] = {"unit": plan.unit, "units": plan.units, "per_pod": plan.per_pod,
                                    "resource": plan.resource, "supernodes": len(supernodes)}
            if autoscaling:
                return outcome(Verdict.WAITS, Cause.WAITS_FOR_NEW_NODES, f"{reason}; waits for new nodes",
                               **unit)
            return outcome(Verdict.NEVER, Cause.SUPERNODES_NEVER_HOLD, reason, plan.path, **unit)
    tick()
    if want != hard and not flexible:
        # Not a gang: every pod is placed on its own. Pods that never fit stay Pending.
        most = [sums[s.key][1] for s in sets]
        short = [(d, m) for d, m in zip(demands, most, strict=True) if m < d.want]
        if short:
            text = "; ".join(f"{d.name}: {m} of {d.want} pods" for d, m in short)
            return outcome(Verdict.NEVER, Cause.NODES_HOLD_PART,
                           f"only part of it fits even the empty cluster ({text}); not a gang, so "
                           f"the rest stays Pending", short=tuple((d.name, m, d.want) for d, m in short))

    # Now: the queue's room, then a witness in the free resources.
    if queue is not None:
        queue.rows = rows
        return queue
    pinned_by_kueue = False
    if set_needs and not question.queue_admitted:
        # Kueue pins an admitted pod set's pods to its flavor's nodes: placed there only
        pinned = _pinned(sets, kueue_pinned_masks(question.scheduler_queues, topo, question.namespace,
                                                  set_needs, question.kueue_excluded))
        pinned_by_kueue = pinned is not sets
        if pinned_by_kueue:
            sets = pinned
            now_by_key = {s.key: s.capacity(free_now) for s in sets}
            uniform_now = {key: None for key in now_by_key}
            caps_now = [now_by_key[s.key] for s in sets]
    caps = _Caps(sets, free_now, now_by_key, free_owned=False)
    if plan is not None and plan.units:
        placed = _place_groups(topo, sets, plan, caps, supernodes, supernode_labels, tick, uniform_now)
    else:
        dense = _place_flexible(caps, sets, flexible) if flexible else _place(caps, sets, want)
        placed = None if dense is None else _sparse(dense)
    tick()
    if placed is not None:
        result = outcome(Verdict.FITS, Cause.FITS, "fits")
        result.witness = _witness(topo, sets, placed)
        result.notes = notes
        return result
    now = _necessary(topo, sets, want, free_now, flexible, "now", caps_now,
                     [_capacity_sum(now_by_key[s.key], uniform_now[s.key], s.elig.count) for s in sets],
                     [_full(uniform_now[s.key]) for s in sets])
    reason, path = now if now is not None else (None, "")
    facts: dict[str, Any] = {}
    if reason is None and plan is not None and plan.units:
        slots = int(_supernode_slots(topo, sets, plan, caps_now, supernodes, supernode_labels,
                                     free_now).sum())
        if slots < plan.units:
            facts = {"units": plan.units, "slots_now": slots}
            reason = (f"{plan.units} units ({_unit_label(plan)}) needed, the supernodes' free resources "
                      f"hold {slots} now")
    if reason is None:
        reason = "no placement found in the free resources now"
    if pinned_by_kueue:
        reason += " (on the nodes of the Kueue flavors it may be admitted to)"
    return outcome(Verdict.WAITS, Cause.WAITS_FOR_ROOM, f"fits the empty cluster but waits: {reason}", path,
                   most_free=_most_free(topo, sets, free_now), **facts)


def _pinned(sets: list[_Set], masks: Sequence[np.ndarray | None]) -> list[_Set]:
    """``sets`` with each one's nodes cut down to its mask of ``masks`` (None: as it is), as Kueue
    places them once admitted; ``sets`` itself when none is cut down. A set cut down gets an
    eligibility signature of its own, named by its nodes, so that nothing kept for its own
    nodes (capacities, blocks, placements) is taken for it."""
    out: list[_Set] = []
    for s, mask in zip(sets, masks, strict=True):
        nodes = s.elig.mask if mask is None else s.elig.mask & mask
        if nodes is s.elig.mask or np.array_equal(nodes, s.elig.mask):
            out.append(s)
            continue
        digest = hashlib.blake2b(np.packbits(nodes).tobytes(), digest_size=16).hexdigest()
        demand = dataclasses.replace(s.demand, signature=f"{s.demand.signature}\x00+kueue flavors {digest}")
        elig = dataclasses.replace(s.elig, mask=nodes, count=int(np.count_nonzero(nodes)))
        out.append(dataclasses.replace(s, demand=demand, elig=elig, key=(demand.signature, *s.key[1:])))
    return out if any(a is not b for a, b in zip(out, sets, strict=True)) else sets


def _most_free(topo: Topology, sets: Sequence[_Set],
               free: np.ndarray) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """Per pod set, the most of each resource it asks that one of its eligible nodes has free
    now, in scheduler units: how far the wait is from its end (read by ``gpugate audit``)."""
    out = []
    for s in sets:
        mask = s.elig.mask[: free.shape[0]]
        most = []
        for col in s.col_list:
            resource = topo.resources[col]
            if resource != "pods" and not is_device_column(resource):
                most.append((resource, int(free[mask, col].max()) if mask.any() else 0))
        out.append((s.demand.name, tuple(most)))
    return tuple(out)


def _check_with_placeholders(question: FitQuestion, topo: Topology, tick: Any,
                             devices: DevicePlan | None = None) -> Outcome:
    """:func:`_check`, and for YuniKorn task groups the gang of their placeholders, which
    must all be placed before any of the pods is: when they never all fit, ``Hard`` fails
    the application (never); ``Soft`` places the pods one by one after the placeholder
    timeout (a warning). The pods themselves are judged one by one either way."""
    out = _check(question, topo, tick, devices)
    gang = question.placeholders
    if gang is None or out.verdict is Verdict.UNKNOWN or (out.verdict is Verdict.NEVER
                                                          and out.cause is not Cause.NODES_HOLD_PART):
        return out
    held = _check(gang, topo, tick)
    if held.verdict is Verdict.NEVER:
        # The placeholder timer starts at the first placeholder placed: with none placeable
        # it never starts, and the application stays Reserving whatever its style.
        none = all(row.fits_empty == 0 for row in held.rows)
        facts = {**held.facts, "hard": question.placeholder_hard, "timeout_s": question.placeholder_timeout,
                 "none_placeable": none}
        if none:
            tail = "none is ever placed, so the placeholder timeout never starts"
        elif question.placeholder_hard:
            tail = "Hard style: the application fails at the placeholder timeout"
        else:
            tail = f"Soft style: the pods go one by one after the {question.placeholder_timeout} s timeout"
        cause = Cause.PLACEHOLDERS_NEVER_HOLD if question.placeholder_hard else Cause.PLACEHOLDERS_TIME_OUT
        message = f"YuniKorn placeholders never all fit: {held.message}; {tail}"
        return Outcome("", Verdict.NEVER, cause, message, held.path, rows=held.rows, facts=facts)
    if held.verdict is Verdict.WAITS and out.verdict is not Verdict.NEVER:
        return Outcome("", Verdict.WAITS, held.cause, f"YuniKorn placeholders: {held.message}",
                       held.path, rows=held.rows, facts=held.facts)
    return out
