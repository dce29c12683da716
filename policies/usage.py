"""Node usage pools (seed 003): what a workload is for, what it must tolerate and prefer,
and the JSON Patch that injects it into every pod template.

Nodes carry the label *and* the taint ``usage.nodeKey`` (``training``, ``inference`` or
``hybrid``) and GPU nodes are tainted with their product label (``nvidia.com/gpu.product``).
A workload of usage U may run on the nodes of ``usage.pools[U]``, prefers the nodes of U
itself, and must tolerate the usage taint of each pool; a workload pinned to a GPU product
must tolerate that product's taint.

The operations are RFC 6902 and valid against the document they are computed for: missing
parents are created with one ``add`` of the whole object, lists are appended with ``/-``.
Computing them again on the patched document yields nothing (the API server may call a
mutating webhook twice).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.config import Policy
from policies.findings import join_pointer, split_pointer
from policies.gpu import gpus_per_pod, is_gpu_workload
from policies.patch import PatchOp, clone
from policies.tolerations import NO_SCHEDULE, tolerates
from policies.workload import PodSet, Workload

__all__ = [
    "UsageConfig", "usage_config", "workload_usage", "in_scope", "required_expression",
    "preferred_term", "usage_tolerations", "product_toleration", "pinned_products",
    "Conflict", "usage_conflicts", "usage_patch", "product_patch", "PodSetPatch",
]


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class UsageConfig:
    """The ``usage`` section of the policy, typed."""

    node_key: str
    workload_key: str
    pools: Mapping[str, Sequence[str]]
    weight: int
    scope: str
    defaults: Mapping[str, str]


def usage_config(policy: Policy) -> UsageConfig:
    u = policy.usage
    return UsageConfig(node_key=u["nodeKey"], workload_key=u["workloadKey"], pools=u["pools"],
                       weight=int(u["preferredWeight"]), scope=u["scope"], defaults=u["defaults"])


# -- what the workload is --------------------------------------------------------------------

def workload_usage(workload: Workload, policy: Policy) -> tuple[str | None, str]:
    """(usage, where it came from). Usage is None when undetermined or not a known pool.

    The label ``usage.workloadKey`` on the object wins; else ``usage.defaults[kind]``; else
    the one pool the pod templates already prefer (``nodeKey In [pool]``). The second
    element describes the source for messages, or why the usage is undetermined.
    """
    cfg = usage_config(policy)
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
    for _, pref in _dicts(_get(pod_set.spec, "affinity", "nodeAffinity", _PREFERRED)):
        for _, expr in _expressions(pref.get("preference"), cfg.node_key):
            values = _values(expr)
            if expr.get("operator") == "In" and len(values) == 1 and values[0] in cfg.pools:
                yield values[0]


def in_scope(workload: Workload, policy: Policy) -> bool:
    """Scope ``gpu``: labelled workloads and GPU workloads. Scope ``all``: every workload."""
    cfg = usage_config(policy)
    if not workload.pod_sets:
        return False
    if cfg.scope == "all" or cfg.workload_key in workload.labels:
        return True
    return is_gpu_workload(workload, policy)


# -- what it should carry --------------------------------------------------------------------

def required_expression(usage: str, policy: Policy) -> dict[str, Any]:
    cfg = usage_config(policy)
    return {"key": cfg.node_key, "operator": "In", "values": list(cfg.pools[usage])}


def preferred_term(usage: str, policy: Policy) -> dict[str, Any]:
    cfg = usage_config(policy)
    return {"weight": cfg.weight,
            "preference": {"matchExpressions": [{"key": cfg.node_key, "operator": "In",
                                                 "values": [usage]}]}}


def usage_tolerations(usage: str, policy: Policy) -> list[dict[str, Any]]:
    cfg = usage_config(policy)
    return [{"key": cfg.node_key, "operator": "Equal", "value": pool, "effect": NO_SCHEDULE}
            for pool in cfg.pools[usage]]


def product_toleration(label: str, product: str) -> dict[str, Any]:
    return {"key": label, "operator": "Equal", "value": product, "effect": NO_SCHEDULE}


# -- reading the pod template -----------------------------------------------------------------

def _get(node: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _dicts(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield i, item


def _expressions(term: Any, key: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, expr in _dicts(_get(term, "matchExpressions")):
        if expr.get("key") == key:
            yield i, expr


def _values(expr: dict[str, Any]) -> list[str]:
    values = expr.get("values")
    return [str(v) for v in values] if isinstance(values, list) else []


def pinned_products(pod_set: PodSet, workload: Workload, policy: Policy,
                    include_workload_label: bool = True) -> list[tuple[str, str]]:
    """(product label, product) pairs the pod template is pinned to, in a stable order.

    Pinned means: a nodeSelector on a product label of ``gpu.resources``, an ``In``
    expression on it in the required node affinity (every value, terms are ORed), or
    the workload label of that key.
    """
    labels = list(dict.fromkeys(policy.gpu_resources.values()))
    spec = pod_set.spec
    found: list[tuple[str, str]] = []

    def note(label: str, value: Any) -> None:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
            pair = (label, str(value))
            if pair not in found:
                found.append(pair)

    selector = spec.get("nodeSelector")
    terms = _get(spec, "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms")
    for label in labels:
        if isinstance(selector, dict) and label in selector:
            note(label, selector[label])
        for _, term in _dicts(terms):
            for _, expr in _expressions(term, label):
                if expr.get("operator") == "In":
                    for value in _values(expr):
                        note(label, value)
        if include_workload_label and label in workload.labels:
            note(label, workload.labels[label])
    return found


# -- conflicts (GG105) -------------------------------------------------------------------------

@dataclass(frozen=True)
class Conflict:
    path: str
    message: str


def _expression_conflicts(expr: dict[str, Any], allowed: set[str]) -> str | None:
    """Why a node-usage expression contradicts the pools ``allowed``, or None."""
    operator = expr.get("operator")
    values = _values(expr)
    if operator == "In":
        outside = [v for v in values if v not in allowed]
        if outside:
            return f"allows {', '.join(outside)}"
    elif operator == "NotIn" and allowed <= set(values):
        return f"excludes every allowed pool ({', '.join(sorted(allowed))})"
    elif operator == "DoesNotExist":
        return "requires nodes without a usage label"
    return None


def usage_conflicts(pod_set: PodSet, usage: str, policy: Policy) -> list[Conflict]:
    """Where the pod template's own scheduling constraints contradict usage ``usage``."""
    cfg = usage_config(policy)
    allowed = set(cfg.pools[usage])
    spec, base = pod_set.spec, pod_set.spec_path
    what = f"usage {usage} (pools {', '.join(cfg.pools[usage])})"
    found: list[Conflict] = []
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and cfg.node_key in selector and str(selector[cfg.node_key]) not in allowed:
        found.append(Conflict(join_pointer(base, "nodeSelector", cfg.node_key),
                              f"nodeSelector {cfg.node_key}={selector[cfg.node_key]} contradicts {what}"))
    node_affinity = _get(spec, "affinity", "nodeAffinity")
    for t, term in _dicts(_get(node_affinity, _REQUIRED, "nodeSelectorTerms")):
        for e, expr in _expressions(term, cfg.node_key):
            reason = _expression_conflicts(expr, allowed)
            if reason:
                found.append(Conflict(
                    join_pointer(base, "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms", t,
                                 "matchExpressions", e),
                    f"required node affinity term {t} on {cfg.node_key} {reason}, contradicting {what}"))
    for p, pref in _dicts(_get(node_affinity, _PREFERRED)):
        for e, expr in _expressions(pref.get("preference"), cfg.node_key):
            # Preferring the hybrid pool is odd but allowed; preferring another pool is not.
            reason = _expression_conflicts(expr, allowed) if expr.get("operator") == "In" else None
            if reason:
                found.append(Conflict(
                    join_pointer(base, "affinity", "nodeAffinity", _PREFERRED, p, "preference",
                                 "matchExpressions", e),
                    f"preferred node affinity {p} on {cfg.node_key} prefers {', '.join(_values(expr))}, "
                    f"contradicting {what}"))
    for i, tol in _dicts(spec.get("tolerations")):
        if tol.get("key") == cfg.node_key and (tol.get("operator") or "Equal") == "Equal":
            value = str(tol.get("value") or "")
            if value not in allowed:
                found.append(Conflict(join_pointer(base, "tolerations", i),
                                      f"toleration {cfg.node_key}={value} tolerates another pool's taint, "
                                      f"contradicting {what}"))
    return found


