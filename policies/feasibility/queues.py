"""Queues and quotas: the Volcano queue the gang is admitted through (it must exist, be a
leaf and be `Open`; its capability and the cluster's share bound the gang's minimum, and
what other pod groups hold makes it wait), and ElasticQuotaTree quotas. The queue's
limits and holdings for the resources asked (:func:`_queue_facts`) are shared by every
job shape: only the amounts are compared per job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from policies.labelselectors import selects_namespace
from policies.quantity import format_quantity
from policies.topology import Topology
from policies.workload import QueueRef

from .capacity import _Set
from .kueue import SetNeed, _held, flavor_pinned_masks, kueue_checks
from .outcomes import Cause, Outcome, Verdict, _fmt1


class Refusal(NamedTuple):
    """Why Volcano's admission refuses a job whatever it asks: its queue is missing, not a
    leaf, or not `Open`."""

    cause: Cause
    message: str
    facts: Mapping[str, Any]


def _gang_total(sets: list[_Set], counts: list[int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for s, c in zip(sets, counts, strict=True):
        for r, v in s.request.items():
            if r != "pods":
                total[r] = total.get(r, 0) + c * v
    return {r: v for r, v in total.items() if v}


def _flexible_need(sets: list[_Set], pods: int) -> dict[str, int]:
    """Per resource, the least any choice of ``pods`` pods of a flexible gang asks."""
    out: dict[str, int] = {}
    names = {r for s in sets for r in s.request if r != "pods"}
    for r in names:
        left, total = pods, 0
        for s in sorted(sets, key=lambda s: s.request.get(r, 0)):
            take = min(left, s.demand.replicas)
            total += take * s.request.get(r, 0)
            left -= take
        if total:
            out[r] = total
    return out


def _queue_checks(ref: QueueRef | None, topo: Topology, need: dict[str, int], autoscaling: bool,
                  own: frozenset[str] = frozenset(), admitted: bool = False) -> Outcome | None:
    """Never (the queue refuses the gang, or can never hold it), or waits for room in the
    queue; None when the queue is fine.
    ``ref``: the Volcano queue the gang is admitted through (None: not under Volcano).
    ``own``: an UPDATE's own pod groups, not counted as held; ``admitted``: the queue
    admitted the object already, its existence and state are not judged again."""
    if not topo.queues or ref is None:
        return None
    facts = _queue_facts(ref, topo, tuple(need), autoscaling, admitted)
    if facts is None:
        return None
    if isinstance(facts, Refusal):
        return Outcome("", Verdict.NEVER, facts.cause, facts.message, ref.path, facts=facts.facts)
    name, path = ref.name, ref.path
    limits, held = facts
    if own:
        held = topo.queue_held(name, own)
    over = [(r, need[r], limits[r]) for r in need if r in limits and need[r] > limits[r][0]]
    if over:
        text = "; ".join(f"{_fmt1(r, n)} asked, the queue can never hold more than "
                         f"{format_quantity(r, lim)} ({why})" for r, n, (lim, why) in over)
        return Outcome("", Verdict.NEVER, Cause.QUEUE_NEVER_HOLDS,
                       f"{text}: the gang's minimum resources exceed queue `{name}`", path,
                       facts={"queue": name, "over": tuple((r, n, lim, why) for r, n, (lim, why) in over)})
    short = [(r, need[r], limits[r][0], held.get(r, 0)) for r in need
             if r in limits and need[r] > limits[r][0] - held.get(r, 0)]
    if short:
        text = "; ".join(f"{_fmt1(r, n)} asked, {format_quantity(r, h)} of {format_quantity(r, lim)} "
                         f"held by running/inqueue pod groups" for r, n, lim, h in short)
        return Outcome("", Verdict.WAITS, Cause.WAITS_FOR_QUEUE, f"waits for room in queue `{name}`: {text}",
                       path, facts={"queue": name, "short": tuple(short)})
    return None


def _kueue_targets(ref: QueueRef, topo: Topology, namespace: str | None) -> set[str]:
    """The ClusterQueue(s) Kueue LocalQueue ``ref`` points at: the one of ``namespace``, or for
    a manifest without a namespace, those of every namespace it may land in (empty: none)."""
    if namespace is not None:
        target = topo.local_queues.get((namespace, ref.name))
        return set() if target is None else {target}
    return {cq for (_, name), cq in topo.local_queues.items() if name == ref.name}


def kueue_namespace_hold(refs: tuple[QueueRef, ...], topo: Topology, namespace: str | None,
                         admitted: bool = False) -> Outcome | None:
    """Kueue holds a workload whose namespace the ClusterQueue its LocalQueue points at does not
    select ("Workload namespace doesn't match ClusterQueue selector": kubernetes-sigs/kueue
    ``workload.ValidateAdmissibility``) until the namespace's labels or the selector change, and
    every workload of a ClusterQueue with no ``namespaceSelector`` (nil selects no namespace).
    Judged from the namespace's labels where the snapshot holds the Namespace, else from its name
    alone (a selector on other labels: nothing said). Namespace labels have no version: this is
    read per review, outside the outcome memo."""
    if namespace is None or admitted or not topo.local_queues:
        return None
    for ref in refs:
        target = topo.local_queues.get((namespace, ref.name)) if ref.system == "kueue" else None
        cq = topo.cluster_queues.get(target) if target else None
        if cq is None:
            continue
        if cq.namespaces is None:
            return _held(f"ClusterQueue `{cq.name}` has no namespaceSelector, which selects no namespace: "
                         f"Kueue admits nothing through it (`{{}}` selects all)", ref.path,
                         cluster_queue=cq.name, namespace=namespace)
        if selects_namespace(cq.namespaces, namespace, topo.namespace_labels.get(namespace)) is False:
            return _held(f"namespace `{namespace}` not selected by ClusterQueue `{cq.name}`'s "
                         f"namespaceSelector: Kueue holds the workload until its labels or the selector "
                         f"change", ref.path, cluster_queue=cq.name, namespace=namespace)
    return None


def kueue_pinned_masks(refs: tuple[QueueRef, ...], topo: Topology, namespace: str | None,
                       sets: Sequence[SetNeed], excluded: Sequence[str] = ()) -> list[np.ndarray | None]:
    """Per pod set, the nodes Kueue pins its pods to once the ClusterQueue its LocalQueue
    points at admits it (:func:`policies.feasibility.kueue.flavor_pinned_masks`); all None when
    no single ClusterQueue is known."""
    for ref in refs:
        if ref.system == "kueue" and topo.local_queues:
            targets = _kueue_targets(ref, topo, namespace)
            if len(targets) == 1 and next(iter(targets)):
                return flavor_pinned_masks(next(iter(targets)), topo, sets, excluded)
    return [None] * len(sets)


def _scheduler_queue_checks(refs: tuple[QueueRef, ...], topo: Topology, need: Mapping[str, int],
                            namespace: str | None, admitted: bool = False, sets: Sequence[SetNeed] = (),
                            kueue_excluded: Sequence[str] = (), autoscaling: bool = False,
                            kueue_need: Mapping[str, int] | None = None) -> Outcome | None:
    """Kueue LocalQueues and KAI queues: never when a KAI queue's limit (its own or an
    ancestor's) is below the gang's minimum, or the Kueue ClusterQueue can never admit it
    (:mod:`policies.feasibility.kueue`; ``sets``: each pod set's minimum need); waits when the
    queue named does not exist yet (Kueue and KAI hold the workload until it is created; judged
    only where the snapshot shows queues of that system at all), when the Kueue LocalQueue is
    stopped (``stopPolicy``: "LocalQueue X is stopped"), or for Kueue quota.
    ``admitted``: an UPDATE that keeps its queue: the queue's existence is not judged again;
    ``autoscaling``: nodes may come (Kueue's flavors' nodes are not judged); ``kueue_need``: what
    Kueue's quota is asked, when it admits more than the gang minimum (default: ``need``)."""
    waits: Outcome | None = None
    for ref in refs:
        if ref.system == "kueue" and topo.local_queues:
            targets = _kueue_targets(ref, topo, namespace)
            known = bool(targets)
            if len(targets) == 1 and next(iter(targets)):
                found = kueue_checks(ref.name, next(iter(targets)), topo,
                                     need if kueue_need is None else kueue_need, sets, ref.path,
                                     kueue_excluded, admitted, autoscaling)
                if found is not None and found.verdict == Verdict.NEVER:
                    return found
                if (namespace, ref.name) in topo.stopped_local_queues and not admitted and waits is None:
                    waits = _held(f"Kueue LocalQueue `{ref.name}` is stopped (stopPolicy): Kueue admits "
                                  f"nothing through it until it is resumed", ref.path, queue=ref.name)
                if found is not None and waits is None:
                    waits = found
            if not known and waits is None and not admitted:
                where = f" in namespace `{namespace}`" if namespace is not None else ""
                waits = Outcome("", Verdict.WAITS, Cause.QUEUE_ABSENT,
                                f"Kueue LocalQueue `{ref.name}` does not exist{where}: Kueue holds the "
                                f"workload until it is created", ref.path,
                                facts={"queue": ref.name, "system": "kueue"})
        elif ref.system == "kai" and topo.kai_queues:
            if ref.name not in topo.kai_queues:
                if not admitted and waits is None:
                    waits = Outcome("", Verdict.WAITS, Cause.QUEUE_ABSENT,
                                    f"KAI queue `{ref.name}` does not exist: the pods stay pending until "
                                    f"it is created", ref.path, facts={"queue": ref.name, "system": "kai"})
                continue
            over = [(r, need[r], limit, owner) for r, (limit, owner) in topo.kai_limits(ref.name).items()
                    if need.get(r, 0) > limit]
            if over:
                text = "; ".join(
                    f"{_fmt1(r, n)} asked, the limit of KAI queue `{owner}` is {_kai_amount(r, limit)}"
                    for r, n, limit, owner in over)
                return Outcome("", Verdict.NEVER, Cause.QUEUE_NEVER_HOLDS,
                               f"{text}: the gang's minimum resources exceed queue `{ref.name}`", ref.path,
                               facts={"queue": ref.name, "system": "kai",
                                      "over": tuple((r, n, str(limit), owner)
                                                    for r, n, limit, owner in over)})
    return waits


def _kai_amount(resource: str, limit: Fraction) -> str:
    """A KAI limit (scheduler units, possibly a fraction of a GPU) as a quantity."""
    if limit.denominator == 1:
        return format_quantity(resource, int(limit))
    return f"{float(limit):g}"


# What :func:`_queue_checks` reads of the queues for one queue and the resources asked:
# None (nothing to check), why the queue refuses the gang, or (limit and why per
# resource, held now).
_QueueFacts = None | Refusal | tuple[Mapping[str, tuple[int, str]], Mapping[str, int]]


def _queue_facts(ref: QueueRef, topo: Topology, resources: tuple[str, ...], autoscaling: bool,
                 admitted: bool = False) -> _QueueFacts:
    """Everything :func:`_queue_checks` reads but the amounts asked: a function of the
    queues, the pod groups, the nodes' allocatable and which resources are asked, so
    every job shape of a template asking through one queue shares it (cached until one
    of those changes)."""
    key = ("queue-facts", ref.name, ref.explicit, resources, autoscaling, admitted)
    versions = (topo.queue_version, topo.podgroup_version, topo.nodeset_version, topo.cordon_version,
                topo.alloc_version, len(topo.res_index))
    cached = topo.cached(key, versions)
    if cached is None:
        # a tuple: None is an answer
        cached = (_queue_facts_now(ref, topo, resources, autoscaling, admitted),)
        topo.remember(key, versions, cached)
    return cached[0]  # type: ignore[no-any-return]


def _queue_facts_now(ref: QueueRef, topo: Topology, resources: tuple[str, ...],
                     autoscaling: bool, admitted: bool = False) -> _QueueFacts:
    """:func:`_queue_facts`, computed."""
    name = ref.name
    queue = topo.queues.get(name)
    if queue is None:
        if not ref.explicit or admitted:
            return None  # Volcano creates `default` itself; a snapshot without it proves nothing
        known = ", ".join(sorted(topo.queues)[:8])
        return Refusal(Cause.QUEUE_MISSING, f"queue `{name}` does not exist (queues: {known})",
                       {"queue": name, "queues": tuple(sorted(topo.queues)[:8])})
    if not admitted:
        if name == "root":
            return Refusal(Cause.QUEUE_NOT_LEAF,
                           "can not submit job to the root queue `root`; name a leaf queue",
                           {"queue": name, "children": ()})
        children = topo.queue_children(name)
        if children:
            return Refusal(Cause.QUEUE_NOT_LEAF,
                           f"can only submit job to a leaf queue, queue `{name}` has child queues "
                           f"{', '.join(children[:5])}", {"queue": name, "children": tuple(children)})
        if not queue.open:
            return Refusal(Cause.QUEUE_CLOSED,
                           f"can only submit job to queue with state `Open`, queue `{name}` status is "
                           f"`{queue.state}`", {"queue": name, "state": queue.state})
    # Volcano capacity: min(capability, (cluster total - all guarantees) + own guarantee),
    # and a child never exceeds its parents' capability.
    total = topo.cluster_total(include_cordoned=True)  # as Volcano counts it: never less
    guarantees: dict[str, int] = {}
    for q in topo.queues.values():
        for r, v in q.guarantee.items():
            guarantees[r] = guarantees.get(r, 0) + v
    limits: dict[str, tuple[int, str]] = {}
    ancestors = topo.queue_ancestors(name)
    for r in resources:
        options: list[tuple[int, str]] = []
        if r in queue.capability:
            options.append((queue.capability[r], f"capability {format_quantity(r, queue.capability[r])}"))
        for parent in ancestors:
            if r in parent.capability:
                options.append((parent.capability[r], f"parent queue `{parent.name}` capability "
                                                      f"{format_quantity(r, parent.capability[r])}"))
        reserved = guarantees.get(r, 0) - queue.guarantee.get(r, 0)
        if not autoscaling and r in topo.res_index and reserved > 0:
            # Other queues' guarantees are held back from this one. Without any, the
            # cluster total alone is the nodes' business, not the queue's.
            cluster = int(total[topo.res_index[r]])
            real = max(0, cluster - guarantees.get(r, 0)) + queue.guarantee.get(r, 0)
            options.append((real, f"cluster {format_quantity(r, cluster)} minus other queues' "
                                  f"guarantees {format_quantity(r, reserved)}"))
        if options:
            limits[r] = min(options)
    # Read-only: shared by every check until the versions move.
    return MappingProxyType(limits), MappingProxyType(topo.queue_held(name))


def _quota_checks(namespace: str | None, topo: Topology, need: dict[str, int]) -> Outcome | None:
    if not namespace or not topo.quota_trees:
        return None
    chain = topo.quota_chain(namespace)
    asked = {**need, "kube-queue/max-jobs": 1}
    for node in reversed(chain):
        over = [(r, asked[r], node.max[r]) for r in asked if r in node.max and asked[r] > node.max[r]]
        if over:
            text = ", ".join(f"{_fmt1(r, a)} asked, max {format_quantity(r, m)}" for r, a, m in over)
            return Outcome("", Verdict.NEVER, Cause.QUOTA_NEVER_HOLDS,
                           f"the gang exceeds ElasticQuotaTree node `{'/'.join(node.path)}` "
                           f"(namespace {namespace}): {text}",
                           facts={"quota": "/".join(node.path), "namespace": namespace, "over": tuple(over)})
    return None
