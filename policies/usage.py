"""Node usage pools (seed 003): what a workload is for, what it must tolerate and prefer,
and the JSON Patch that injects it into every pod template.

Nodes carry the label *and* the taint ``usage.nodeKey`` (``training``, ``inference`` or
``hybrid``) and GPU nodes are tainted with their product label (``nvidia.com/gpu.product``).
A workload of usage U may run on the nodes of ``usage.pools[U]``, prefers the nodes of U
itself, and must tolerate the usage taint of each pool; a workload pinned to a GPU product
must tolerate that product's taint.

What a pod template lacks is worked out in one place, :func:`usage_additions` and
:func:`toleration_additions`: the patches (built with :mod:`policies.patch_builder`) are
those additions, and "nothing to add" (the /validate case) is their absence.

The operations are RFC 6902 and valid against the document they are computed for: missing
parents are created with one ``add`` of the whole object, lists are appended with ``/-``.
Computing them again on the patched document yields nothing (the API server may call a
mutating webhook twice).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.config import Policy
from policies.findings import join_pointer
from policies.gpu import gpu_pod_sets, is_gpu_pod_set, is_gpu_workload
from policies.patch import PatchOp, clone
from policies.patch_builder import _UNSEEN, _Builder, _spec_walk, _walk
from policies.pins import (
    PREFERRED,
    REQUIRED,
    _values,
    affinity_expressions,
    annotation_pins_model,
    labels_pin_product,
    model_pin_labels,
    pinned_products,
    spec_pinned_products,
    spec_pins_model,
)
from policies.specfacts import facts_token
from policies.tolerations import NO_SCHEDULE, any_tolerates, exact_tolerations
from policies.workload import PodSet, Workload

__all__ = [
    "UsageConfig", "usage_config", "workload_usage", "in_scope", "steered_pod_sets",
    "product_toleration", "pinned_products",
    "spec_pinned_products", "labels_pin_product", "model_pin_labels", "spec_pins_model",
    "annotation_pins_model", "Addition", "usage_additions", "toleration_additions",
    "Conflict", "usage_conflicts", "usage_patch", "product_patch", "PodSetPatch",
]


_TERMS_IN_SPEC = ("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms")
_PREFERRED_IN_SPEC = ("affinity", "nodeAffinity", PREFERRED)


@dataclass(frozen=True)
class UsageConfig:
    """The ``usage`` section of the policy, typed."""

    node_key: str
    workload_key: str
    pools: Mapping[str, Sequence[str]]
    weight: int
    scope: str
    defaults: Mapping[str, str]
    token: int                  # the policy's facts_token, for keys of shared facts
    # What each usage asks of a pod template, filled on first use (the config lives as long
    # as its policy, which nobody mutates).
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def usage_config(policy: Policy) -> UsageConfig:
    """Worked out once per loaded policy (nobody mutates one)."""
    cfg: UsageConfig | None = policy.memo.get("usage_config")
    if cfg is None:
        u = policy.usage
        cfg = policy.memo["usage_config"] = UsageConfig(
            node_key=u["nodeKey"], workload_key=u["workloadKey"], pools=u["pools"],
            weight=int(u["preferredWeight"]), scope=u["scope"], defaults=u["defaults"],
            token=facts_token(policy.memo))
    return cfg


# -- what the workload is --------------------------------------------------------------------

def workload_usage(workload: Workload, policy: Policy) -> tuple[str | None, str]:
    """(usage, where it came from). Usage is None when undetermined or not a known pool.

    The label ``usage.workloadKey`` on the object wins; else ``usage.defaults[kind]``; else
    the one pool the pod templates already prefer (``nodeKey In [pool]``). The second
    element describes the source for messages, or why the usage is undetermined.
    Remembered on the workload: four rules ask.
    """
    key = ("workload_usage", id(policy))
    found: tuple[str | None, str] | None = workload.memo.get(key)
    if found is None:
        found = workload.memo[key] = _workload_usage(workload, usage_config(policy))
    return found


def _workload_usage(workload: Workload, cfg: UsageConfig) -> tuple[str | None, str]:
    declared = workload.labels.get(cfg.workload_key)
    if declared is not None:
        if declared in cfg.pools:
            return declared, f"label {cfg.workload_key}={declared}"
        known = ", ".join(sorted(cfg.pools))
        return None, f"label {cfg.workload_key}={declared!r} is not a known usage ({known})"
    default = cfg.defaults.get(workload.kind)
    if default is not None and default in cfg.pools:
        return default, f"default usage of kind {workload.kind}"
    # A pod created from an already mutated template carries no label but the preference
    # for its own pool: without this, every such Pod would be GG103 at admission.
    preferred = {value for pod_set in workload.pod_sets for value in _preferred_usages(pod_set, cfg)}
    if len(preferred) == 1:
        (usage,) = preferred
        return usage, f"preferred node affinity {cfg.node_key} In [{usage}] of its pod template"
    return None, f"no label {cfg.workload_key} and kind {workload.kind} has no default usage"


def _preferred_usages(pod_set: PodSet, cfg: UsageConfig) -> Iterator[str]:
    """Pools named alone in a preferred ``nodeKey In [pool]`` term of the pod template."""
    for _, _, expr in affinity_expressions(pod_set).preferred:
        if expr.get("key") == cfg.node_key and expr.get("operator") == "In":
            values = _values(expr)
            if len(values) == 1 and values[0] in cfg.pools:
                yield values[0]


def in_scope(workload: Workload, policy: Policy) -> bool:
    """Scope ``gpu``: labelled workloads and GPU workloads. Scope ``all``: every workload."""
    if not workload.pod_sets:
        return False
    cfg = usage_config(policy)
    if cfg.scope == "all" or cfg.workload_key in workload.labels:
        return True
    return is_gpu_workload(workload, policy)


def steered_pod_sets(workload: Workload, policy: Policy) -> list[PodSet]:
    """The pod sets the usage affinities and tolerations are for.

    Scope ``gpu``: in a workload that uses GPUs, only the pod sets that use them (request
    a GPU resource, or a KAI GPU share: :func:`policies.gpu.is_gpu_pod_set`);
    CPU-only members (a Ray head, an MPI launcher, a RayJob submitter) are left where the
    scheduler puts them, so that steering never makes a feasible workload infeasible. A
    labelled workload without GPUs asked for its usage: all its pod sets. Scope ``all``:
    every pod set of every workload."""
    if not in_scope(workload, policy):
        return []
    if usage_config(policy).scope == "all" or not is_gpu_workload(workload, policy):
        return list(workload.pod_sets)
    return gpu_pod_sets(workload, policy)


# -- what it should carry --------------------------------------------------------------------

def _required_expression(cfg: UsageConfig, usage: str) -> dict[str, Any]:
    return {"key": cfg.node_key, "operator": "In", "values": list(cfg.pools[usage])}


def _preferred_term(cfg: UsageConfig, usage: str) -> dict[str, Any]:
    return {"weight": cfg.weight,
            "preference": {"matchExpressions": [{"key": cfg.node_key, "operator": "In",
                                                 "values": [usage]}]}}


def _usage_tolerations(cfg: UsageConfig, usage: str) -> list[dict[str, Any]]:
    return [{"key": cfg.node_key, "operator": "Equal", "value": pool, "effect": NO_SCHEDULE}
            for pool in cfg.pools[usage]]


def product_toleration(label: str, product: str) -> dict[str, Any]:
    return {"key": label, "operator": "Equal", "value": product, "effect": NO_SCHEDULE}



# -- conflicts (GG105) -------------------------------------------------------------------------

@dataclass(frozen=True)
class Conflict:
    path: str
    message: str


def _expression_conflicts(expr: dict[str, Any], allowed: frozenset[str]) -> str | None:
    """Why a node-usage expression contradicts the pools ``allowed``, or None."""
    operator = expr.get("operator")
    if operator == "In":
        values = _values(expr)
        for value in values:
            if value not in allowed:  # rare: list the outsiders only then
                return f"allows {', '.join(v for v in values if v not in allowed)}"
    elif operator == "NotIn" and allowed <= set(_values(expr)):
        return f"excludes every allowed pool ({', '.join(sorted(allowed))})"
    elif operator == "DoesNotExist":
        return "requires nodes without a usage label"
    return None


def _says_usage(term: dict[str, Any], node_key: str, allowed: frozenset[str]) -> bool:
    """Whether a required node-selector term already requires a usage (``In``), or
    contradicts the pools ``allowed`` (a GG105 conflict)."""
    expressions = term.get("matchExpressions")
    if isinstance(expressions, list):
        for expr in expressions:
            if isinstance(expr, dict) and expr.get("key") == node_key and (
                    expr.get("operator") == "In" or _expression_conflicts(expr, allowed)):
                return True
    return False


def _prefers_a_pool(preferred: list[Any], node_key: str) -> bool:
    """Whether a preferred scheduling term already prefers a usage (``nodeKey In [...]``)."""
    for term in preferred:
        preference = term.get("preference") if isinstance(term, dict) else None
        expressions = preference.get("matchExpressions") if isinstance(preference, dict) else None
        if isinstance(expressions, list):
            for expr in expressions:
                if isinstance(expr, dict) and expr.get("key") == node_key and expr.get("operator") == "In":
                    return True
    return False


def usage_conflicts(pod_set: PodSet, usage: str, policy: Policy) -> list[Conflict]:
    """Where the pod template's own scheduling constraints contradict usage ``usage``.

    Found once per shared facts, with paths from the pod spec (nearly always none)."""
    cfg = usage_config(policy)
    memo_key = ("usage_conflicts", cfg.token, usage)
    facts = pod_set.blind_facts  # the nodeSelector and affinity: no requested amount
    in_spec: list[Conflict] | None = facts.get(memo_key)
    if in_spec is None:
        in_spec = facts[memo_key] = _usage_conflicts(pod_set, cfg, usage)
    if not in_spec:
        return []
    base = pod_set.spec_path
    return [Conflict(base + c.path, c.message) for c in in_spec]


def _usage_conflicts(pod_set: PodSet, cfg: UsageConfig, usage: str) -> list[Conflict]:
    """:func:`usage_conflicts`, with JSON Pointers from the pod spec."""
    key = cfg.node_key
    allowed = _wanted_usage(cfg, usage).allowed
    spec, base = pod_set.spec, ""
    found: list[Conflict] = []

    def what() -> str:  # built only for a conflict, which is rare
        return f"usage {usage} (pools {', '.join(cfg.pools[usage])})"

    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and key in selector and str(selector[key]) not in allowed:
        found.append(Conflict(join_pointer(base, "nodeSelector", key),
                              f"nodeSelector {key}={selector[key]} contradicts {what()}"))
    expressions = affinity_expressions(pod_set)
    for t, e, expr in expressions.required:
        if expr.get("key") != key:
            continue
        reason = _expression_conflicts(expr, allowed)
        if reason:
            found.append(Conflict(
                join_pointer(base, "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms", t,
                             "matchExpressions", e),
                f"required node affinity term {t} on {key} {reason}, contradicting {what()}"))
    for p, e, expr in expressions.preferred:
        # Preferring the hybrid pool is odd but allowed; preferring another pool is not.
        if expr.get("key") != key or expr.get("operator") != "In":
            continue
        reason = _expression_conflicts(expr, allowed)
        if reason:
            found.append(Conflict(
                join_pointer(base, "affinity", "nodeAffinity", PREFERRED, p, "preference",
                             "matchExpressions", e),
                f"preferred node affinity {p} on {key} prefers {', '.join(_values(expr))}, "
                f"contradicting {what()}"))
    tolerations = spec.get("tolerations")
    if isinstance(tolerations, list):
        for i, tol in enumerate(tolerations):
            if not isinstance(tol, dict) or tol.get("key") != key:
                continue
            if (tol.get("operator") or "Equal") == "Equal":
                value = str(tol.get("value") or "")
                if value not in allowed:
                    found.append(Conflict(join_pointer(base, "tolerations", i),
                                          f"toleration {key}={value} tolerates another pool's taint, "
                                          f"contradicting {what()}"))
    return found


# -- what to add: the one source of the patches and of "nothing to add" ------------------------

@dataclass(frozen=True)
class _WantedUsage:
    """What every pod template of usage ``usage`` must carry, worked out once per policy."""

    usage: str
    cfg: UsageConfig
    allowed: frozenset[str]
    pools: str                                  # the pools, for messages
    expression: dict[str, Any]                  # read only: appended as (deep) copies
    first_term: dict[str, Any]                  # read only: the required term when there is none
    preferred: dict[str, Any]                   # read only: the preferred term
    tolerations: tuple[dict[str, Any], ...]     # read only: appended as copies


def _wanted_usage(cfg: UsageConfig, usage: str) -> _WantedUsage:
    found = cfg.derived.get(usage)
    if found is None:
        pools = cfg.pools[usage]
        expression = _required_expression(cfg, usage)
        found = cfg.derived[usage] = _WantedUsage(
            usage, cfg, frozenset(pools), ", ".join(pools), expression, {"matchExpressions": [expression]},
            _preferred_term(cfg, usage), tuple(_usage_tolerations(cfg, usage)))
    return found


@dataclass(frozen=True)
class Addition:
    """One item to append to a list in a pod spec. ``at``: the tokens of that list from the
    spec (missing parents are created); ``item`` is read only (appended as a copy);
    ``what`` says what it is, for messages."""

    at: tuple[str, ...]
    item: Any
    what: str


def usage_additions(pod_set: PodSet | None, spec: Any, wanted: _WantedUsage) -> list[Addition]:
    """What the pod spec ``spec`` (the pod set's, as walked: see :meth:`_Builder.enter`) lacks
    of usage ``wanted``, in the order GG101 appends it. The patch is these additions; a pod
    set with none needs nothing (the /validate case).

    Required: the usage expression ANDed into every term (terms are ORed) that says nothing
    about usage (a term that does is the user's choice, or a GG105 conflict), or a first
    term when there is none. Preferred: one term for the usage's own pool unless one
    prefers a pool already. Then every usage toleration not tolerated yet."""
    cfg = wanted.cfg
    node_key = cfg.node_key
    out: list[Addition] = []
    terms = _walk(spec, _TERMS_IN_SPEC)
    if not isinstance(terms, list) or not terms:
        if terms is None or isinstance(terms, list):
            out.append(Addition(_TERMS_IN_SPEC, wanted.first_term,
                                f"required node affinity {node_key} In [{wanted.pools}]"))
    else:
        for t, term in enumerate(terms):
            if isinstance(term, dict) and not _says_usage(term, node_key, wanted.allowed):
                out.append(Addition((*_TERMS_IN_SPEC, str(t), "matchExpressions"), wanted.expression,
                                    f"{node_key} In [{wanted.pools}] in required node affinity term {t}"))
    preferred = _walk(spec, _PREFERRED_IN_SPEC)
    if preferred is None or (isinstance(preferred, list) and not _prefers_a_pool(preferred, node_key)):
        out.append(Addition(_PREFERRED_IN_SPEC, wanted.preferred,
                            f"preferred node affinity (weight {cfg.weight}) {node_key} In [{wanted.usage}]"))
    out.extend(toleration_additions(pod_set, spec, wanted.tolerations))
    return out


def toleration_additions(pod_set: PodSet | None, spec: Any,
                         wanted: Iterable[dict[str, Any]]) -> list[Addition]:
    """The tolerations of ``wanted`` the pod spec ``spec`` (and the ones added before them)
    does not tolerate yet."""
    out: list[Addition] = []
    added: list[dict[str, Any]] = []
    for tol in wanted:
        key, value, effect = tol["key"], tol["value"], tol["effect"]
        if _tolerates(pod_set, spec, key, value, effect):
            continue
        if added and any_tolerates(added, key, value, effect):
            continue  # the same toleration wanted twice
        added.append(tol)
        out.append(Addition(("tolerations",), tol, f"toleration {key}={value}:{effect}"))
    return out


def _usage_additions_remembered(pod_set: PodSet, spec: Any, wanted: _WantedUsage) -> list[Addition]:
    """:func:`usage_additions`, once per shared facts when ``spec`` is the model's own (the
    additions are relative to the spec: equal specs lack the same)."""
    if spec is not pod_set.spec:
        return usage_additions(pod_set, spec, wanted)
    key = ("usage_additions", wanted.cfg.token, wanted.usage)
    facts = pod_set.blind_facts  # the affinity and tolerations: no requested amount
    found: list[Addition] | None = facts.get(key)
    if found is None:
        found = facts[key] = usage_additions(pod_set, spec, wanted)
    return found


def _carries_usage(pod_set: PodSet, spec: Any, wanted: _WantedUsage) -> bool:
    """Whether the pod spec ``spec`` lacks nothing of usage ``wanted``."""
    return not _usage_additions_remembered(pod_set, spec, wanted)


def _tolerates(pod_set: PodSet | None, spec: Any, key: str, value: str, effect: str = NO_SCHEDULE) -> bool:
    """``any_tolerates`` of the tolerations of ``spec``, the pod set's spec as walked (see
    :meth:`_Builder.enter`). The usage and product checks both ask of every pod set: the
    ``Equal`` tolerations are indexed once per shared facts."""
    if pod_set is not None and spec is pod_set.spec:  # nearly always: the walk found the model's own
        facts = pod_set.blind_facts  # the tolerations: no requested amount
        index: frozenset[tuple[str, str, str]] | None = facts.get("exact_tolerations")
        if index is None:
            index = facts["exact_tolerations"] = exact_tolerations(spec.get("tolerations"))
        if (key, value, effect) in index or (key, value, "") in index:
            return True
    existing = spec.get("tolerations") if isinstance(spec, dict) else None
    return any_tolerates(existing, key, value, effect)


def _tolerates_all(pod_set: PodSet, spec: Any, wanted: Iterable[dict[str, Any]]) -> bool:
    """Whether the pod spec's tolerations already tolerate every toleration of ``wanted``."""
    return not toleration_additions(pod_set, spec, wanted)


