"""The member clusters of a context: one question per workload (and one per pod set
outside its gang), checked against every fresh member cluster, the outcomes combined into
one verdict and the :class:`Report` s saying why. The workload is fine when one member
cluster can run it. Which rule reports what is not decided here."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from policies.changes import touches
from policies.config import Policy
from policies.topology import ClusterSnapshot
from policies.workload import PodSet, ShapeError, Workload, build_workload

from .check import check_cluster
from .outcomes import STILL_RUNS, Cause, Outcome, Report, Verdict
from .questions import FitQuestion, _question, _rows, _spec_fits, fit_question

if TYPE_CHECKING:
    from policies.context import Change, Held

__all__ = ["Answer", "evaluate"]


@dataclass
class Answer:
    """What the member clusters say about a workload: the fleet's verdict, each member
    cluster's outcome, and what to report (nothing when it fits without notes)."""

    verdict: Verdict
    outcomes: list[Outcome]
    reports: list[Report] = field(default_factory=list)


def evaluate(workload: Workload, policy: Policy, clusters: Sequence[ClusterSnapshot],
             deadline: float | None = None, change: Change | None = None,
             held: Held | None = None) -> Answer | None:
    """The answer for ``workload`` on ``clusters`` (the context's member clusters); None
    when there is nothing to ask (no pods to place, or an UPDATE that asks what the stored
    object asked). ``deadline``: ``time.monotonic()`` past which nothing more is checked
    (default: now plus the policy's ``feasibility.budgetMilliseconds``). ``held``: an object
    that exists already (an audit): what its own pods and pod groups hold is free for it and,
    when its queue admitted it, the queue is not judged again."""
    options = policy.feasibility
    question = fit_question(workload, policy)
    if change is not None and question is not None:
        # None: the update does not change what the gang asks of the cluster
        question = _update_question(question, change, policy)
    elif held is not None and question is not None:
        question = dataclasses.replace(question, own=held.keys, queue_admitted=held.admitted)
    members = _member_questions(workload, policy, change)
    if question is None and not members:
        return None
    if not clusters:
        return _combine([Outcome("", Verdict.UNKNOWN, Cause.NO_TOPOLOGY, "no cluster topology is available")])
    now = time.monotonic()
    if deadline is None:
        deadline = now + float(options.get("budgetMilliseconds", 200)) / 1000
    stale_after = float(options.get("staleAfterSeconds", 5))
    outcomes = []
    fresh: list[ClusterSnapshot] = []
    stale = False
    for snapshot in clusters:
        if snapshot.stale(now, stale_after):
            # A view the API server has not confirmed for staleAfterSeconds (or never: not
            # synced yet) proves nothing: no verdict from it, and the answer says so aloud.
            stale = True
            age = now - (snapshot.updated_at or now)
            what = (f"topology is {age:.0f}s old (staleAfterSeconds {stale_after:g}): queue and capacity "
                    "rules not applied" if age != float("inf")
                    else "topology not synced yet: queue and capacity rules not applied")
            outcomes.append(Outcome(snapshot.name, Verdict.UNKNOWN, Cause.STALE_TOPOLOGY, what,
                                    facts={"age_seconds": age, "stale_after_seconds": stale_after}))
            continue
        fresh.append(snapshot)
        if question is not None:
            outcomes.append(check_cluster(question, snapshot, policy, deadline))
    answer = _combine(outcomes) if question is not None or outcomes else Answer(Verdict.FITS, [])
    if stale and answer.verdict is Verdict.UNKNOWN:
        answer.reports = [dataclasses.replace(r, stale=True) if r.verdict is Verdict.UNKNOWN else r
                          for r in answer.reports]
    if fresh and len(fresh) == len(clusters):
        for pod_set, member in members:
            report = _judge_member(pod_set, member, fresh, policy, deadline)
            if report is not None:
                answer.reports.append(report)
    return answer


