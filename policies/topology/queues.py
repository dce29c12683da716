"""Volcano Queues, PodGroups, ElasticQuotaTrees and HyperNodes of a
:class:`policies.topology.Topology`, and the supernodes (groups of nodes a gang may be
asked to share) derived from HyperNodes and node labels."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.changes import owner_keys
from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.topology.nodes import Units, _key, _mapping, units_of
from policies.topology.pods import PodUsage

# PodGroup phases whose minResources count as held by the queue (Volcano's proportion
# plugin adds running allocations and the reservations of inqueue jobs).
HOLDING_PHASES = frozenset({"Running", "Inqueue"})


@dataclass
class QueueInfo:
    name: str
    capability: Units
    guarantee: Units
    state: str                  # Open | Closed | Closing | Unknown ("" read as Open)
    parent: str | None          # None: no parent given (root's children, or flat queues)
    status_allocated: Units

    @property
    def open(self) -> bool:
        return self.state in ("", "Open")


@dataclass
class PodGroupInfo:
    queue: str
    phase: str
    min_resources: Units
    owners: tuple[str, ...] = ()    # policies.changes.owner_keys: whose pod group it is

    @property
    def holding(self) -> bool:
        return self.phase in HOLDING_PHASES


@dataclass
class QuotaNode:
    """One node of an ElasticQuotaTree; ``path`` is the chain of names from the root."""

    name: str
    path: tuple[str, ...]
    max: Units
    min: Units
    namespaces: tuple[str, ...]

@dataclass(frozen=True)
class SupernodeLayout:
    """A supernode list laid out flat: the member slots of supernode ``k`` are
    ``members[starts[k]:ends[k]]``, in the list's order; ``owner`` maps each member
    position back to ``k``. ``disjoint``: no node belongs to two supernodes."""

    members: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray
    disjoint: bool


class QueuesAndHypernodes(PodUsage):
    """Volcano Queues and PodGroups (what each queue holds), ElasticQuotaTrees, and
    HyperNodes with the supernodes derived from them and from node labels."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        super().__init__(policy, memo)
        self.queues: dict[str, QueueInfo] = {}
        self.podgroups: dict[tuple[str, str], PodGroupInfo] = {}
        self._queue_held: dict[str, Units] = {}
        self.quota_trees: dict[tuple[str, str], list[QuotaNode]] = {}
        self.hypernodes: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
        self._hypernodes_by_label: set[str] = set()  # HyperNodes with a labelMatch member
        # The supernodes() list it was built for, and that list laid out flat.
        self._supernode_flat: tuple[list[tuple[str, np.ndarray]], SupernodeLayout] | None = None
        self.hypernode_version = 0
        self.queue_version = 0                  # a Volcano Queue came, went or changed
        self.podgroup_version = 0               # a PodGroup came, went or changed
        self.quota_version = 0                  # an ElasticQuotaTree came, went or changed

    # -- volcano queues and pod groups --------------------------------------------------
    def _apply_queue(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        if deleted:
            if self.queues.pop(name, None) is not None:
                self.queue_version += 1
            return
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        parent = spec.get("parent")
        state = status.get("state")
        queue = QueueInfo(
            name=name,
            capability=units_of(spec.get("capability")),
            guarantee=units_of(_mapping(spec.get("guarantee")).get("resource")),
            state=state if isinstance(state, str) else "",
            parent=parent if isinstance(parent, str) and parent else None,
            status_allocated=units_of(status.get("allocated")),
        )
        if self.queues.get(name) != queue:     # a status refresh that changes nothing keeps it
            self.queue_version += 1
        self.queues[name] = queue

    def _apply_podgroup(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        old = self.podgroups.pop(key, None)
        if old is not None and old.holding:
            self._hold(old, -1)
        if deleted:
            if old is not None:
                self.podgroup_version += 1
            return
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        queue = spec.get("queue")
        phase = status.get("phase")
        group = PodGroupInfo(queue=queue if isinstance(queue, str) and queue else "default",
                             phase=phase if isinstance(phase, str) else "",
                             min_resources=units_of(spec.get("minResources")),
                             owners=owner_keys(obj))
        self.podgroups[key] = group
        if group.holding:
            self._hold(group, 1)
        if group != old:                        # status refreshes come often; most change nothing
            self.podgroup_version += 1

    def _hold(self, group: PodGroupInfo, sign: int) -> None:
        held = self._queue_held.setdefault(group.queue, {})
        for r, v in group.min_resources.items():
            held[r] = held.get(r, 0) + sign * v

    def queue_held(self, name: str, exclude: frozenset[str] = frozenset()) -> Units:
        """What a queue holds now: its running and inqueue pod groups' minResources, or the
        queue's own ``status.allocated`` where that is larger. ``exclude``: owner keys
        (policies.changes) whose pod groups are left out (an UPDATE's own)."""
        held = dict(self._queue_held.get(name, {}))
        own: dict[str, int] = {}
        if exclude:
            for group in self.podgroups.values():
                if group.queue == name and group.holding and not exclude.isdisjoint(group.owners):
                    for r, v in group.min_resources.items():
                        own[r] = own.get(r, 0) + v
                        held[r] = held.get(r, 0) - v
        queue = self.queues.get(name)
        if queue is not None:
            for r, v in queue.status_allocated.items():
                held[r] = max(held.get(r, 0), v - own.get(r, 0))
        return {r: v for r, v in held.items() if v > 0}
    def queue_children(self, name: str) -> list[str]:
        return sorted(q.name for q in self.queues.values() if q.parent == name)

    def queue_ancestors(self, name: str) -> list[QueueInfo]:
        """The queue's parents, nearest first (cycles cut)."""
        out: list[QueueInfo] = []
        seen = {name}
        queue = self.queues.get(name)
        while queue is not None and queue.parent and queue.parent not in seen:
            seen.add(queue.parent)
            queue = self.queues.get(queue.parent)
            if queue is not None:
                out.append(queue)
        return out

    # -- elastic quota trees ------------------------------------------------------------
    def _apply_elasticquotatree(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        if deleted:
            if self.quota_trees.pop(key, None) is not None:
                self.quota_version += 1
            return
        nodes: list[QuotaNode] = []

        def walk(node: Any, path: tuple[str, ...], depth: int) -> None:
            if not isinstance(node, Mapping) or depth > 32:
                return
            name = str(node.get("name") or "")
            here = (*path, name)
            namespaces = node.get("namespaces")
            nodes.append(QuotaNode(name, here, units_of(node.get("max")), units_of(node.get("min")),
                                   tuple(str(n) for n in namespaces) if isinstance(namespaces, list) else ()))
            children = node.get("children")
            for child in children if isinstance(children, list) else []:
                walk(child, here, depth + 1)

        walk(_mapping(obj.get("spec")).get("root"), (), 0)
        if self.quota_trees.get(key) != nodes:
            self.quota_version += 1
        self.quota_trees[key] = nodes

    def quota_chain(self, namespace: str) -> list[QuotaNode]:
        """The quota nodes a namespace's jobs are limited by: its node and every ancestor."""
        for nodes in self.quota_trees.values():
            by_path = {n.path: n for n in nodes}
            for node in nodes:
                if namespace in node.namespaces:
                    return [by_path[node.path[:i]] for i in range(1, len(node.path) + 1)
                            if node.path[:i] in by_path]
        return []

    # -- hypernodes and supernodes ------------------------------------------------------
    def _apply_hypernode(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        if deleted:
            if self.hypernodes.pop(name, None) is None:
                return
            self._hypernodes_by_label.discard(name)
        else:
            spec = _mapping(obj.get("spec"))
            tier = spec.get("tier")
            members = spec.get("members")
            kept = [m for m in members if isinstance(m, Mapping)] if isinstance(members, list) else []
            entry = (tier if isinstance(tier, int) and not isinstance(tier, bool) else 0, kept)
            if self.hypernodes.get(name) == entry:
                return  # a status refresh: the supernodes stay as they are
            self.hypernodes[name] = entry
            if any(_mapping(_mapping(m.get("selector")).get("labelMatch")) for m in kept):
                self._hypernodes_by_label.add(name)
            else:
                self._hypernodes_by_label.discard(name)
        self.label_version += 1
        self.hypernode_version += 1

    def supernodes(self, labels: Iterable[str] | None = None) -> list[tuple[str, np.ndarray]]:
        """(name, node slots) of every supernode: nodes sharing a value of one of the
        ``labels`` (default: the policy's ``gpu.supernodeLabels``), and the node members
        of each tier-1 HyperNode."""
        label_keys = tuple(self.policy.gpu.get("supernodeLabels", []) if labels is None else labels)
        versions = self.supernode_versions(label_keys)
        key = ("supernodes", label_keys)
        cached = self.cached(key, versions)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        out: list[tuple[str, np.ndarray]] = []
        live = self.live[: self.slots]
        for label in label_keys:
            codes = self._label_codes.get(label)
            if codes is None:
                continue
            codes = np.where(live, codes[: self.slots], 0)
            order = np.argsort(codes, kind="stable")
            sorted_codes = codes[order]
            bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
            for part in np.split(order, bounds):
                code = int(codes[part[0]]) if part.size else 0
                if code:
                    out.append((f"{label}={self._label_names[label][code]}", part))
        for name, (tier, members) in sorted(self.hypernodes.items()):
            if tier != 1:
                continue
            mask = np.zeros(self.slots, dtype=bool)
            for member in members:
                if member.get("type", "Node") != "Node":
                    continue
                mask |= self._member_mask(_mapping(member.get("selector")))
            rows = np.flatnonzero(mask & live)
            if rows.size:
                out.append((f"HyperNode {name}", rows))
        self.remember(key, versions, out)
        return out

    def supernode_versions(self, label_keys: Iterable[str]) -> tuple[Any, ...]:
        """The versions :meth:`supernodes` for these label keys depends on."""
        by_label = bool(self._hypernodes_by_label)  # any label may move their members
        return (self.versions(label_keys), self.hypernode_version, self.label_version if by_label else 0)

    def supernode_layout(self, supernodes: list[tuple[str, np.ndarray]]) -> SupernodeLayout:
        """``supernodes`` (as returned by :meth:`supernodes`) laid out flat, for vectorised
        per-supernode work; kept for the last list asked about."""
        flat = self._supernode_flat
        if flat is not None and flat[0] is supernodes:
            return flat[1]
        members = np.concatenate([rows for _, rows in supernodes]) if supernodes else \
            np.zeros(0, dtype=np.intp)
        sizes = np.fromiter((rows.size for _, rows in supernodes), dtype=np.int64, count=len(supernodes))
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if supernodes else sizes
        layout = SupernodeLayout(members=members, starts=starts, ends=starts + sizes,
                                 owner=np.repeat(np.arange(len(supernodes)), sizes),
                                 disjoint=np.unique(members).size == members.size)
        self._supernode_flat = (supernodes, layout)
        return layout

    def supernode_totals(self, per_node: np.ndarray, supernodes: list[tuple[str, np.ndarray]]) -> np.ndarray:
        """``per_node`` summed over each supernode of ``supernodes`` (as returned by
        :meth:`supernodes`), in one vectorised pass instead of one sum per supernode."""
        if not supernodes:
            return np.zeros(0, dtype=per_node.dtype)
        layout = self.supernode_layout(supernodes)
        return np.add.reduceat(per_node[layout.members], layout.starts)

    def _member_mask(self, selector: Mapping[str, Any]) -> np.ndarray:
        mask = np.zeros(self.slots, dtype=bool)
        exact = _mapping(selector.get("exactMatch"))
        if isinstance(exact.get("name"), str):
            slot = self.node_index.get(exact["name"])
            if slot is not None:
                mask[slot] = True
        regex = _mapping(selector.get("regexMatch"))
        if isinstance(regex.get("pattern"), str):
            try:
                pattern = re.compile(regex["pattern"])
            except re.error:
                pattern = None
            if pattern is not None:
                for name, slot in self.node_index.items():
                    if pattern.match(name):
                        mask[slot] = True
        labels = _mapping(_mapping(selector.get("labelMatch")).get("matchLabels"))
        if labels:
            part = np.ones(self.slots, dtype=bool)
            for k, v in labels.items():
                part &= self.label_equals(str(k), [str(v)])
            mask |= part
        return mask
