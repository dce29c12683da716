"""The question a workload asks of a cluster: :func:`fit_question` reduces the workload
(with the policy) to a frozen, hashable :class:`FitQuestion` holding exactly what the
check reads, so the per-cluster outcome is a function of (question, topology state).

Jobs of one template get the one question object (kept by what it is built from), which
the outcome memo finds by identity; what the question reads of a pod spec
(:class:`_SpecFit`: units per pod and eligibility signature) is worked out once per spec
content and kept in the spec's shared facts, so a repeated template finds its question
by a key of a few small values.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import marshal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from policies import memo
from policies.config import Policy
from policies.dra.claims import PodDevices, pod_devices
from policies.groups import group_sizes
from policies.kinds import DEFAULT_SCHEDULER, KAI_SCHEDULER, YUNIKORN_SCHEDULER
from policies.labelselectors import Requirement, requirements
from policies.quantity import QuantityError, parse_quantity, scheduler_units
from policies.schedulers import VOLCANO_SCHEDULER, scheduler_known
from policies.workload import PodSet, QueueRef, Workload, resolve
from policies.yunikorn import placeholder_pod_sets

from .shares import ShareAsk, share_asks, without_shares
from .specs import (
    _EXTENDED,
    _parts_signature,
    _placement_of,
    _placement_parts,
    _signature_label_keys,
    extended_toleration_mode,
)
from .tas import PodSetTopology, podset_topology

__all__ = ["Demand", "GroupQuestion", "FitQuestion", "fit_question", "demands_for"]


@dataclass(frozen=True)
class Demand:
    """One pod set as the packer sees it: everything the check reads of it, and nothing
    else (the check never sees the :class:`PodSet`)."""

    name: str
    path: str                   # JSON Pointer of the pod template (findings point there)
    replicas: int               # pods at full size (a flexible gang picks among them)
    units: tuple[tuple[str, int], ...]  # scheduler units per pod, ``pods: 1`` included, in request order
    hard: int                   # pods any run needs (the gang's share; never-checks)
    want: int                   # pods to place for fits/waits
    # The eligibility inputs (tolerations, nodeSelector, required node affinity, nodeName)
    # as text (:func:`_signature`: equal text, equal inputs): equality and hashing go by
    # it, as the eligibility cache does.
    signature: str
    # The same inputs as written, read only to compute eligibility on a miss.
    placement: Mapping[str, Any] = field(compare=False, repr=False)

    @property
    def request(self) -> dict[str, int]:
        return dict(self.units)


@dataclass(frozen=True)
class GroupQuestion:
    """What the GPU-group check reads of :func:`policies.groups.group_sizes`."""

    size: int                   # G
    atomic: int                 # A (G when not set)
    size_path: str
    atomic_path: str            # "" when A defaults to G
    gpu_pod_sets: bool          # the gang has GPU pod sets at all

    @property
    def atomic_explicit(self) -> bool:
        return bool(self.atomic_path)


@dataclass(frozen=True, eq=False)
class FitQuestion:
    """The question a workload asks of a cluster's topology, apart from the workload.

    Everything :func:`check_cluster` reads of the workload and the policy is here, so the
    answer is a function of (question, topology state): jobs of one template (a sweep,
    retries, the API server asking again) ask equal questions, and the memo answers them.
    Names, uids and labels nobody schedules by are not part of it.

    Equal when every field is equal (the demands as :class:`Demand` compares them), as a
    dataclass would compare them, but through one flat tuple of built-in values computed
    once: the memo hashes and compares questions on every review."""

    demands: tuple[Demand, ...]
    flexible_min: int           # pods a flexible gang needs in total; 0: rigid or no gang
    queue: QueueRef | None      # the Volcano queue it is admitted through; None: not Volcano's
    namespace: str | None       # for ElasticQuotaTree quotas
    groups: GroupQuestion | None
    gpu_resources: frozenset[str]       # the policy's GPU resources the pod sets request
    supernode_labels: tuple[str, ...]
    autoscaling: bool
    label_keys: tuple[str, ...]         # node label keys the pod sets' eligibility reads
    # An UPDATE's own usage: the keys its bound pods and pod groups are filed under in the
    # topology (policies.changes.owner_keys), counted as free for it. Empty for a CREATE.
    own: frozenset[str] = frozenset()
    # An UPDATE that keeps its queue: the queue admitted it, its existence and state are
    # not judged again (a queue closed since must not block a running job's edits).
    queue_admitted: bool = False
    # platform.extendedResourceToleration: "on", "off", or "auto" (on for GKE snapshots)
    extended_toleration: str = "off"
    # A gang with no pods of its own (a Volcano PodGroup): the minimum resources it declares,
    # in scheduler units, judged against its queue; () for the others.
    declared: tuple[tuple[str, int], ...] = ()
    # The Kueue LocalQueue and KAI queue it names, where their system reads them.
    scheduler_queues: tuple[QueueRef, ...] = ()
    # YuniKorn task groups (policies.yunikorn): the gang of their placeholder pods, placed
    # before any of the pods above (which are then placed one by one), whether a gang that
    # never forms fails the application (gangSchedulingStyle Hard) and its timeout.
    placeholders: FitQuestion | None = None
    placeholder_hard: bool = False
    placeholder_timeout: int = 0
    # What containers ask of one device (policies.feasibility.shares): not in the demands'
    # units, which are node capacity only.
    shares: tuple[ShareAsk, ...] = ()
    # Resource prefixes Kueue does not account (queues.kueueExcludeResourcePrefixes), when it
    # names a Kueue queue.
    kueue_excluded: tuple[str, ...] = ()
    # Per demand, the pods Kueue admits at once when it admits the whole workload
    # (KindSpec.kueue_admits_all); (): the gang minimum.
    kueue_pods: tuple[int, ...] = ()
    # Per demand, the Kueue topology it requires (policies.feasibility.kueue.podset_topology), when
    # it names a Kueue queue and some pod set has one.
    kueue_topology: tuple[PodSetTopology | None, ...] = ()
    # Per demand, the DRA claims its pods name (policies.dra.claims); None: no pod set has any.
    devices: tuple[PodDevices | None, ...] | None = None
    # Whether Kueue manages the namespace hangs on these requirements of its namespace's labels
    # (queues.kueueManagedJobsNamespaceSelector: labels other than its name); (): it does.
    kueue_namespaces: tuple[Requirement, ...] = ()
    _key: tuple[Any, ...] = field(init=False, repr=False)
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        queue, groups = self.queue, self.groups
        demands = tuple((d.name, d.path, d.replicas, d.units, d.hard, d.want, d.signature)
                        for d in self.demands)
        key = (demands, self.flexible_min,
               None if queue is None else (queue.name, queue.system, queue.path, queue.explicit),
               self.namespace,
               None if groups is None else (groups.size, groups.atomic, groups.size_path, groups.atomic_path,
                                            groups.gpu_pod_sets),
               self.gpu_resources, self.supernode_labels, self.autoscaling, self.label_keys,
               self.own, self.queue_admitted, self.extended_toleration, self.declared,
               tuple((q.name, q.system, q.path) for q in self.scheduler_queues),
               None if self.placeholders is None else self.placeholders._key, self.placeholder_hard,
               self.placeholder_timeout, self.shares, self.kueue_excluded, self.kueue_topology, self.devices,
               self.kueue_pods, self.kueue_namespaces)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, FitQuestion):
            return NotImplemented
        return self._hash == other._hash and self._key == other._key

    def __hash__(self) -> int:
        return self._hash


def _is_gang(workload: Workload) -> bool:
    """Pods placed all-or-nothing: a gang kind under a batch scheduler (not the default one,
    nor YuniKorn, whose gang is its task groups' placeholders: see :func:`fit_question`)."""
    return _gang_and_volcano(workload)[0]


def _gang_and_volcano(workload: Workload) -> tuple[bool, bool]:
    """(:func:`_is_gang`, whether Volcano schedules some of its pods) of ``workload``, its
    schedulers read once."""
    if not scheduler_known(workload):
        volcano = any(q.explicit and q.system == "volcano" for q in workload.queues)
        return bool(workload.spec.gang) and volcano, volcano
    batch = volcano = False
    for p in workload.gang_pod_sets:  # a loop, not sets of schedulers: on every review
        if p.scheduler != DEFAULT_SCHEDULER:
            if p.scheduler == YUNIKORN_SCHEDULER:
                continue  # YuniKorn places the pods themselves one by one (its gang: placeholders)
            batch = True
            if p.scheduler == VOLCANO_SCHEDULER:
                volcano = True
    return bool(workload.spec.gang) and batch, volcano


def demands_for(workload: Workload) -> list[Demand] | None:
    """The pod sets to place, or None when a request does not parse (a rule on requests reports it)."""
    return _demands(workload, _is_gang(workload))


def _demands(workload: Workload, gang: bool) -> list[Demand] | None:
    """:func:`demands_for`, with :func:`_is_gang` of ``workload`` already known."""
    found = _demand_rows(workload, gang)
    if found is None:
        return None
    rows, sets = found
    demands: list[Demand] = []
    placements: dict[str, dict[str, Any]] = {}
    for row, pod_set in zip(rows, sets, strict=True):
        signature = row[6]
        placement = placements.get(signature)
        if placement is None:
            placement = placements[signature] = _placement_of(*_placement_parts(pod_set.spec))
        demands.append(Demand(*row, placement))
    return demands


# One pod set's Demand fields but the placement: (name, path, replicas, units, hard, want, signature).
_DemandRow = tuple[str, str, int, tuple[tuple[str, int], ...], int, int, str]


# What the check reads of a pod spec, kept in ``PodSet.facts`` under this key (see
# :class:`_SpecFit`), or None when a request does not parse.
_FIT_FACTS = "fit"


class _SpecFit:
    """What the check reads of one pod spec: its scheduler units per pod (``pods: 1``
    included, in request order) and its eligibility signature (:func:`_signature`).

    Both are functions of the spec's content alone, so it lives in the spec's shared
    facts: pod sets of one template, in this object and in later ones, are neither
    converted nor serialised again. Compared by identity, which is cheap to hash, and
    sound as a key while it is held: one object stands for one spec content."""

    __slots__ = ("units", "signature")

    def __init__(self, units: tuple[tuple[str, int], ...], signature: str) -> None:
        self.units = units
        self.signature = signature


def _spec_fit(pod_set: PodSet) -> _SpecFit | None:
    facts = pod_set.facts
    if _FIT_FACTS in facts:
        return facts[_FIT_FACTS]  # type: ignore[no-any-return]
    found = None
    if not pod_set.request_errors:
        per_pod = {r: max(0, scheduler_units(r, q)) for r, q in pod_set.requests.items()}
        per_pod["pods"] = per_pod.get("pods", 0) + 1
        found = _SpecFit(tuple(per_pod.items()), _spec_signature(pod_set))
    facts[_FIT_FACTS] = found
    return found


def _spec_signature(pod_set: PodSet) -> str:
    """:func:`_signature` of the pod set's spec: what eligibility reads (placement, and the
    names of extended resources, not their amounts), so in its blind facts: job shapes of
    one template that differ in CPU or memory share it (one string object)."""
    blind = pod_set.blind_facts
    found: str | None = blind.get(_FIT_FACTS)
    if found is None:
        found = blind[_FIT_FACTS] = _parts_signature(list(_placement_parts(pod_set.spec)))
    return found


def _placed_sets(workload: Workload) -> list[PodSet]:
    """The gang's pod sets with pods to place."""
    return [p for p in workload.gang_pod_sets if p.gang_count > 0 or p.replicas > 0]


def _spec_fits(sets: list[PodSet]) -> list[_SpecFit] | None:
    """:func:`_spec_fit` of each pod set; None when a request does not parse."""
    fits: list[_SpecFit] = []
    for p in sets:
        fit = _spec_fit(p)
        if fit is None:
            return None
        fits.append(fit)
    return fits


def _demand_rows(workload: Workload, gang: bool) -> tuple[list[_DemandRow], list[PodSet]] | None:
    """The fields of each pod set's :class:`Demand` but the placement, as plain tuples,
    and the pod sets they are of; None when a request does not parse."""
    sets = _placed_sets(workload)
    fits = _spec_fits(sets)
    if fits is None:
        return None
    return _rows(sets, fits, gang, workload.gang_min), sets


def _rows(sets: list[PodSet], fits: list[_SpecFit], gang: bool, gang_min: int) -> list[_DemandRow]:
    """:func:`_demand_rows` from the pod sets' :func:`_spec_fit`. Pod sets with equal
    requests or placements share one units and one signature object."""
    units = [f.units for f in fits]
    signatures = [f.signature for f in fits]
    if len(fits) > 1:
        units, signatures = _shared(units), _shared(signatures)
    counts = [p.gang_count for p in sets] if gang else [p.replicas for p in sets]
    if gang and 0 < gang_min < sum(counts):
        # Flexible gang (Volcano minAvailable below the tasks' sum): any gang_min pods will
        # do, so no pod set is individually required; place the cheapest ones.
        order = sorted(range(len(sets)), key=lambda i: sorted(units[i]))
        want = [0] * len(sets)
        left = gang_min
        for i in order:
            take = min(left, sets[i].replicas)
            want[i] = take
            left -= take
        hard = [0] * len(sets)
    else:
        want = counts
        hard = counts if gang else [min(1, c) for c in counts]
    return [(p.name, p.path, p.replicas, u, h, w, signature)
            for p, u, h, w, signature in zip(sets, units, hard, want, signatures, strict=True)]


def _shared(values: list[Any]) -> list[Any]:
    """``values`` with equal ones as one object: pod sets of other templates but equal
    requests or placements share them (the check works out columns once per units
    object, and every cache and the memo hash one signature)."""
    seen: list[Any] = []
    out: list[Any] = []
    for value in values:
        for known in seen:  # a loop, not a dict: a handful of pod sets
            if known == value:
                value = known
                break
        else:
            seen.append(value)
        out.append(value)
    return out


QUESTIONS_KEPT = 1024
_POLICY_TOKENS = itertools.count(1)
# Questions asked recently, by everything they are built from (with the policy's token):
# jobs of one template (a sweep, retries) get the one question object, whose Demand and
# dataclass objects are not built again and which the memo finds by identity.
_QUESTIONS = memo.ContentMemo("feasibility.questions", QUESTIONS_KEPT)
# The same questions (or None: nothing to place) by what the workload holds, its pod
# specs by their :class:`_SpecFit`: a repeated template is answered without building the
# rows above; kept as a one-tuple, since None is an answer.
_QUESTIONS_BY_SHAPE = memo.ContentMemo("feasibility.questions-by-shape", QUESTIONS_KEPT)
# Placements by signature, rebuilt from the signature itself (see :func:`_own_placement`).
_PLACEMENTS = memo.ContentMemo("feasibility.placements", 4096)


def fit_question(workload: Workload, policy: Policy) -> FitQuestion | None:
    """The question ``workload`` asks of a cluster under ``policy``; None when there is
    nothing to place (no pods, or a request that does not parse: a rule on requests reports it)."""
    gang, volcano = _gang_and_volcano(workload)
    sets = _placed_sets(workload)
    if not workload.spec.pod_sets and workload.spec.derived is None:  # a gang without pods of its own
        return _declared_question(workload, policy)
    fits = _spec_fits(sets)
    if fits is None:
        return None
    queue = _volcano_queue(workload) if volcano else None
    queue_fields = None if queue is None else (queue.name, queue.system, queue.path, queue.explicit)
    spec = group_sizes(workload, policy)
    group_fields = None if spec is None else (spec.size, spec.atomic, spec.size_path, spec.atomic_path,
                                              bool(spec.pod_sets))
    # Everything the rows (:func:`_rows`) and the question are built from; the policy by
    # its token, the pod specs by their facts (equal objects, equal contents).
    shape = (_policy_token(policy), gang, workload.gang_min, queue_fields, workload.namespace, group_fields,
             *[(fit, p.name, p.path, p.replicas, p.gang_count) for fit, p in zip(fits, sets, strict=True)])
    kept: tuple[FitQuestion | None] | None = _QUESTIONS_BY_SHAPE.get(shape)
    if kept is None:
        kept = _QUESTIONS_BY_SHAPE.put(shape, (_question(
            _rows(sets, fits, gang, workload.gang_min), sets, gang, workload.gang_min, queue, queue_fields,
            workload.namespace, group_fields, policy),))
    question = kept[0]
    others, namespaces = _scheduler_queues(workload, policy)
    if others and question is not None:
        kueue = any(q.system == "kueue" for q in others)
        excluded = tuple(policy.data["queues"].get("kueueExcludeResourcePrefixes") or ()) if kueue else ()
        topology = tuple(podset_topology(p.annotations) for p in sets) if kueue else ()
        question = dataclasses.replace(question, scheduler_queues=others, kueue_excluded=excluded,
                                       kueue_topology=topology if any(topology) else (),
                                       kueue_pods=_kueue_pods(workload, sets) if kueue else (),
                                       kueue_namespaces=namespaces)
    if question is not None:
        devices = pod_devices(sets, workload.namespace)
        if devices is not None:
            question = dataclasses.replace(question, devices=devices)
        question = _with_placeholders(question, workload, policy)
    return question


def _kueue_pods(workload: Workload, sets: list[PodSet]) -> tuple[int, ...]:
    """The pods of each pod set Kueue admits at once (:attr:`FitQuestion.kueue_pods`): all of
    them for a kind it admits whole, or the partial-admission minimum it may go down to (read
    only when valid: a whole number from 1 to the pod set's count, as Kueue's webhook demands)."""
    spec = workload.spec
    if not spec.kueue_admits_all:
        return ()
    counts = tuple(p.replicas for p in sets)
    least = resolve(workload.doc, spec.kueue_min_count) if spec.kueue_min_count else None
    if len(counts) == 1 and isinstance(least, str) and least.isdigit() and 0 < int(least) < counts[0]:
        return (int(least),)
    return counts


def _with_placeholders(question: FitQuestion, workload: Workload, policy: Policy) -> FitQuestion:
    """``question`` with the gang of YuniKorn's placeholder pods, when its task groups are
    judged (:func:`policies.yunikorn.placeholder_pod_sets`): a gang of its own (``minMember``
    pods of ``minResource`` per group, with the group's placement), no queue or quota of
    Volcano's or the scheduler-plugins' (YuniKorn's queues live in its configuration)."""
    found = placeholder_pod_sets(workload, policy)
    if found is None:
        return question
    sets, hard, timeout = found
    fits = _spec_fits(sets)
    if fits is None:
        return question
    gang = _question(_rows(sets, fits, True, 0), sets, True, 0, None, None, None, None, policy)
    if gang is None:
        return question
    return dataclasses.replace(question, placeholders=gang, placeholder_hard=hard,
                               placeholder_timeout=timeout)


def _scheduler_queues(workload: Workload,
                      policy: Policy) -> tuple[tuple[QueueRef, ...], tuple[Requirement, ...]]:
    """The Kueue LocalQueue (whatever schedules the pods: Kueue admits the workload, when it
    reads the label: :meth:`Workload.kueue_reads_queue`) and the KAI queue (only when KAI
    schedules some of its pods, or it is a gang without pods of a kind KAI schedules: a KAI
    PodGroup) the workload names; and the requirements on its namespace's labels Kueue's
    reading hangs on, when its name alone does not tell (:attr:`FitQuestion.kueue_namespaces`)."""
    found: list[QueueRef] = []
    hangs_on: tuple[Requirement, ...] = ()
    podless_kai = not workload.spec.pod_sets and workload.spec.default_scheduler == KAI_SCHEDULER
    for q in workload.queues:
        if not q.explicit or any(f.system == q.system for f in found):
            continue
        if q.system == "kueue":
            reads = workload.kueue_reads_queue(policy.data["queues"])
            if reads is None:
                hangs_on = requirements(policy.data["queues"]["kueueManagedJobsNamespaceSelector"])
            if reads is not False:
                found.append(q)
        elif q.system == "kai" and (podless_kai or any(p.scheduler == KAI_SCHEDULER
                                                       for p in workload.pod_sets)):
            found.append(q)
    return tuple(found), hangs_on


def _question(rows: list[_DemandRow], sets: list[PodSet], gang: bool, gang_min: int, queue: QueueRef | None,
              queue_fields: tuple[Any, ...] | None, namespace: str | None,
              group_fields: tuple[Any, ...] | None, policy: Policy) -> FitQuestion | None:
    """:func:`fit_question` from the rows: the question kept for equal inputs, else a new one."""
    if not any(row[5] for row in rows):
        return None
    flexible = gang_min if gang and all(row[4] == 0 for row in rows) else 0
    # Everything the question is built from: the rows, the gang, the queue, the groups, what
    # single containers ask of one device (the rows hold only the pods' sums), and the policy
    # (its token: the policy-derived fields below are functions of it).
    shares = share_asks(sets, policy)
    inputs = (_policy_token(policy), tuple(rows), flexible, queue_fields, namespace, group_fields, shares)
    question: FitQuestion | None = _QUESTIONS.get(inputs)
    if question is None:
        question = _QUESTIONS.put(inputs, _new_question(rows, sets, flexible, queue, namespace, group_fields,
                                                        policy, shares))
    return question


def _own_placement(signature: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The placement (:func:`_placement_of`) of a pod spec whose signature is
    ``signature``, sharing nothing with ``spec``: kept questions outlive the documents
    they were asked from. A marshal signature loads back to equal values of equal types
    (see :func:`_parts_signature`); a JSON one is a copy. The spec's parts are read only
    on a miss: job shapes of one template share the placement."""
    placement: dict[str, Any] | None = _PLACEMENTS.get(signature)
    if placement is None:
        own: Any
        if signature.startswith("m"):
            own = marshal.loads(signature[1:].encode("latin-1"))
        else:
            own = list(_placement_parts(spec))
            try:
                own = copy.deepcopy(own)
            except (RecursionError, TypeError, copy.Error):
                pass    # not copyable (hostile nesting, odd YAML values): kept as written
        placement = _PLACEMENTS.put(signature, _placement_of(*own))
    return placement


def _new_question(rows: list[_DemandRow], sets: list[PodSet], flexible: int,
                  queue: QueueRef | None, namespace: str | None, group_fields: tuple[Any, ...] | None,
                  policy: Policy, shares: tuple[ShareAsk, ...]) -> FitQuestion:
    """The :class:`FitQuestion` of :func:`fit_question`'s inputs."""
    # Share resources are no node's capacity: out of the units (equal units stay one object).
    units = {id(row[3]): without_shares(row[3], policy) for row in rows}
    demands = [Demand(*row[:3], units[id(row[3])], *row[4:], _own_placement(row[6], pod_set.spec))
               for row, pod_set in zip(rows, sets, strict=True)]
    groups = None if group_fields is None else GroupQuestion(*group_fields)
    # Once per distinct placement and request: pod sets of one template share them.
    placements = {d.signature: d.placement for d in demands}
    if len(placements) == 1:
        label_keys = _signature_label_keys(*next(iter(placements.items())))
    else:
        label_keys = tuple(sorted({k for signature, placement in placements.items()
                                   for k in _signature_label_keys(signature, placement)}))
    gpu_names = policy.gpu_resources
    requests = {id(d.units): d.units for d in demands}.values()
    mode = extended_toleration_mode(policy)
    if mode == "auto" and not any(d.placement.get(_EXTENDED) for d in demands):
        mode = "off"  # nothing for the plugin to add: the answer does not depend on it
    return FitQuestion(
        demands=tuple(demands), flexible_min=flexible, queue=queue, namespace=namespace,
        groups=groups,
        gpu_resources=frozenset(r for units in requests for r, v in units if v > 0 and r in gpu_names),
        supernode_labels=tuple(policy.gpu.get("supernodeLabels", [])),
        autoscaling=bool(policy.feasibility.get("autoscaling")),
        label_keys=label_keys, extended_toleration=mode, shares=shares)


def _declared_question(workload: Workload, policy: Policy) -> FitQuestion | None:
    """The question of a gang that has no pods of its own (a Volcano or KAI PodGroup): its queue
    must admit it and can ever hold the minimum resources it declares (Volcano's). An amount
    that does not parse is left out (a smaller need never makes a false "never")."""
    queue = _volcano_queue(workload)
    others, namespaces = _scheduler_queues(workload, policy)
    if queue is None and not others:
        return None
    declared = resolve(workload.doc, workload.spec.min_resources) if workload.spec.min_resources else None
    need: dict[str, int] = {}
    for resource, raw in (declared.items() if isinstance(declared, dict) else ()):
        try:
            units = scheduler_units(str(resource), parse_quantity(raw))
        except QuantityError:
            continue
        if units > 0:
            need[str(resource)] = units
    return FitQuestion(demands=(), flexible_min=0, queue=queue, namespace=workload.namespace, groups=None,
                       gpu_resources=frozenset(), supernode_labels=(),
                       autoscaling=bool(policy.feasibility.get("autoscaling")), label_keys=(),
                       declared=tuple(sorted(need.items())), scheduler_queues=others,
                       kueue_namespaces=namespaces)


def _volcano_queue(workload: Workload) -> QueueRef | None:
    """The Volcano queue the gang is admitted through: an explicit one first."""
    found = None
    for q in workload.queues:
        if q.system == "volcano":
            if q.explicit:
                return q
            found = found or q
    return found


def _policy_token(policy: Policy) -> int:
    """A number of this loaded policy, never reused (``id()`` would be, after a reload)."""
    token = policy.memo.get("feasibility-memo-token")
    if token is None:
        token = policy.memo["feasibility-memo-token"] = next(_POLICY_TOKENS)
    return token  # type: ignore[no-any-return]
