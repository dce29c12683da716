"""Gang feasibility: can the workload's gang ever run on the cluster, and can it run now?

One :func:`feasibility` call per evaluation (cached in ``ctx.cache``) answers for every
member cluster of ``ctx.clusters`` and gives rules GG306 and GG402-GG406 their problems.

Verdicts:

- ``fits``: a witness placement was found in the free resources now (and the queue has room);
- ``waits``: it fits the empty cluster and the full queue, not what is free now;
- ``never``: a *necessary* condition fails; the message carries the numbers;
- ``unknown``: nothing proven either way (stale or missing topology, budget exhausted).

Soundness is the point: a ``never`` blocks someone's job, so every ``never`` comes from a
condition that any placement must satisfy (a pod set fits no node; the eligible nodes
cannot hold the pod set's pods even empty; the gang's total exceeds what the nodes it
could use offer; a queue or quota limit; too few supernode slots for the GPU groups).
Witnesses come from a greedy first-fit packer, so ``fits`` is always backed by a real
placement. Everything is array operations over nodes; eligibility masks are cached on
the topology per (tolerations, selector, affinity) signature.

A job of a shape never asked about (another CPU request per pod) reuses what does not
depend on its requests: per eligibility, the allocatable and the free resources on the
eligible rows only (:func:`_block`, with per-resource bounds that often settle a
capacity without dividing at all), and GPU group placements, which depend on nothing
but the capacities (:func:`_placement_key`). Each is kept against the versions of what
it was computed from, so a warm answer is the answer a cold check gives. A capacity that
is one number on every eligible node (GPU-bound nodes of one kind: the usual case) is
known as such (:data:`_Capacity`): its sum, its zeros, its offers, its supernode slots
and its group placement then follow from that number without reading the array, and
nothing is kept per job shape for it. The free resources now are shared by every check
and copied only when a placement has to write to them. Also shared by the shapes: the
queue's limits and holdings for the resources asked (:func:`_queue_facts`: only the
amounts are compared per job), the supernode slots of a uniform capacity with the
supernode holding the most and their sum (:func:`_uniform_slots`, kept with the eligible
members they are worked out from), and the witness of a kept group placement, per pod set
names (:class:`_KeptPlacement`; every caller gets a copy).

The check never sees the workload: :func:`fit_question` reduces it (with the policy) to
a frozen, hashable :class:`FitQuestion` holding exactly what the check reads, so the
per-cluster outcome is a function of (question, topology state). Jobs of one template
get the one question object (kept by what it is built from), which the memo finds by
identity; what the question reads of a pod spec (:class:`_SpecFit`: units per pod and
eligibility signature) is worked out once per spec content and kept in the spec's shared
facts, so a repeated template finds its question by a key of a few small values.
:class:`OutcomeMemo` keeps recent outcomes on the topology against its version counters,
so jobs of one shape (sweeps, retries, one template, the API server asking again) are
answered without checking again until something the snapshot holds changes (while
nothing at all has, the topology's stamp says so without reading the counters); a hit is
a shallow copy (the explain rows are frozen).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import marshal
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from policies.changes import touches
from policies.config import Policy
from policies.findings import Problem, Severity, bounded_words
from policies.groups import group_sizes
from policies.kinds import DEFAULT_SCHEDULER
from policies.quantity import format_quantity, scheduler_units
from policies.schedulers import VOLCANO_SCHEDULER, scheduler_known
from policies.tolerations import any_tolerates
from policies.topology import HARD_EFFECTS, ClusterSnapshot, SupernodeLayout, Topology
from policies.workload import PodSet, QueueRef, ShapeError, Workload, build_workload

__all__ = ["Verdict", "Demand", "GroupQuestion", "FitQuestion", "Outcome", "OutcomeMemo", "Feasibility",
           "feasibility", "problems", "check_cluster", "fit_question", "demands_for", "CACHE_KEY",
           "MEMO_ENTRIES", "eligible_mask"]

CACHE_KEY = "feasibility"
_BIG = np.int64(2**62)


def _nonzero(values: np.ndarray) -> np.ndarray:
    """The indexes of the non-zero entries of a 1-d integer array: ``np.flatnonzero``,
    which on int64 costs several times a comparison plus ``nonzero`` on the booleans."""
    return (values != 0).nonzero()[0]  # type: ignore[no-any-return]


class Verdict(StrEnum):
    FITS = "fits"
    WAITS = "waits"
    NEVER = "never"
    UNKNOWN = "unknown"


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
               self.own, self.queue_admitted, self.extended_toleration)
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


@dataclass(frozen=True)
class ExplainRow:
    """One pod set's line of ``lint --explain``; frozen, so outcomes share their rows."""

    pod_set: str
    count: int
    eligible: int               # nodes passing taints/selector/affinity/cordon
    fits_now: int               # pods of this set the free resources hold (alone)
    fits_empty: int             # ... the empty cluster holds


