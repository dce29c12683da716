"""The engine: one document in, findings and a JSON Patch out. Both front ends call
:func:`evaluate`; nothing here knows which one is calling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies import references
from policies.changes import changed_pointers, identity_keys, inside, made_by_controller, touches
from policies.config import Policy
from policies.context import KIND_FIELDS, Change, Context, Held, Sees
from policies.findings import Finding, ObjectRef, Problem, Severity
from policies.gpu import is_gpu_workload
from policies.patch import PatchOp, apply_patch, clone
from policies.registry import Rule, all_rules, get_rule
from policies.usage import in_scope
from policies.workload import (
    ShapeError,
    Workload,
    build_workload,
    is_kubernetes_object,
    object_ref,
)

log = logging.getLogger("gpugate.engine")

IGNORE_ANNOTATION = "gpugate.io/ignore"


def _has_pod_sets(workload: Workload, policy: Policy) -> bool:
    return bool(workload.pod_sets)


def _kind_has(name: str) -> Callable[[Workload, Policy], bool]:
    def predicate(workload: Workload, policy: Policy) -> bool:
        return bool(getattr(workload.spec, name))
    return predicate


# The named predicates of Sees, each a function of the workload and the policy.
PREDICATES: dict[str, Callable[[Workload, Policy], bool]] = {
    "pod_sets": _has_pod_sets,
    "gpu": is_gpu_workload,
    "usage_scope": in_scope,
    **{f"kind has {name}": _kind_has(name) for name in KIND_FIELDS},
}


def rule_sees(rule: Rule) -> tuple[str, ...]:
    """The predicates of the rule's ``SEES`` (none: it sees every object)."""
    return rule.sees.predicates if isinstance(rule.sees, Sees) else ()


def _sees(predicates: tuple[str, ...], workload: Workload, policy: Policy, seen: dict[str, bool]) -> bool:
    """Whether ``workload`` satisfies every one of ``predicates``; ``seen`` keeps the
    answers for this workload, so each predicate is tested once per object."""
    for name in predicates:
        found = seen.get(name)
        if found is None:
            found = seen[name] = PREDICATES[name](workload, policy)
        if not found:
            return False
    return True


@dataclass
class Evaluation:
    """The outcome for one document."""

    object: ObjectRef | None = None
    workload: Workload | None = None
    findings: list[Finding] = field(default_factory=list)
    patch: list[PatchOp] = field(default_factory=list)
    mutated: dict[str, Any] | None = None
    skipped: bool = False               # not a Kubernetes object (values file, list, scalar)
    excluded: bool = False              # namespace excluded by the policy
    owned: bool = False                 # made by a controller from a template already judged
    unchanged: bool = False             # an UPDATE that changes nothing outside metadata and status

    @property
    def modeled(self) -> bool:
        return self.workload is not None