def _member_questions(workload: Workload, policy: Policy,
                      change: Change | None) -> list[tuple[PodSet, FitQuestion]]:
    """The pod sets outside the gang (a RayJob's submitter), each a question of its own:
    one pod that must fit some node. On an UPDATE, only those whose template changed."""
    out: list[tuple[PodSet, FitQuestion]] = []
    for pod_set in workload.pod_sets:
        if pod_set.counted or pod_set.replicas == 0:
            continue
        if change is not None and not touches(pod_set.path, change.changed):
            continue
        fits = _spec_fits([pod_set])
        if fits is None:
            continue
        question = _question(_rows([pod_set], fits, False, 0), [pod_set], False, 0, None, None,
                             workload.namespace, None, policy)
        if question is not None:
            out.append((pod_set, question))
    return out


def _judge_member(pod_set: PodSet, question: FitQuestion, clusters: Sequence[ClusterSnapshot],
                  policy: Policy, deadline: float) -> Report | None:
    """A report when a pod outside the gang fits no node of any member cluster even when
    empty (it would stay Pending and hold up its workload); anything else is its
    scheduler's job."""
    outcomes = [check_cluster(question, snapshot, policy, deadline) for snapshot in clusters]
    if outcomes and all(o.verdict == Verdict.NEVER for o in outcomes):
        first = outcomes[0]
        return Report(first.cause, Verdict.NEVER, f"pod set {pod_set.name}: {first.message}",
                      first.path or pod_set.path, member=True)
    return None


def _update_question(question: FitQuestion, change: Change, policy: Policy) -> FitQuestion | None:
    """An UPDATE's question: None when it asks what the stored object asked (replicas,
    requests, placement, queue and groups unchanged: a running object is never judged
    again against today's cluster); else the new question with the object's own usage
    counted as free and, when it keeps its queue, the queue's state not judged again."""
    try:
        old = build_workload(change.old)
    except ShapeError:
        old = None
    before = fit_question(old, policy) if old is not None else None
    if before is not None and before == question:
        return None
    same_queue = before is not None and before.queue == question.queue
    return dataclasses.replace(question, own=change.own, queue_admitted=same_queue)


def _combine(outcomes: list[Outcome]) -> Answer:
    """One verdict for the fleet: fits when one member cluster fits, else waits, else
    unknown, else never; the outcomes of that verdict in one report, the others after."""
    for o in outcomes:
        if o.verdict is Verdict.FITS:
            if not o.notes:  # the usual answer: nothing to report
                return Answer(Verdict.FITS, outcomes)
            break
    fleet = len(outcomes) > 1

    def label(o: Outcome) -> str:
        return f"cluster {o.cluster}: " if fleet and o.cluster else ""

    fits = [o for o in outcomes if o.verdict == Verdict.FITS]
    if fits:
        # parts of the check that had no data
        notes = [Report(Cause.NOT_CHECKED, Verdict.UNKNOWN, f"{label(fits[0])}{note}")
                 for note in fits[0].notes]
        return Answer(Verdict.FITS, outcomes, notes)
    for verdict in (Verdict.WAITS, Verdict.UNKNOWN):
        chosen = [o for o in outcomes if o.verdict == verdict]
        if chosen:
            others = [o for o in outcomes if o.verdict != verdict]
            text = "; ".join(f"{label(o)}{o.message}" for o in chosen)
            if others:
                text += "; " + "; ".join(f"{label(o)}{o.verdict.value}: {o.message}" for o in others)
            return Answer(verdict, outcomes, [Report(chosen[0].cause, verdict, text, chosen[0].path)])
    if fleet:
        text = "no member cluster can run it: " + "; ".join(f"{label(o)}{o.message}" for o in outcomes)
    else:
        text = outcomes[0].message
    partial = all(o.cause in STILL_RUNS for o in outcomes)
    return Answer(Verdict.NEVER, outcomes, [Report(outcomes[0].cause, Verdict.NEVER, text, outcomes[0].path,
                                                   partial=partial)])
