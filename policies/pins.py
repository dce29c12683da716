"""What a pod template says about where it runs: its node-affinity expressions, read once
per pod set, and the GPU products and models it is pinned to (GG102, GG104)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from policies.config import Policy
from policies.specfacts import facts_token
from policies.workload import PodSet, Workload

__all__ = ["AffinityExpressions", "affinity_expressions", "pinned_products", "spec_pinned_products",
           "labels_pin_product", "model_pin_labels", "spec_pins_model", "annotation_pins_model",
           "product_labels"]

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

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
    required = node_affinity.get(REQUIRED)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if isinstance(terms, list):
        for t, term in enumerate(terms):
            _add_expressions(t, term, found.required)
    terms = node_affinity.get(PREFERRED)
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
    facts = pod_set.blind_facts  # the nodeSelector and affinity: no requested amount
    found: tuple[tuple[str, str], ...] | None = facts.get(key)
    if found is None:
        found = facts[key] = _pinned_products(pod_set, product_labels(policy), {})
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
    facts = pod_set.blind_facts  # the nodeSelector and affinity: no requested amount
    found: bool | None = facts.get(key)
    if found is None:
        found = facts[key] = _spec_pins_model(pod_set, model_pin_labels(policy)[0])
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
