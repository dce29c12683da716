"""What the feasibility check answers: a verdict per member cluster, with its typed cause.

An :class:`Outcome` says *why* (a :class:`Cause`) and gives the facts behind it (the
names and numbers its message is made of); which rule reports a cause, and at which
severity, is the rules' business (``policies.rules._feasibility``), not this package's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from policies.quantity import format_quantity

__all__ = ["Verdict", "Cause", "STILL_RUNS", "ExplainRow", "Outcome", "Report", "fmt"]


class Verdict(StrEnum):
    FITS = "fits"
    WAITS = "waits"
    NEVER = "never"
    UNKNOWN = "unknown"


class Cause(StrEnum):
    """Why a verdict is what it is (one cause per outcome)."""

    FITS = "fits"                                       # a witness placement in the free resources now
    # never: the queue refuses the gang
    QUEUE_MISSING = "queue-missing"                     # the queue named does not exist
    QUEUE_NOT_LEAF = "queue-not-leaf"                   # root, or a queue with child queues
    QUEUE_CLOSED = "queue-closed"                       # a queue whose state is not Open
    # never: a limit the gang's minimum resources are above
    QUEUE_NEVER_HOLDS = "queue-never-holds"             # the queue's capability (or the cluster's share)
    QUOTA_NEVER_HOLDS = "quota-never-holds"             # an ElasticQuotaTree node's max
    # never: the nodes
    NODES_NEVER_HOLD = "nodes-never-hold"               # a necessary condition on the empty cluster fails
    NODES_HOLD_PART = "nodes-hold-part"                 # not a gang: only part of its pods ever fit
    SHARE_NEVER_FITS = "share-never-fits"               # a device share above what any device has
    # never: YuniKorn's task-group placeholders (policies.yunikorn) never all fit
    PLACEHOLDERS_NEVER_HOLD = "placeholders-never-hold"  # Hard style (or none placeable): never runs
    PLACEHOLDERS_TIME_OUT = "placeholders-time-out"     # Soft style: the pods go one by one after the timeout
    SUPERNODES_NEVER_HOLD = "supernodes-never-hold"     # too few supernode slots for the GPU groups
    # waits
    WAITS_FOR_QUEUE = "waits-for-queue"                 # other pod groups hold the queue's room
    WAITS_FOR_ROOM = "waits-for-room"                   # fits the empty cluster, not the free resources
    WAITS_FOR_NEW_NODES = "waits-for-new-nodes"         # fits no node now; autoscaling may add some
    QUEUE_ABSENT = "queue-absent"                       # a Kueue LocalQueue or KAI queue not created yet
    # unknown: nothing proven either way
    BUDGET_SPENT = "budget-spent"
    EMPTY_SNAPSHOT = "empty-snapshot"                   # a member cluster's snapshot has no nodes
    NO_TOPOLOGY = "no-topology"                         # the cluster list is empty
    STALE_TOPOLOGY = "stale-topology"                   # not synced, or not confirmed for too long
    NOT_CHECKED = "not-checked"                         # a part of the check had no data (a note)
    DEVICES_UNKNOWN = "devices-unknown"                 # DRA claims gpugate cannot count (a reason given)
    KUEUE_NAMESPACE_UNKNOWN = "kueue-namespace-unknown"  # Kueue's verdict hangs on unseen namespace labels


# Causes of a "never" for a workload that runs all the same, in part (not a gang) or
# without its gang (YuniKorn's Soft style): reported as warnings.
STILL_RUNS = frozenset({Cause.NODES_HOLD_PART, Cause.PLACEHOLDERS_TIME_OUT})


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
    cause: Cause = Cause.FITS
    message: str = ""
    path: str = ""
    witness: dict[str, dict[str, int]] | None = None   # pod set -> node -> pods
    rows: list[ExplainRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # parts of the check that had no data
    # The names and numbers the message is made of (read-only values: outcomes share them).
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """One thing to say about a workload across the member clusters: the outcomes of one
    verdict combined into one message (see :mod:`policies.feasibility.fleet`)."""

    cause: Cause                # the first outcome's
    verdict: Verdict
    message: str
    path: str = ""
    # Every outcome behind it is a never of a workload that runs all the same (:data:`STILL_RUNS`):
    # only part of a workload that is not a gang fits, or a YuniKorn Soft gang times out.
    partial: bool = False
    # About a pod outside the gang (a RayJob's submitter), judged on its own.
    member: bool = False
    # The fleet's answer is unknown and some member cluster's topology is stale.
    stale: bool = False


def fmt(units: Mapping[str, int], skip_pods: bool = True) -> str:
    parts = [f"{r} {format_quantity(r, v)}" for r, v in units.items()
             if v and not (skip_pods and r == "pods")]
    return ", ".join(parts) if parts else "no resources"


def _fmt1(resource: str, value: int) -> str:
    return f"{resource} {format_quantity(resource, int(value))}"
