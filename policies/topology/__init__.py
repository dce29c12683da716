"""A cluster's scheduling topology, held as numpy arrays and updated by events.

Nodes live in *slots* (rows): ``alloc`` and ``used`` are ``slots x resources`` int64
matrices in scheduler units (:func:`policies.quantity.scheduler_units`: CPU in
millicores, everything else in units, rounded up). ``used`` is the sum of the
effective requests (:func:`policies.resources.pod_requests`) of the non-terminated pods
bound to the node, plus one ``pods`` each. Labels are kept per key as an int32 code
column (0: absent) and hard taints as a boolean column per distinct taint, so that a
node selector or a toleration list becomes a few array comparisons.

Besides nodes: the labels of Namespaces, Volcano Queues and PodGroups (what each queue holds), the
ElasticQuotaTree (kube-queue quotas), HyperNodes (supernodes by tier), Kueue LocalQueues,
ClusterQueues, Cohorts, ResourceFlavors and Topologies, KAI Scheduler Queues, DRA DeviceClasses,
ResourceSlices, ResourceClaims and their templates, and what other objects
name: Kubeflow Trainer runtimes and the Workload API's Workloads and PodGroups.

Events are cheap: a slot is found through a name index, rows are written in place,
arrays grow geometrically, and derived data (eligibility masks, supernodes) is cached
against version counters of exactly what it depends on: the node set, taints,
cordons, and each label key separately, so that a label some agent rewrites every
minute (GPU feature discovery's timestamp) does not throw away the masks of selectors
that never look at it. Heartbeats move nothing. Not thread-safe.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.topology.devices import DEVICE_KINDS, DeviceObjects
from policies.topology.named import NAMED, NamedObjects
from policies.topology.nodes import HARD_EFFECTS, Taint, Units, _key, units_of
from policies.topology.pods import TERMINATED_PHASES
from policies.topology.queues import (
    HOLDING_PHASES,
    PodGroupInfo,
    QueueInfo,
    QuotaNode,
    SupernodeLayout,
)
from policies.topology.scheduler_queues import KaiQueueInfo

__all__ = ["Topology", "ClusterSnapshot", "SupernodeLayout", "QueueInfo", "PodGroupInfo", "QuotaNode",
           "KaiQueueInfo", "Taint", "WATCHED", "WATCHED_KINDS", "HARD_EFFECTS", "HOLDING_PHASES",
           "TERMINATED_PHASES", "Units", "units_of"]

# (apiVersion group, kind) of everything the topology reads -> the name it is filed under
# (its store, counts and metrics: two kinds are called Queue); anything else is ignored.
WATCHED: dict[tuple[str, str], str] = {
    ("", "Node"): "Node", ("", "Pod"): "Pod", ("", "Namespace"): "Namespace",
    ("scheduling.volcano.sh", "Queue"): "Queue", ("scheduling.volcano.sh", "PodGroup"): "PodGroup",
    ("topology.volcano.sh", "HyperNode"): "HyperNode",
    ("scheduling.sigs.k8s.io", "ElasticQuotaTree"): "ElasticQuotaTree",
    ("kueue.x-k8s.io", "LocalQueue"): "LocalQueue",
    ("kueue.x-k8s.io", "ClusterQueue"): "ClusterQueue", ("kueue.x-k8s.io", "Cohort"): "Cohort",
    ("kueue.x-k8s.io", "ResourceFlavor"): "ResourceFlavor", ("kueue.x-k8s.io", "Topology"): "KueueTopology",
    ("kueue.x-k8s.io", "AdmissionCheck"): "AdmissionCheck",
    ("scheduling.run.ai", "Queue"): "KAIQueue",
    ("trainer.kubeflow.org", "TrainingRuntime"): "TrainingRuntime",
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): "ClusterTrainingRuntime",
    ("scheduling.k8s.io", "Workload"): "Workload",
    ("scheduling.k8s.io", "PodGroup"): "WorkloadAPIPodGroup",
    **{("resource.k8s.io", kind): kind for kind in DEVICE_KINDS},
}
# name -> (group, kind)
WATCHED_KINDS: dict[str, tuple[str, str]] = {name: group_kind for group_kind, name in WATCHED.items()}

# Bounds of the derived-data memo (see NodeArrays.remember), read when a Topology is made.
CACHE_ENTRIES = 1024
CACHE_BYTES = 16 * 1024 * 1024


class Topology(NamedObjects, DeviceObjects):
    """Nodes, pods, queues, pod groups, quotas and hypernodes of one cluster."""

    def __init__(self, policy: Policy | None = None) -> None:
        super().__init__(policy or Policy(), SnapshotMemo(CACHE_ENTRIES, CACHE_BYTES))
        # Whole answers (policies.feasibility.OutcomeMemo), checked against state_versions().
        self.outcome_memo: Any = None
        self._init_devices()
        # Functions, not bound methods: a Topology that refers to itself is a reference cycle,
        # freed only by a full collection (a replaced --cluster snapshot in the webhook).
        cls = type(self)
        self._handlers: dict[str, Callable[[Topology, Mapping[str, Any], bool], None]] = {
                          "Node": cls._apply_node, "Pod": cls._apply_pod, "Queue": cls._apply_queue,
                          "Namespace": cls._apply_namespace,
                          "PodGroup": cls._apply_podgroup, "HyperNode": cls._apply_hypernode,
                          "ElasticQuotaTree": cls._apply_elasticquotatree,
                          "LocalQueue": cls._apply_local_queue, "KAIQueue": cls._apply_kai_queue,
                          "ClusterQueue": cls._apply_cluster_queue, "Cohort": cls._apply_cohort,
                          "ResourceFlavor": cls._apply_resource_flavor,
                          "KueueTopology": cls._apply_kueue_topology,
                          "AdmissionCheck": cls._apply_admission_check,
                          "DeviceClass": cls._apply_device_class, "ResourceSlice": cls._apply_resource_slice,
                          "ResourceClaim": cls._apply_resource_claim,
                          "ResourceClaimTemplate": cls._apply_claim_template,
                          **{name: functools.partial(cls._apply_named, name=name) for name in NAMED}}

    @property
    def cache(self) -> dict[Any, tuple[Any, Any, int]]:
        """The derived data held: key -> (versions, value, bytes)."""
        return self.memo.entries

    @property
    def cache_bytes(self) -> int:
        return self.memo.bytes

    def _stores(self) -> dict[str, Mapping[Any, Any]]:
        """Per watched kind, the mapping whose keys are the objects held (for relists)."""
        return {"Node": self.node_index, "Pod": self._pods, "Namespace": self.namespace_labels,
                "Queue": self.queues,
                "PodGroup": self.podgroups, "HyperNode": self.hypernodes,
                "ElasticQuotaTree": self.quota_trees, "LocalQueue": self.local_queues,
                "KAIQueue": self.kai_queues, "ClusterQueue": self.cluster_queues, "Cohort": self.cohorts,
                "ResourceFlavor": self.resource_flavors, "KueueTopology": self.kueue_topologies,
                "AdmissionCheck": self.admission_checks, **self.named,
                **self._device_stores()}

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
        """Per watched kind, the objects held."""
        return {name: len(store) for name, store in self._stores().items()}

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        """One watch event. Unknown kinds and malformed objects are ignored."""
        if not isinstance(obj, Mapping):
            return
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str):
            return
        name = WATCHED.get((api_version.rpartition("/")[0] if "/" in api_version else "", kind))
        if name is not None:
            self._handlers[name](self, obj, event == "DELETED")

    def replace_all(self, name: str, objects: Iterable[dict[str, Any]]) -> None:
        """After a relist: objects of the kind filed under ``name`` (:data:`WATCHED`) absent
        from ``objects`` are removed."""
        store = self._stores().get(name)
        if store is None:
            return
        items = [o for o in objects if isinstance(o, Mapping)]
        seen = {_key(o) for o in items}
        # Cluster-scoped kinds are keyed by name alone; namespaced ones by (namespace, name).
        stale = [k if isinstance(k, tuple) else ("", k) for k in store]
        stale = [k for k in stale if k not in seen]
        group, kind = WATCHED_KINDS[name]
        api_version = f"{group}/v1" if group else "v1"
        for ns, name in stale:
            self.apply("DELETED", {"apiVersion": api_version, "kind": kind,
                                   "metadata": {"namespace": ns, "name": name}})
        nodes_first = sorted(items, key=lambda o: o.get("kind") == "Pod")
        for obj in nodes_first:
            self.apply("MODIFIED", obj)

    def state_versions(self, label_keys: Iterable[str] = ()) -> tuple[int, ...]:
        """Every version counter of the snapshot, labels only for ``label_keys``: what an
        answer computed from all the snapshot holds depends on. Every mutation path moves
        one of them (a change of nothing, such as a heartbeat, moves none)."""
        return (self.nodeset_version, self.taint_version, self.cordon_version, self.alloc_version,
                self.used_version, self.hypernode_version, self.queue_version, self.podgroup_version,
                self.quota_version, self.device_version, self.dra_version,
                *[self._key_versions.get(k, 0) for k in label_keys])

    def state_stamp(self) -> int:
        """One number that moves whenever any version counter does: they only grow, and a
        label key's version never moves without ``label_version``. Equal stamps, equal
        :meth:`state_versions` and :meth:`supernode_versions` whatever the keys."""
        return (self.label_version + self.nodeset_version + self.taint_version + self.cordon_version
                + self.hypernode_version + self.alloc_version + self.used_version + self.queue_version
                + self.podgroup_version + self.quota_version + self.device_version + self.dra_version)

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
