"""The queues of schedulers other than Volcano: Kueue LocalQueues (the namespace's entry to a
ClusterQueue) with Kueue's quota objects (:mod:`policies.topology.kueue`) and the labels of the
Namespaces (whether Kueue manages a namespace's jobs), and KAI Scheduler Queues (hierarchical,
with per-resource limits)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.topology.kueue import KueueObjects
from policies.topology.nodes import _key, _mapping
from policies.topology.queues import QueuesAndHypernodes

# KAI Queue resources and their units (the CRD's own descriptions): cpu in millicpus, memory
# in megabytes (10^6 bytes), gpu in devices (fractions allowed); -1: no limit.
KAI_RESOURCES: Mapping[str, tuple[str, int]] = {
    "cpu": ("cpu", 1), "memory": ("memory", 1_000_000), "gpu": ("nvidia.com/gpu", 1)}


@dataclass(frozen=True)
class KaiQueueInfo:
    name: str
    parent: str | None
    limits: Mapping[str, Fraction]      # scheduler units (millicores, bytes, devices); absent: none


class SchedulerQueues(QueuesAndHypernodes, KueueObjects):
    """Kueue LocalQueues and KAI Queues, besides Volcano's (a queue of one of them moves
    ``queue_version`` like a Volcano Queue)."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        super().__init__(policy, memo)
        # (namespace, name) -> the ClusterQueue it points at
        self.local_queues: dict[tuple[str, str], str] = {}
        # LocalQueues whose stopPolicy is Hold or HoldAndDrain: Kueue admits nothing through them
        self.stopped_local_queues: set[tuple[str, str]] = set()
        self.kai_queues: dict[str, KaiQueueInfo] = {}
        # namespace -> its labels. Read per review, never by a kept answer: no version of its own.
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        self._init_kueue()

    def _apply_namespace(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        if deleted:
            self.namespace_labels.pop(name, None)
            return
        labels = _mapping(_mapping(obj.get("metadata")).get("labels"))
        self.namespace_labels[name] = {str(k): v for k, v in labels.items() if isinstance(v, str)}

    def _apply_local_queue(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        if not key[1]:
            return
        if deleted:
            self.stopped_local_queues.discard(key)
            if self.local_queues.pop(key, None) is not None:
                self.queue_version += 1
            return
        spec = _mapping(obj.get("spec"))
        cluster_queue, stop = spec.get("clusterQueue"), spec.get("stopPolicy")
        value = cluster_queue if isinstance(cluster_queue, str) else ""
        stopped = isinstance(stop, str) and stop != "None"
        if self.local_queues.get(key) != value or (key in self.stopped_local_queues) != stopped:
            self.queue_version += 1
        self.local_queues[key] = value
        if stopped:
            self.stopped_local_queues.add(key)
        else:
            self.stopped_local_queues.discard(key)

    def _apply_kai_queue(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        if deleted:
            if self.kai_queues.pop(name, None) is not None:
                self.queue_version += 1
            return
        spec = _mapping(obj.get("spec"))
        limits: dict[str, Fraction] = {}
        for field, (resource, scale) in KAI_RESOURCES.items():
            limit = _mapping(_mapping(spec.get("resources")).get(field)).get("limit")
            # a number of the CRD's unit; -1 (or any negative, or not a number): no limit
            if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit >= 0:
                limits[resource] = Fraction(limit) * scale
        parent = spec.get("parentQueue")
        queue = KaiQueueInfo(name, parent if isinstance(parent, str) and parent else None, limits)
        if self.kai_queues.get(name) != queue:
            self.queue_version += 1
        self.kai_queues[name] = queue

    def kai_limits(self, name: str) -> dict[str, tuple[Fraction, str]]:
        """The limits a KAI queue's jobs can never exceed: per resource the least of its own
        and its ancestors' (cycles cut), with the queue that sets it."""
        out: dict[str, tuple[Fraction, str]] = {}
        seen: set[str] = set()
        queue = self.kai_queues.get(name)
        while queue is not None and queue.name not in seen:
            seen.add(queue.name)
            for resource, limit in queue.limits.items():
                if resource not in out or limit < out[resource][0]:
                    out[resource] = (limit, queue.name)
            queue = self.kai_queues.get(queue.parent) if queue.parent else None
        return out
