"""Kubeflow Trainer runtimes (TrainingRuntime, ClusterTrainingRuntime) of a cluster: the pod
templates a TrainJob submitted to it names (its ``spec.runtimeRef``), so that the TrainJob is
judged with its runtime's pods, not only with what it says itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.references import References
from policies.topology.nodes import _key
from policies.topology.scheduler_queues import SchedulerQueues

TRAINER_GROUP = "trainer.kubeflow.org"


class Runtimes(SchedulerQueues):
    """Trainer runtimes, by (kind, namespace, name)."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        super().__init__(policy, memo)
        self.runtimes: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.runtime_version = 0                # a runtime came, went or changed

    def _apply_runtime(self, obj: Mapping[str, Any], deleted: bool) -> None:
        namespace, name = _key(obj)
        if not name:
            return
        key = (str(obj.get("kind")), namespace, name)
        if deleted:
            if self.runtimes.pop(key, None) is not None:
                self.runtime_version += 1
            return
        if self.runtimes.get(key) != obj:       # a resync that changes nothing keeps it
            self.runtime_version += 1
        self.runtimes[key] = obj

    def named_references(self) -> References | None:
        """The runtimes, as the objects other objects may name (None: the cluster has none)."""
        if not self.runtimes:
            return None
        versions = (self.runtime_version,)
        found = self.cached("runtimes", versions)
        if found is None:
            found = References.of(self.runtimes.values())
            self.remember("runtimes", versions, found)
        return found  # type: ignore[no-any-return]