@dataclass
class Outcome:
    """The verdict for one member cluster."""

    cluster: str
    verdict: Verdict
    rule: str = ""              # the rule that reports it (GG306, GG402..GG406); "" for fits
    message: str = ""
    path: str = ""
    witness: dict[str, dict[str, int]] | None = None   # pod set -> node -> pods
    severity: Severity | None = None                   # overrides the rule's default
    rows: list[ExplainRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Feasibility:
    verdict: Verdict
    outcomes: list[Outcome]
    problems: dict[str, list[Problem]] = field(default_factory=dict)

    def problems_for(self, rule_id: str) -> list[Problem]:
        return self.problems.get(rule_id, [])


# -- demands ---------------------------------------------------------------------------


def _is_gang(workload: Workload) -> bool:
    """Pods placed all-or-nothing: a gang kind under a batch scheduler (not the default one)."""
    return _gang_and_volcano(workload)[0]


def _uses_volcano(workload: Workload) -> bool:
    return _gang_and_volcano(workload)[1]


def _gang_and_volcano(workload: Workload) -> tuple[bool, bool]:
    """(:func:`_is_gang`, :func:`_uses_volcano`) of ``workload``, its schedulers read once."""
    if not scheduler_known(workload):
        volcano = any(q.explicit and q.system == "volcano" for q in workload.queues)
        return bool(workload.spec.gang) and volcano, volcano
    batch = volcano = False
    for p in workload.gang_pod_sets:  # a loop, not sets of schedulers: on every review
        if p.scheduler != DEFAULT_SCHEDULER:
            batch = True
            if p.scheduler == VOLCANO_SCHEDULER:
                volcano = True
    return bool(workload.spec.gang) and batch, volcano


def demands_for(workload: Workload) -> list[Demand] | None:
    """The pod sets to place, or None when a request does not parse (GG504 reports it)."""
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


_Parts = tuple[Any, Any, Any, Any]     # :func:`_placement_parts`

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
        found = _SpecFit(tuple(per_pod.items()), _parts_signature(list(_placement_parts(pod_set.spec))))
    facts[_FIT_FACTS] = found
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
# Questions asked recently, by everything they are built from (with the policy's token):
# jobs of one template (a sweep, retries) get the one question object, whose Demand and
# dataclass objects are not built again and which the memo finds by identity.
_QUESTIONS: dict[Any, FitQuestion] = {}
# The same questions (or None: nothing to place) by what the workload holds, its pod
# specs by their :class:`_SpecFit`: a repeated template is answered without building the
# rows above. Bounded as ``_QUESTIONS`` is.
_QUESTIONS_BY_SHAPE: dict[Any, FitQuestion | None] = {}
_UNSET: Any = object()
# Placements by signature, rebuilt from the signature itself (see :func:`_own_placement`).
_PLACEMENTS: dict[str, dict[str, Any]] = {}


def fit_question(workload: Workload, policy: Policy) -> FitQuestion | None:
    """The question ``workload`` asks of a cluster under ``policy``; None when there is
    nothing to place (no pods, or a request that does not parse: GG504 reports it)."""
    gang, volcano = _gang_and_volcano(workload)
    sets = _placed_sets(workload)
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
    question = _QUESTIONS_BY_SHAPE.get(shape, _UNSET)
    if question is _UNSET:
        if len(_QUESTIONS_BY_SHAPE) >= QUESTIONS_KEPT:   # bounded: one-off shapes must not pile up
            _QUESTIONS_BY_SHAPE.clear()
        question = _QUESTIONS_BY_SHAPE[shape] = _question(
            _rows(sets, fits, gang, workload.gang_min), sets, gang, workload.gang_min, queue, queue_fields,
            workload.namespace, group_fields, policy)
    return question


def _question(rows: list[_DemandRow], sets: list[PodSet], gang: bool, gang_min: int, queue: QueueRef | None,
              queue_fields: tuple[Any, ...] | None, namespace: str | None,
              group_fields: tuple[Any, ...] | None, policy: Policy) -> FitQuestion | None:
    """:func:`fit_question` from the rows: the question kept for equal inputs, else a new one."""
    if not any(row[5] for row in rows):
        return None
    flexible = gang_min if gang and all(row[4] == 0 for row in rows) else 0
    # Everything the question is built from: the rows, the gang, the queue, the groups,
    # and the policy (its token: the policy-derived fields below are functions of it).
    inputs = (_policy_token(policy), tuple(rows), flexible, queue_fields, namespace, group_fields)
    question = _QUESTIONS.get(inputs)
    if question is None:
        if len(_QUESTIONS) >= QUESTIONS_KEPT:   # bounded: one-off shapes must not pile up
            _QUESTIONS.clear()
        question = _QUESTIONS[inputs] = _new_question(rows, sets, flexible, queue, namespace, group_fields,
                                                      policy)
    return question


def _own_placement(signature: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The placement (:func:`_placement_of`) of a pod spec whose signature is
    ``signature``, sharing nothing with ``spec``: kept questions outlive the documents
    they were asked from. A marshal signature loads back to equal values of equal types
    (see :func:`_parts_signature`); a JSON one is a copy. The spec's parts are read only
    on a miss: job shapes of one template share the placement."""
    placement = _PLACEMENTS.get(signature)
    if placement is None:
        if len(_PLACEMENTS) >= 4096:    # bounded: one-off placements must not pile up
            _PLACEMENTS.clear()
        own: Any
        if signature.startswith("m"):
            own = marshal.loads(signature[1:].encode("latin-1"))
        else:
            own = list(_placement_parts(spec))
            try:
                own = copy.deepcopy(own)
            except (RecursionError, TypeError, copy.Error):
                pass    # not copyable (hostile nesting, odd YAML values): kept as written
        placement = _PLACEMENTS[signature] = _placement_of(*own)
    return placement


def _new_question(rows: list[_DemandRow], sets: list[PodSet], flexible: int,
                  queue: QueueRef | None, namespace: str | None, group_fields: tuple[Any, ...] | None,
                  policy: Policy) -> FitQuestion:
    """The :class:`FitQuestion` of :func:`fit_question`'s inputs."""
    demands = [Demand(*row, _own_placement(row[6], pod_set.spec))
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
        label_keys=label_keys, extended_toleration=mode)


def _volcano_queue(workload: Workload) -> QueueRef | None:
    """The Volcano queue the gang is admitted through: an explicit one first."""
    found = None
    for q in workload.queues:
        if q.system == "volcano":
            if q.explicit:
                return q
            found = found or q
    return found


# -- formatting --------------------------------------------------------------------------


def fmt(units: Mapping[str, int], skip_pods: bool = True) -> str:
    parts = [f"{r} {format_quantity(r, v)}" for r, v in units.items()
             if v and not (skip_pods and r == "pods")]
    return ", ".join(parts) if parts else "no resources"


def _fmt1(resource: str, value: int) -> str:
    return f"{resource} {format_quantity(resource, int(value))}"


# -- eligibility -------------------------------------------------------------------------


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _required_affinity(spec: Mapping[str, Any]) -> Any:
    affinity = spec.get("affinity")
    if affinity is None:
        return None
    # dict first: the ABC check costs several times more, and parsed documents hold dicts.
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) or \
        isinstance(affinity, Mapping) else None
    return node_affinity.get(_REQUIRED) if isinstance(node_affinity, dict) or \
        isinstance(node_affinity, Mapping) else None


def _placement_parts(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """(tolerations, nodeSelector, required node affinity, nodeName) of a pod spec, as
    written: everything eligibility reads, in :func:`_signature`'s order; then, only for a
    pod that requests extended resources, their names (:func:`extended_resources`), which
    the ExtendedResourceToleration plugin turns into tolerations where it runs."""
    parts = (spec.get("tolerations"), spec.get("nodeSelector"), _required_affinity(spec),
             spec.get("nodeName"))
    extended = spec.get(_EXTENDED)  # a placement (a pod spec of its own) keeps them
    extended = tuple(extended) if isinstance(extended, (list, tuple)) else extended_resources(spec)
    return (*parts, extended) if extended else parts


def _placement_of(tolerations: Any, selector: Any, required: Any, node_name: Any,
                  extended: Any = None) -> dict[str, Any]:
    """The parts of a pod spec that decide which nodes it may use (what
    :func:`eligible_mask` reads, from :func:`_placement_parts`), as a pod spec of its own."""
    placement = {"tolerations": tolerations, "nodeSelector": selector, "nodeName": node_name}
    if required is not None:
        placement["affinity"] = {"nodeAffinity": {_REQUIRED: required}}
    if extended:
        placement[_EXTENDED] = tuple(extended)
    return placement


# -- the ExtendedResourceToleration admission plugin ---------------------------------------
#
# Upstream (plugin/pkg/admission/extendedresourcetoleration): on CREATE and UPDATE of a Pod,
# every resource name in the requests of its containers and init containers that is an
# extended resource (it has a domain, the domain is not *kubernetes.io, and it does not
# start with `requests.`) gets the toleration {key: <name>, operator: Exists, effect:
# NoSchedule}. Requests are defaulted from limits before admission, so limits count too;
# the amount does not matter (0 counts); pod overhead does not. GKE runs the plugin.

_EXTENDED = "gpugate.io/extendedResources"   # placement key: not a pod spec field
# Node labels every GKE node carries: a snapshot with them is a GKE cluster.
GKE_NODE_LABELS = ("cloud.google.com/gke-nodepool", "cloud.google.com/gke-os-distribution",
                   "cloud.google.com/gke-boot-disk")


def is_extended_resource(name: str) -> bool:
    """Kubernetes' ``IsExtendedResourceName``: a domain-prefixed name outside
    ``kubernetes.io`` that is not a quota name (``requests.*``)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def extended_resources(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The extended resources a pod spec's containers and init containers request (or
    limit: requests default from limits), sorted, each once: what the plugin tolerates."""
    names: set[str] = set()
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for container in containers:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("requests", "limits"):
                values = resources.get(part)
                if isinstance(values, Mapping):
                    for name in values:
                        if isinstance(name, str) and is_extended_resource(name):
                            names.add(name)
    return tuple(sorted(names))


def implied_tolerations(names: Sequence[str]) -> list[dict[str, str]]:
    """The tolerations the plugin adds for the extended resources ``names``."""
    return [{"key": name, "operator": "Exists", "effect": "NoSchedule"} for name in names]


def extended_toleration_mode(policy: Policy) -> str:
    """``platform.extendedResourceToleration`` as "on", "off" or "auto"."""
    value = (policy.data.get("platform") or {}).get("extendedResourceToleration", "auto")
    return "on" if value is True else "off" if value is False else "auto"


def runs_extended_toleration(mode: str, topo: Topology) -> bool:
    """Whether pods are judged with the plugin's tolerations on ``topo``: ``on``, or
    ``auto`` and some node carries a GKE label (cached until those labels or the nodes change)."""
    if mode != "auto":
        return mode == "on"
    key = ("gke",)
    versions = topo.versions(GKE_NODE_LABELS)
    cached = topo.cached(key, versions)
    if cached is None:
        n = topo.slots
        cached = (any(bool((topo.label_exists(k)[:n] & topo.live[:n]).any()) for k in GKE_NODE_LABELS),)
        topo.remember(key, versions, cached)
    return bool(cached[0])


def _with_plugin(demand: Demand) -> Demand:
    """``demand`` as the plugin leaves its pods: the implied tolerations added, under a
    signature of its own (every cache keyed by signature tells the two apart)."""
    extended = demand.placement.get(_EXTENDED)
    if not extended:
        return demand
    placement = dict(demand.placement)
    tolerations = placement.get("tolerations")
    placement["tolerations"] = [*(tolerations if isinstance(tolerations, list) else []),
                                *implied_tolerations(extended)]
    return dataclasses.replace(demand, signature=demand.signature + "\x00+ExtendedResourceToleration",
                               placement=placement)


def _signature(spec: Mapping[str, Any]) -> str:
    """The eligibility inputs of a pod spec (tolerations, nodeSelector, required node
    affinity, nodeName) as text: equal text means equal inputs, so equal eligibility."""
    return _parts_signature(list(_placement_parts(spec)))


def _parts_signature(parts: list[Any]) -> str:
    """:func:`_signature` of the eligibility inputs ``parts``.

    Usually ``marshal`` format 2, several times cheaper than sorted JSON, and sound: format
    2 writes no back-references, so its bytes are a function of the value alone; every
    type has a code of its own (``True``, ``1``, ``1.0`` and ``"1"`` all differ, as keys
    too) and strings are written losslessly (UTF-8, lone surrogates kept), so equal bytes
    load back to equal values of equal types. Equal mappings with their keys in another
    order give other bytes: a cache miss, never a wrong hit. Anything but plain built-in
    values (subclasses included), and nesting deeper than marshal allows, raise ValueError
    and get the sorted JSON text instead, which starts with ``[``: never equal to an ``m``
    signature.
    """
    try:
        return "m" + marshal.dumps(parts, 2).decode("latin-1")
    except ValueError:
        pass
    try:
        return json.dumps(parts, sort_keys=True, default=str)
    except TypeError:  # YAML allows non-string keys ({1: a}), which do not sort among strings
        return json.dumps(_tagged_keys(parts), sort_keys=True, default=str)


def _tagged_keys(value: Any) -> Any:
    """``value`` with every non-string mapping key spelled with its type, so that it sorts
    among strings and stays apart from the string of the same text (``1`` vs ``"1"``)."""
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else f"{type(k).__name__}:{k!r}": _tagged_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged_keys(v) for v in value]
    return value


def _expression(topo: Topology, expr: Any, field_match: bool) -> np.ndarray:
    """One node selector requirement; malformed ones do not narrow anything (the API
    server rejects them, and a false ``never`` is worse than a missed one)."""
    ones = np.ones(topo.slots, dtype=bool)
    if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
        return ones
    key, operator = expr["key"], expr.get("operator")
    raw_values = expr.get("values")
    values = [str(v) for v in raw_values] if isinstance(raw_values, list) else []
    if operator in ("In", "NotIn") and not values:
        return ones  # invalid (the API server refuses the pod): not ours to judge
    if field_match:
        if key != "metadata.name":
            return ones
        if operator == "In":
            return topo.name_in(values)
        if operator == "NotIn":
            return ~topo.name_in(values)
        return ones
    if operator == "In":
        return topo.label_equals(key, values)
    if operator == "NotIn":
        return ~topo.label_equals(key, values)
    if operator == "Exists":
        return topo.label_exists(key)
    if operator == "DoesNotExist":
        return ~topo.label_exists(key)
    if operator in ("Gt", "Lt") and len(values) == 1:
        try:
            bound = int(values[0])
        except ValueError:
            return ones
        numbers = topo.label_numbers(key)
        with np.errstate(invalid="ignore"):
            return numbers > bound if operator == "Gt" else numbers < bound  # NaN: False
    return ones


def _affinity_mask(topo: Topology, required: Any) -> np.ndarray:
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return np.ones(topo.slots, dtype=bool)
    mask = np.zeros(topo.slots, dtype=bool)
    for term in terms:
        if not isinstance(term, Mapping):
            continue
        exprs = term.get("matchExpressions")
        fields = term.get("matchFields")
        exprs = exprs if isinstance(exprs, list) else []
        fields = fields if isinstance(fields, list) else []
        if not exprs and not fields:
            continue  # an empty term matches no node
        part = np.ones(topo.slots, dtype=bool)
        for e in exprs:
            part &= _expression(topo, e, False)
        for f in fields:
            part &= _expression(topo, f, True)
        mask |= part
    return mask


@dataclass
class _Eligibility:
    mask: np.ndarray            # live, schedulable, tolerated, selected
    cordoned: int
    tainted: int                # schedulable nodes excluded by an untolerated taint
    unselected: int             # ... by nodeSelector / affinity / nodeName
    blocking_taints: list[str]
    count: int = 0              # eligible nodes (mask.sum(), counted once)


def _label_keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The node label keys a pod spec's selector and required affinity look at."""
    keys: set[str] = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        keys.update(str(k) for k in selector)
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_affinity, Mapping) else None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for e in exprs if isinstance(exprs, list) else []:
            if isinstance(e, Mapping) and isinstance(e.get("key"), str):
                keys.add(e["key"])
    return tuple(sorted(keys))


_KEYS_BY_SIGNATURE: dict[str, tuple[str, ...]] = {}