# -- building the patch ------------------------------------------------------------------------

@dataclass
class PodSetPatch:
    """The ops for one pod template and a human description of what they inject."""

    pod_set: PodSet
    ops: list[PatchOp]
    injected: list[str]


def _append(builder: _Builder, spec_tokens: tuple[str, ...], additions: Iterable[Addition]) -> list[str]:
    """Append ``additions`` to the pod spec at ``spec_tokens``; what was added, for the message."""
    injected: list[str] = []
    for addition in additions:
        if builder.append((*spec_tokens, *addition.at), clone(addition.item)):
            injected.append(addition.what)
    return injected


def _inject_usage(builder: _Builder, spec_tokens: tuple[str, ...], wanted: _WantedUsage,
                  pod_set: PodSet | None = None) -> list[str]:
    """Append what one pod template lacks of usage ``wanted`` to ``builder``."""
    spec = builder.lookup_in(spec_tokens, ())
    additions = (_usage_additions_remembered(pod_set, spec, wanted) if pod_set is not None
                 else usage_additions(None, spec, wanted))
    return _append(builder, spec_tokens, additions)


def _add_tolerations(builder: _Builder, spec_tokens: tuple[str, ...], wanted: Iterable[dict[str, Any]],
                     injected: list[str], pod_set: PodSet | None = None) -> None:
    spec = builder.lookup_in(spec_tokens, ())
    injected.extend(_append(builder, spec_tokens, toleration_additions(pod_set, spec, wanted)))


