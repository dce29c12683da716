"""What a rule is given and what it declares it looks at.

Rules import this module, never the engine: the engine (:mod:`policies.engine`) sits above
the rules and calls them; the registry finds them (:mod:`policies.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from policies.config import Policy
from policies.kinds import KindSpec
from policies.specfacts import facts_token


@dataclass(frozen=True)
class Sees:
    """What a rule looks at: ``SEES = Sees(...)`` in its module, right after ``SEVERITY``.
    The engine calls the rule's ``check`` and ``mutate`` only on the objects that satisfy
    every predicate given, and tests each predicate once per object, not once per rule.
    ``Sees()``: every object.

    ``kinds_with`` names a field of the kind's row in :data:`policies.kinds.KINDS` that must
    be set for the rule to see the kind (``"queues"``: kinds that may name a queue;
    ``"gang_min"``, ``"scheduler_override"``, ...); the other predicates are the named ones
    of :data:`PREDICATES`."""

    kinds_with: str = ""
    pod_sets: bool = False      # objects with pod templates
    gpu: bool = False           # workloads that request GPUs (policies.gpu.is_gpu_workload)
    usage_scope: bool = False   # in the scope of the usage rules (policies.usage.in_scope)

    def __post_init__(self) -> None:
        if self.kinds_with and self.kinds_with not in KIND_FIELDS:
            raise ValueError(f"Sees(kinds_with={self.kinds_with!r}): not a field of policies.kinds.KindSpec")

    @property
    def predicates(self) -> tuple[str, ...]:
        """The names of the predicates an object must satisfy, cheapest first."""
        names = [f"kind has {self.kinds_with}"] if self.kinds_with else []
        names += [name for name in ("pod_sets", "gpu", "usage_scope") if getattr(self, name)]
        return tuple(names)


# The fields of a kinds-table row: what ``Sees(kinds_with=...)`` may name.
KIND_FIELDS = frozenset(f.name for f in fields(KindSpec))


@dataclass(frozen=True)
class Change:
    """An UPDATE: the object as it was stored, the parts the update changes (JSON Pointers,
    ``metadata`` and ``status`` left out) and the keys its own pods and pod groups are filed
    under in the topology (counted as free for it)."""

    old: dict[str, Any]
    changed: tuple[str, ...]
    own: frozenset[str]


@dataclass(frozen=True)
class Held:
    """What an object that exists already holds in the cluster (``gpugate audit``): it is never
    judged against itself."""

    # the keys its pods and pod groups are filed under in the topology
    # (policies.changes.identity_keys of its tree): what they hold is free for it
    keys: frozenset[str] = frozenset()
    # its queue admitted it (a Kueue Workload with an admission, a pod group Inqueue or
    # Running): the queue's existence, state and room are not judged again
    admitted: bool = False


@dataclass
class Context:
    """What a rule may look at besides the workload. Shared by every rule of one evaluation."""

    policy: Policy
    # Cluster snapshots (``policies.topology``); None: no topology was given, so rules that
    # need one are not run. An empty or stale snapshot is the rules' business (GG406).
    clusters: Sequence[Any] | None = None
    # Answers several rules share, worked out once per evaluation (the feasibility answer
    # that GG306 and GG402-GG406 each report a part of): evaluation state, not a memo.
    answers: dict[str, Any] = field(default_factory=dict)
    # Wall-clock deadline (time.monotonic()) for the feasibility checks; None: no budget.
    deadline: float | None = None
    # Set for an UPDATE: what it changes (rules and feasibility judge only that).
    change: Change | None = None
    # An object that exists already (an audit): what it holds in the cluster.
    held: Held | None = None
    # The policy's facts_token, for keys of shared pod-spec facts: asked once here, not by
    # every rule (see policies.workload.facts_token).
    token: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.token = facts_token(self.policy.memo)