def _signature_label_keys(signature: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """:func:`_label_keys` of ``spec``, whose :func:`_signature` is ``signature`` (it holds
    everything the keys are read from), remembered: every check asks it again."""
    keys = _KEYS_BY_SIGNATURE.get(signature)
    if keys is None:
        if len(_KEYS_BY_SIGNATURE) >= 4096:    # bounded: one-off placements must not pile up
            _KEYS_BY_SIGNATURE.clear()
        keys = _KEYS_BY_SIGNATURE[signature] = _label_keys(spec)
    return keys


def eligible_mask(topo: Topology, spec: Mapping[str, Any], signature: str | None = None) -> _Eligibility:
    """Which nodes a pod with this spec may be scheduled on, resources aside. Cached on
    the topology until the node set, taints, cordons or a label key it reads change."""
    signature = signature if signature is not None else _signature(spec)
    return _eligibility(topo, spec, signature, topo.versions(_signature_label_keys(signature, spec)))


# The taint effects that keep a pod bound by nodeName off a node.
_BOUND_EFFECTS = frozenset({"NoExecute"})


def _eligibility(topo: Topology, spec: Mapping[str, Any], signature: str,
                 versions: tuple[int, ...]) -> _Eligibility:
    """:func:`eligible_mask`, given the topology versions it depends on."""
    key = ("eligible", signature)
    cached = topo.cached(key, versions)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    n = topo.slots
    live = topo.live[:n]
    node_name = spec.get("nodeName")
    node_name = node_name if isinstance(node_name, str) else ""
    bound = bool(node_name)
    # A pod with nodeName bypasses the scheduler: the kubelet admits it whatever the
    # cordon and NoSchedule taints say (a NoExecute taint still evicts it).
    schedulable = live if bound else live & ~topo.unschedulable[:n]
    effects = _BOUND_EFFECTS if bound else HARD_EFFECTS
    tolerations = spec.get("tolerations")
    untolerated = [col for taint, col in topo.taint_index.items()
                   if taint.effect in effects
                   and not any_tolerates(tolerations, taint.key, taint.value, taint.effect)]
    if untolerated:
        taint_ok = ~topo.taint_matrix[:n][:, untolerated].any(axis=1)
    else:
        taint_ok = np.ones(n, dtype=bool)
    selected = np.ones(n, dtype=bool)
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for k, v in selector.items():
            selected &= topo.label_equals(str(k), [str(v)])
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if isinstance(node_affinity, Mapping):
        selected &= _affinity_mask(topo, node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    if bound:
        selected &= topo.name_in([node_name])
    mask = schedulable & taint_ok & selected
    blocking: list[str] = []
    if untolerated:
        inv = {col: t for t, col in topo.taint_index.items()}
        hit = np.asarray(topo.taint_matrix[:n][schedulable & selected][:, untolerated].any(axis=0))
        blocking = [f"{inv[c].key}={inv[c].value}:{inv[c].effect}" if inv[c].value
                    else f"{inv[c].key}:{inv[c].effect}"
                    for c, h in zip(untolerated, list(hit), strict=True) if h]
    result = _Eligibility(mask=mask, cordoned=0 if bound else int((live & topo.unschedulable[:n]).sum()),
                          tainted=int((schedulable & ~taint_ok).sum()),
                          unselected=int((schedulable & taint_ok & ~selected).sum()),
                          blocking_taints=blocking, count=int(mask.sum()))
    topo.remember(key, versions, result)
    return result


# -- packing -----------------------------------------------------------------------------


@dataclass
class _Set:
    demand: Demand
    cols: np.ndarray            # resource columns the pod requests
    amounts: np.ndarray         # units per pod in those columns
    missing: list[str]          # requested resources no node offers at all
    elig: _Eligibility
    key: tuple[Any, ...] = ()   # (signature, request): what the capacity depends on
    versions: tuple[int, ...] = ()  # topology versions the eligibility depends on
    request: dict[str, int] = field(default_factory=dict)  # the demand's units, as a mapping
    # ``cols`` and ``amounts`` as lists: the per-shape work reads a handful of numbers,
    # cheaper from lists than through numpy calls on tiny arrays.
    col_list: list[int] = field(default_factory=list)
    amount_list: list[int] = field(default_factory=list)

    def capacity(self, free: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Pods of this set each node (row of ``free``) can take on its own (0 where
        ineligible). ``mask``: the eligibility of ``free``'s rows when they are not all
        the topology's slots."""
        mask = self.elig.mask if mask is None else mask
        if self.missing:
            return np.zeros(free.shape[0], dtype=np.int64)
        per = free[:, self.cols] // self.amounts
        cap = per.min(axis=1) if self.cols.size else np.full(free.shape[0], _BIG)
        return np.where(mask, np.maximum(cap, 0), 0)


class _Caps:
    """Each distinct set's capacity on one free matrix, kept current while pods are
    placed on it. Sets with the same key (eligibility and request) share one array, and
    a placement recomputes only the rows it touched, not every node.

    ``rows``: the topology slots of ``free``'s rows when ``free`` is a part of the
    cluster (one supernode). ``known``: capacities already computed on ``free`` as it
    is; they are copied before the first write, so the caller's arrays stay valid.
    ``free_owned``: False when ``free`` is the caller's (the free resources now, shared
    by every review): it is copied before the first write, so a placement found before
    (:func:`_placement_key`) never pays for copying the whole matrix."""

    def __init__(self, sets: Sequence[_Set], free: np.ndarray, known: Mapping[Any, np.ndarray] | None = None,
                 rows: np.ndarray | None = None, free_owned: bool = True) -> None:
        self.free = free
        self.free_owned = free_owned
        self.rows = rows
        self.by_key: dict[Any, _Set] = {}
        for s in sets:
            self.by_key.setdefault(s.key, s)
        self.caps: dict[Any, np.ndarray] = dict(known) if known else {}
        self.owned: set[Any] = set()
        self._masks: dict[Any, np.ndarray] = {}

    def _mask(self, key: Any) -> np.ndarray | None:
        if self.rows is None:
            return None
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = self.by_key[key].elig.mask[self.rows]
        return mask

    def get(self, s: _Set) -> np.ndarray:
        """The set's capacity per row of ``free`` as it is now (do not write to it)."""
        cap = self.caps.get(s.key)
        if cap is None:
            cap = self.caps[s.key] = s.capacity(self.free, self._mask(s.key))
            self.owned.add(s.key)
        return cap

    def writable_free(self) -> np.ndarray:
        """``free``, copied first if it is still the caller's."""
        if not self.free_owned:
            self.free = self.free.copy()
            self.free_owned = True
        return self.free

    def adopt(self, trial: _Caps) -> None:
        """Take over a trial's free resources and capacities (the trial is dropped)."""
        self.free, self.free_owned = trial.free, trial.free_owned
        self.caps, self.owned = trial.caps, trial.owned

    def place(self, s: _Set, rows: np.ndarray, take: np.ndarray) -> None:
        """``take[j]`` pods of ``s`` onto row ``rows[j]`` (distinct rows)."""
        if not s.cols.size:
            self.refresh(rows)
            return
        self.writable_free()[rows[:, None], s.cols] -= take[:, None] * s.amounts[None, :]
        own = self.caps.get(s.key)
        if own is None:
            self.refresh(rows)
            return
        # The set's own capacity drops by exactly what it took: each of its columns lost
        # ``take`` times the amount its quotient is taken by (and take <= capacity).
        if s.key not in self.owned:
            own = self.caps[s.key] = own.copy()
            self.owned.add(s.key)
        own[rows] -= take
        self.refresh(rows, skip=s.key)

    def refresh(self, rows: np.ndarray, skip: Any = None) -> None:
        """Recompute every known capacity (but ``skip``'s) on ``rows`` after ``free``
        changed there."""
        if not rows.size or not any(key != skip for key in self.caps):
            return
        local = self.free[rows]
        for key, cap in list(self.caps.items()):
            if key == skip:
                continue
            if key not in self.owned:
                cap = self.caps[key] = cap.copy()
                self.owned.add(key)
            mask = self.by_key[key].elig.mask if self.rows is None else self._mask(key)
            assert mask is not None
            cap[rows] = self.by_key[key].capacity(local, mask[rows])


def _sets(topo: Topology, demands: Sequence[Demand], plugin: bool = False) -> list[_Set]:
    if plugin:  # the ExtendedResourceToleration plugin runs: its tolerations count
        demands = [_with_plugin(d) for d in demands]
    out = []
    # Pod sets of one template (master and workers) share their eligibility, and their
    # request (one units object, see :func:`_shared`): both are worked out once.
    by_signature: dict[str, tuple[_Eligibility, tuple[int, ...]]] = {}
    by_units: dict[int, tuple[np.ndarray, np.ndarray, list[str], tuple[Any, ...], list[int], list[int]]] = {}
    for d in demands:
        request = d.request
        columns = by_units.get(id(d.units))
        if columns is None:
            present = [(topo.res_index[r], v) for r, v in request.items() if r in topo.res_index and v > 0]
            missing = [r for r, v in request.items() if r not in topo.res_index and v > 0]
            col_list = [c for c, _ in present]
            # A request beyond int64 (`cpu: 1e30` parses exactly) fits no node either way:
            # saturate it, as the scheduler does, instead of overflowing the array.
            amount_list = [min(v, int(_BIG)) for _, v in present]
            columns = by_units[id(d.units)] = (np.array(col_list, dtype=np.intp),
                                               np.array(amount_list, dtype=np.int64), missing,
                                               tuple(sorted(request.items())), col_list, amount_list)
        cols, amounts, missing, sorted_request, col_list, amount_list = columns
        signature = d.signature
        known = by_signature.get(signature)
        if known is None:
            versions = topo.versions(_signature_label_keys(signature, d.placement))
            known = by_signature[signature] = (_eligibility(topo, d.placement, signature, versions), versions)
        # Arrays shared by sets of one request: nothing writes to them.
        out.append(_Set(d, cols, amounts, list(missing), known[0], (signature, sorted_request), known[1],
                        request, col_list, amount_list))
    return out


class _Block(NamedTuple):   # a tuple, so that the cache counts the bytes of its arrays
    """A resource matrix (the allocatable, or the free resources now) on the rows of one
    eligibility only, clipped at 0, one contiguous row per resource column. It depends on
    the eligibility and the matrix, not on what a pod set requests, so every job shape
    of one template reuses it; a capacity is then a few divisions over eligible rows."""

    rows: np.ndarray            # the eligible slots, ascending
    values: np.ndarray          # resources x rows
    low: np.ndarray             # per resource column: the smallest value, the largest,
    high: np.ndarray            # and the sum over the rows
    total: np.ndarray


_ASKED_ONCE = "asked once"     # a block's cache entry before it is worth building


def _block(topo: Topology, s: _Set, matrix: np.ndarray, which: str, versions: tuple[Any, ...],
           build: bool = True) -> _Block | None:
    """``matrix`` (``which``: "empty" or "now", computed at ``versions``) on the rows
    ``s`` is eligible for; cached on the topology per eligibility signature. Building
    one costs about two capacities computed on the whole matrix, so it is built the
    second time it is asked for at the same versions (a second job shape of the
    placement): None the first time, or when not ``build``ing and there is none yet."""
    key = ("block", which, s.demand.signature)
    versions = (s.versions, versions)
    cached = topo.cached(key, versions)
    if isinstance(cached, _Block) or not build:
        return cached if isinstance(cached, _Block) else None
    if cached is None:
        topo.remember(key, versions, _ASKED_ONCE)
        return None
    mask = s.elig.mask
    rows = np.flatnonzero(mask)
    values = np.compress(mask, matrix, axis=0)
    # Clipping at 0 changes no capacity: a negative free value gives 0 pods either way.
    np.maximum(values, 0, out=values)
    values = np.ascontiguousarray(values.T)
    if rows.size:
        low, high = values.min(axis=1), values.max(axis=1)
    else:
        low = high = np.zeros(values.shape[0], dtype=np.int64)
    block = _Block(rows, values, low, high, values.sum(axis=1))
    for array in block:
        array.setflags(write=False)
    topo.remember(key, versions, block)
    return block


def _block_capacity(topo: Topology, s: _Set, block: _Block, which: str,
                    versions: tuple[Any, ...]) -> np.ndarray:
    """:func:`_block_capacity_of`'s capacity."""
    return _block_capacity_of(topo, s, block, which, versions)[0]


# A capacity, and its value when it is that one number on every eligible node and 0
# elsewhere (:func:`_uniform_capacity`), else None: what it sums to, where it is 0 and
# which group placement it gives are then known without reading the array.
_Capacity = tuple[np.ndarray, int | None]


def _block_capacity_of(topo: Topology, s: _Set, block: _Block, which: str,
                       versions: tuple[Any, ...]) -> _Capacity:
    """What :meth:`_Set.capacity` gives on the block's matrix (see :func:`_block` for
    ``which`` and ``versions``), computed on the eligible rows only. A column whose
    smallest quotient is at least another column's largest never decides the minimum, so
    it is skipped; when one column decides and its quotient is the same on every row, the
    capacity is that number on every eligible row, an array shared (read-only) by every
    shape that gets the same number."""
    slots = topo.slots
    if s.missing or not block.rows.size:
        return np.zeros(slots, dtype=np.int64), None
    if not s.cols.size:
        return _uniform_capacity(topo, s, block, which, versions, int(_BIG)), int(_BIG)
    cols, amounts = s.col_list, s.amount_list
    lows, highs = block.low.tolist(), block.high.tolist()
    low = [lows[c] // a for c, a in zip(cols, amounts, strict=True)]
    high = [highs[c] // a for c, a in zip(cols, amounts, strict=True)]
    decides = min(range(len(high)), key=high.__getitem__)
    bound = high[decides]
    needed = [j for j in range(len(low)) if j == decides or low[j] < bound]
    if needed == [decides] and low[decides] == bound:
        return _uniform_capacity(topo, s, block, which, versions, bound), bound
    out = np.zeros(slots, dtype=np.int64)
    cap = block.values[cols[needed[0]]] // amounts[needed[0]]
    if len(needed) > 1:
        part = np.empty_like(cap)
        for j in needed[1:]:
            np.floor_divide(block.values[cols[j]], amounts[j], out=part)
            np.minimum(cap, part, out=cap)
    out[block.rows] = cap
    return out, None


def _uniform_capacity(topo: Topology, s: _Set, block: _Block, which: str, versions: tuple[Any, ...],
                      value: int) -> np.ndarray:
    """``value`` on the block's rows, 0 elsewhere (read-only): cached like the block."""
    key = ("uniform", which, s.demand.signature, value)
    versions = (s.versions, versions)
    cached = topo.cached(key, versions)
    if cached is None:
        cached = np.zeros(topo.slots, dtype=np.int64)
        cached[block.rows] = value
        cached.setflags(write=False)
        topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _empty_capacity(topo: Topology, s: _Set) -> np.ndarray:
    """Pods of a set each empty node takes: cached until labels or allocatable change."""
    return _empty_capacity_of(topo, s)[0]


def _empty_capacity_of(topo: Topology, s: _Set) -> _Capacity:
    """:func:`_empty_capacity`, with its uniform value. A uniform one is not kept per job
    shape: it is one cached lookup away (the block's), and kept per shape it would crowd
    the cache with entries of no use to any other shape."""
    key = ("capacity", s.key)
    versions = (s.versions, topo.alloc_version)
    cached = topo.cached(key, versions)
    if cached is None:
        alloc = topo.alloc[: topo.slots]
        block = _block(topo, s, alloc, "empty", (topo.alloc_version,))
        cached = (s.capacity(alloc), None) if block is None else \
            _block_capacity_of(topo, s, block, "empty", (topo.alloc_version,))
        cached[0].setflags(write=False)
        if cached[1] is None:
            topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _now(topo: Topology) -> tuple[np.ndarray, dict[Any, _Capacity]]:
    """The free resources now (read-only) and the capacities computed on them so far:
    kept until a pod or node event changes what is free, so a burst of reviews between
    events does the node-wide work once."""
    versions = _now_versions(topo)
    cached = topo.cached(("now",), versions)
    if cached is None:
        n = topo.slots
        free = topo.alloc[:n] - topo.used[:n]
        free.setflags(write=False)
        cached = (free, {})
        topo.remember(("now",), versions, cached)
    return cached  # type: ignore[no-any-return]


def _now_versions(topo: Topology) -> tuple[int, ...]:
    return (topo.nodeset_version, topo.alloc_version, topo.used_version)


def _now_capacity(topo: Topology, known: dict[Any, _Capacity], s: _Set, free_now: np.ndarray) -> np.ndarray:
    """A set's capacity on the free resources now (read-only), from ``known`` (see
    :func:`_now`) while its eligibility is unchanged."""
    return _now_capacity_of(topo, known, s, free_now)[0]


def _now_capacity_of(topo: Topology, known: dict[Any, _Capacity], s: _Set, free_now: np.ndarray) -> _Capacity:
    """:func:`_now_capacity`, with its uniform value."""
    key = (s.key, s.versions)
    found = known.get(key)
    if found is None:
        if len(known) >= 64:    # bounded: one-off pod sets must not pile up
            known.clear()
        versions = _now_versions(topo)
        block = _block(topo, s, free_now, "now", versions)
        found = (s.capacity(free_now), None) if block is None else \
            _block_capacity_of(topo, s, block, "now", versions)
        known[key] = found
        found[0].setflags(write=False)
    return found


def _capacity_sum(cap: np.ndarray, uniform: int | None, eligible: int) -> int:
    """``int(cap.sum())``; for a uniform capacity on ``eligible`` nodes, without reading it
    (where the product fits int64, as numpy's sum does)."""
    if uniform is not None:
        total = uniform * eligible
        if total < 2**63:
            return total
    return int(cap.sum())


def _full(uniform: int | None) -> bool | None:
    """Whether a capacity is non-zero on every eligible node, when its uniform value
    tells (a uniform capacity has at least one eligible node); None: read it."""
    return None if uniform is None else uniform != 0


def _greedy(caps: _Caps, sets: list[_Set], counts: list[int], order: Iterable[int],
            node_order: str = "index") -> list[np.ndarray] | None:
    """Greedy placement of ``counts[i]`` pods of each set, in ``order``; per-set node
    counts, or None. Nodes are filled in slot order (first fit), roomiest first
    (``most``) or tightest first (``least``, best fit). ``caps.free`` is updated in place."""
    n = caps.free.shape[0]
    placed: list[np.ndarray] = [np.zeros(n, dtype=np.int64) for _ in sets]
    for i in order:
        want = counts[i]
        if want <= 0:
            continue
        s = sets[i]
        cap = caps.get(s)
        if int(cap.sum()) < want:
            return None
        idx = _nonzero(cap)
        if node_order == "most":
            idx = idx[np.argsort(-cap[idx], kind="stable")]
        elif node_order == "least":
            idx = idx[np.argsort(cap[idx], kind="stable")]
        sorted_cap = cap[idx]
        cum = np.cumsum(sorted_cap)
        last = int(np.searchsorted(cum, want))
        take = sorted_cap[: last + 1].copy()
        take[-1] -= int(cum[last]) - want
        rows = idx[: last + 1]
        placed[i][rows] += take
        caps.place(s, rows, take)
    return placed


def _place(caps: _Caps, sets: list[_Set], counts: list[int]) -> list[np.ndarray] | None:
    """A few greedy orders; the first that places everything wins. ``caps`` is updated
    (free resources and capacities) only by the winning order."""
    if not any(c > 0 for c in counts):
        return [np.zeros(caps.free.shape[0], dtype=np.int64) for _ in sets]
    scarcity = []
    for i, s in enumerate(sets):
        total = int(caps.get(s).sum())
        scarcity.append(total / counts[i] if counts[i] else float("inf"))
    by_scarcity = sorted(range(len(sets)), key=lambda i: scarcity[i])
    tries = [(by_scarcity, "index"), (by_scarcity[::-1], "index"), (by_scarcity, "least"),
             (by_scarcity[::-1], "least"), (by_scarcity, "most")]
    for order, node_order in tries:
        trial = _Caps(sets, caps.free.copy(), caps.caps)
        placed = _greedy(trial, sets, counts, order, node_order)
        if placed is not None:
            caps.adopt(trial)
            return placed
    return None


def _place_flexible(caps: _Caps, sets: list[_Set], need: int) -> list[np.ndarray] | None:
    """Any ``need`` pods of the sets (a flexible gang): take from the roomiest sets first."""
    for roomiest_first in (True, False):
        trial = _Caps(sets, caps.free.copy(), caps.caps)
        left = need
        rooms = [int(trial.get(s).sum()) for s in sets]
        order = sorted(range(len(sets)), key=lambda i: -rooms[i] if roomiest_first else rooms[i])
        placed = [np.zeros(caps.free.shape[0], dtype=np.int64) for _ in sets]
        for i in order:
            if left == 0:
                break
            take = min(left, sets[i].demand.replicas, int(trial.get(sets[i]).sum()))
            if take <= 0:
                continue
            counts = [0] * len(sets)
            counts[i] = take
            got = _greedy(trial, sets, counts, [i])
            if got is None:
                continue
            placed[i] += got[i]
            left -= take
        if left == 0:
            caps.adopt(trial)
            return placed
    return None


# A placement per set as (slots, pods on each): a few dozen numbers, not arrays over all nodes.
_Sparse = list[tuple[np.ndarray, np.ndarray]]


def _sparse(placed: list[np.ndarray]) -> _Sparse:
    """Per-set pods per node (arrays over all slots) as (slots, pods) where not 0."""
    return [(hit, array[hit]) for array in placed for hit in (_nonzero(array),)]


class _KeptPlacement(list[tuple[np.ndarray, np.ndarray]]):
    """A placement kept on the topology (see :func:`_placement_key`), shared by every job
    shape it is the answer for, with the witnesses worked out from it by pod set names:
    the entry is kept against the node set's version, so its slots name the same nodes."""

    def __init__(self, placed: _Sparse) -> None:
        super().__init__(placed)
        self.witnesses: dict[tuple[str, ...], dict[str, dict[str, int]]] = {}


def _witness(topo: Topology, sets: list[_Set], placed: _Sparse) -> dict[str, dict[str, int]]:
    """Pod set name -> node name -> pods, the caller's own."""
    if not isinstance(placed, _KeptPlacement):
        return _witness_of(topo, sets, placed)
    names = tuple(s.demand.name for s in sets)
    kept = placed.witnesses.get(names)
    if kept is None:
        if len(placed.witnesses) >= 16:     # bounded: pod set names come from the jobs
            placed.witnesses.clear()
        kept = placed.witnesses[names] = _witness_of(topo, sets, placed)
    return {name: nodes.copy() for name, nodes in kept.items()}


def _witness_of(topo: Topology, sets: list[_Set], placed: _Sparse) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    names = topo.node_names
    for s, (hit, pods) in zip(sets, placed, strict=True):
        slots, counts = hit.tolist(), pods.tolist()
        placed_on = [names[slot] for slot in slots]
        nodes = out.get(s.demand.name)
        if nodes is None and None not in placed_on:
            # A slot holds one node, so the names are distinct: no counts to add up.
            out[s.demand.name] = dict(zip(placed_on, counts, strict=True))  # type: ignore[arg-type]
            continue
        nodes = out.setdefault(s.demand.name, {})
        for name, count in zip(placed_on, counts, strict=True):
            if name is not None:
                nodes[name] = nodes.get(name, 0) + count
    return out


# -- necessary conditions ----------------------------------------------------------------


def _exclusions(e: _Eligibility) -> str:
    """Why nodes are not eligible: ``1 cordoned; 8 with taints it does not tolerate (...)``."""
    reasons = []
    if e.cordoned:
        reasons.append(f"{e.cordoned} cordoned")
    if e.tainted:
        taints = f" ({', '.join(e.blocking_taints[:3])})" if e.blocking_taints else ""
        reasons.append(f"{e.tainted} with taints it does not tolerate{taints}")
    if e.unselected:
        reasons.append(f"{e.unselected} not matching its nodeSelector/affinity")
    return "; ".join(reasons)


def _why_no_node(topo: Topology, s: _Set, alloc: np.ndarray) -> str:
    """Why no node, even empty, takes one pod of ``s``: the failing number first."""
    d = s.demand
    e = s.elig
    who = f"pod set {d.name}"
    if s.missing:
        return f"no node offers {', '.join(s.missing)} ({who} asks for it)"
    eligible = int(e.mask.sum())
    excluded = _exclusions(e)
    if eligible == 0:
        return f"0 of {topo.n_nodes} nodes eligible for {who} ({excluded or 'no nodes'})"
    also = f"; not eligible: {excluded}" if excluded else ""
    rows = alloc[e.mask][:, s.cols] if s.cols.size else np.zeros((eligible, 0), dtype=np.int64)
    short = []
    for j, col in enumerate(s.cols):
        best = int(rows[:, j].max())
        if best < s.amounts[j]:
            name = topo.resources[col]
            short.append(f"{name} {format_quantity(name, int(s.amounts[j]))} asked per pod, the largest "
                         f"eligible node offers {format_quantity(name, best)}")
    if short:
        return f"{'; '.join(short)} ({who}, {eligible} eligible nodes{also}), even when empty"
    # every resource fits somewhere, never all on one node: show the closest node
    ratio = (rows / s.amounts[None, :]).min(axis=1)
    best_row = int(np.argmax(ratio))
    slot = int(np.flatnonzero(e.mask)[best_row])
    offer = ", ".join(_fmt1(topo.resources[c], int(alloc[slot, c])) for c in s.cols
                      if topo.resources[c] != "pods")
    return (f"no eligible node has all of {fmt(d.request)} per pod at once, even when empty ({who}; "
            f"closest: {topo.node_names[slot]} with {offer}{also})")


def _necessary(topo: Topology, sets: list[_Set], counts: list[int], free: np.ndarray,
               flexible_min: int, what: str, caps: list[np.ndarray],
               sums: list[int], full: Sequence[bool | None] | None = None) -> tuple[str, str] | None:
    """(reason, JSON Pointer) why no placement of ``counts`` can exist on ``free`` (each
    set's capacity there: ``caps``, summed: ``sums``; ``full``: see :func:`_offers`), or
    None. Every check here is a necessary condition, so a returned reason is a proof."""
    if flexible_min:
        most = sum(sums)
        if most < flexible_min:
            return (f"the gang needs {flexible_min} pods; the eligible nodes hold at most {most} "
                    f"of them {what}"), ""
        return None
    for s, most, want in zip(sets, sums, counts, strict=True):
        if want <= 0:
            continue
        if most == 0:               # capacities are never negative
            if what == "even when empty":
                return _why_no_node(topo, s, free), s.demand.path
            return (f"0 pods of pod set {s.demand.name} ({fmt(s.request)} each) fit the free "
                    f"resources {what}", s.demand.path)
        if most < want:
            return (f"{want} pods of pod set {s.demand.name} needed, its {s.elig.count} eligible nodes "
                    f"hold at most {most} {what} ({fmt(s.request)} each)", s.demand.path)
    # Totals: a resource can only come from nodes where some pod using it fits.
    total_cols: dict[int, int] = {}
    for s, want in zip(sets, counts, strict=True):
        if want <= 0:
            continue
        for col, amount in zip(s.col_list, s.amount_list, strict=True):
            total_cols[col] = total_cols.get(col, 0) + want * amount
    active = [(s, cap) for s, cap, want in zip(sets, caps, counts, strict=True) if want > 0]
    active_full = None if full is None else [f for f, want in zip(full, counts, strict=True) if want > 0]
    offers = _offers(topo, active, free, empty=what == "even when empty", full=active_full)
    for col, needed in total_cols.items():
        offered, nodes = offers[col]
        if needed > offered:
            resource = topo.resources[col]
            return (f"the gang needs {_fmt1(resource, needed)} in total; the "
                    f"{nodes} nodes its pods fit offer {format_quantity(resource, offered)} "
                    f"{what}"), ""
    return None


def _offers(topo: Topology, active: list[tuple[_Set, np.ndarray]], free: np.ndarray,
            empty: bool, full: Sequence[bool | None] | None = None) -> Mapping[int, tuple[int, int]]:
    """Per resource column the sets request: (what ``free`` offers on the nodes where a
    pod of some set requesting it fits, how many such nodes). ``empty``: ``free`` is the
    allocatable, so the answer keeps until the sets' eligibility or allocatable change;
    else it is the free resources now (:func:`_now`). ``full``: per active set, whether
    its capacity is non-zero on every eligible node, where known without reading it."""
    whole = _whole_block(topo, active, empty, full)
    if whole is not None:
        # Every set's pods fit every node of one eligibility: the offers are the block's
        # sums, whatever the shape, so not worth a cache entry per shape.
        totals, nodes = whole.total.tolist(), int(whole.rows.size)
        return {col: (totals[col], nodes) for s, _ in active for col in s.col_list}
    cache = empty
    key = ("offers", tuple(s.key for s, _ in active))
    versions = (tuple(s.versions for s, _ in active), topo.alloc_version)
    if cache:
        cached = topo.cached(key, versions)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
    users: dict[int, list[int]] = {}          # column -> the active sets requesting it
    for j, (s, _) in enumerate(active):
        for col in s.col_list:
            users.setdefault(col, []).append(j)
    out: dict[int, tuple[int, int]] = {}
    by_users: dict[frozenset[Any], np.ndarray] = {}   # columns mostly share their users
    blocks: dict[frozenset[Any], _Block | None] = {}
    for col, js in users.items():
        ids = frozenset(active[j][0].key for j in js)
        if ids not in blocks:
            blocks[ids] = _whole_block(topo, [active[j] for j in js], empty)
        block = blocks[ids]
        if block is not None:
            out[col] = (int(block.total[col]), int(block.rows.size))
            continue
        rows = by_users.get(ids)
        if rows is None:
            usable = np.zeros(free.shape[0], dtype=bool)
            for j in js:
                usable |= active[j][1] > 0
            rows = by_users[ids] = np.flatnonzero(usable)
        out[col] = (int(np.maximum(free[rows, col], 0).sum()), int(rows.size))
    if cache:
        topo.remember(key, versions, MappingProxyType(out))  # read-only; a few numbers, no arrays
    return out


def _whole_block(topo: Topology, users: list[tuple[_Set, np.ndarray]], empty: bool,
                 full: Sequence[bool | None] | None = None) -> _Block | None:
    """When the ``users`` (sets with their capacities) share one eligibility and a pod of
    each fits every eligible node, the nodes where some pod fits are exactly the eligible
    ones: their block (whose sums are the offers, whatever the shape). Else None.
    ``full``: see :func:`_offers`."""
    if not users:
        return None
    first = users[0][0]
    if any(s.demand.signature != first.demand.signature or s.versions != first.versions for s, _ in users):
        return None
    for j, (s, cap) in enumerate(users):
        known = None if full is None else full[j]
        if not (known if known is not None else int(np.count_nonzero(cap)) == s.elig.count):
            return None
    if empty:
        return _block(topo, first, topo.alloc[: topo.slots], "empty", (topo.alloc_version,), build=False)
    return _block(topo, first, _now(topo)[0], "now", _now_versions(topo), build=False)


# -- GPU groups --------------------------------------------------------------------------


@dataclass
class _Groups:
    unit: int                   # GPUs that must share one supernode (A, else G)
    per_pod: int                # g
    pods_per_unit: int
    units: int                  # units the gang needs
    gpu_sets: list[int]         # indexes into sets
    resource: str
    size: int
    atomic_explicit: bool
    path: str


def _group_plan(question: FitQuestion, sets: list[_Set]) -> _Groups | None:
    """How the GPU pods form units (G, A: ``question.groups``)."""
    spec = question.groups
    if spec is None or not spec.gpu_pod_sets:
        return None
    resources = set(question.gpu_resources)  # those requested with a positive amount
    if len(resources) != 1:
        return None
    resource = resources.pop()
    gpu_sets = [i for i, s in enumerate(sets) if s.request.get(resource, 0) > 0]
    per_pod = {sets[i].request[resource] for i in gpu_sets}
    if len(per_pod) != 1:
        return None  # mixed g: GG202/GG203 judge the sizes, we cannot chunk units
    g = per_pod.pop()
    unit = spec.atomic
    if unit % g:
        return None
    total = sum(sets[i].demand.want for i in gpu_sets) * g
    hard_total = sum(sets[i].demand.hard for i in gpu_sets) * g
    return _Groups(unit=unit, per_pod=g, pods_per_unit=unit // g, units=min(total, hard_total) // unit,
                   gpu_sets=gpu_sets, resource=resource, size=spec.size,
                   atomic_explicit=spec.atomic_explicit, path=spec.atomic_path or spec.size_path)


def _supernode_slots(topo: Topology, sets: list[_Set], plan: _Groups, caps: Sequence[np.ndarray],
                     supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                     free: np.ndarray) -> np.ndarray:
    """Units each supernode can hold at most: an upper bound on the GPU pods its nodes
    can take together. ``caps``: each set's capacity on ``free``, the free resources in
    question; ``labels``: the supernode labels ``supernodes`` was found by."""
    first = sets[plan.gpu_sets[0]]
    if all(sets[i].key == first.key for i in plan.gpu_sets):
        # One kind of pod (sets of one template): a node takes at most its capacity. Where
        # that is one number on every eligible node, a supernode holds that many times its
        # eligible nodes.
        best = caps[plan.gpu_sets[0]]
        uniform = _uniform(best, first.elig.count)
        if uniform is not None:
            return _uniform_slots(topo, first, supernodes, labels, uniform, plan.pods_per_unit)[0]
        return topo.supernode_totals(best, supernodes) // plan.pods_per_unit
    # Pods of different kinds can share a node where neither kind fits twice (a CPU-heavy
    # and a memory-heavy pod of 4 GPUs on an 8-GPU node): the kinds' capacities add up,
    # and no node holds more GPU pods than its free GPUs allow.
    kinds = {sets[i].key: caps[i] for i in plan.gpu_sets}
    pods = np.sum(list(kinds.values()), axis=0)
    column = topo.res_index.get(plan.resource)
    if column is not None:
        pods = np.minimum(pods, np.maximum(free[:, column], 0) // plan.per_pod)
    return topo.supernode_totals(pods, supernodes) // plan.pods_per_unit


def _uniform(cap: np.ndarray, eligible: int) -> int | None:
    """The capacity's value when it is the same on all ``eligible`` nodes where it is
    not 0 by eligibility (a capacity is 0 on every other node), else None."""
    if not eligible:
        return 0
    most = int(cap.max())
    if most and int(np.count_nonzero(cap == most)) == eligible:
        return most
    return None


def _eligible_members(topo: Topology, s: _Set, supernodes: list[tuple[str, np.ndarray]],
                      labels: tuple[str, ...]) -> np.ndarray:
    """How many nodes of each supernode ``s`` is eligible for (read-only); cached until
    the eligibility or the supernodes change."""
    return _members_entry(topo, s, supernodes, labels)[0]


# Units per supernode for a uniform capacity (read-only), the supernode holding the most
# (first of equals, as ``np.argmax``) and their sum: (slots, best, total).
_UniformSlots = tuple[np.ndarray, int, int]


def _members_entry(topo: Topology, s: _Set, supernodes: list[tuple[str, np.ndarray]],
                   labels: tuple[str, ...]) -> tuple[np.ndarray, dict[tuple[int, int], _UniformSlots]]:
    """:func:`_eligible_members`, with the uniform slots worked out from it so far (see
    :func:`_uniform_slots`), which are valid exactly as long as it is."""
    key = ("supernode-eligible", s.demand.signature, labels)
    versions = (s.versions, topo.supernode_versions(labels))
    cached = topo.cached(key, versions)
    if cached is None:
        members = topo.supernode_totals(s.elig.mask.astype(np.int64), supernodes)
        members.setflags(write=False)
        cached = (members, {})
        topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _uniform_slots(topo: Topology, s: _Set, supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                   uniform: int, pods_per_unit: int) -> _UniformSlots:
    """Units per supernode when ``s``'s capacity is ``uniform`` on every eligible node:
    ``uniform`` times the supernode's eligible nodes, over the pods a unit takes. A
    function of two small numbers and the eligible members, so it is kept with those
    (the job shapes of a sweep on GPU-bound nodes share one)."""
    members, derived = _members_entry(topo, s, supernodes, labels)
    found = derived.get((uniform, pods_per_unit))
    if found is None:
        if len(derived) >= 32:      # bounded: a few values per eligibility in practice
            derived.clear()
        slots = uniform * members // pods_per_unit
        slots.setflags(write=False)
        best = int(np.argmax(slots)) if slots.size else -1
        found = derived[(uniform, pods_per_unit)] = (slots, best, int(slots.sum()))
    return found


def _empty_supernode_slots(topo: Topology, sets: list[_Set], plan: _Groups, caps_empty: Sequence[np.ndarray],
                           supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                           alloc: np.ndarray, uniform: int | None = None) -> np.ndarray:
    """:func:`_supernode_slots` on the empty cluster, cached until the GPU sets'
    eligibility, the allocatable or the supernodes change. Read-only. ``uniform``: the
    first GPU set's capacity's uniform value, if it has one: when every GPU set has that
    capacity, the slots are that many pods times each supernode's eligible nodes (what
    :func:`_supernode_slots` computes after finding the value), not worth a cache entry
    per job shape."""
    return _empty_supernode_slots_of(topo, sets, plan, caps_empty, supernodes, labels, alloc, uniform)[0]


def _empty_supernode_slots_of(topo: Topology, sets: list[_Set], plan: _Groups,
                              caps_empty: Sequence[np.ndarray], supernodes: list[tuple[str, np.ndarray]],
                              labels: tuple[str, ...], alloc: np.ndarray, uniform: int | None = None
                              ) -> _UniformSlots | tuple[np.ndarray]:
    """:func:`_empty_supernode_slots`; for a uniform capacity with the supernode holding the
    most and the sum (:data:`_UniformSlots`), else as a one-tuple."""
    gpu_sets = [sets[i] for i in plan.gpu_sets]
    first = gpu_sets[0]
    if uniform and first.elig.count and all(s.key == first.key for s in gpu_sets):
        return _uniform_slots(topo, first, supernodes, labels, uniform, plan.pods_per_unit)
    key = ("supernode-slots", tuple(s.key for s in gpu_sets), plan.pods_per_unit, labels)
    versions = (tuple(s.versions for s in gpu_sets), topo.alloc_version, topo.supernode_versions(labels))
    cached = topo.cached(key, versions)
    if cached is None:
        cached = _supernode_slots(topo, sets, plan, caps_empty, supernodes, labels, alloc)
        cached.setflags(write=False)
        topo.remember(key, versions, cached)
    return (cached,)


def _unit_label(plan: _Groups) -> str:
    if plan.atomic_explicit:
        return f"atomic part of {plan.unit} GPUs (atomic-gpu-group-size, group {plan.size})"
    return f"group of {plan.unit} GPUs (gpu-group-size)"


def _groups_never(topo: Topology, plan: _Groups, alloc: np.ndarray, supernodes: list[tuple[str, np.ndarray]],
                  slots: np.ndarray, summary: tuple[int, int] | None = None) -> str | None:
    """Why the GPU groups can never form; ``slots``: units per supernode when empty;
    ``summary``: the supernode holding the most (``np.argmax``) and the sum, when known."""
    if summary is None:
        best = int(np.argmax(slots)) if slots.size else -1
        total = int(slots.sum())
    else:
        best, total = summary
    if not slots.size or slots[best] == 0:
        # what new pods could ever use: cordoned nodes give them nothing
        column = topo.res_index.get(plan.resource)
        gpus = [0 if column is None else
                int(np.maximum(alloc[rows, column], 0)[~topo.unschedulable[rows]].sum())
                for _, rows in supernodes]
        i = max(range(len(gpus)), key=lambda j: gpus[j])
        return (f"no supernode can ever hold one {_unit_label(plan)} of {plan.pods_per_unit} pods x "
                f"{plan.per_pod} {plan.resource}: the largest of {len(supernodes)} supernodes, "
                f"{supernodes[i][0]}, has {gpus[i]} {plan.resource} in total")
    if total < plan.units:
        return (f"the gang forms {plan.units} units ({_unit_label(plan)}) that must each sit inside one "
                f"supernode; the {len(supernodes)} supernodes can hold at most {total} of them even "
                f"when empty (largest: {supernodes[best][0]}, {slots[best]})")
    return None


def _unit_runs(sets: list[_Set], plan: _Groups) -> tuple[list[tuple[list[int], int]], list[int]]:
    """The gang's units as runs of identical composition ((pods per set, how many units)),
    and the pods outside units (placed anywhere). The GPU pods are taken set after set, so
    there are at most two runs per GPU set, whatever the gang's size."""
    per = plan.pods_per_unit
    runs: list[tuple[list[int], int]] = []
    rest = [0] * len(sets)
    partial = [0] * len(sets)           # the unit being filled, which may span two sets
    partial_pods = 0
    units_left = plan.units
    for i in plan.gpu_sets:
        left = sets[i].demand.want
        if partial_pods and units_left:
            take = min(left, per - partial_pods)
            partial[i] += take
            partial_pods += take
            left -= take
            if partial_pods == per:
                runs.append((partial, 1))
                partial, partial_pods = [0] * len(sets), 0
                units_left -= 1
        if units_left and left >= per:
            whole = min(left // per, units_left)
            comp = [0] * len(sets)
            comp[i] = per
            runs.append((comp, whole))
            left -= whole * per
            units_left -= whole
        if units_left and left and not partial_pods:
            partial[i] += left
            partial_pods += left
            left = 0
        rest[i] += left
    for i in range(len(sets)):
        rest[i] += partial[i]           # a unit never completed: not grouped
        if i not in plan.gpu_sets:
            rest[i] = sets[i].demand.want
    return runs, rest


def _place_groups(topo: Topology, sets: list[_Set], plan: _Groups, caps: _Caps,
                  supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                  tick: Any, uniform: Mapping[Any, int | None] | None = None) -> _Sparse | None:
    """Units of GPU pods, each inside one supernode, then everything else anywhere.
    Supernodes are visited in order; per supernode as many units of a run as fit at
    once (halving on failure), so the cost grows with supernodes, not with the gang's
    size. ``caps`` (free resources and capacities) is updated in place, except when the
    placement is one found before (see :func:`_placement_key`); ``labels``: the
    supernode labels ``supernodes`` was found by; ``uniform``: the uniform values of
    the capacities in ``caps`` (by set key), where known. The placement per set, sparse."""
    n = caps.free.shape[0]
    runs, rest_counts = _unit_runs(sets, plan)
    layout = topo.supernode_layout(supernodes)
    found = _placement_key(topo, sets, runs, rest_counts, layout, caps, labels, uniform or {})
    if found is not None:
        key, versions, cap, exact = found
        known = topo.cached(key, versions)
        if known is not None and (exact or known[0] is cap or np.array_equal(known[0], cap)):
            if not exact and known[0] is not cap:
                # Equal, not the same array: keep this one, so the next hit needs no comparing.
                topo.remember(key, versions, (cap, known[1]))
            return known[1]  # type: ignore[no-any-return]  # read-only arrays
    placed = [np.zeros(n, dtype=np.int64) for _ in sets]
    if found is not None:
        result = _place_group_runs(topo, sets, runs, layout, caps, supernodes, tick, placed)
        sparse = None if result is None else _KeptPlacement(_sparse(result))
        for arrays in sparse or ():
            for array in arrays:
                array.setflags(write=False)
        topo.remember(key, versions, (cap, sparse))
        return sparse
    sn = 0
    for comp, count in runs:
        tick()
        parts = [(i, c) for i, c in enumerate(comp) if c]
        # One set per unit, or one unit of sets that share their capacity: the loop below
        # reduces to first fit over the supernodes' nodes in order, done in array steps.
        shared = len(parts) == 1 or (count == 1 and len({sets[i].key for i, _ in parts}) == 1)
        if layout.disjoint and shared:
            at = _place_run(supernodes, layout, sets, parts, count, sn, caps, placed)
        else:
            # Units each supernode could take now. Free resources only shrink during a
            # run, so a supernode without room now is one the loop would pass over anyway.
            bound = np.full(len(supernodes), count, dtype=np.int64)
            for i, c in parts:
                np.minimum(bound, topo.supernode_totals(caps.get(sets[i]), supernodes) // c, out=bound)
            at = _place_run_per_supernode(sets, comp, count, bound, sn, caps, placed, supernodes, tick)
        if at is None:
            return None
        sn = at
    tick()
    if not any(rest_counts):
        return _sparse(placed)
    rest = _place(caps, sets, rest_counts)
    if rest is None:
        return None
    return _sparse([a + b for a, b in zip(placed, rest, strict=True)])


def _placement_key(topo: Topology, sets: list[_Set], runs: list[tuple[list[int], int]], rest: list[int],
                   layout: SupernodeLayout, caps: _Caps, labels: tuple[str, ...],
                   uniform: Mapping[Any, int | None]) -> tuple[Any, tuple[Any, ...], np.ndarray, bool] | None:
    """(cache key, versions, capacity, exact) of a group placement that depends on nothing
    but one capacity array: every unit of one capacity (sets of one template), disjoint
    supernodes (so each run is :func:`_place_run`'s first fit, which reads capacities
    only, and lowers the set's own capacity by what it takes) and no pods outside units.
    Job shapes that differ in what the nodes hold the same number of pods of (a sweep
    of CPU requests on GPU-bound nodes) then share one placement. None otherwise.

    ``exact``: the key determines the capacity (a uniform one, ``uniform`` by set key,
    is its value on the rows of one eligibility), so an entry found needs no comparing;
    else the key holds a checksum and the entry's capacity must be compared."""
    if not layout.disjoint or any(rest) or not runs:
        return None
    used = [i for comp, _ in runs for i, c in enumerate(comp) if c]
    s = sets[used[0]]
    if any(sets[i].key != s.key for i in used):
        return None
    cap = caps.get(s)
    if cap.flags.writeable:     # kept with the placement: must not change after
        cap = cap.copy()
        cap.setflags(write=False)
    shape = tuple((tuple(comp), count) for comp, count in runs)
    versions = (topo.nodeset_version, topo.supernode_versions(labels))
    # Still the capacity the value was known for: nothing placed, not computed again here.
    value = uniform.get(s.key) if s.key not in caps.owned else None
    if value is not None:
        exact = ("group-placement", shape, labels, cap.shape[0], "uniform", s.demand.signature, s.versions)
        return (*exact, value), versions, cap, True
    # The checksum picks the entry; the capacity kept with it is compared in full. Pods
    # per node are small numbers: below 256 (capacities are never negative) one byte
    # per node holds them exactly, and checksumming an eighth of the bytes is cheaper.
    narrow = cap.astype(np.uint8) if cap.size and int(cap.max()) < 256 else cap
    key = ("group-placement", shape, labels, cap.shape[0], narrow.dtype.itemsize,
           zlib.crc32(np.ascontiguousarray(narrow).data))
    return key, versions, cap, False


def _place_group_runs(topo: Topology, sets: list[_Set], runs: list[tuple[list[int], int]],
                      layout: SupernodeLayout, caps: _Caps, supernodes: list[tuple[str, np.ndarray]],
                      tick: Any, placed: list[np.ndarray]) -> list[np.ndarray] | None:
    """The runs of :func:`_place_groups` when each is one :func:`_place_run`."""
    sn = 0
    for comp, count in runs:
        tick()
        parts = [(i, c) for i, c in enumerate(comp) if c]
        at = _place_run(supernodes, layout, sets, parts, count, sn, caps, placed)
        if at is None:
            return None
        sn = at
    tick()
    return placed


def _place_run(supernodes: list[tuple[str, np.ndarray]], layout: SupernodeLayout, sets: list[_Set],
               parts: list[tuple[int, int]], count: int, sn: int, caps: _Caps,
               placed: list[np.ndarray]) -> int | None:
    """``count`` units of ``parts`` ((set, pods per unit); several sets only when they
    share one capacity and ``count`` is 1), supernode after supernode from ``sn``
    (disjoint supernodes), first fit inside each, the sets' pods one set after another:
    what :func:`_place_run_per_supernode` does, in a few array operations. The
    supernode the run ends in, or None."""
    s = sets[parts[0][0]]
    per_unit = sum(c for _, c in parts)
    cap_all = caps.get(s)
    lo = int(layout.starts[sn])
    # Units per supernode from sn on, over a window that grows until it holds the run:
    # a run usually ends a few supernodes after it starts.
    width = max(2 * count, 32)
    while True:
        stop = min(len(supernodes), sn + width)
        hi = int(layout.ends[stop - 1])
        cap = cap_all[layout.members[lo:hi]]
        room = np.add.reduceat(cap, layout.starts[sn:stop] - lo) // per_unit
        if stop == len(supernodes) or int(room.sum()) >= count:
            break
        width *= 4
    before = np.cumsum(room) - room
    units = np.minimum(np.maximum(count - before, 0), room)
    if int(units.sum()) < count:
        return None
    last = int(_nonzero(units)[-1])
    hi = int(layout.ends[sn + last])
    members = layout.members[lo:hi]
    owner = layout.owner[lo:hi] - sn
    cap = cap[: hi - lo]
    cum = np.cumsum(cap)
    already = cum - cap                           # pods the earlier members take, from lo
    first = layout.starts[sn: sn + last + 1] - lo
    already -= already[first][owner]              # ... within the member's own supernode
    units = units[: last + 1][owner]              # per member: its supernode's units
    take = np.minimum(np.maximum(units * per_unit - already, 0), cap)
    hit = _nonzero(take)
    rows, take = members[hit], take[hit]
    if len(parts) == 1:             # one set takes every pod of the run
        placed[parts[0][0]][rows] += take
        caps.place(s, rows, take)
        return sn + last
    already, units = already[hit], units[hit]
    start = 0
    for i, c in parts:                            # set i takes pods [start, end) of the unit(s)
        end = start + c
        mine = np.minimum(already + take, units * end) - np.maximum(already, units * start)
        placed[i][rows] += np.maximum(mine, 0)
        start = end
    caps.place(s, rows, take)
    return sn + last


def _place_run_per_supernode(sets: list[_Set], comp: list[int], count: int, bound: np.ndarray, sn: int,
                             caps: _Caps, placed: list[np.ndarray], supernodes: list[tuple[str, np.ndarray]],
                             tick: Any) -> int | None:
    """``count`` units of ``comp`` (pods per set), one supernode at a time from ``sn``:
    the general case (several sets per unit, or supernodes sharing nodes). The
    supernode the run ends in, or None."""
    left = count
    candidates = (_nonzero(bound[sn:]) + sn).tolist()
    while left:
        while candidates and candidates[0] < sn:
            candidates.pop(0)
        if not candidates:
            return None
        sn = candidates[0]
        tick()
        rows = supernodes[sn][1]
        fit = min([left] + [int(caps.get(sets[i])[rows].sum()) // c for i, c in enumerate(comp) if c])
        got = None
        while fit > 0:
            local = _Caps(sets, caps.free[rows], {k: v[rows] for k, v in caps.caps.items()}, rows)
            got = _greedy(local, sets, [c * fit for c in comp], range(len(sets)))
            if got is not None:
                caps.writable_free()[rows] = local.free
                caps.refresh(rows)
                for i, g in enumerate(got):
                    placed[i][rows] += g
                left -= fit
                break
            fit //= 2
        if got is None or left:
            sn += 1             # this supernode is full for this run
    return sn


# -- queues and quotas ---------------------------------------------------------------------


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
    """GG306 / GG402 never, or GG404 waits for the queue; None when the queue is fine.
    ``ref``: the Volcano queue the gang is admitted through (None: not under Volcano).
    ``own``: an UPDATE's own pod groups, not counted as held; ``admitted``: the queue
    admitted the object already, its existence and state are not judged again."""
    if not topo.queues or ref is None:
        return None
    facts = _queue_facts(ref, topo, tuple(need), autoscaling, admitted)
    if facts is None:
        return None
    if isinstance(facts, str):
        return Outcome("", Verdict.NEVER, "GG306", facts, ref.path)
    name, path = ref.name, ref.path
    limits, held = facts
    if own:
        held = topo.queue_held(name, own)
    over = [(r, need[r], limits[r]) for r in need if r in limits and need[r] > limits[r][0]]
    if over:
        text = "; ".join(f"{_fmt1(r, n)} asked, the queue can never hold more than "
                         f"{format_quantity(r, lim)} ({why})" for r, n, (lim, why) in over)
        return Outcome("", Verdict.NEVER, "GG402",
                       f"{text}: the gang's minimum resources exceed queue `{name}`", path)
    short = [(r, need[r], limits[r][0], held.get(r, 0)) for r in need
             if r in limits and need[r] > limits[r][0] - held.get(r, 0)]
    if short:
        text = "; ".join(f"{_fmt1(r, n)} asked, {format_quantity(r, h)} of {format_quantity(r, lim)} "
                         f"held by running/inqueue pod groups" for r, n, lim, h in short)
        return Outcome("", Verdict.WAITS, "GG404", f"waits for room in queue `{name}`: {text}", path)
    return None


# What :func:`_queue_checks` reads of the queues for one queue and the resources asked:
# None (nothing to check), a GG306 message, or (limit and why per resource, held now).
_QueueFacts = None | str | tuple[Mapping[str, tuple[int, str]], Mapping[str, int]]


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
        return f"queue `{name}` does not exist (queues: {known})"
    if not admitted:
        if name == "root":
            return "can not submit job to the root queue `root`; name a leaf queue"
        children = topo.queue_children(name)
        if children:
            return (f"can only submit job to a leaf queue, queue `{name}` has child queues "
                    f"{', '.join(children[:5])}")
        if not queue.open:
            return (f"can only submit job to queue with state `Open`, queue `{name}` status is "
                    f"`{queue.state}`")
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
            # cluster total alone is the nodes' business (GG403), not the queue's.
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
            return Outcome("", Verdict.NEVER, "GG402",
                           f"the gang exceeds ElasticQuotaTree node `{'/'.join(node.path)}` "
                           f"(namespace {namespace}): {text}")
    return None


# -- one cluster ----------------------------------------------------------------------------


class _OutOfTime(Exception):
    pass


# -- the memo ---------------------------------------------------------------------------------

MEMO_ENTRIES = 256
_POLICY_TOKENS = itertools.count(1)


class OutcomeMemo:
    """Outcomes of questions already asked of one topology, least recently used out first.

    Key: (:class:`FitQuestion`, the policy's token); value: (versions, outcome, stamp).
    The question holds everything the check reads of the workload and the policy, and the
    versions (:meth:`Topology.state_versions`, plus the supernodes' when GPU groups are
    checked) move on every change of anything the snapshot holds, so an entry whose
    versions still match is the answer a fresh check would give. The stamp
    (:meth:`Topology.state_stamp`) the versions were last found current at answers
    without working the versions out again while nothing at all has changed. Outcomes
    that depend on time (GG406: budget spent, stale or empty topology) are never kept.

    Not thread-safe, like the topology itself: the webhook applies watch events and
    evaluates reviews on its event-loop thread, the linter has one thread.
    """

    def __init__(self, size: int = MEMO_ENTRIES) -> None:
        self.size = size
        self.entries: OrderedDict[Any, tuple[tuple[Any, ...], Outcome, int | None]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @classmethod
    def of(cls, topo: Topology) -> OutcomeMemo:
        memo = topo.outcome_memo
        if not isinstance(memo, cls):
            memo = topo.outcome_memo = cls()
        return memo

    def get(self, key: Any, versions: tuple[Any, ...], stamp: int | None = None) -> Outcome | None:
        """The outcome kept for ``key`` if computed at ``versions``; do not mutate it.
        ``stamp``: the topology's stamp now, remembered with a hit (see :meth:`current`)."""
        entry = self.entries.get(key)
        if entry is None or entry[0] != versions:
            if entry is not None:
                del self.entries[key]   # versions only grow: it can never match again
            self.misses += 1
            return None
        if stamp is not None and entry[2] != stamp:
            self.entries[key] = (versions, entry[1], stamp)
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def current(self, key: Any, stamp: int) -> Outcome | None:
        """The outcome kept for ``key`` if its versions were found current at ``stamp``
        (nothing has changed since, so they still are); None: ask :meth:`get`."""
        entry = self.entries.get(key)
        if entry is None or entry[2] != stamp:
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def put(self, key: Any, versions: tuple[Any, ...], outcome: Outcome, stamp: int | None = None) -> None:
        self.entries[key] = (versions, outcome, stamp)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self.entries)


def _policy_token(policy: Policy) -> int:
    """A number of this loaded policy, never reused (``id()`` would be, after a reload)."""
    token = policy.memo.get("feasibility-memo-token")
    if token is None:
        token = policy.memo["feasibility-memo-token"] = next(_POLICY_TOKENS)
    return token  # type: ignore[no-any-return]


def _memo_versions(topo: Topology, question: FitQuestion) -> tuple[Any, ...]:
    """What the answer to ``question`` depends on in ``topo``: every counter but the
    labels of keys neither its eligibility nor its supernodes read."""
    versions = topo.state_versions(question.label_keys)
    if question.extended_toleration == "auto":  # the answer depends on whether the nodes are GKE's
        versions = (*versions, *topo.versions(GKE_NODE_LABELS)[3:])
    if question.groups is not None:
        return (*versions, topo.supernode_versions(question.supernode_labels))
    return versions


def _copy_outcome(out: Outcome, cluster: str) -> Outcome:
    """A copy for ``cluster`` that shares nothing mutable with ``out`` (the rows are
    frozen): what the memo keeps, and what a caller gets from it, to edit as it likes."""
    witness = out.witness
    if witness is not None:
        witness = {name: nodes.copy() for name, nodes in witness.items()}
    return Outcome(cluster, out.verdict, out.rule, out.message, out.path, witness, out.severity,
                   list(out.rows), list(out.notes))


def check_cluster(question: FitQuestion, snapshot: ClusterSnapshot, policy: Policy,
                  deadline: float | None = None, *, memo: bool = True) -> Outcome:
    """The verdict for one member cluster. ``memo``: answer a question asked before of
    the topology as it is now from the topology's memo (see :class:`OutcomeMemo`)."""
    topo = snapshot.topology
    # A budget already spent gets the same GG406 with or without the memo (tick() below).
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

    def tick() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _OutOfTime

    try:
        out = _check(question, topo, tick)
    except _OutOfTime:
        out = Outcome("", Verdict.UNKNOWN, "GG406",
                      f"feasibility budget ({policy.feasibility.get('budgetMilliseconds')} ms) ran out")
    if key is not None and out.verdict != Verdict.UNKNOWN:
        # The caller owns what it gets (it sets ``cluster``; front ends may edit rows):
        # the memo keeps a copy of its own.
        OutcomeMemo.of(topo).put(key, versions, _copy_outcome(out, ""), stamp)
    out.cluster = snapshot.name
    return out


def _check(question: FitQuestion, topo: Topology, tick: Any) -> Outcome:
    """The verdict, from the question and the topology alone (nothing else to read)."""
    if topo.n_nodes == 0:
        # Queues are known without nodes: a missing or closed queue is proven all the same.
        queue = _queue_checks(question.queue, topo, {}, question.autoscaling, question.own,
                              question.queue_admitted) if topo.queues else None
        if queue is not None and queue.verdict == Verdict.NEVER:
            return queue
        return Outcome("", Verdict.UNKNOWN, "GG406", "the cluster snapshot has no nodes")
    demands = question.demands
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

    def outcome(verdict: Verdict, rule: str, message: str, path: str = "") -> Outcome:
        return Outcome("", verdict, rule, message, path, rows=rows)

    hard_need = _flexible_need(sets, flexible) if flexible else _gang_total(sets, hard)
    queue = _queue_checks(question.queue, topo, hard_need, autoscaling, question.own, question.queue_admitted)
    if queue is not None and queue.verdict == Verdict.NEVER:
        queue.rows = rows
        return queue
    quota = _quota_checks(question.namespace, topo, hard_need)
    if quota is not None:
        quota.rows = rows
        return quota
    tick()

    # Empty cluster: necessary conditions (a proof when they fail).
    proof = _necessary(topo, sets, hard, alloc, flexible, "even when empty", caps_empty,
                       [sums[s.key][1] for s in sets], [_full(uniform_empty[s.key]) for s in sets])
    if proof is not None:
        if autoscaling:
            return outcome(Verdict.WAITS, "GG404",
                           f"{proof[0]}; waits for new nodes (feasibility.autoscaling)", proof[1])
        return outcome(Verdict.NEVER, "GG403", *proof)
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
            if autoscaling:
                return outcome(Verdict.WAITS, "GG404", f"{reason}; waits for new nodes")
            return outcome(Verdict.NEVER, "GG405", reason, plan.path)
    tick()
    if want != hard and not flexible:
        # Not a gang: every pod is placed on its own. Pods that never fit stay Pending.
        most = [sums[s.key][1] for s in sets]
        short = [(d, m) for d, m in zip(demands, most, strict=True) if m < d.want]
        if short:
            text = "; ".join(f"{d.name}: {m} of {d.want} pods" for d, m in short)
            partial = outcome(Verdict.NEVER, "GG403",
                              f"only part of it fits even the empty cluster ({text}); not a gang, so "
                              f"the rest stays Pending")
            partial.severity = Severity.WARNING
            return partial

    # Now: the queue's room, then a witness in the free resources.
    if queue is not None:
        queue.rows = rows
        return queue
    caps = _Caps(sets, free_now, now_by_key, free_owned=False)
    if plan is not None and plan.units:
        placed = _place_groups(topo, sets, plan, caps, supernodes, supernode_labels, tick, uniform_now)
    else:
        dense = _place_flexible(caps, sets, flexible) if flexible else _place(caps, sets, want)
        placed = None if dense is None else _sparse(dense)
    tick()
    if placed is not None:
        result = outcome(Verdict.FITS, "", "fits")
        result.witness = _witness(topo, sets, placed)
        result.notes = notes
        return result
    now = _necessary(topo, sets, want, free_now, flexible, "now", caps_now, [sums[s.key][0] for s in sets],
                     [_full(uniform_now[s.key]) for s in sets])
    reason, path = now if now is not None else (None, "")
    if reason is None and plan is not None and plan.units:
        slots = int(_supernode_slots(topo, sets, plan, caps_now, supernodes, supernode_labels,
                                     free_now).sum())
        if slots < plan.units:
            reason = (f"{plan.units} units ({_unit_label(plan)}) needed, the supernodes' free resources "
                      f"hold {slots} now")
    if reason is None:
        reason = "no placement found in the free resources now"
    return outcome(Verdict.WAITS, "GG404", f"fits the empty cluster but waits: {reason}", path)


# -- the whole fleet ---------------------------------------------------------------------------


def _severity_for(verdict: Verdict, policy: Policy) -> Severity | None:
    if verdict == Verdict.NEVER and policy.feasibility.get("mode") == "warn":
        return Severity.WARNING
    return None


def feasibility(workload: Workload, ctx: Any) -> Feasibility | None:
    """The verdict for a workload against ``ctx.clusters``, computed once per evaluation."""
    if CACHE_KEY in ctx.cache:
        return ctx.cache[CACHE_KEY]  # type: ignore[no-any-return]
    result = _evaluate(workload, ctx)
    ctx.cache[CACHE_KEY] = result
    # A front end that wants to show the placements (lint --explain) passes a sequence
    # with a ``record`` method; policies never know who is listening.
    record = getattr(ctx.clusters, "record", None)
    if result is not None and callable(record):
        record(workload, result)
    return result


def problems(workload: Workload, ctx: Any, rule_id: str) -> Iterator[Problem]:
    """The problems one feasibility rule reports for this evaluation (six rules ask on
    every review: a plain function, not a generator)."""
    result = ctx.cache[CACHE_KEY] if CACHE_KEY in ctx.cache else feasibility(workload, ctx)
    return iter(result.problems.get(rule_id, ()) if result is not None else ())


def _evaluate(workload: Workload, ctx: Any) -> Feasibility | None:
    policy: Policy = ctx.policy
    options = policy.feasibility
    if options.get("mode") == "off" or ctx.clusters is None:
        return None
    question = fit_question(workload, policy)
    change = ctx.change
    if change is not None and question is not None:
        # None: the update does not change what the gang asks of the cluster
        question = _update_question(question, change, policy)
    members = _member_questions(workload, policy, change)
    if question is None and not members:
        return None
    clusters: Sequence[ClusterSnapshot] = ctx.clusters
    if not clusters:
        out = Outcome("", Verdict.UNKNOWN, "GG406", "no cluster topology is available")
        return _combine([out], policy)
    now = time.monotonic()
    deadline = ctx.deadline
    if deadline is None:
        deadline = now + float(options.get("budgetMilliseconds", 200)) / 1000
    stale_after = float(options.get("staleAfterSeconds", 5))
    outcomes = []
    fresh: list[ClusterSnapshot] = []
    stale = False
    for snapshot in clusters:
        if snapshot.stale(now, stale_after):
            # A view the API server has not confirmed for staleAfterSeconds (or never: not
            # synced yet) proves nothing: no verdict from it, and the answer says so aloud.
            stale = True
            age = now - (snapshot.updated_at or now)
            what = (f"topology is {age:.0f}s old (staleAfterSeconds {stale_after:g}): queue and capacity "
                    "rules not applied" if age != float("inf")
                    else "topology not synced yet: queue and capacity rules not applied")
            outcomes.append(Outcome(snapshot.name, Verdict.UNKNOWN, "GG406", what))
            continue
        fresh.append(snapshot)
        if question is not None:
            outcomes.append(check_cluster(question, snapshot, policy, deadline))
    result = _combine(outcomes, policy) if question is not None or outcomes else \
        Feasibility(Verdict.FITS, [])
    if stale and result.verdict is Verdict.UNKNOWN:
        # Never silent: a warning (kubectl prints it), or with whenStale: deny an error that
        # refuses the workload (fail closed; mode warn never refuses).
        severity = Severity.ERROR if (options.get("whenStale") == "deny" and options.get("mode") != "warn") \
            else Severity.WARNING
        result.problems["GG406"] = [dataclasses.replace(p, severity=severity)
                                    for p in result.problems.get("GG406", ())]
    if fresh and len(fresh) == len(clusters):
        for pod_set, member in members:
            _judge_member(result, pod_set, member, fresh, policy, deadline)
    return result


def _member_questions(workload: Workload, policy: Policy, change: Any) -> list[tuple[PodSet, FitQuestion]]:
    """The pod sets outside the gang (a RayJob's submitter), each a question of its own:
    one pod that must fit some node. On an UPDATE, only those whose template changed."""
    out: list[tuple[PodSet, FitQuestion]] = []
    for pod_set in workload.pod_sets:
        if pod_set.counted or pod_set.replicas == 0:
            continue
        if change is not None and not touches(pod_set.path, change.changed):
            continue
        fits = _spec_fits([pod_set])
        if fits is None:
            continue
        question = _question(_rows([pod_set], fits, False, 0), [pod_set], False, 0, None, None,
                             workload.namespace, None, policy)
        if question is not None:
            out.append((pod_set, question))
    return out


def _judge_member(result: Feasibility, pod_set: PodSet, question: FitQuestion,
                  clusters: Sequence[ClusterSnapshot], policy: Policy, deadline: float) -> None:
    """GG403 when a pod outside the gang fits no node of any member cluster even when empty
    (it would stay Pending and hold up its workload); anything else is its scheduler's job."""
    outcomes = [check_cluster(question, snapshot, policy, deadline) for snapshot in clusters]
    if outcomes and all(o.verdict == Verdict.NEVER for o in outcomes):
        first = outcomes[0]
        result.problems.setdefault(first.rule, []).append(
            Problem(bounded_words(f"pod set {pod_set.name}: {first.message}"), first.path or pod_set.path,
                    _severity_for(Verdict.NEVER, policy)))


def _update_question(question: FitQuestion, change: Any, policy: Policy) -> FitQuestion | None:
    """An UPDATE's question: None when it asks what the stored object asked (replicas,
    requests, placement, queue and groups unchanged: a running object is never judged
    again against today's cluster); else the new question with the object's own usage
    counted as free and, when it keeps its queue, the queue's state not judged again."""
    try:
        old = build_workload(change.old)
    except ShapeError:
        old = None
    before = fit_question(old, policy) if old is not None else None
    if before is not None and before == question:
        return None
    same_queue = before is not None and before.queue == question.queue
    return dataclasses.replace(question, own=change.own, queue_admitted=same_queue)


def _combine(outcomes: list[Outcome], policy: Policy) -> Feasibility:
    for o in outcomes:
        if o.verdict is Verdict.FITS:
            if not o.notes:  # the usual answer: nothing to report
                return Feasibility(Verdict.FITS, outcomes)
            break
    fleet = len(outcomes) > 1

    def label(o: Outcome) -> str:
        return f"cluster {o.cluster}: " if fleet and o.cluster else ""

    result = Feasibility(Verdict.UNKNOWN, outcomes)

    def add(rule: str, message: str, path: str, verdict: Verdict, severity: Severity | None = None) -> None:
        # names no object (the finding carries it); long queue, node and pod set names bounded
        result.problems.setdefault(rule, []).append(
            Problem(bounded_words(message), path, severity or _severity_for(verdict, policy)))

    fits = [o for o in outcomes if o.verdict == Verdict.FITS]
    if fits:
        result.verdict = Verdict.FITS
        for note in fits[0].notes:  # parts of the check that had no data
            add("GG406", f"{label(fits[0])}{note}", "", Verdict.UNKNOWN)
        return result
    for verdict in (Verdict.WAITS, Verdict.UNKNOWN):
        chosen = [o for o in outcomes if o.verdict == verdict]
        if chosen:
            result.verdict = verdict
            others = [o for o in outcomes if o.verdict != verdict]
            text = "; ".join(f"{label(o)}{o.message}" for o in chosen)
            if others:
                text += "; " + "; ".join(f"{label(o)}{o.verdict.value}: {o.message}" for o in others)
            add(chosen[0].rule, text, chosen[0].path, verdict)
            return result
    result.verdict = Verdict.NEVER
    if fleet:
        text = "no member cluster can run it: " + "; ".join(f"{label(o)}{o.message}" for o in outcomes)
    else:
        text = outcomes[0].message
    add(outcomes[0].rule, text, outcomes[0].path, Verdict.NEVER,
        outcomes[0].severity if all(o.severity for o in outcomes) else None)
    return result
