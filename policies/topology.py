"""A cluster's scheduling topology, held as numpy arrays and updated by events.

Nodes live in *slots* (rows): ``alloc`` and ``used`` are ``slots x resources`` int64
matrices in scheduler units (:func:`policies.quantity.scheduler_units`: CPU in
millicores, everything else in units, rounded up). ``used`` is the sum of the
effective requests (:func:`policies.resources.pod_requests`) of the non-terminated pods
bound to the node, plus one ``pods`` each. Labels are kept per key as an int32 code
column (0: absent) and hard taints as a boolean column per distinct taint, so that a
node selector or a toleration list becomes a few array comparisons.

Besides nodes: Volcano Queues and PodGroups (what each queue holds), the
ElasticQuotaTree (kube-queue quotas) and HyperNodes (supernodes by tier).

Events are cheap: a slot is found through a name index, rows are written in place,
arrays grow geometrically, and derived data (eligibility masks, supernodes) is cached
against version counters of exactly what it depends on: the node set, taints,
cordons, and each label key separately, so that a label some agent rewrites every
minute (GPU feature discovery's timestamp) does not throw away the masks of selectors
that never look at it. Heartbeats move nothing. Not thread-safe.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.changes import owner_keys
from policies.config import Policy
from policies.quantity import QuantityError, parse_quantity, scheduler_units
from policies.resources import pod_requests

__all__ = ["Topology", "ClusterSnapshot", "SupernodeLayout", "QueueInfo", "PodGroupInfo", "QuotaNode",
           "Taint", "KINDS_WATCHED", "HARD_EFFECTS", "units_of"]

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# PodGroup phases whose minResources count as held by the queue (Volcano's proportion
# plugin adds running allocations and the reservations of inqueue jobs).
HOLDING_PHASES = frozenset({"Running", "Inqueue"})
# (apiVersion group, kind) of everything the topology reads; anything else is ignored.
KINDS_WATCHED: dict[str, str] = {
    "Node": "", "Pod": "", "Queue": "scheduling.volcano.sh", "PodGroup": "scheduling.volcano.sh",
    "HyperNode": "topology.volcano.sh", "ElasticQuotaTree": "scheduling.sigs.k8s.io",
}
_BASE_RESOURCES = ("cpu", "memory", "pods")
_NO_LABELS = hash(frozenset())
_MAX_SHAPES = 10_000
_MAX_OWNERS = 65_536
DEFAULT_MAX_PODS = 110   # the kubelet's default when a node does not report ``pods``
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A pod's request in one resource: at most this, so that the sums of 1,000,000 pods stay in range.
_POD_UNITS_MAX = _INT64_MAX // 2**20

log = logging.getLogger("gpugate.topology")

Units = dict[str, int]


def units_of(values: Any) -> Units:
    """A resource list (``{cpu: "4", memory: 6Gi}``) in scheduler units; bad values skipped.

    Topology objects come from the API server, which has validated them already; a
    value that still does not parse is dropped rather than guessed.
    """
    out: Units = {}
    if not isinstance(values, Mapping):
        return out
    for name, raw in values.items():
        try:
            out[str(name)] = scheduler_units(str(name), parse_quantity(raw))
        except QuantityError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


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


@dataclass(slots=True)
class _Pod:
    """What a bound pod holds. Small on purpose: a cluster has 100,000 of them."""

    node: str                   # the node it is bound to
    request: tuple[tuple[int, int], ...]   # (resource column, units), pods: 1 included; shared
    fingerprint: int            # hash of what the request depends on
    owners: tuple[str, ...]     # policies.changes.owner_keys; shared by the pods of one owner


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) else "", name if isinstance(name, str) else "")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _taints(value: Any) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, Mapping) and item.get("effect") in HARD_EFFECTS:
            out.append(Taint(str(item.get("key") or ""), str(item.get("value") or ""), str(item["effect"])))
    return tuple(out)


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


# Bounds of the derived-data cache (see Topology.remember).
CACHE_ENTRIES = 1024
CACHE_BYTES = 16 * 1024 * 1024


class Topology:
    """Nodes, pods, queues, pod groups, quotas and hypernodes of one cluster."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        # The supernodes() list it was built for, and that list laid out flat.
        self._supernode_flat: tuple[list[tuple[str, np.ndarray]], SupernodeLayout] | None = None
        self.resources: list[str] = list(_BASE_RESOURCES)
        self.res_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        cap = 16
        self.alloc = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self.used = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self.live = np.zeros(cap, dtype=bool)
        self.unschedulable = np.zeros(cap, dtype=bool)
        self.slots = 0                          # rows in use (live or freed)
        self.node_index: dict[str, int] = {}
        self.node_names: list[str | None] = []
        self._free_slots: list[int] = []
        # Per slot, hashes to tell a heartbeat from a change without keeping the dicts
        # (labels live in the code columns below; 50 labels x 10,000 nodes add up).
        self._label_hash: list[int] = []
        self._node_taints: list[tuple[Taint, ...]] = []
        self._alloc_hash: list[int | None] = []
        # Requests by the text of what they are computed from (see _resource_text).
        self._shapes: dict[str, tuple[tuple[int, int], ...]] = {}
        # label key -> int32 codes per slot (0 = absent); value tables per key
        self._label_codes: dict[str, np.ndarray] = {}
        self._label_values: dict[str, dict[str, int]] = {}
        self._label_names: dict[str, list[str]] = {}
        # distinct hard taints -> column of a bool matrix
        self.taint_index: dict[Taint, int] = {}
        self.taint_matrix = np.zeros((cap, 0), dtype=bool)
        # Version counters: derived data remembers the versions it was computed from.
        self.label_version = 0                  # any eligibility input changed
        self.nodeset_version = 0                # a node came or went (slots, names)
        self.taint_version = 0
        self.cordon_version = 0
        self.hypernode_version = 0
        self.alloc_version = 0                  # a node's allocatable changed
        self.used_version = 0                   # what the pods on a node hold changed
        self.queue_version = 0                  # a Volcano Queue came, went or changed
        self.podgroup_version = 0               # a PodGroup came, went or changed
        self.quota_version = 0                  # an ElasticQuotaTree came, went or changed
        self._key_versions: dict[str, int] = {}  # per label key
        self.cache: dict[Any, Any] = {}         # derived data: key -> (versions, value, bytes)
        self.cache_bytes = 0
        # Whole answers (policies.feasibility.OutcomeMemo), checked against state_versions().
        self.outcome_memo: Any = None
        self._hypernodes_by_label: set[str] = set()  # HyperNodes with a labelMatch member

        self._pods: dict[tuple[str, str], _Pod] = {}
        # owner_keys tuples, one object per owner, shared by its pods (bounded)
        self._owner_tuples: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._pods_on: dict[str, set[tuple[str, str]]] = {}
        self.queues: dict[str, QueueInfo] = {}
        self.podgroups: dict[tuple[str, str], PodGroupInfo] = {}
        self._queue_held: dict[str, Units] = {}
        self.quota_trees: dict[tuple[str, str], list[QuotaNode]] = {}
        self.hypernodes: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
        # Functions, not bound methods: a Topology that refers to itself is a reference cycle,
        # freed only by a full collection (a replaced --cluster snapshot in the webhook).
        cls = type(self)
        self._handlers = {"Node": cls._apply_node, "Pod": cls._apply_pod, "Queue": cls._apply_queue,
                          "PodGroup": cls._apply_podgroup, "HyperNode": cls._apply_hypernode,
                          "ElasticQuotaTree": cls._apply_elasticquotatree}

    def _stores(self) -> dict[str, Mapping[Any, Any]]:
        """Per watched kind, the mapping whose keys are the objects held (for relists)."""
        return {"Node": self.node_index, "Pod": self._pods, "Queue": self.queues,
                "PodGroup": self.podgroups, "HyperNode": self.hypernodes,
                "ElasticQuotaTree": self.quota_trees}

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]], policy: Policy | None = None) -> Topology:
        topo = cls(policy)
        pods: list[dict[str, Any]] = []
        for obj in objects:
            if isinstance(obj, Mapping) and obj.get("kind") == "Pod":
                pods.append(obj)  # nodes first, so pods land on known rows
            else:
                topo.apply("ADDED", obj)
        for pod in pods:
            topo.apply("ADDED", pod)
        return topo

    def counts(self) -> dict[str, int]:
        return {"Node": len(self.node_index), "Pod": len(self._pods), "Queue": len(self.queues),
                "PodGroup": len(self.podgroups), "HyperNode": len(self.hypernodes),
                "ElasticQuotaTree": len(self.quota_trees)}

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        """One watch event. Unknown kinds and malformed objects are ignored."""
        if not isinstance(obj, Mapping):
            return
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str):
            return
        group = KINDS_WATCHED.get(kind)
        if group is None or (api_version.rpartition("/")[0] if "/" in api_version else "") != group:
            return
        self._handlers[kind](self, obj, event == "DELETED")

    def replace_all(self, kind: str, objects: Iterable[dict[str, Any]]) -> None:
        """After a relist: objects of ``kind`` absent from ``objects`` are removed."""
        store = self._stores().get(kind)
        if store is None:
            return
        items = [o for o in objects if isinstance(o, Mapping)]
        seen = {_key(o) for o in items}
        # Cluster-scoped kinds are keyed by name alone; namespaced ones by (namespace, name).
        stale = [k if isinstance(k, tuple) else ("", k) for k in store]
        stale = [k for k in stale if k not in seen]
        group = KINDS_WATCHED[kind]
        api_version = f"{group}/v1" if group else "v1"
        for ns, name in stale:
            self.apply("DELETED", {"apiVersion": api_version, "kind": kind,
                                   "metadata": {"namespace": ns, "name": name}})
        nodes_first = sorted(items, key=lambda o: o.get("kind") == "Pod")
        for obj in nodes_first:
            self.apply("MODIFIED", obj)

    # -- resources ------------------------------------------------------------------
    def column(self, resource: str) -> int:
        """The column of a resource, added (rarely) when first seen."""
        index = self.res_index.get(resource)
        if index is None:
            index = len(self.resources)
            self.resources.append(resource)
            self.res_index[resource] = index
            pad = np.zeros((self.alloc.shape[0], 1), dtype=np.int64)
            self.alloc = np.hstack([self.alloc, pad])
            self.used = np.hstack([self.used, pad])
            self.alloc_version += 1
            self.used_version += 1
        return index

    def vector(self, units: Mapping[str, int]) -> np.ndarray:
        """A resource vector over the current columns (new resources get columns)."""
        cols = [(self.column(r), v) for r, v in units.items()]
        out = np.zeros(len(self.resources), dtype=np.int64)
        for c, v in cols:
            out[c] = v
        return out

    @property
    def n_nodes(self) -> int:
        return len(self.node_index)

    def cluster_total(self, include_cordoned: bool = False) -> np.ndarray:
        """Allocatable summed over live (and, unless asked, schedulable) nodes. Read-only:
        cached until a node comes, goes, is cordoned or changes its allocatable."""
        key = ("cluster_total", include_cordoned)
        versions = (self.nodeset_version, self.cordon_version, self.alloc_version)
        cached = self.cached(key, versions)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        rows = self.live[: self.slots]
        if not include_cordoned:
            rows = rows & ~self.unschedulable[: self.slots]
        total = self.alloc[: self.slots][rows].sum(axis=0)
        total.setflags(write=False)
        self.remember(key, versions, total)
        return total

    # -- nodes ----------------------------------------------------------------------
    def _grow(self) -> None:
        cap = self.alloc.shape[0] * 2
        for name in ("alloc", "used", "taint_matrix"):
            old = getattr(self, name)
            new = np.zeros((cap, old.shape[1]), dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        for name in ("live", "unschedulable"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=bool)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        for key, codes in self._label_codes.items():
            new_codes = np.zeros(cap, dtype=np.int32)
            new_codes[: codes.shape[0]] = codes
            self._label_codes[key] = new_codes

    def _new_slot(self, name: str) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
            self.node_names[slot] = name
        else:
            if self.slots == self.alloc.shape[0]:
                self._grow()
            slot = self.slots
            self.slots += 1
            self.node_names.append(name)
            self._label_hash.append(_NO_LABELS)
            self._node_taints.append(())
            self._alloc_hash.append(None)
        self.node_index[name] = slot
        self.live[slot] = True
        self.label_version += 1
        self.nodeset_version += 1
        return slot

    def _set_labels(self, slot: int, labels: dict[str, str]) -> None:
        digest = hash(frozenset(labels.items()))
        if digest == self._label_hash[slot]:
            return
        versions = self._key_versions
        for key, codes in self._label_codes.items():
            if codes[slot] and key not in labels:
                codes[slot] = 0
                versions[key] = versions.get(key, 0) + 1
        for key, value in labels.items():
            found = self._label_codes.get(key)
            if found is None:
                key = sys.intern(key)
                codes = self._label_codes[key] = np.zeros(self.alloc.shape[0], dtype=np.int32)
                self._label_values[key] = {}
                self._label_names[key] = [""]
            else:
                codes = found
            table = self._label_values[key]
            code = table.get(value)
            if code is None:
                code = table[value] = len(self._label_names[key])
                self._label_names[key].append(value)
            if codes[slot] != code:
                codes[slot] = code
                versions[key] = versions.get(key, 0) + 1
        self._label_hash[slot] = digest
        self.label_version += 1

    def _set_taints(self, slot: int, taints: tuple[Taint, ...]) -> None:
        if self._node_taints[slot] == taints:
            return
        self.taint_matrix[slot, :] = False
        for taint in taints:
            col = self.taint_index.get(taint)
            if col is None:
                col = self.taint_index[taint] = self.taint_matrix.shape[1]
                pad = np.zeros((self.taint_matrix.shape[0], 1), dtype=bool)
                self.taint_matrix = np.hstack([self.taint_matrix, pad])
            self.taint_matrix[slot, col] = True
        self._node_taints[slot] = taints
        self.label_version += 1
        self.taint_version += 1

    def _apply_node(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        slot = self.node_index.get(name)
        if deleted:
            if slot is None:
                return
            del self.node_index[name]
            self.node_names[slot] = None
            self.live[slot] = False
            self.unschedulable[slot] = False
            self.alloc[slot] = 0
            self.used[slot] = 0
            self.used_version += 1
            self._set_labels(slot, {})
            self._set_taints(slot, ())
            self._alloc_hash[slot] = None
            self._free_slots.append(slot)
            self.label_version += 1
            self.nodeset_version += 1
            self.alloc_version += 1
            return
        meta = _mapping(obj.get("metadata"))
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        raw = status.get("allocatable")
        if raw is None:
            raw = status.get("capacity")
        raw_hash = hash(repr(raw))
        units: Units | None = None
        if slot is None or raw_hash != self._alloc_hash[slot]:
            units = units_of(raw)
            units.setdefault("pods", DEFAULT_MAX_PODS)
            too_large = sorted(r for r, v in units.items() if not _INT64_MIN <= v <= _INT64_MAX)
            if too_large:
                # all of the node or none of it: a half-applied node would skew every verdict
                log.warning("node %s left out of the topology: allocatable %s beyond 64-bit range",
                            name[:253], ", ".join(too_large)[:200])
                self._apply_node(obj, deleted=True)
                return
        if slot is None:
            slot = self._new_slot(name)
            fresh = True
        else:
            fresh = False
        self._set_labels(slot, _str_map(meta.get("labels")))
        self._set_taints(slot, _taints(spec.get("taints")))
        unschedulable = spec.get("unschedulable") is True
        if bool(self.unschedulable[slot]) != unschedulable:
            self.unschedulable[slot] = unschedulable
            self.label_version += 1
            self.cordon_version += 1
        if units is not None:
            row = np.zeros(len(self.resources), dtype=np.int64)
            for r, v in units.items():
                col = self.column(r)
                if col >= row.shape[0]:
                    row = np.pad(row, (0, col + 1 - row.shape[0]))
                row[col] = v
            self.alloc[slot, :] = 0
            self.alloc[slot, : row.shape[0]] = row
            self._alloc_hash[slot] = raw_hash
            self.alloc_version += 1
        if fresh:
            self.used[slot] = 0
            for pod_key in self._pods_on.get(name, ()):
                for col, v in self._pods[pod_key].request:
                    self.used[slot, col] += v
            self.used_version += 1

    # -- pods -----------------------------------------------------------------------
    def _apply_pod(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        old = self._pods.get(key)
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        node = spec.get("nodeName")
        active = (not deleted and isinstance(node, str) and bool(node)
                  and status.get("phase") not in TERMINATED_PHASES)
        if not active:
            if old is not None:
                self._release(key, old)
                del self._pods[key]
            return
        assert isinstance(node, str)
        resources = _resource_text(spec)
        fingerprint = hash(resources)
        if old is not None and old.node == node and old.fingerprint == fingerprint:
            return  # status-only update: nothing the scheduler counts changed
        if old is not None:
            self._release(key, old)
        request = self._shapes.get(resources)
        if request is None:  # a shape not seen yet; replicas of one template share the rest
            requests, _errors = pod_requests(spec, "/spec")
            units = {self.column(r): scheduler_units(r, q) for r, q in requests.items() if q > 0}
            if any(v > _POD_UNITS_MAX for v in units.values()):
                # the API server would not run it anywhere; counting it would overflow the sums
                log.warning("pod %s/%s left out of the topology: a request beyond 64-bit range",
                            key[0][:63], key[1][:253])
                if old is not None:   # released above
                    del self._pods[key]
                return
            pods_col = self.res_index["pods"]
            units[pods_col] = units.get(pods_col, 0) + 1
            request = tuple(sorted(units.items()))
            if len(self._shapes) > _MAX_SHAPES:  # bounded: one-off shapes must not pile up
                self._shapes.clear()
            self._shapes[resources] = request
        node = sys.intern(node)
        key = (sys.intern(key[0]), key[1])
        owners = owner_keys(obj)
        shared = self._owner_tuples.get(owners)
        if shared is None:
            if len(self._owner_tuples) >= _MAX_OWNERS:
                self._owner_tuples.clear()
            shared = self._owner_tuples[owners] = owners
        self._pods[key] = _Pod(node, request, fingerprint, shared)
        self._pods_on.setdefault(node, set()).add(key)
        slot = self.node_index.get(node)
        if slot is not None:
            for col, v in request:
                self.used[slot, col] += v
            self.used_version += 1

    def _release(self, key: tuple[str, str], pod: _Pod) -> None:
        on = self._pods_on.get(pod.node)
        if on is not None:
            on.discard(key)
            if not on:
                del self._pods_on[pod.node]
        slot = self.node_index.get(pod.node)
        if slot is not None:
            for col, v in pod.request:
                self.used[slot, col] -= v
            self.used_version += 1

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

    def own_usage(self, owners: frozenset[str]) -> np.ndarray | None:
        """Per node slot, what the bound pods filed under any of ``owners`` hold (see
        policies.changes.owner_keys); None when they hold nothing. A scan of every pod:
        only a spec-changing UPDATE asks."""
        rows: np.ndarray | None = None
        for pod in self._pods.values():
            if pod.owners and not owners.isdisjoint(pod.owners):
                slot = self.node_index.get(pod.node)
                if slot is None:
                    continue
                if rows is None:
                    rows = np.zeros((self.slots, self.alloc.shape[1]), dtype=np.int64)
                for col, v in pod.request:
                    rows[slot, col] += v
        return rows

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

    # -- label and taint queries (used by policies.feasibility) --------------------------
    def label_equals(self, key: str, values: Iterable[str]) -> np.ndarray:
        """Slots whose label ``key`` has one of ``values``."""
        codes = self._label_codes.get(key)
        if codes is None:
            return np.zeros(self.slots, dtype=bool)
        table = self._label_values[key]
        wanted = [table[v] for v in values if v in table]
        if not wanted:
            return np.zeros(self.slots, dtype=bool)
        if len(wanted) == 1:
            return codes[: self.slots] == wanted[0]  # the common case, ~10x cheaper than isin
        return np.isin(codes[: self.slots], wanted)

    def label_exists(self, key: str) -> np.ndarray:
        codes = self._label_codes.get(key)
        if codes is None:
            return np.zeros(self.slots, dtype=bool)
        return codes[: self.slots] != 0

    def label_numbers(self, key: str) -> np.ndarray:
        """The label's value as an integer per slot (NaN when absent or not an integer)."""
        codes = self._label_codes.get(key)
        if codes is None:
            return np.full(self.slots, np.nan)
        table = np.array([_as_int(v) for v in self._label_names[key]], dtype=float)
        return table[codes[: self.slots]]  # type: ignore[no-any-return]

    def name_in(self, names: Iterable[str]) -> np.ndarray:
        mask = np.zeros(self.slots, dtype=bool)
        for name in names:
            slot = self.node_index.get(name)
            if slot is not None:
                mask[slot] = True
        return mask

    def node_labels(self, slot: int) -> dict[str, str]:
        """A node's labels, read back from the code columns."""
        return {key: self._label_names[key][int(codes[slot])]
                for key, codes in self._label_codes.items() if codes[slot]}

    def versions(self, label_keys: Iterable[str] = ()) -> tuple[int, ...]:
        """The versions node eligibility depends on: node set, taints, cordons, and the
        given label keys."""
        return (self.nodeset_version, self.taint_version, self.cordon_version,
                *(self._key_versions.get(k, 0) for k in label_keys))

    def state_versions(self, label_keys: Iterable[str] = ()) -> tuple[int, ...]:
        """Every version counter of the snapshot, labels only for ``label_keys``: what an
        answer computed from all the snapshot holds depends on. Every mutation path moves
        one of them (a change of nothing, such as a heartbeat, moves none)."""
        return (self.nodeset_version, self.taint_version, self.cordon_version, self.alloc_version,
                self.used_version, self.hypernode_version, self.queue_version, self.podgroup_version,
                self.quota_version, *(self._key_versions.get(k, 0) for k in label_keys))

    def state_stamp(self) -> int:
        """One number that moves whenever any version counter does: they only grow, and a
        label key's version never moves without ``label_version``. Equal stamps, equal
        :meth:`state_versions` and :meth:`supernode_versions` whatever the keys."""
        return (self.label_version + self.nodeset_version + self.taint_version + self.cordon_version
                + self.hypernode_version + self.alloc_version + self.used_version + self.queue_version
                + self.podgroup_version + self.quota_version)

    def cached(self, key: Any, versions: Any) -> Any:
        """Derived data remembered under ``key``, if computed from these ``versions``."""
        entry = self.cache.get(key)
        if entry is not None and entry[0] == versions:
            # A hit moves the entry to the back (least recently used out first), so data
            # every review reads is not evicted by a stream of one-off job shapes.
            self.cache[key] = self.cache.pop(key)
            return entry[1]
        return None

    def remember(self, key: Any, versions: Any, value: Any) -> None:
        # Bounded in entries and in bytes, oldest out first: jobs of ever new shapes each
        # leave per-node arrays behind (80 KB each at 10,000 nodes), which must not grow
        # the server's memory.
        size = _nbytes(value)
        old = self.cache.pop(key, None)
        if old is not None:
            self.cache_bytes -= old[2]
        while self.cache and (len(self.cache) >= CACHE_ENTRIES or self.cache_bytes + size > CACHE_BYTES):
            self.cache_bytes -= self.cache.pop(next(iter(self.cache)))[2]
        self.cache[key] = (versions, value, size)
        self.cache_bytes += size


def _nbytes(value: Any) -> int:
    """Roughly what a cached value holds: its arrays' bytes, a little for anything else."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return 64 + sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return 64 + sum(_nbytes(v) for v in value.values())
    return 64


def _as_int(text: str) -> float:
    try:
        return float(int(text))
    except ValueError:
        return float("nan")


def _resource_text(spec: Mapping[str, Any]) -> str:
    """Everything of a pod spec its effective request depends on, as comparable text."""
    parts: list[Any] = [spec.get("overhead")]
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            if isinstance(c, Mapping):
                parts.append((c.get("resources"), c.get("restartPolicy")))
    return repr(parts)


@dataclass
class ClusterSnapshot:
    """One member cluster: the elements of :attr:`policies.engine.Context.clusters`."""

    name: str
    topology: Topology
    # time.monotonic() of the last confirmed contact with the source; None: a static file,
    # never stale.
    updated_at: float | None = None

    def stale(self, now: float, after_seconds: float) -> bool:
        return self.updated_at is not None and now - self.updated_at > after_seconds
