"""The audit: every subject of a cluster judged by the engine, pending ones with a verdict.

A pending subject is evaluated against the cluster's topology, as if it were created now,
with what its own pods and pod groups hold counted as free for it when it is a gang (its
placed pods are part of the gang, not in its way); the feasibility answer gives the
verdict (never / waits / unknown / fits) and the reasons. Every other subject is judged by
the lint rules alone (the background scan): a running object is never judged again against
today's cluster.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.config import Policy
from policies.context import Held
from policies.engine import evaluate
from policies.findings import Finding, Severity
from policies.quantity import format_quantity
from policies.rules._feasibility import Feasibility, Recorder, rule_for
from policies.topology import ClusterSnapshot
from policies.workload import ShapeError, Workload, build_workload

from .subjects import Subject, evaluable, find_subjects

__all__ = ["VERDICTS", "FEASIBILITY_RULES", "Filters", "GangVerdict", "Entry", "Audit", "audit"]

# Worst first: the order of the table, and of the verdicts in counts.
VERDICTS = ("never", "unknown", "waits", "fits")
# The rules that report feasibility answers: the verdict says what they say.
FEASIBILITY_RULES = frozenset({"GG306", "GG402", "GG403", "GG404", "GG405", "GG406"})
_FITS_WORDS = ("a placement exists in the free resources now; still pending: the scheduler may not have "
               "retried yet, or something gpugate does not model holds it (volumes, ports, pod affinity)")


@dataclass(frozen=True)
class Filters:
    """Which subjects an audit looks at (empty: all). Kinds match the kind (``Job``), its
    label (``Job.batch``) or its plural (``jobs``), case-insensitively."""

    namespaces: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()

    def admits(self, subject: Subject, queues: Callable[[], Iterable[str]]) -> bool:
        """Whether ``subject`` passes; ``queues`` gives the queues it names (asked only when
        filtering by queue)."""
        if self.namespaces and (subject.ref.namespace or "") not in self.namespaces:
            return False
        if self.kinds:
            names = {subject.spec.kind.lower(), subject.spec.label.lower(), subject.spec.resource.lower()}
            if names.isdisjoint(k.lower() for k in self.kinds):
                return False
        return not self.queues or not self.queues.isdisjoint(queues())


@dataclass
class GangVerdict:
    """The verdict on a pending subject and the facts behind it."""

    verdict: str                    # never | unknown | waits | fits
    cause: str                      # policies.feasibility.Cause value
    rule: str                       # the rule that reports it ("" for fits)
    reason: str
    rows: list[dict[str, Any]] = field(default_factory=list)   # per pod set: eligible nodes, fits now/empty
    notes: list[str] = field(default_factory=list)
    # a never of pods placed one by one: the rest of the workload runs (a warning at admission)
    partial: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "cause": self.cause, "rule": self.rule, "reason": self.reason,
                "partial": self.partial, "podSets": self.rows, "notes": self.notes}


@dataclass
class Entry:
    """One subject: the findings of the engine and, when it is pending, its verdict."""

    subject: Subject
    queues: list[str]
    findings: list[Finding]
    gang: GangVerdict | None = None

    @property
    def rank(self) -> tuple[int, int, str]:
        """Worst first: by verdict, then more pods waiting, then waiting longer."""
        order = VERDICTS.index(self.gang.verdict) if self.gang is not None else len(VERDICTS)
        return order, -self.subject.unscheduled, self.subject.since

    def as_dict(self) -> dict[str, Any]:
        s = self.subject
        out: dict[str, Any] = {
            "object": {**s.ref.as_dict(), "uid": s.uid or None},
            "kind": s.kind_label, "queues": self.queues,
            "pending": s.pending, "heldBy": s.held_by, "podsUnscheduled": s.unscheduled,
            "podsBound": s.bound, "since": s.since or None, "systemSays": s.system_says,
        }
        if self.gang is not None:
            out.update(self.gang.as_dict())
        out["findings"] = [f.as_dict() for f in self.findings]
        return out


@dataclass
class Audit:
    """What one audit found."""

    cluster: str
    entries: list[Entry]
    seconds: float = 0.0

    @property
    def pending(self) -> list[Entry]:
        """The pending subjects, worst first."""
        return sorted((e for e in self.entries if e.gang is not None), key=lambda e: e.rank)

    @property
    def scanned(self) -> list[Entry]:
        """Subjects with findings of the lint rules, by namespace and name."""
        found = [e for e in self.entries if any(f.rule not in FEASIBILITY_RULES for f in e.findings)]
        return sorted(found, key=lambda e: (e.subject.ref.namespace or "", e.subject.ref.name or ""))

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(VERDICTS, 0)
        for e in self.entries:
            if e.gang is not None:
                counts[e.gang.verdict] += 1
        return counts

    def by_cause(self) -> dict[tuple[str, str], int]:
        """Pending subjects by (verdict, cause)."""
        out: dict[tuple[str, str], int] = {}
        for e in self.entries:
            if e.gang is not None:
                key = (e.gang.verdict, e.gang.cause)
                out[key] = out.get(key, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "seconds": round(self.seconds, 3), "verdicts": self.counts(),
                "pending": [e.as_dict() for e in self.pending],
                "scanned": [e.as_dict() for e in self.scanned]}


class _Capture(Recorder):
    """The cluster of an audit, catching each evaluation's feasibility answer."""

    def __init__(self, members: Sequence[ClusterSnapshot]) -> None:
        super().__init__(members)
        self.last: Feasibility | None = None

    def record(self, workload: Any, result: Feasibility) -> None:
        self.last = result


