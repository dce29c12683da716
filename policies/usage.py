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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from policies.config import Policy
from policies.findings import join_pointer, pointer_tokens
from policies.gpu import gpu_pod_sets, gpus_per_pod, is_gpu_workload
from policies.patch import PatchOp, clone
from policies.quantity import is_positive
from policies.tolerations import NO_SCHEDULE, any_tolerates, exact_tolerations
from policies.workload import PodSet, Workload, facts_token

__all__ = [
    "UsageConfig", "usage_config", "workload_usage", "in_scope", "steered_pod_sets", "required_expression",
    "preferred_term", "usage_tolerations", "product_toleration", "pinned_products",
    "spec_pinned_products", "labels_pin_product", "model_pin_labels", "spec_pins_model",
    "annotation_pins_model",
    "Conflict", "usage_conflicts", "usage_patch", "product_patch", "PodSetPatch",
]


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_TERMS_IN_SPEC = ("affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms")
_PREFERRED_IN_SPEC = ("affinity", "nodeAffinity", _PREFERRED)


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

    Scope ``gpu``: in a workload that requests GPUs, only the pod sets that request them;
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

def required_expression(usage: str, policy: Policy) -> dict[str, Any]:
    return _required_expression(usage_config(policy), usage)


def preferred_term(usage: str, policy: Policy) -> dict[str, Any]:
    return _preferred_term(usage_config(policy), usage)


def usage_tolerations(usage: str, policy: Policy) -> list[dict[str, Any]]:
    return _usage_tolerations(usage_config(policy), usage)


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


# -- reading the pod template -----------------------------------------------------------------

def _values(expr: dict[str, Any]) -> list[str]:
    """An expression's values as strings (read only: it may be the document's own list)."""
    values = expr.get("values")
    if not isinstance(values, list):
        return []
    for value in values:
        if type(value) is not str:
            return [str(v) for v in values]
    return values


class AffinityExpressions(NamedTuple):
    """Every node-affinity match expression of a pod template, as (term index, expression
    index, expression): the usage and product rules each filter them by key."""

    required: list[tuple[int, int, dict[str, Any]]]     # requiredDuring... nodeSelectorTerms
    preferred: list[tuple[int, int, dict[str, Any]]]    # preferredDuring... [i].preference


def affinity_expressions(pod_set: PodSet) -> AffinityExpressions:
    """The pod template's node-affinity expressions, read once per pod set (the facts
    derived from them are shared; these are parts of the document)."""
    found: AffinityExpressions | None = pod_set.memo.get("affinity_expressions")
    if found is None:
        found = pod_set.memo["affinity_expressions"] = _read_affinity(pod_set.spec)
    return found


def _read_affinity(spec: dict[str, Any]) -> AffinityExpressions:
    found = AffinityExpressions([], [])
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        return found
    required = node_affinity.get(_REQUIRED)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if isinstance(terms, list):
        for t, term in enumerate(terms):
            _add_expressions(t, term, found.required)
    terms = node_affinity.get(_PREFERRED)
    if isinstance(terms, list):
        for p, term in enumerate(terms):
            if isinstance(term, dict):
                _add_expressions(p, term.get("preference"), found.preferred)
    return found


def _add_expressions(index: int, selector: Any, into: list[tuple[int, int, dict[str, Any]]]) -> None:
    """Append (index, i, expression) for each mapping in ``selector.matchExpressions``."""
    expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
    if isinstance(expressions, list):
        for i, expr in enumerate(expressions):
            if isinstance(expr, dict):
                into.append((index, i, expr))


def pinned_products(pod_set: PodSet, workload: Workload, policy: Policy,
                    include_workload_label: bool = True) -> list[tuple[str, str]]:
    """(product label, product) pairs the pod template is pinned to, in a stable order.

    Pinned means: a nodeSelector on a product label of ``gpu.resources``, an ``In``
    expression on it in the required node affinity (every value, terms are ORed), or
    the workload label of that key. Remembered: GG102 and GG104 ask. In the pod set's
    shared facts unless the workload's labels pin a product too.
    """
    labels = product_labels(policy)
    if not (include_workload_label and _labels_pin(workload, labels)):
        return list(spec_pinned_products(pod_set, policy))
    key = ("pinned_products", facts_token(policy.memo), True)
    found: tuple[tuple[str, str], ...] | None = pod_set.memo.get(key)
    if found is None:
        found = pod_set.memo[key] = _pinned_products(pod_set, labels, workload.labels)
    return list(found)


