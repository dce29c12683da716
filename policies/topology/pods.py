"""Pods of a :class:`policies.topology.Topology`: what each bound pod holds, and the
``used`` row of its node kept as the sum of them."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.changes import owner_keys
from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.quantity import scheduler_units
from policies.resources import pod_requests
from policies.topology.nodes import _INT64_MAX, NodeArrays, _key, _mapping

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
_MAX_SHAPES = 10_000
_MAX_OWNERS = 65_536
# A pod's request in one resource: at most this, so that the sums of 1,000,000 pods stay in range.
_POD_UNITS_MAX = _INT64_MAX // 2**20

log = logging.getLogger("gpugate.topology")


@dataclass(slots=True)
class _Pod:
    """What a bound pod holds. Small on purpose: a cluster has 100,000 of them."""

    node: str                   # the node it is bound to
    request: tuple[tuple[int, int], ...]   # (resource column, units), pods: 1 included; shared
    fingerprint: int            # hash of what the request depends on
    owners: tuple[str, ...]     # policies.changes.owner_keys; shared by the pods of one owner


class PodUsage(NodeArrays):
    """Bound pods and what they hold: each node's ``used`` row is the sum of its pods'
    requests, kept up to date by pod events."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        super().__init__(policy, memo)
        # Requests by the text of what they are computed from (see _resource_text).
        self._shapes: dict[str, tuple[tuple[int, int], ...]] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        # owner_keys tuples, one object per owner, shared by its pods (bounded)
        self._owner_tuples: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._pods_on: dict[str, set[tuple[str, str]]] = {}
        # owner key -> its bound pods (policies.changes.owner_keys), like _pods_on per node
        self._pods_of: dict[str, set[tuple[str, str]]] = {}

    def _bound_requests(self, node: str) -> Iterator[tuple[int, int]]:
        for pod_key in self._pods_on.get(node, ()):
            yield from self._pods[pod_key].request

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
        for owner in shared:
            self._pods_of.setdefault(owner, set()).add(key)
        slot = self.node_index.get(node)
        if slot is not None:
            for col, v in request:
                self.used[slot, col] += v
            self.used_version += 1

    def _release(self, key: tuple[str, str], pod: _Pod) -> None:
        for index, name in ((self._pods_on, pod.node), *((self._pods_of, owner) for owner in pod.owners)):
            keys = index.get(name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[name]
        slot = self.node_index.get(pod.node)
        if slot is not None:
            for col, v in pod.request:
                self.used[slot, col] -= v
            self.used_version += 1
    def own_usage(self, owners: frozenset[str]) -> np.ndarray | None:
        """Per node slot, what the bound pods filed under any of ``owners`` hold (see
        policies.changes.owner_keys); None when they hold nothing. Asked by a spec-changing
        UPDATE and by an audit of each partly placed gang."""
        rows: np.ndarray | None = None
        keys = set().union(*(self._pods_of.get(owner, ()) for owner in owners))
        for key in keys:
            pod = self._pods[key]
            slot = self.node_index.get(pod.node)
            if slot is None:
                continue
            if rows is None:
                rows = np.zeros((self.slots, self.alloc.shape[1]), dtype=np.int64)
            for col, v in pod.request:
                rows[slot, col] += v
        return rows


def _resource_text(spec: Mapping[str, Any]) -> str:
    """Everything of a pod spec its effective request depends on, as comparable text."""
    parts: list[Any] = [spec.get("overhead"), spec.get("resources")]   # pod-level resources count too
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            if isinstance(c, Mapping):
                parts.append((c.get("resources"), c.get("restartPolicy")))
    return repr(parts)
