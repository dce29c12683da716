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
- A LocalQueue pointing at a ClusterQueue that does not exist, a stopped ClusterQueue, or one
  whose ResourceFlavor does not exist: Kueue holds the workload (a wait).

Flavors are not matched against the pods' node selectors and tolerations (every flavor counts as
possible: weaker, never wrong), and the amounts are the gang's minimum (Kueue asks for all pods
unless partial admission applies: again weaker). Resources Kueue is configured not to account
are left out (``queues.kueueExcludeResourcePrefixes``, its ``resources.excludeResourcePrefixes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.quantity import format_quantity
from policies.topology import Topology
from policies.topology.kueue import KueueClusterQueue, KueueResourceGroup

from .outcomes import Cause, Outcome, Verdict

__all__ = ["SetNeed", "kueue_checks"]

_FR = tuple[str, str]   # (flavor, resource)


@dataclass(frozen=True)
class SetNeed:
    """What one pod set of the gang asks in all (its minimum pods x its request per pod)."""

    name: str
    path: str
    need: Mapping[str, int]


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


def kueue_checks(local_queue: str, name: str, topo: Topology, need: Mapping[str, int],
                 sets: Sequence[SetNeed], path: str, excluded: Sequence[str] = (),
                 admitted: bool = False) -> Outcome | None:
    """Never (ClusterQueue ``name``'s quota can never admit the gang), waits (Kueue holds it, or
    waits for quota), or None. ``need``: the gang's total minimum; ``sets``: each pod set's;
    ``excluded``: resource prefixes Kueue does not account; ``admitted``: an UPDATE that keeps
    its queue (its own reservation is in the usage: no wait is judged)."""
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
        return resource != "pods" and not any(resource.startswith(p) for p in excluded)

    asked = {r: v for r, v in need.items() if v > 0 and counted(r)}
    for resource in asked:
        if _group_of(cq, resource) is None:
            return _never(f"resource {resource} unavailable in ClusterQueue `{name}`: no resource group "
                          f"covers it, so Kueue never admits the workload", path,
                          cluster_queue=name, resource=resource)
    node = tree.queues[name]
    for s in sets:
        found = _set_never(cq, tree, node, s, counted)
        if found is not None:
            return found
    for resource, amount in asked.items():
        group = _group_of(cq, resource)
        assert group is not None
        most = sum(tree.potential(node, (flavor, resource)) for flavor, _ in group.flavors)
        if amount > most:
            return _never(f"{format_quantity(resource, amount)} {resource} asked in all, ClusterQueue "
                          f"`{name}` can ever admit {format_quantity(resource, most)} over its flavors "
                          f"({', '.join(f for f, _ in group.flavors)})", path,
                          cluster_queue=name, resource=resource, asked=amount, limit=most)
    if admitted:
        return None
    if cq.stopped:
        return _held(f"ClusterQueue `{name}` is stopped (stopPolicy): Kueue admits nothing through it "
                     f"until it is resumed", path, cluster_queue=name)
    if topo.resource_flavors:
        missing = sorted({f for g in cq.groups for f, _ in g.flavors} - set(topo.resource_flavors))
        if missing:
            return _held(f"ClusterQueue `{name}` is inactive: ResourceFlavor `{missing[0]}` does not exist; "
                         f"Kueue holds the workload until it is created", path,
                         cluster_queue=name, flavor=missing[0])
    for s in sets:
        short = _set_waits(cq, tree, node, s, counted)
        if short is not None:
            resource, amount, now = short
            return Outcome("", Verdict.WAITS, Cause.WAITS_FOR_QUEUE,
                           f"waits for quota in ClusterQueue `{name}`: {format_quantity(resource, amount)} "
                           f"{resource} asked (pod set {s.name}), {format_quantity(resource, now)} free now "
                           f"in the best flavor", s.path,
                           facts={"system": "kueue", "cluster_queue": name, "resource": resource})
    return None


def _set_never(cq: KueueClusterQueue, tree: _Tree, node: _Node, s: SetNeed, counted: Any) -> Outcome | None:
    """Never when, for some resource group, no flavor's potential quota holds the pod set."""
    for group in cq.groups:
        asked = {r: v for r, v in s.need.items() if v > 0 and counted(r) and r in group.covered}
        if not asked or not group.flavors:
            continue
        shortfalls = [next(((r, v, tree.potential(node, (flavor, r))) for r, v in asked.items()
                            if v > tree.potential(node, (flavor, r))), None) for flavor, _ in group.flavors]
        if all(short is not None for short in shortfalls):
            flavor = group.flavors[0][0]
            resource, amount, most = shortfalls[0]  # type: ignore[misc]
            others = f" (and no other of its {len(group.flavors)} flavors)" if len(group.flavors) > 1 else ""
            return _never(f"insufficient quota for {resource} in flavor `{flavor}`{others}: "
                          f"{format_quantity(resource, amount)} asked by pod set {s.name} > maximum capacity "
                          f"{format_quantity(resource, most)} of ClusterQueue `{cq.name}`", s.path,
                          cluster_queue=cq.name, flavor=flavor, resource=resource, asked=amount, limit=most)
    return None


def _set_waits(cq: KueueClusterQueue, tree: _Tree, node: _Node, s: SetNeed,
               counted: Any) -> tuple[str, int, int] | None:
    """(resource, asked, free in the best flavor) when no flavor of some group has the room now."""
    for group in cq.groups:
        asked = {r: v for r, v in s.need.items() if v > 0 and counted(r) and r in group.covered}
        if not asked or not group.flavors:
            continue
        best: tuple[str, int, int] | None = None
        for flavor, _ in group.flavors:
            short = next(((r, v, tree.available(node, (flavor, r))) for r, v in asked.items()
                          if v > tree.available(node, (flavor, r))), None)
            if short is None:
                best = None
                break
            if best is None or short[2] > best[2]:
                best = short
        if best is not None:
            return best
    return None