def spec_pinned_products(pod_set: PodSet, policy: Policy) -> tuple[tuple[str, str], ...]:
    """:func:`pinned_products` by the pod spec alone (its nodeSelector and required node
    affinity, not the workload label), in the shared facts (read only)."""
    key = ("pinned_products", facts_token(policy.memo), False)
    found: tuple[tuple[str, str], ...] | None = pod_set.facts.get(key)
    if found is None:
        found = pod_set.facts[key] = _pinned_products(pod_set, product_labels(policy), {})
    return found


def labels_pin_product(workload: Workload, policy: Policy) -> bool:
    """Whether the workload's own labels name a GPU product (see :func:`pinned_products`)."""
    return _labels_pin(workload, product_labels(policy))


def _labels_pin(workload: Workload, labels: list[str]) -> bool:
    """Whether the workload's own labels name a product (rare: products pin per template)."""
    for label in labels:
        if label in workload.labels:
            return True
    return False


def model_pin_labels(policy: Policy) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(node labels, annotations) of ``gpu.modelPins`` that pin a GPU model (GG104), the
    node labels after the product labels of ``gpu.resources``; each once."""
    found: tuple[tuple[str, ...], tuple[str, ...]] | None = policy.memo.get("model_pin_labels")
    if found is None:
        pins = policy.gpu.get("modelPins") or {}
        labels = tuple(dict.fromkeys([*product_labels(policy), *(pins.get("nodeLabels") or [])]))
        annotations = tuple(dict.fromkeys(pins.get("annotations") or []))
        found = policy.memo["model_pin_labels"] = (labels, annotations)
    return found


def spec_pins_model(pod_set: PodSet, policy: Policy) -> bool:
    """Whether the pod spec pins a GPU model: a nodeSelector, or a required node affinity
    ``In`` expression (in any term, as :func:`pinned_products` reads them), on a label of
    :func:`model_pin_labels`. In the shared facts (the spec's content and the policy)."""
    key = ("spec pins model", facts_token(policy.memo))
    found: bool | None = pod_set.facts.get(key)
    if found is None:
        found = pod_set.facts[key] = _spec_pins_model(pod_set, model_pin_labels(policy)[0])
    return found


def _spec_pins_model(pod_set: PodSet, labels: tuple[str, ...]) -> bool:
    selector = pod_set.spec.get("nodeSelector")
    if isinstance(selector, dict):
        for label in labels:
            value = selector.get(label)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
                return True
    for _, _, expr in affinity_expressions(pod_set).required:
        if expr.get("key") in labels and expr.get("operator") == "In" and _values(expr):
            return True
    return False


def annotation_pins_model(pod_set: PodSet, policy: Policy) -> bool:
    """Whether the pod template carries an annotation of ``gpu.modelPins.annotations``
    with a value (HAMi's ``nvidia.com/use-gputype: A100``). Read from the template's
    metadata, not the shared facts of its spec."""
    annotations = model_pin_labels(policy)[1]
    if not annotations or not pod_set.annotations:
        return False
    for key in annotations:
        value = pod_set.annotations.get(key)
        if isinstance(value, str) and value.strip():
            return True
    return False


def product_labels(policy: Policy) -> list[str]:
    """The node labels carrying GPU products, each once, in ``gpu.resources`` order."""
    labels: list[str] | None = policy.memo.get("product_labels")
    if labels is None:
        labels = policy.memo["product_labels"] = list(dict.fromkeys(policy.gpu_resources.values()))
    return labels


def _pinned_products(pod_set: PodSet, labels: list[str],
                     workload_labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The pins of the pod spec, then of ``workload_labels`` (empty: the spec's alone)."""
    spec = pod_set.spec
    selector = spec.get("nodeSelector")
    if not isinstance(selector, dict):
        selector = {}
    # The required ``In`` expressions, in term order; read once for every label.
    required_in = [expr for _, _, expr in affinity_expressions(pod_set).required
                   if expr.get("operator") == "In"]
    found: dict[tuple[str, str], None] = {}  # ordered, without repeats
    for label in labels:
        values: list[Any] = []
        if label in selector:
            values.append(selector[label])
        for expr in required_in:
            if expr.get("key") == label:
                values.extend(_values(expr))
        if label in workload_labels:
            values.append(workload_labels[label])
        for value in values:
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
                found[label, str(value)] = None
    return tuple(found)


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
    in_spec: list[Conflict] | None = pod_set.facts.get(memo_key)
    if in_spec is None:
        in_spec = pod_set.facts[memo_key] = _usage_conflicts(pod_set, cfg, usage)
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
                join_pointer(base, "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms", t,
                             "matchExpressions", e),
                f"required node affinity term {t} on {key} {reason}, contradicting {what()}"))
    for p, e, expr in expressions.preferred:
        # Preferring the hybrid pool is odd but allowed; preferring another pool is not.
        if expr.get("key") != key or expr.get("operator") != "In":
            continue
        reason = _expression_conflicts(expr, allowed)
        if reason:
            found.append(Conflict(
                join_pointer(base, "affinity", "nodeAffinity", _PREFERRED, p, "preference",
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


# -- building the patch ------------------------------------------------------------------------

class _Builder:
    """Collects RFC 6902 ops against ``doc`` while applying them to a private copy, so that
    each op sees the effect of the previous ones. Additions inside an object this builder
    created are folded into that object's ``add`` instead of becoming ops of their own."""

    def __init__(self, workload: Workload) -> None:
        # The document as patched so far. Copied along each changed path only (the rest is
        # shared with the workload's document, which is never written to): most documents
        # need no change at all, and a change touches a few nodes of a large object.
        self.work: Any = workload.doc
        self._copied = False
        self._owned: set[int] = set()   # ids of the containers this builder made or copied
        self.ops: list[PatchOp] = []
        self._created: set[tuple[str, ...]] = set()
        # Nodes found by lookup_in, by path: a pod template is looked into several times.
        # Forgotten on every append, which may copy the document or create the node.
        self._found: dict[tuple[str, ...], Any] = {}

    def _inside_created(self, tokens: tuple[str, ...]) -> bool:
        # prefixes of the path, not every created path: linear in depth, not in pod sets
        return any(tokens[:depth] in self._created for depth in range(1, len(tokens) + 1))

    def lookup(self, tokens: Sequence[str]) -> Any:
        return _walk(self.work, tokens)

    def enter(self, pod_set: PodSet) -> tuple[str, ...]:
        """The tokens of the pod set's spec: the ``base`` of its :meth:`lookup_in` calls.

        The node there is found by walking the tokens, not taken from ``pod_set.spec``: a
        map key that is not a string (YAML ``1:``) is found by the model but not by a JSON
        Pointer walk, and the walk is the truth here. On the workload's own (unpatched)
        document the walk is remembered on the pod set, for the next builder."""
        if self._copied:
            return _spec_tokens(pod_set)
        tokens, node = _spec_walk(pod_set, self.work)
        self._found[tokens] = node
        return tokens

    def lookup_in(self, base: tuple[str, ...], rest: Sequence[str]) -> Any:
        """``lookup((*base, *rest))``, with the node at ``base`` remembered."""
        node = self._found.get(base, _UNSEEN)
        if node is _UNSEEN:
            node = self._found[base] = _walk(self.work, base)
        return _walk(node, rest)

    def append(self, tokens: Sequence[str], item: Any) -> bool:
        """Append ``item`` to the list at ``tokens``, creating missing parents (mappings,
        then the list). False when something in the way has the wrong type."""
        self._found.clear()
        self._own_all(item)   # folded into later: it must never be copied away from its op
        if not self._copied:
            self.work, self._copied = self._copy(self.work), True
        node: Any = self.work
        for depth, token in enumerate(tokens):
            is_last = depth == len(tokens) - 1
            if isinstance(node, list):
                if not (token.isdigit() and int(token) < len(node)):
                    return False
                index = int(token)
                child = node[index]
                if child is None:
                    return False
                if isinstance(child, (dict, list)) and id(child) not in self._owned:
                    child = node[index] = self._copy(child)
                node = child
                continue
            if not isinstance(node, dict):
                return False
            child = node.get(token)
            if child is None:  # missing (or null): create everything from here down
                value: Any = [item]
                self._owned.add(id(value))
                for key in reversed(tokens[depth + 1:]):
                    value = {key: value}
                    self._owned.add(id(value))
                node[token] = value
                here = tuple(tokens[:depth + 1])
                if not self._inside_created(here):
                    self.ops.append({"op": "add", "path": _pointer(here), "value": value})
                    self._created.add(here)
                return True
            if isinstance(child, (dict, list)) and id(child) not in self._owned:
                child = node[token] = self._copy(child)
            if is_last:
                if not isinstance(child, list):
                    return False
                child.append(item)
                if not self._inside_created(tuple(tokens)):
                    self.ops.append({"op": "add", "path": _pointer(tokens) + "/-", "value": item})
                return True
            node = child
        return False

    def _copy(self, node: Any) -> Any:
        """A shallow copy of a container on a changed path, owned by this builder."""
        copied = dict(node) if isinstance(node, dict) else list(node) if isinstance(node, list) else node
        self._owned.add(id(copied))
        return copied

    def _own_all(self, value: Any) -> None:
        if isinstance(value, dict):
            self._owned.add(id(value))
            for child in value.values():
                self._own_all(child)
        elif isinstance(value, list):
            self._owned.add(id(value))
            for child in value:
                self._own_all(child)


_UNSEEN: Any = object()


def _spec_tokens(pod_set: PodSet) -> tuple[str, ...]:
    """The JSON Pointer tokens of the pod set's spec, split once per pod set."""
    found = pod_set.memo.get("spec_walk")
    return found[0] if found is not None else _spec_pointer_tokens(pod_set.path)


def _spec_walk(pod_set: PodSet, doc: Any) -> tuple[tuple[str, ...], Any]:
    """(tokens, node) of the pod set's spec in ``doc``, its workload's own (unpatched) document,
    found by walking the tokens (see :meth:`_Builder.enter`); remembered on the pod set."""
    found: tuple[tuple[str, ...], Any] | None = pod_set.memo.get("spec_walk")
    if found is None:
        tokens = _spec_pointer_tokens(pod_set.path)
        found = pod_set.memo["spec_walk"] = (tokens, _walk(doc, tokens))
    return found


def _spec_pointer_tokens(template_path: str) -> tuple[str, ...]:
    """The tokens of ``<template_path>/spec``: the same few paths on every object, so kept
    (unless hostile keys made the path long)."""
    if len(template_path) > _REMEMBERED_PATH_MAX:
        return (*pointer_tokens(template_path), "spec")
    found = _SPEC_POINTER_TOKENS.get(template_path)
    if found is None:
        if len(_SPEC_POINTER_TOKENS) >= _MAX_SPEC_POINTER_TOKENS:
            _SPEC_POINTER_TOKENS.clear()
        found = _SPEC_POINTER_TOKENS[template_path] = (*pointer_tokens(template_path), "spec")
    return found


_REMEMBERED_PATH_MAX = 512
_MAX_SPEC_POINTER_TOKENS = 1024
_SPEC_POINTER_TOKENS: dict[str, tuple[str, ...]] = {}


def _walk(node: Any, tokens: Sequence[str]) -> Any:
    """The node at ``tokens`` below ``node``, or None."""
    for token in tokens:
        if type(node) is dict:  # nearly always: no subclass check
            node = node.get(token)
        elif isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _pointer(tokens: Iterable[str]) -> str:
    return join_pointer("", *tokens)


@dataclass
class PodSetPatch:
    """The ops for one pod template and a human description of what they inject."""

    pod_set: PodSet
    ops: list[PatchOp]
    injected: list[str]


def _add_tolerations(builder: _Builder, spec_tokens: tuple[str, ...],
                     wanted: Iterable[dict[str, Any]], injected: list[str]) -> None:
    existing = builder.lookup_in(spec_tokens, ("tolerations",))
    for tol in wanted:
        if any_tolerates(existing, tol["key"], tol["value"], tol["effect"]):
            continue
        if builder.append((*spec_tokens, "tolerations"), dict(tol)):
            injected.append(f"toleration {tol['key']}={tol['value']}:{tol['effect']}")
        existing = builder.lookup_in(spec_tokens, ("tolerations",))  # as the append left it


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
        if not _carries_usage_remembered(pod_set, _spec_walk(pod_set, workload.doc)[1], wanted):
            break
    else:
        return []  # already mutated (the /validate case): nothing to build
    builder = _Builder(workload)
    out: list[PodSetPatch] = []
    for pod_set in steered:
        start = len(builder.ops)
        injected = _inject_usage(builder, builder.enter(pod_set), wanted)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return out


@dataclass(frozen=True)
class _WantedUsage:
    """What every pod template of usage ``usage`` must carry, worked out once per policy."""

    usage: str
    cfg: UsageConfig
    allowed: frozenset[str]
    pools: str                                  # the pools, for messages
    expression: dict[str, Any]                  # read only: appended as (deep) copies
    tolerations: tuple[dict[str, Any], ...]     # read only: appended as copies


def _wanted_usage(cfg: UsageConfig, usage: str) -> _WantedUsage:
    found = cfg.derived.get(usage)
    if found is None:
        pools = cfg.pools[usage]
        found = cfg.derived[usage] = _WantedUsage(
            usage, cfg, frozenset(pools), ", ".join(pools), _required_expression(cfg, usage),
            tuple(_usage_tolerations(cfg, usage)))
    return found


def _carries_usage(pod_set: PodSet, spec: Any, wanted: _WantedUsage) -> bool:
    """Whether :func:`_inject_usage` would find nothing to add to the pod spec ``spec``:
    every required term already says something about usage, a preferred term prefers a
    pool, and every usage taint is tolerated. False whenever in doubt (the builder decides)."""
    terms = _walk(spec, _TERMS_IN_SPEC)
    if not isinstance(terms, list) or not terms:
        return False
    node_key = wanted.cfg.node_key
    for term in terms:
        if isinstance(term, dict) and not _says_usage(term, node_key, wanted.allowed):
            return False
    preferred = _walk(spec, _PREFERRED_IN_SPEC)
    if not isinstance(preferred, list) or not _prefers_a_pool(preferred, node_key):
        return False
    return _tolerates_all(pod_set, spec, wanted.tolerations)


def _carries_usage_remembered(pod_set: PodSet, spec: Any, wanted: _WantedUsage) -> bool:
    """:func:`_carries_usage`, once per shared facts when ``spec`` is the model's own."""
    if spec is not pod_set.spec:
        return _carries_usage(pod_set, spec, wanted)
    key = ("carries_usage", wanted.cfg.token, wanted.usage)
    found: bool | None = pod_set.facts.get(key)
    if found is None:
        found = pod_set.facts[key] = _carries_usage(pod_set, spec, wanted)
    return found


def _tolerates(pod_set: PodSet, spec: Any, key: str, value: str, effect: str = NO_SCHEDULE) -> bool:
    """``any_tolerates`` of the tolerations of ``spec``, the pod set's spec as walked (see
    :meth:`_Builder.enter`). The usage and product checks both ask of every pod set: the
    ``Equal`` tolerations are indexed once per shared facts."""
    if spec is pod_set.spec:  # nearly always: the walk found the model's own spec
        index: frozenset[tuple[str, str, str]] | None = pod_set.facts.get("exact_tolerations")
        if index is None:
            index = pod_set.facts["exact_tolerations"] = exact_tolerations(spec.get("tolerations"))
        if (key, value, effect) in index or (key, value, "") in index:
            return True
    existing = spec.get("tolerations") if isinstance(spec, dict) else None
    return any_tolerates(existing, key, value, effect)


def _tolerates_all(pod_set: PodSet, spec: Any, wanted: Iterable[dict[str, Any]]) -> bool:
    """Whether the pod spec's tolerations already tolerate every toleration of ``wanted``
    (what :func:`_add_tolerations` would skip)."""
    for tol in wanted:
        if not _tolerates(pod_set, spec, tol["key"], tol["value"], tol["effect"]):
            return False
    return True


def _inject_usage(builder: _Builder, spec_tokens: tuple[str, ...], wanted: _WantedUsage) -> list[str]:
    """Append what one pod template lacks to ``builder``; what was injected, for the message."""
    cfg, usage = wanted.cfg, wanted.usage
    injected: list[str] = []
    # Required: AND the usage expression into every term (terms are ORed); a term that
    # already says something about usage is the user's choice (or a GG105 conflict).
    terms = builder.lookup_in(spec_tokens, _TERMS_IN_SPEC)
    if not isinstance(terms, list) or not terms:
        if terms is None or isinstance(terms, list):
            first_term = {"matchExpressions": [clone(wanted.expression)]}
            if builder.append((*spec_tokens, *_TERMS_IN_SPEC), first_term):
                injected.append(f"required node affinity {cfg.node_key} In [{wanted.pools}]")
    else:
        for t, term in enumerate(terms):
            if not isinstance(term, dict):
                continue
            if _says_usage(term, cfg.node_key, wanted.allowed):
                continue  # the user's own usage requirement, or a GG105 conflict
            expressions_at = (*spec_tokens, *_TERMS_IN_SPEC, str(t), "matchExpressions")
            if builder.append(expressions_at, clone(wanted.expression)):
                injected.append(f"{cfg.node_key} In [{wanted.pools}] in required node affinity term {t}")

    # Preferred: one term for the usage's own pool unless one about usage exists.
    preferred = builder.lookup_in(spec_tokens, _PREFERRED_IN_SPEC)
    has_usage_preference = isinstance(preferred, list) and _prefers_a_pool(preferred, cfg.node_key)
    if not has_usage_preference and (preferred is None or isinstance(preferred, list)):
        if builder.append((*spec_tokens, *_PREFERRED_IN_SPEC), _preferred_term(cfg, usage)):
            injected.append(f"preferred node affinity (weight {cfg.weight}) {cfg.node_key} In [{usage}]")

    _add_tolerations(builder, spec_tokens, wanted.tolerations, injected)
    return injected


def product_patch(workload: Workload, policy: Policy) -> list[PodSetPatch]:
    """GG102: the product tolerations missing from each pod template pinned to a product.

    A template pinned by its own nodeSelector or affinity can only ever run on that
    product's (tainted) nodes, so it gets the toleration whatever it requests; the
    workload label pins only the pod sets that request GPUs.
    """
    if not in_scope(workload, policy):
        return []
    if not _labels_pin(workload, product_labels(policy)) and _spec_pins_tolerated(workload, policy):
        return []  # the /validate case: worked out once per shared facts
    pinned = [(pod_set, pinned_products(pod_set, workload, policy,
                                        include_workload_label=is_positive(gpus_per_pod(pod_set, policy))))
              for pod_set in workload.pod_sets]
    if _tolerates_pinned(pinned, workload):
        return []  # already mutated (the /validate case), or pinned to nothing: nothing to build
    builder = _Builder(workload)
    out: list[PodSetPatch] = []
    for pod_set, pairs in pinned:
        start = len(builder.ops)
        if not pairs:
            continue  # not pinned: nothing to tolerate
        injected: list[str] = []
        _add_tolerations(builder, builder.enter(pod_set),
                         (product_toleration(label, product) for label, product in pairs), injected)
        if injected:
            out.append(PodSetPatch(pod_set, builder.ops[start:], injected))
    return out


def _tolerates_pinned(pinned: list[tuple[PodSet, list[tuple[str, str]]]], workload: Workload) -> bool:
    """Whether every pod set already tolerates the product taints it is pinned to: the
    ``_tolerates_all`` of their :func:`product_toleration`, without building them."""
    for pod_set, pairs in pinned:
        if pairs:
            spec = _spec_walk(pod_set, workload.doc)[1]
            for label, product in pairs:
                if not _tolerates(pod_set, spec, label, product, NO_SCHEDULE):
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
    found: bool | None = pod_set.facts.get(key, _UNSEEN)
    if found is _UNSEEN:
        pins = spec_pinned_products(pod_set, policy)
        found = pod_set.facts[key] = None if not pins else all(
            [_tolerates(pod_set, pod_set.spec, label, product, NO_SCHEDULE) for label, product in pins])
    return found