def audit(objects: Iterable[dict[str, Any]], snapshot: ClusterSnapshot, policy: Policy, *,
          filters: Filters = Filters(), scan: bool = True, budget_seconds: float = 1.0,
          progress: Callable[[str], None] | None = None,
          on_subjects: Callable[[int], None] | None = None) -> Audit:
    """Judge the subjects of ``objects`` (see :mod:`policies.audit.subjects`) against
    ``snapshot``. ``scan=False``: the pending subjects alone. ``budget_seconds``: the
    feasibility budget of each pending subject (past it, the verdict is unknown).
    ``on_subjects`` is told how many subjects will be judged, ``progress`` each one's name."""
    started = time.monotonic()
    clusters = _Capture([snapshot])
    chosen = []
    for subject in find_subjects(objects):
        if not (scan or subject.pending) or subject.ref.namespace in policy.excluded_namespaces:
            continue
        if filters.admits(subject, functools.partial(_named_queues, subject.doc)):
            chosen.append(subject)
    if on_subjects is not None:
        on_subjects(len(chosen))
    feasibility_on = policy.feasibility.get("mode") != "off"
    entries = []
    for subject in chosen:
        entries.append(_judge(subject, clusters, policy, budget_seconds, feasibility_on))
        if progress is not None:
            progress(str(subject.ref))
    return Audit(snapshot.name, entries, time.monotonic() - started)


def _queue_names(workload: Workload | None) -> list[str]:
    return [q.name for q in workload.queues] if workload is not None else []


def _named_queues(doc: dict[str, Any]) -> list[str]:
    """The queues an object names (for ``--queue``, before it is judged)."""
    try:
        return _queue_names(build_workload(doc))
    except ShapeError:
        return []


def _judge(subject: Subject, clusters: _Capture, policy: Policy, budget: float,
           feasibility_on: bool) -> Entry:
    doc = evaluable(subject)
    if not subject.pending:
        scanned = evaluate(doc, policy, as_stored=True)
        return Entry(subject, _queue_names(scanned.workload), scanned.findings)
    # A gang's placed pods and the queue room its pod group holds are its own: free for it.
    # A pod placed one by one waits for room its siblings hold, like any other pod.
    keys = subject.held_keys() if subject.spec.gang and (subject.bound or subject.holding_group) \
        else frozenset()
    admitted = subject.holding_group or subject.kueue_admitted
    held = Held(keys, admitted) if keys or admitted else None
    clusters.last = None
    result = evaluate(doc, policy, clusters, deadline=time.monotonic() + budget, held=held,
                      as_stored=True)
    return Entry(subject, _queue_names(result.workload), result.findings,
                 _verdict(clusters.last, result.findings, feasibility_on, budget))


def _verdict(answer: Feasibility | None, findings: list[Finding], feasibility_on: bool,
             budget: float) -> GangVerdict:
    if answer is None:
        broken = [f for f in findings if f.rule in ("GG001", "GG002") and f.severity is Severity.ERROR]
        reason = ("feasibility.mode is off in the policy" if not feasibility_on
                  else broken[0].message if broken
                  else "nothing to place: gpugate models no pods of it")
        return GangVerdict("unknown", "not-checked", "GG406", reason)
    outcomes = answer.outcomes
    first = outcomes[0] if outcomes else None
    # what one eligible node has free at most, per pod set (the check says it for a wait)
    most_free = dict(first.facts.get("most_free", ())) if first is not None else {}
    rows = []
    for r in first.rows if first is not None else []:
        row: dict[str, Any] = {"podSet": r.pod_set, "pods": r.count, "eligibleNodes": r.eligible,
                               "fitsNow": r.fits_now, "fitsEmpty": r.fits_empty}
        if r.pod_set in most_free:
            row["mostFree"] = {res: format_quantity(res, units) for res, units in most_free[r.pod_set]}
        rows.append(row)
    notes = list(first.notes) if first is not None else []
    verdict = answer.verdict.value
    reports = answer.answer.reports
    if verdict == "fits":
        where = ""
        if first is not None and first.witness:
            nodes = {n for placed in first.witness.values() for n in placed}
            where = f" ({len(nodes)} node{'s' * (len(nodes) != 1)})"
        return GangVerdict(verdict, "fits", "", _FITS_WORDS.replace("now;", f"now{where};", 1), rows, notes)
    if not reports:   # (every other verdict comes with its reasons)
        return GangVerdict(verdict, "not-checked", "GG406", "no reason was given", rows, notes)
    report = reports[0]
    cause = report.cause.value
    if cause == "budget-spent":   # the audit's budget, not the policy's
        return GangVerdict(verdict, cause, rule_for(report.cause),
                           f"the feasibility budget ({budget * 1000:g} ms per object, --budget-ms) ran out",
                           rows, notes)
    return GangVerdict(verdict, cause, rule_for(report.cause), report.message, rows, notes, report.partial)