# -- building the patch ------------------------------------------------------------------------

class _Builder:
    """Collects RFC 6902 ops against ``doc`` while applying them to a private copy, so that
    each op sees the effect of the previous ones. Additions inside an object this builder
    created are folded into that object's ``add`` instead of becoming ops of their own."""

    def __init__(self, doc: Any) -> None:
        self.work = doc             # copied on the first change: most documents need none
        self._copied = False
        self.ops: list[PatchOp] = []
        self._created: set[tuple[str, ...]] = set()

    def _inside_created(self, tokens: tuple[str, ...]) -> bool:
        # prefixes of the path, not every created path: linear in depth, not in pod sets
        return any(tokens[:depth] in self._created for depth in range(1, len(tokens) + 1))

    def lookup(self, tokens: Sequence[str]) -> Any:
        node = self.work
        for token in tokens:
            if isinstance(node, dict):
                node = node.get(token)
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return None
        return node

    def append(self, tokens: Sequence[str], item: Any) -> bool:
        """Append ``item`` to the list at ``tokens``, creating missing parents (mappings,
        then the list). False when something in the way has the wrong type."""
        if not self._copied:
            self.work, self._copied = clone(self.work), True
        node: Any = self.work
        for depth, token in enumerate(tokens):
            is_last = depth == len(tokens) - 1
            if isinstance(node, list):
                if not (token.isdigit() and int(token) < len(node)):
                    return False
                child = node[int(token)]
                if child is None:
                    return False
                node = child
                continue
            if not isinstance(node, dict):
                return False
            child = node.get(token)
            if child is None:  # missing (or null): create everything from here down
                value: Any = [item]
                for key in reversed(tokens[depth + 1:]):
                    value = {key: value}
                node[token] = value
                here = tuple(tokens[:depth + 1])
                if not self._inside_created(here):
                    self.ops.append({"op": "add", "path": _pointer(here), "value": value})
                    self._created.add(here)
                return True
            if is_last:
                if not isinstance(child, list):
                    return False
                child.append(item)
                if not self._inside_created(tuple(tokens)):
                    self.ops.append({"op": "add", "path": _pointer(tokens) + "/-", "value": item})
                return True
            node = child
        return False