def ignored_rules(doc: dict[str, Any]) -> frozenset[str]:
    meta = doc.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(IGNORE_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(value, str):
        return frozenset()
    return frozenset(part.strip() for part in value.replace(";", ",").split(",") if part.strip())


class InternalError(Problem):
    """A rule that raised. Always a warning, whatever the rule's severity: a bug in gpugate
    must not block anyone's job (the webhook would deny on an error)."""


def _finding(rule: Rule, problem: Problem, ref: ObjectRef | None, policy: Policy) -> Finding:
    if isinstance(problem, InternalError):
        severity = Severity.WARNING
    else:
        severity = policy.rule_setting(rule.id, rule.slug).severity or problem.severity or rule.severity
    # positional (rule, slug, severity, message, path, fixable, object): cheaper than keywords
    return Finding(rule.id, rule.slug, severity, problem.message, problem.path, problem.fixable, ref)


def input_finding(rule_id: str, message: str, path: str = "", ref: ObjectRef | None = None,
                  policy: Policy | None = None) -> Finding:
    """A finding of an input-stage rule (GG001, GG002), raised by parsers and the model."""
    return _finding(get_rule(rule_id), Problem(message, path), ref, policy or Policy())


def enabled_rules(policy: Policy) -> list[Rule]:
    """The rules a policy switches on, worked out once per loaded policy."""
    rules = policy.memo.get("enabled_rules")
    if rules is None:
        rules = policy.memo["enabled_rules"] = [r for r in all_rules().values()
                                                if policy.rule_setting(r.id, r.slug).enabled]
    return rules  # type: ignore[no-any-return]


_Dispatch = list[tuple[Rule, tuple[str, ...]]]   # each rule with the predicates of what it sees


def _rules_to_run(policy: Policy, ignored: frozenset[str], topology: bool) -> tuple[_Dispatch, _Dispatch]:
    """(mutating rules, checking rules) to run on one object, in ID order, each with what it
    sees. Worked out once per loaded policy for objects that ignore no rule (nearly all)."""
    key = "rules_to_run with topology" if topology else "rules_to_run"
    if not ignored and key in policy.memo:
        return policy.memo[key]  # type: ignore[no-any-return]
    rules = [r for r in enabled_rules(policy) if r.id not in ignored and r.slug not in ignored]
    found = ([(r, rule_sees(r)) for r in rules if r.mutate is not None],
             [(r, rule_sees(r)) for r in rules if r.check is not None and (topology or not r.needs_topology)])
    if not ignored:
        policy.memo[key] = found
    return found


def _mutations(rule: Rule, workload: Workload, ctx: Context,
               ref: ObjectRef | None) -> list[tuple[Problem, list[PatchOp]] | Problem]:
    """What a mutating rule proposes, guarded: an internal error is logged and reported as
    a :class:`Problem` after what it proposed before failing, never raised. (``mutate``
    may return any iterable.)"""
    found: list[tuple[Problem, list[PatchOp]] | Problem] = []
    try:
        for item in rule.mutate(workload, ctx):  # type: ignore[misc]  # only rules with a mutate
            found.append(item)
    except Exception as exc:  # noqa: BLE001 - a rule bug must not take the front end down
        found.append(_internal_error(rule, exc, ref))
    return found


def _internal_error(rule: Rule, exc: Exception, ref: ObjectRef | None) -> Problem:
    log.exception("rule %s failed on %s", rule.id, ref, exc_info=exc)
    return InternalError(f"internal error in rule {rule.id} ({type(exc).__name__}: {exc}); "
                         "please report this")


def evaluate(doc: Any, policy: Policy, clusters: Sequence[Any] | None = None, *,
             deadline: float | None = None, previous: Any = None, checks: bool = True,
             held: Held | None = None, as_stored: bool = False) -> Evaluation:
    """Mutate, then validate the mutated object, as the API server would see it.

    ``previous``: for an UPDATE, the object as stored; then only what the update changes is
    mutated and judged (README "Lifecycle"). ``checks=False``: the mutations alone (what a
    mutating webhook answers; the validating one judges the result). ``held``: an object that
    exists already (``gpugate audit``): what it holds in the cluster, free for it.
    ``as_stored``: the object runs as it is (an audit): the mutating rules say what they would
    inject, but the checks judge the object unpatched, as its pods are.

    What the object names (a TrainJob's runtime) is looked up in the objects a front end put
    in scope (the linted files), else in the one member cluster's topology."""
    if references.current() is None and clusters is not None and len(clusters) == 1:
        topology = getattr(clusters[0], "topology", None)
        named = topology.named_references() if topology is not None else None
        if named is not None:
            with references.scope(named):
                return _evaluate(doc, policy, clusters, deadline, previous, checks, held, as_stored)
    return _evaluate(doc, policy, clusters, deadline, previous, checks, held, as_stored)


def _evaluate(doc: Any, policy: Policy, clusters: Sequence[Any] | None, deadline: float | None,
              previous: Any, checks: bool, held: Held | None, as_stored: bool) -> Evaluation:
    if not is_kubernetes_object(doc):
        return Evaluation(skipped=True)
    ref = object_ref(doc)
    if ref.namespace in policy.excluded_namespaces:
        return Evaluation(object=ref, excluded=True)
    if made_by_controller(doc):
        # its controller made it from a template that was judged with the parent
        return Evaluation(object=ref, owned=True)
    change: Change | None = None
    if previous is not None and is_kubernetes_object(previous):
        changed = changed_pointers(previous, doc)
        if not changed:
            return Evaluation(object=ref, unchanged=True)
        change = Change(previous, tuple(changed), identity_keys(doc) | identity_keys(previous))
    try:
        workload = build_workload(doc, ref)
    except ShapeError as exc:
        return Evaluation(object=ref, findings=[input_finding("GG002", exc.message, exc.path, ref, policy)])
    if workload is None:
        return Evaluation(object=ref)

    ignored = ignored_rules(doc)
    # positional: cheaper than keywords, and this runs on every object
    ctx = Context(policy, clusters, {}, deadline, change, held)
    result = Evaluation(ref, workload)
    mutating, checking = _rules_to_run(policy, ignored, topology=clusters is not None)
    if not checks:
        checking = []
    patchable = _patchable(workload, change)

    seen: dict[str, bool] = {}   # the predicates of Sees, for this workload
    current = doc
    for index, (rule, sees) in enumerate(mutating):
        if sees and not _sees(sees, workload, policy, seen):
            continue
        changed_doc = False
        for item in _mutations(rule, workload, ctx, ref):
            if isinstance(item, Problem):  # internal error
                result.findings.append(_finding(rule, item, ref, policy))
                continue
            problem, ops = item
            if patchable is not None:
                ops = [op for op in ops if any(inside(op["path"], p) for p in patchable)]
                if not ops:
                    continue  # a template the update leaves alone, or one that cannot change
            result.findings.append(_finding(rule, problem, ref, policy))
            if ops and not as_stored:
                result.patch.extend(ops)
                if not checks and index + 1 == len(mutating):
                    continue  # the patch is the answer: nothing reads the patched object
                if current is doc:
                    current = clone(doc)
                apply_patch(current, ops, in_place=True)
                changed_doc = True
        # the next mutating rule, and the checks, see the object as patched so far
        if changed_doc and (checking or index + 1 < len(mutating)):
            try:
                workload = build_workload(current) or workload
            except ShapeError:  # our own patch never breaks the shape; keep the last good model
                pass
            ctx.answers.clear()
            seen.clear()
    # (without checks, the last rule's patch is not applied: ``mutated`` is not the whole truth)
    result.mutated = current if result.patch and checks else None
    result.workload = workload

    for rule, sees in checking:
        if sees and not _sees(sees, workload, policy, seen):
            continue
        # The guard is inlined: it runs for every rule and object. A check may return any
        # iterable (most return an empty tuple when they cannot fire).
        try:
            for problem in rule.check(workload, ctx):  # type: ignore[misc]  # only rules with a check
                if change is not None and not rule.needs_topology and \
                        not touches(problem.path, change.changed):
                    continue  # about a part the update does not change
                result.findings.append(_finding(rule, problem, ref, policy))
        except Exception as exc:  # noqa: BLE001 - a rule bug must not take the front end down
            result.findings.append(_finding(rule, _internal_error(rule, exc, ref), ref, policy))
    for check in policy.custom_checks if checks else ():
        if check.id in ignored or check.slug in ignored:
            continue
        for finding in check.evaluate(workload, ref, policy):
            if change is None or touches(finding.path, change.changed):
                result.findings.append(finding)
    return result


def _patchable(workload: Workload, change: Change | None) -> tuple[str, ...] | None:
    """For an UPDATE, the pod templates a patch may touch: those whose content the update
    changes, unless the kind's templates are immutable (None: a CREATE, anything goes)."""
    if change is None:
        return None
    if workload.spec.templates_immutable:
        return ()
    return tuple(p.path for p in workload.pod_sets if touches(p.path, change.changed))