def usage_patch(workload: Workload, policy: Policy) -> list[PodSetPatch]:
    """GG101: the usage affinity and tolerations missing from each pod template.

    Empty when the workload is out of scope or its usage is undetermined (GG103).
    """
    steered = steered_pod_sets(workload, policy)
    if not steered:
        return []
    usage, _ = workload_usage(workload, policy)
    if usage is None:
        return []
    wanted = _wanted_usage(usage_config(policy), usage)
    for pod_set in steered:  # a loop, not all(<generator>): this runs on every object
        if not _carries_usage(pod_set, _spec_walk(pod_set, workload.doc)[1], wanted):
            break
    else:
        return []  # already mutated (the /validate case): nothing to build
    builder = _Builder(workload)
    out: list[PodSetPatch] = []
    for pod_set in steered:
        start = len(builder.ops)
        injected = _inject_usage(builder, builder.enter(pod_set), wanted, pod_set)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return out


def product_patch(workload: Workload, policy: Policy) -> list[PodSetPatch]:
    """GG102: the product tolerations missing from each pod template pinned to a product.

    A template pinned by its own nodeSelector or affinity can only ever run on that
    product's (tainted) nodes, so it gets the toleration whatever it requests; the
    workload label pins only the pod sets that use GPUs (a KAI GPU share too).
    """
    if not in_scope(workload, policy):
        return []
    if not labels_pin_product(workload, policy) and _spec_pins_tolerated(workload, policy):
        return []  # the /validate case: worked out once per shared facts
    pinned = [(pod_set, pinned_products(pod_set, workload, policy,
                                        include_workload_label=is_gpu_pod_set(pod_set, policy)))
              for pod_set in workload.pod_sets]
    if _tolerates_pinned(pinned, workload):
        return []  # already mutated (the /validate case), or pinned to nothing: nothing to build
    builder = _Builder(workload)
    out: list[PodSetPatch] = []
    for pod_set, pairs in pinned:
        if not pairs:
            continue  # not pinned: nothing to tolerate
        start = len(builder.ops)
        injected: list[str] = []
        _add_tolerations(builder, builder.enter(pod_set),
                         [product_toleration(label, product) for label, product in pairs], injected, pod_set)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return out