def _pointer(tokens: Iterable[str]) -> str:
    return join_pointer("", *tokens)


@dataclass
class PodSetPatch:
    """The ops for one pod template and a human description of what they inject."""

    pod_set: PodSet
    ops: list[PatchOp]
    injected: list[str]


def _spec_tokens(pod_set: PodSet) -> tuple[str, ...]:
    return (*split_pointer(pod_set.path), "spec")


def _add_tolerations(builder: _Builder, spec_tokens: tuple[str, ...],
                     wanted: Iterable[dict[str, Any]], injected: list[str]) -> None:
    for tol in wanted:
        existing = builder.lookup((*spec_tokens, "tolerations"))
        if isinstance(existing, list) and any(tolerates(t, tol["key"], tol["value"], tol["effect"])
                                              for t in existing):
            continue
        if builder.append((*spec_tokens, "tolerations"), dict(tol)):
            injected.append(f"toleration {tol['key']}={tol['value']}:{tol['effect']}")


def usage_patch(workload: Workload, policy: Policy) -> list[PodSetPatch]:
    """GG101: the usage affinity and tolerations missing from each pod template.

    Empty when the workload is out of scope or its usage is undetermined (GG103).
    """
    if not in_scope(workload, policy):
        return []
    usage, _ = workload_usage(workload, policy)
    if usage is None:
        return []
    cfg = usage_config(policy)
    allowed = set(cfg.pools[usage])
    expression = required_expression(usage, policy)
    pools = ", ".join(cfg.pools[usage])
    builder = _Builder(workload.doc)
    out: list[PodSetPatch] = []
    for pod_set in workload.pod_sets:
        start = len(builder.ops)
        injected: list[str] = []
        spec_tokens = _spec_tokens(pod_set)
        node_affinity = (*spec_tokens, "affinity", "nodeAffinity")

        # Required: AND the usage expression into every term (terms are ORed); a term that
        # already says something about usage is the user's choice (or a GG105 conflict).
        terms_at = (*node_affinity, _REQUIRED, "nodeSelectorTerms")
        terms = builder.lookup(terms_at)
        if not isinstance(terms, list) or not terms:
            if terms is None or isinstance(terms, list):
                if builder.append(terms_at, {"matchExpressions": [dict(expression)]}):
                    injected.append(f"required node affinity {cfg.node_key} In [{pools}]")
        else:
            for t, term in enumerate(terms):
                if not isinstance(term, dict):
                    continue
                if any(e.get("operator") == "In" or _expression_conflicts(e, allowed)
                       for _, e in _expressions(term, cfg.node_key)):
                    continue  # the user's own usage requirement, or a GG105 conflict
                if builder.append((*terms_at, str(t), "matchExpressions"), dict(expression)):
                    injected.append(f"{cfg.node_key} In [{pools}] in required node affinity term {t}")

        # Preferred: one term for the usage's own pool unless one about usage exists.
        preferred_at = (*node_affinity, _PREFERRED)
        preferred = builder.lookup(preferred_at)
        has_usage_preference = isinstance(preferred, list) and any(
            e.get("operator") == "In" for _, p in _dicts(preferred)
            for _, e in _expressions(p.get("preference"), cfg.node_key))
        if not has_usage_preference and (preferred is None or isinstance(preferred, list)):
            if builder.append(preferred_at, preferred_term(usage, policy)):
                injected.append(f"preferred node affinity (weight {cfg.weight}) {cfg.node_key} In [{usage}]")

        _add_tolerations(builder, spec_tokens, usage_tolerations(usage, policy), injected)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return _decoupled(out)


def product_patch(workload: Workload, policy: Policy) -> list[PodSetPatch]:
    """GG102: the product tolerations missing from each pod template pinned to a product.

    A template pinned by its own nodeSelector or affinity can only ever run on that
    product's (tainted) nodes, so it gets the toleration whatever it requests; the
    workload label pins only the pod sets that request GPUs.
    """
    if not in_scope(workload, policy):
        return []
    builder = _Builder(workload.doc)
    out: list[PodSetPatch] = []
    for pod_set in workload.pod_sets:
        start = len(builder.ops)
        pairs = pinned_products(pod_set, workload, policy,
                                include_workload_label=gpus_per_pod(pod_set, policy) > 0)
        injected: list[str] = []
        _add_tolerations(builder, _spec_tokens(pod_set),
                         (product_toleration(label, product) for label, product in pairs), injected)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return _decoupled(out)


def _decoupled(patches: list[PodSetPatch]) -> list[PodSetPatch]:
    """Copy the op values out of the builder's working document, which they share."""
    for patch in patches:
        patch.ops = copy.deepcopy(patch.ops)
    return patches
