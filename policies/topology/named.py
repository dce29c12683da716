"""Objects of a cluster that other objects name (:data:`policies.references.REFERABLE`):
Kubeflow Trainer runtimes (the pod template a TrainJob's ``spec.runtimeRef`` names) and the
Workload API's Workloads and PodGroups (the gang a Pod's ``spec.workloadRef`` or
``spec.schedulingGroup`` names), so that an object submitted to the cluster is judged with
what it names there, not only with what it says itself."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.references import References
from policies.topology.nodes import _key
from policies.topology.scheduler_queues import SchedulerQueues

# The names (policies.topology.WATCHED) of the kinds held here.
NAMED = ("TrainingRuntime", "ClusterTrainingRuntime", "Workload", "WorkloadAPIPodGroup")


class NamedObjects(SchedulerQueues):
    """The objects of :data:`NAMED`, per watched name, by (namespace, name)."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        super().__init__(policy, memo)
        self.named: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {name: {} for name in NAMED}
        self.named_version = 0                  # a named object came, went or changed

    def _apply_named(self, obj: Mapping[str, Any], deleted: bool, *, name: str) -> None:
        key = _key(obj)
        if not key[1]:
            return
        store = self.named[name]
        if deleted:
            if store.pop(key, None) is not None:
                self.named_version += 1
            return
        if store.get(key) != obj:               # a resync that changes nothing keeps it
            self.named_version += 1
        store[key] = obj

    def named_references(self) -> References | None:
        """The objects held, as the objects other objects may name (None: there are none)."""
        if not any(self.named.values()):
            return None
        versions = (self.named_version,)
        found = self.cached("named", versions)
        if found is None:
            found = References.of(itertools.chain.from_iterable(s.values() for s in self.named.values()))
            self.remember("named", versions, found)
        return found  # type: ignore[no-any-return]
