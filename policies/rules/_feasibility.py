"""The feasibility rules' side of :mod:`policies.feasibility`: which rule reports which
cause, at which severity, and the problems each rule reports for an evaluation.

The feasibility check (numpy with it) is imported on the first evaluation given a
topology, so the linter without one never loads it; after that its entry point is kept
here, because an ``import`` statement in each rule's ``check`` costs more than the lookup
it leads to, six times per review. (A leading underscore: the registry loads no rule from
this module.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policies.config import Policy
from policies.context import Context
from policies.findings import Problem, Severity, bounded_words
from policies.workload import Workload

if TYPE_CHECKING:
    from policies.feasibility import Answer, Cause, ExplainRow, FitQuestion, Outcome, Report, Verdict
    from policies.topology import ClusterSnapshot

__all__ = ["CACHE_KEY", "Feasibility", "Reported", "Recorder", "feasibility", "problems", "check_cluster",
           "rule_for"]

CACHE_KEY = "feasibility"

# The rule that reports each cause (by the cause's value, so that this table needs no
# import of the check): a queue that refuses the gang, a limit it is above, nodes or
# supernodes that never hold it, a wait, or nothing proven.
_RULES: Mapping[str, str] = {
    "fits": "",
    "queue-missing": "GG306", "queue-not-leaf": "GG306", "queue-closed": "GG306",
    "queue-never-holds": "GG402", "quota-never-holds": "GG402",
    "nodes-never-hold": "GG403", "nodes-hold-part": "GG403", "share-never-fits": "GG403",
    "placeholders-never-hold": "GG403", "placeholders-time-out": "GG403",
    "waits-for-queue": "GG404", "waits-for-room": "GG404", "waits-for-new-nodes": "GG404",
    "queue-absent": "GG306",
    "supernodes-never-hold": "GG405",
    "budget-spent": "GG406", "empty-snapshot": "GG406", "no-topology": "GG406", "stale-topology": "GG406",
    "not-checked": "GG406", "devices-unknown": "GG406", "kueue-namespace-unknown": "GG406",
}


# Causes of a never for a workload that runs all the same (policies.feasibility.STILL_RUNS):
# a warning, whatever the rule's severity.
_STILL_RUNS = frozenset({"nodes-hold-part", "placeholders-time-out"})


def rule_for(cause: Cause) -> str:
    """The rule that reports ``cause`` ("" for fits)."""
    return _RULES[cause]


@dataclass
class Reported:
    """An outcome of one member cluster as the rules report it: with its rule and, where
    the cause fixes one, its severity (a partial fit of a workload that is not a gang, or a
    YuniKorn Soft gang that times out, is a warning)."""

    cluster: str
    verdict: Verdict
    rule: str
    message: str
    path: str
    witness: dict[str, dict[str, int]] | None
    severity: Severity | None
    rows: list[ExplainRow]
    notes: list[str]
    cause: Cause
    facts: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, out: Outcome) -> Reported:
        """``out`` (whose containers the caller owns) with its rule and severity."""
        severity = Severity.WARNING if out.cause in _STILL_RUNS else None
        return cls(out.cluster, out.verdict, rule_for(out.cause), out.message, out.path, out.witness,
                   severity, out.rows, out.notes, out.cause, out.facts)


@dataclass
class Feasibility:
    """The feasibility of a workload for one evaluation: the fleet's verdict, each member
    cluster's outcome and the problems per rule."""

    verdict: Verdict
    answer: Answer = field(repr=False)
    problems: dict[str, list[Problem]] = field(default_factory=dict)
    _outcomes: list[Reported] | None = field(default=None, repr=False, compare=False)

    @property
    def outcomes(self) -> list[Reported]:
        """Each member cluster's outcome, with its rule (worked out when first asked for:
        only ``lint --explain`` and tests read them)."""
        if self._outcomes is None:
            self._outcomes = [Reported.of(o) for o in self.answer.outcomes]
        return self._outcomes


class Recorder(list[Any]):
    """Member clusters that also want each evaluation's feasibility answer (``lint
    --explain`` prints the placements): a front end subclasses this and overrides
    :meth:`record`; policies never know who is listening."""

    def record(self, workload: Workload, result: Feasibility) -> None:
        """Called with every evaluation's answer."""


_Evaluate = Callable[[Workload, Policy, "Sequence[ClusterSnapshot]", "float | None", Any, Any],
                     "Answer | None"]
_evaluate_fleet: _Evaluate | None = None


def _fleet() -> _Evaluate:
    """:func:`policies.feasibility.evaluate`, imported on first use."""
    global _evaluate_fleet
    if _evaluate_fleet is None:
        from policies.feasibility import Cause, evaluate

        unmapped = [c for c in Cause if c.value not in _RULES]
        if unmapped:
            raise RuntimeError(f"no feasibility rule reports {unmapped}")
        _evaluate_fleet = evaluate
    return _evaluate_fleet


def feasibility(workload: Workload, ctx: Context) -> Feasibility | None:
    """The verdict for a workload against ``ctx.clusters``, computed once per evaluation."""
    if CACHE_KEY in ctx.answers:
        return ctx.answers[CACHE_KEY]  # type: ignore[no-any-return]
    result = _evaluate(workload, ctx)
    ctx.answers[CACHE_KEY] = result
    clusters = ctx.clusters
    if result is not None and isinstance(clusters, Recorder):
        clusters.record(workload, result)
    return result


def problems(workload: Workload, ctx: Context, rule_id: str) -> Iterator[Problem]:
    """The problems rule ``rule_id`` reports for this evaluation (six rules ask on every
    review: a plain function, not a generator)."""
    result = ctx.answers[CACHE_KEY] if CACHE_KEY in ctx.answers else feasibility(workload, ctx)
    return iter(result.problems.get(rule_id, ()) if result is not None else ())


def _evaluate(workload: Workload, ctx: Context) -> Feasibility | None:
    policy = ctx.policy
    if policy.feasibility.get("mode") == "off" or ctx.clusters is None:
        return None
    answer = _fleet()(workload, policy, ctx.clusters, ctx.deadline, ctx.change, ctx.held)
    if answer is None:
        return None
    found: dict[str, list[Problem]] = {}
    for report in answer.reports:
        # names no object (the finding carries it); long queue, node and pod set names bounded
        found.setdefault(rule_for(report.cause), []).append(
            Problem(bounded_words(report.message), report.path, _severity(report, policy)))
    return Feasibility(answer.verdict, answer, found)


def _severity(report: Report, policy: Policy) -> Severity | None:
    """The severity a report is given, None for the rule's own: an unknown answer from a
    stale topology is said aloud (a warning kubectl prints, or with ``whenStale: deny`` an
    error that refuses the workload: fail closed; ``mode: warn`` never refuses); a partial
    fit of a workload that is not a gang is a warning; ``mode: warn`` makes a never a
    warning."""
    options = policy.feasibility
    if report.stale:
        deny = options.get("whenStale") == "deny" and options.get("mode") != "warn"
        return Severity.ERROR if deny else Severity.WARNING
    if report.partial or report.verdict == "waits":
        return Severity.WARNING  # (a wait reported by GG306: a queue not created yet)
    if report.verdict == "never" and options.get("mode") == "warn":
        return Severity.WARNING
    return None


def check_cluster(question: FitQuestion, snapshot: ClusterSnapshot, policy: Policy,
                  deadline: float | None = None, *, memo: bool = True) -> Reported:
    """:func:`policies.feasibility.check_cluster`, as the rules report it."""
    from policies.feasibility import check_cluster as check

    return Reported.of(check(question, snapshot, policy, deadline, memo=memo))
