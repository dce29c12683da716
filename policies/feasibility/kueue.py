"""Kueue's admission by quota: whether the ClusterQueue a LocalQueue points at can ever admit the
workload, as Kueue's flavor assigner decides it (kubernetes-sigs/kueue
``pkg/scheduler/flavorassigner``, with the quota tree of ``pkg/cache/scheduler/resource_node.go``).

- A requested resource that no resource group of the ClusterQueue covers: Kueue answers
  "resource X unavailable in ClusterQueue" and never admits the workload (never).
- Each pod set takes one flavor per resource group, for all the group's resources it asks; a
  flavor fits only if the request is within the ClusterQueue's *potential available* quota of
  that flavor: its own quota, plus what it may borrow up the cohort tree (children lend all but
  what their lending limits keep; a borrowing limit caps each step). A pod set no flavor could
  ever hold, or a workload whose total of a resource exceeds all flavors together: never.
- Otherwise, when no flavor has the room now (the quota reserved by admitted workloads, from
  the ClusterQueue's status, and the cohort's), the workload waits for quota.
- A LocalQueue pointing at a ClusterQueue that does not exist, or one Kueue holds inactive
  (stopped, naming a ResourceFlavor or AdmissionCheck that does not exist, or an AdmissionCheck
  not active: :meth:`policies.topology.kueue.KueueObjects.inactive`): Kueue holds the workload
  (a wait).

Only a pod set's *candidate* flavors count, as in Kueue's ``checkFlavorForPodSets``: a flavor
whose ``nodeTaints`` (NoSchedule, NoExecute) the pod's tolerations plus the flavor's own do not
tolerate, whose ``nodeLabels`` the pod's nodeSelector and required node affinity, cut down to the
flavor's own label keys, do not match, or (Topology Aware Scheduling) whose Topology lacks the
level the pod set requires, is never tried for it. No candidate in a resource group the pod set
asks of: never. An admitted pod set's pods carry the flavor's ``nodeLabels`` as nodeSelector and
its tolerations: when no candidate's nodes hold the pod set's pods even empty, never (with
``feasibility.autoscaling``, not judged); a workload not admitted yet is placed now on its
candidates' nodes only (:func:`flavor_pinned_masks`). A pod set with ``podset-required-topology`` placed by
a flavor with a Topology must fit within one domain of that level (and, with
``podset-slice-required-topology``, each slice within one domain of the slice level): never
when no domain's nodes hold it even empty. Topology Aware Scheduling is taken to be on where a
flavor names a Topology the snapshot holds (a flavor naming none, or one not seen, is not judged
by topology); preferred and unconstrained topologies never narrow anything.

The amounts are the pods Kueue's Workload counts for the kinds it admits whole
(:attr:`policies.kinds.KindSpec.kueue_admits_all`: a batch Job, down to its partial-admission
minimum; a training-operator job but an MPIJob; a JobSet), else the gang's minimum (Kueue may ask for more:
weaker, never wrong). Resources Kueue is configured not to account are left out
(``queues.kueueExcludeResourcePrefixes``, its ``resources.excludeResourcePrefixes``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from policies.labelselectors import holds
from policies.quantity import format_quantity
from policies.tolerations import any_tolerates
from policies.topology import Topology
from policies.topology.kueue import KueueClusterQueue, KueueFlavor, KueueResourceGroup
from policies.workload import QueueRef

from .nodes import eligible_mask
from .outcomes import Cause, Outcome, Verdict
from .questions import Demand
from .tas import PodSetTopology

if TYPE_CHECKING:
    from .capacity import _Set

__all__ = ["SetNeed", "kueue_checks", "flavor_tolerations", "with_tolerations", "flavor_pinned_masks"]

_FR = tuple[str, str]   # (flavor, resource)

@dataclass(frozen=True)
class SetNeed:
    """What one pod set of the gang asks in all (its minimum pods x its request per pod), and
    what Kueue matches its flavors against."""

    name: str
    path: str
    need: Mapping[str, int]
    pods: int = 0                       # the pods any run needs
    # The template's tolerations, nodeSelector and required node affinity (a placement,
    # policies.feasibility.specs): what Kueue matches each flavor against. None: not matched.
    placement: Mapping[str, Any] | None = None
    nodes: _Set | None = None           # the set as the packer sees it; None: its nodes not judged
    topology: PodSetTopology | None = None


@dataclass(eq=False)
class _Node:
    """A ClusterQueue or Cohort of the quota tree (Kueue's resourceNode)."""

    # (flavor, resource) -> (nominal, borrowingLimit, lendingLimit)
    quotas: dict[_FR, tuple[int, int | None, int | None]] = field(default_factory=dict)
    parent: str | None = None           # a cohort's name
    subtree: dict[_FR, int] = field(default_factory=dict)
    usage: dict[_FR, int] = field(default_factory=dict)

    def local(self, fr: _FR) -> int:
        """Quota only this subtree sees: what the lending limit keeps from the parent."""
        lend = self.quotas.get(fr, (0, None, None))[2]
        return 0 if lend is None else max(0, self.subtree.get(fr, 0) - lend)


@dataclass
class _Tree:
    queues: dict[str, _Node]
    cohorts: dict[str, _Node]

    def _parent(self, node: _Node) -> _Node | None:
        return self.cohorts.get(node.parent) if node.parent is not None else None

    def potential(self, node: _Node, fr: _FR) -> int:
        """The most ``node`` could ever hold of ``fr`` (Kueue's potentialAvailable)."""
        parent = self._parent(node)
        if parent is None:
            return node.subtree.get(fr, 0)
        found = node.local(fr) + self.potential(parent, fr)
        borrow = node.quotas.get(fr, (0, None, None))[1]
        return found if borrow is None else min(node.subtree.get(fr, 0) + borrow, found)

    def available(self, node: _Node, fr: _FR) -> int:
        """What ``node`` could take of ``fr`` now (Kueue's available, at least 0)."""
        parent = self._parent(node)
        if parent is None:
            return max(0, node.subtree.get(fr, 0) - node.usage.get(fr, 0))
        above = self.available(parent, fr)
        borrow = node.quotas.get(fr, (0, None, None))[1]
        local = node.local(fr)
        if borrow is not None:
            stored = node.subtree.get(fr, 0) - local
            used_above = max(0, node.usage.get(fr, 0) - local)
            above = min(stored - used_above + borrow, above)
        return max(0, max(0, local - node.usage.get(fr, 0)) + above)


def _quotas(groups: Sequence[KueueResourceGroup]) -> dict[_FR, tuple[int, int | None, int | None]]:
    return {(flavor, r): (q.nominal, q.borrowing, q.lending)
            for group in groups for flavor, quotas in group.flavors for r, q in quotas.items()}


def _tree(topo: Topology) -> _Tree | None:
    """The quota tree of every ClusterQueue and Cohort (implicit cohorts, named by a queue but
    without an object, included); None when the cohorts' parents make a cycle (Kueue then
    admits nothing through them: not judged). Kept per queue version."""
    versions = (topo.queue_version,)
    found = topo.cached("kueue-tree", versions)
    if found is not None:
        return found[0]  # type: ignore[no-any-return]
    cohorts = {name: _Node(_quotas(c.groups), c.parent) for name, c in topo.cohorts.items()}
    queues: dict[str, _Node] = {}
    for name, cq in topo.cluster_queues.items():
        quotas = _quotas(cq.groups)
        queues[name] = _Node(quotas, cq.cohort, {fr: q[0] for fr, q in quotas.items()}, dict(cq.usage))
        if cq.cohort is not None:
            cohorts.setdefault(cq.cohort, _Node())
    for node in list(cohorts.values()):
        if node.parent is not None:
            cohorts.setdefault(node.parent, _Node())
    tree: _Tree | None = _Tree(queues, cohorts)
    for name in cohorts:   # a cycle anywhere: Kueue marks those queues inactive
        seen: set[str] = set()
        at: str | None = name
        while at is not None:
            if at in seen:
                tree = None
                break
            seen.add(at)
            at = cohorts[at].parent if at in cohorts else None
        if tree is None:
            break
    if tree is not None:
        _accumulate(tree)
    topo.remember("kueue-tree", versions, (tree,))
    return tree


def _accumulate(tree: _Tree) -> None:
    """Each cohort's subtree quota and usage from its children, leaves first (Kueue's
    updateCohortResourceNode): a child passes up what its lending limit does not keep."""
    child_cohorts: dict[str, list[str]] = {}
    child_queues: dict[str, list[_Node]] = {}
    for name, cohort in tree.cohorts.items():
        if cohort.parent is not None:
            child_cohorts.setdefault(cohort.parent, []).append(name)
    for queue in tree.queues.values():
        if queue.parent is not None:
            child_queues.setdefault(queue.parent, []).append(queue)

    def fill(name: str) -> None:
        cohort = tree.cohorts[name]
        cohort.subtree = {fr: q[0] for fr, q in cohort.quotas.items()}
        cohort.usage = {}
        for child_name in child_cohorts.get(name, []):
            fill(child_name)
        for child in [*(tree.cohorts[n] for n in child_cohorts.get(name, [])), *child_queues.get(name, [])]:
            for fr, amount in child.subtree.items():
                cohort.subtree[fr] = cohort.subtree.get(fr, 0) + amount - child.local(fr)
            for fr, amount in child.usage.items():
                cohort.usage[fr] = cohort.usage.get(fr, 0) + max(0, amount - child.local(fr))

    for name, cohort in tree.cohorts.items():
        if cohort.parent is None:
            fill(name)


def _counted(resource: str, excluded: Sequence[str]) -> bool:
    """Whether Kueue accounts ``resource`` in quota (not ``pods``, not an excluded prefix)."""
    return resource != "pods" and not any(resource.startswith(p) for p in excluded)


def _group_of(cq: KueueClusterQueue, resource: str) -> KueueResourceGroup | None:
    for group in cq.groups:
        if resource in group.covered:
            return group
    return None


def _held(message: str, path: str, **facts: Any) -> Outcome:
    return Outcome("", Verdict.WAITS, Cause.QUEUE_ABSENT, message, path, facts={"system": "kueue", **facts})


def _never(message: str, path: str, **facts: Any) -> Outcome:
    return Outcome("", Verdict.NEVER, Cause.QUEUE_NEVER_HOLDS, message, path,
                   facts={"system": "kueue", **facts})


# -- which flavors Kueue tries for a pod set (flavorassigner.go checkFlavorForPodSets) ----------

_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def _untolerated(flavor: KueueFlavor, placement: Mapping[str, Any]) -> str | None:
    """The first of the flavor's NoSchedule/NoExecute taints that neither the pod's tolerations
    nor the flavor's own tolerate, as ``key=value:effect``."""
    own = placement.get("tolerations")
    tolerations = [*(own if isinstance(own, list) else []), *flavor.tolerations]
    for taint in flavor.node_taints:
        effect, value = taint.get("effect"), taint.get("value")
        value = value if isinstance(value, str) else ""
        if effect in _TAINT_EFFECTS and not any_tolerates(tolerations, taint["key"], value, str(effect)):
            return f"{taint['key']}={value}:{effect}" if value else f"{taint['key']}:{effect}"
    return None


def _requirement_holds(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One node selector requirement on a key the flavor labels; anything malformed holds (the API
    server refuses it: not ours to judge)."""
    raw = expr.get("values")
    values = [str(v) for v in raw] if isinstance(raw, list) else []
    return holds(expr.get("operator"), values, labels[expr["key"]]) is not False


def _matches_labels(placement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kueue's flavorSelector: the pod's nodeSelector and required node affinity cut down to the
    flavor's own label keys (a term left with nothing drops the whole affinity; matchFields are
    dropped), matched against a node carrying exactly the flavor's labels."""
    selector = placement.get("nodeSelector")
    if isinstance(selector, Mapping):
        for key, value in selector.items():
            if key in labels and isinstance(value, str) and labels[key] != value:
                return False
    affinity = placement.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_affinity, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return True
    kept: list[list[Mapping[str, Any]]] = []
    for term in terms:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        mine = [e for e in exprs if isinstance(e, Mapping) and e.get("key") in labels] \
            if isinstance(exprs, list) else []
        if not mine:
            return True
        kept.append(mine)
    return any(all(_requirement_holds(e, labels) for e in exprs) for exprs in kept)


def _tas_levels(topo: Topology, flavor: KueueFlavor) -> tuple[str, ...] | None:
    """The levels of the Topology the flavor is placed by; None: no Topology, or one not seen."""
    return None if flavor.topology is None else topo.kueue_topologies.get(flavor.topology)


def _mismatch(topo: Topology, name: str, flavor: KueueFlavor, s: SetNeed) -> str | None:
    """Why Kueue never tries flavor ``name`` for pod set ``s`` (in its words), or None."""
    assert s.placement is not None
    levels = _tas_levels(topo, flavor)
    if s.topology is not None and levels is not None and (
            s.topology.required not in levels
            or (s.topology.slice_level is not None and s.topology.slice_level not in levels)):
        return f'Flavor "{name}" does not contain the requested level'
    taint = _untolerated(flavor, s.placement)
    if taint is not None:
        return f"untolerated taint {taint} in flavor {name}"
    if not _matches_labels(s.placement, flavor.node_labels):
        return f"flavor {name} doesn't match node affinity"
    return None


def _candidates(topo: Topology, group: KueueResourceGroup, s: SetNeed) -> tuple[list[str], list[str]]:
    """(the flavors of ``group`` Kueue may try for ``s``, why it never tries each other). A flavor
    whose ResourceFlavor is not seen is tried (its ClusterQueue waits for it anyway)."""
    found: list[str] = []
    reasons: list[str] = []
    for name, _ in group.flavors:
        flavor = topo.resource_flavors.get(name)
        reason = None if flavor is None or s.placement is None else _mismatch(topo, name, flavor, s)
        if reason is None:
            found.append(name)
        else:
            reasons.append(reason)
    return found, reasons


# -- whether a flavor's nodes can hold the pod set once admitted --------------------------------

def flavor_tolerations(refs: Sequence[QueueRef], topo: Topology,
                       namespace: str | None) -> tuple[Mapping[str, Any], ...]:
    """Every toleration the flavors of the ClusterQueue(s) a Kueue LocalQueue of ``refs`` may
    point at add to admitted pods: with them, the pods pass more taints than their templates
    say, so the node check proper counts them all (more nodes: weaker, never wrong)."""
    if not topo.local_queues or not topo.resource_flavors:
        return ()
    found: list[Mapping[str, Any]] = []
    for ref in refs:
        if ref.system != "kueue":
            continue
        for (ns, name), cq_name in topo.local_queues.items():
            cq = topo.cluster_queues.get(cq_name) if name == ref.name and namespace in (None, ns) else None
            for group in cq.groups if cq is not None else ():
                for flavor_name, _ in group.flavors:
                    flavor = topo.resource_flavors.get(flavor_name)
                    own = flavor.tolerations if flavor is not None else ()
                    found.extend(t for t in own if t not in found)
    return tuple(found)


def with_tolerations(demand: Demand, tolerations: Sequence[Mapping[str, Any]]) -> Demand:
    """``demand`` with ``tolerations`` added to its pods, under a signature of its own."""
    placement = dict(demand.placement)
    own = placement.get("tolerations")
    placement["tolerations"] = [*(own if isinstance(own, list) else []), *tolerations]
    return dataclasses.replace(demand, signature=f"{demand.signature}\x00+kueue{tolerations!r}",
                               placement=placement)


def _narrows(flavor: KueueFlavor) -> bool:
    """Whether an admitted pod's nodes depend on ``flavor`` (its labels pin them, its
    tolerations open tainted ones); else they are the pod's own."""
    return bool(flavor.node_labels or flavor.tolerations)


def _flavor_mask(topo: Topology, nodes: _Set, flavor: KueueFlavor) -> np.ndarray:
    """The nodes a pod of ``nodes`` may use once Kueue admits it to ``flavor``: the flavor's
    ``nodeLabels`` added to its nodeSelector and the flavor's tolerations to its own. Its own
    are those the node check gives it (every flavor's, and the ExtendedResourceToleration
    plugin's): more than one flavor's, so more nodes (weaker, never wrong)."""
    placement = nodes.demand.placement
    tolerations, selector = placement.get("tolerations"), placement.get("nodeSelector")
    spec = {**placement, "tolerations": [*(tolerations if isinstance(tolerations, list) else []),
                                         *flavor.tolerations],
            "nodeSelector": {**(selector if isinstance(selector, Mapping) else {}), **flavor.node_labels}}
    return eligible_mask(topo, spec).mask


def flavor_pinned_masks(name: str, topo: Topology, sets: Sequence[SetNeed],
                        excluded: Sequence[str] = ()) -> list[np.ndarray | None]:
    """Per pod set, the nodes its pods may run on once ClusterQueue ``name`` admits it (None:
    no narrower than its own): for each resource group it asks of, the nodes of any flavor
    Kueue may try for it (:func:`_candidates`), and all groups' together. Kueue gives a pod set
    one flavor per group and pins its pods to that flavor's nodes, so a placement outside these
    nodes is none Kueue makes; the union over flavors is weaker than one flavor (never wrong for
    a wait). A flavor Kueue may try that narrows nothing (no labels, no tolerations), or one not
    seen, leaves the group's nodes the pod set's own."""
    cq = topo.cluster_queues.get(name)
    out: list[np.ndarray | None] = []
    for s in sets:
        pinned: np.ndarray | None = None
        for group in cq.groups if cq is not None and s.nodes is not None and s.placement is not None else ():
            if any(v > 0 and _counted(r, excluded) and r in group.covered for r, v in s.need.items()):
                union = _candidates_nodes(topo, group, s)
                if union is not None:
                    pinned = union if pinned is None else pinned & union
        out.append(pinned)
    return out


def _candidates_nodes(topo: Topology, group: KueueResourceGroup, s: SetNeed) -> np.ndarray | None:
    """The nodes of the flavors of ``group`` Kueue may try for ``s`` together (None: one of them
    narrows nothing, or is not seen: the pod set's own nodes)."""
    assert s.nodes is not None
    union: np.ndarray | None = None
    for flavor_name in _candidates(topo, group, s)[0]:
        flavor = topo.resource_flavors.get(flavor_name)
        if flavor is None or not _narrows(flavor):
            return None
        mask = _flavor_mask(topo, s.nodes, flavor)
        union = mask.copy() if union is None else union | mask
    return union


def _flavor_short(topo: Topology, s: SetNeed, name: str, flavor: KueueFlavor) -> str | None:
    """:func:`_flavor_now`, kept until the nodes, the labels it reads or Kueue's objects change."""
    assert s.nodes is not None
    request = s.topology if s.topology is not None and _tas_levels(topo, flavor) is not None else None
    key = ("kueue-flavor-nodes", name, s.nodes.key, s.pods, request)
    levels = () if request is None else (request.required, request.slice_level or "")
    versions = (s.nodes.versions, topo.versions((*flavor.node_labels, *levels)), topo.alloc_version,
                topo.queue_version)
    cached = topo.cached(key, versions)
    if cached is None:
        cached = (_flavor_now(topo, s, flavor),)
        topo.remember(key, versions, cached)
    return cached[0]  # type: ignore[no-any-return]


def _flavor_now(topo: Topology, s: SetNeed, flavor: KueueFlavor) -> str | None:
    """Why the nodes of ``flavor`` never hold ``s``'s pods, with the flavor's labels as
    nodeSelector and its tolerations added, even empty (within one domain of its required
    topology level when the flavor's Topology has it); None when they may (the nodes are
    :func:`_flavor_mask`'s: weaker, never wrong)."""
    assert s.nodes is not None
    levels = _tas_levels(topo, flavor)
    request = s.topology if s.topology is not None and levels is not None else None
    if not _narrows(flavor) and request is None:
        return None     # the pod's own nodes: the node check proper speaks for them
    mask = _flavor_mask(topo, s.nodes, flavor)
    pods = np.minimum(s.nodes.capacity(topo.alloc[: topo.slots], mask), s.pods).astype(np.float64)
    if request is None:
        held = int(pods.sum())
        return None if held >= s.pods else f"its nodes hold {held} of {s.pods} pod(s) even empty"
    domains = topo.label_domains(request.required).astype(np.int64)
    if request.slice_level is None or s.pods < request.slice_size:
        held = int(np.bincount(domains, weights=pods).max(initial=0))
        return None if held >= s.pods else \
            f'topology "{flavor.topology}" allows to fit only {held} out of {s.pods} pod(s) in one ' \
            f"{request.required} domain even empty"
    slices = s.pods // request.slice_size
    inner = topo.label_domains(request.slice_level).astype(np.int64)
    width = int(inner.max(initial=0)) + 1
    cells, where = np.unique(domains * width + inner, return_inverse=True)
    per_cell = np.floor(np.bincount(where, weights=pods) / request.slice_size)
    held = int(np.bincount(cells // width, weights=per_cell).max(initial=0))
    return None if held >= slices else \
        f'topology "{flavor.topology}" allows to fit only {held} out of {slices} slice(s) of ' \
        f"{request.slice_size} pods ({request.slice_level}) in one {request.required} domain even empty"


def _nodes_never(topo: Topology, cq: KueueClusterQueue, s: SetNeed,
                 candidates: Sequence[tuple[KueueResourceGroup, list[str]]]) -> Outcome | None:
    """Never when, for some resource group ``s`` asks of, no candidate flavor's nodes hold it."""
    if s.nodes is None or s.pods <= 0:
        return None
    for _, flavors in candidates:
        reasons: list[str] = []
        for name in flavors:
            flavor = topo.resource_flavors.get(name)
            short = None if flavor is None else _flavor_short(topo, s, name, flavor)
            if short is None:
                break
            reasons.append(f"flavor `{name}`: {short}")
        else:
            if reasons:
                return Outcome("", Verdict.NEVER, Cause.NODES_NEVER_HOLD,
                               f"pod set {s.name} never runs on the nodes of ClusterQueue `{cq.name}`'s "
                               f"flavors: {'; '.join(reasons)}", s.path,
                               facts={"system": "kueue", "cluster_queue": cq.name, "pods": s.pods})
    return None


def kueue_checks(local_queue: str, name: str, topo: Topology, need: Mapping[str, int],
                 sets: Sequence[SetNeed], path: str, excluded: Sequence[str] = (),
                 admitted: bool = False, autoscaling: bool = False) -> Outcome | None:
    """Never (ClusterQueue ``name``'s quota can never admit the gang, or its flavors' nodes never
    hold it), waits (Kueue holds it, or waits for quota), or None. ``need``: the gang's total
    minimum; ``sets``: each pod set's; ``excluded``: resource prefixes Kueue does not account;
    ``admitted``: an UPDATE that keeps its queue (its own reservation is in the usage: no wait is
    judged); ``autoscaling``: nodes may come, so the flavors' nodes are not judged."""
    cq = topo.cluster_queues.get(name)
    if cq is None:
        if not topo.cluster_queues or admitted:
            return None     # the snapshot shows no ClusterQueues at all: nothing to say
        return _held(f"Kueue LocalQueue `{local_queue}` points at ClusterQueue `{name}`, which does not "
                     f"exist: Kueue holds the workload until it is created", path,
                     queue=local_queue, cluster_queue=name)
    tree = _tree(topo)
    if tree is None:
        return None

    def counted(resource: str) -> bool:
        return _counted(resource, excluded)

    asked = {r: v for r, v in need.items() if v > 0 and counted(r)}
    for resource in asked:
        if _group_of(cq, resource) is None:
            return _never(f"resource {resource} unavailable in ClusterQueue `{name}`: no resource group "
                          f"covers it, so Kueue never admits the workload", path,
                          cluster_queue=name, resource=resource)
    node = tree.queues[name]
    # per pod set, each resource group it asks of with the flavors Kueue may try
    tried: list[list[tuple[KueueResourceGroup, list[str]]]] = []
    for s in sets:
        groups: list[tuple[KueueResourceGroup, list[str]]] = []
        for group in cq.groups:
            if not group.flavors or not any(v > 0 and counted(r) and r in group.covered
                                            for r, v in s.need.items()):
                continue
            flavors, reasons = _candidates(topo, group, s)
            if not flavors:
                return _never(f"no flavor of ClusterQueue `{name}` is tried for pod set {s.name}: "
                              f"{'; '.join(reasons)}", s.path, cluster_queue=name, reasons=tuple(reasons))
            groups.append((group, flavors))
        tried.append(groups)
        found = _set_never(cq, tree, node, s, groups, counted)
        if found is not None:
            return found
    for resource, amount in asked.items():
        covering = _group_of(cq, resource)
        assert covering is not None
        # the flavors some pod set asking it may take
        flavors = [f for f, _ in covering.flavors
                   if not sets or any(f in fs for groups in tried for g, fs in groups if g is covering)]
        most = sum(tree.potential(node, (flavor, resource)) for flavor in flavors)
        if amount > most:
            return _never(f"{format_quantity(resource, amount)} {resource} asked in all, ClusterQueue "
                          f"`{name}` can ever admit {format_quantity(resource, most)} over its flavors "
                          f"({', '.join(flavors)})", path,
                          cluster_queue=name, resource=resource, asked=amount, limit=most)
    if not autoscaling:
        for s, groups in zip(sets, tried, strict=True):
            found = _nodes_never(topo, cq, s, groups)
            if found is not None:
                return found
    if admitted:
        return None
    inactive = topo.inactive(cq)
    if inactive is not None:
        return _held(f"ClusterQueue `{name}` {inactive}: Kueue admits nothing through it until that changes",
                     path, cluster_queue=name, inactive=inactive)
    for s, groups in zip(sets, tried, strict=True):
        short = _set_waits(tree, node, s, groups, counted)
        if short is not None:
            resource, amount, now = short
            return Outcome("", Verdict.WAITS, Cause.WAITS_FOR_QUEUE,
                           f"waits for quota in ClusterQueue `{name}`: {format_quantity(resource, amount)} "
                           f"{resource} asked (pod set {s.name}), {format_quantity(resource, now)} free now "
                           f"in the best flavor", s.path,
                           facts={"system": "kueue", "cluster_queue": name, "resource": resource})
    return None


def _set_never(cq: KueueClusterQueue, tree: _Tree, node: _Node, s: SetNeed,
               groups: Sequence[tuple[KueueResourceGroup, list[str]]], counted: Any) -> Outcome | None:
    """Never when, for some resource group, no flavor Kueue may try has the potential quota for
    the pod set."""
    for group, flavors in groups:
        asked = {r: v for r, v in s.need.items() if v > 0 and counted(r) and r in group.covered}
        shortfalls = [next(((r, v, most) for r, v in asked.items()
                            if v > (most := tree.potential(node, (flavor, r)))), None) for flavor in flavors]
        if all(short is not None for short in shortfalls):
            flavor = flavors[0]
            resource, amount, most = shortfalls[0]  # type: ignore[misc]
            others = f" (and no other of its {len(flavors)} flavors)" if len(flavors) > 1 else ""
            return _never(f"insufficient quota for {resource} in flavor `{flavor}`{others}: "
                          f"{format_quantity(resource, amount)} asked by pod set {s.name} > maximum capacity "
                          f"{format_quantity(resource, most)} of ClusterQueue `{cq.name}`", s.path,
                          cluster_queue=cq.name, flavor=flavor, resource=resource, asked=amount, limit=most)
    return None


def _set_waits(tree: _Tree, node: _Node, s: SetNeed, groups: Sequence[tuple[KueueResourceGroup, list[str]]],
               counted: Any) -> tuple[str, int, int] | None:
    """(resource, asked, free in the best flavor) when no flavor Kueue may try in some group has
    the room now."""
    for group, flavors in groups:
        asked = {r: v for r, v in s.need.items() if v > 0 and counted(r) and r in group.covered}
        best: tuple[str, int, int] | None = None
        for flavor in flavors:
            short = next(((r, v, free) for r, v in asked.items()
                          if v > (free := tree.available(node, (flavor, r)))), None)
            if short is None:
                best = None
                break
            if best is None or short[2] > best[2]:
                best = short
        if best is not None:
            return best
    return None