def _tolerates_pinned(pinned: list[tuple[PodSet, list[tuple[str, str]]]], workload: Workload) -> bool:
    """Whether every pod set already tolerates the product taints it is pinned to."""
    for pod_set, pairs in pinned:
        if pairs and not _tolerates_all(pod_set, _spec_walk(pod_set, workload.doc)[1],
                                        [product_toleration(label, product) for label, product in pairs]):
            return False
    return True


def _spec_pins_tolerated(workload: Workload, policy: Policy) -> bool:
    """:func:`_tolerates_pinned` for a workload whose labels pin no product (nearly all):
    then every pod set is pinned by its spec alone, so whether the spec tolerates its own
    pins is a fact of the spec's content. False when in doubt (the long way decides)."""
    for pod_set in workload.pod_sets:
        pins_tolerated = _spec_pins_tolerated_in_facts(pod_set, policy)
        if pins_tolerated is None:
            continue  # pinned to nothing: nothing to tolerate
        if not pins_tolerated or _spec_walk(pod_set, workload.doc)[1] is not pod_set.spec:
            return False
    return True


def _spec_pins_tolerated_in_facts(pod_set: PodSet, policy: Policy) -> bool | None:
    """Whether the pod spec tolerates the product taint of every product it pins itself
    to; None when it pins none. Once per shared facts."""
    key = ("spec pins tolerated", facts_token(policy.memo))
    facts = pod_set.blind_facts  # pins and tolerations: no requested amount
    found: bool | None = facts.get(key, _UNSEEN)
    if found is _UNSEEN:
        pins = spec_pinned_products(pod_set, policy)
        found = facts[key] = None if not pins else _tolerates_all(
            pod_set, pod_set.spec, [product_toleration(label, product) for label, product in pins])
    return found
