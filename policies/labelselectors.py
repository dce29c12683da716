"""Kubernetes label selectors (``metav1.LabelSelector``: ``matchLabels`` and
``matchExpressions``), matched against labels that may be known only in part, and the one
requirement a label selector or a node selector term puts on a label (:func:`holds`).

A namespace's name is always known (its ``kubernetes.io/metadata.name`` label is its name), its
other labels only where a cluster snapshot holds the Namespace. A selector that reads a label
not known answers None: the caller must not judge as if it knew. A selector in a policy file is
validated with :data:`SELECTOR_SCHEMA`; one in a cluster object is read by :func:`read_selector`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = ["NAME_LABEL", "SELECTOR_SCHEMA", "Requirement", "holds", "read_selector", "requirements",
           "selects", "selects_namespace"]

# The label the API server sets on every Namespace: its name.
NAME_LABEL = "kubernetes.io/metadata.name"

# The JSON Schema of a LabelSelector as the API server validates it: In and NotIn need values,
# Exists and DoesNotExist take none.
SELECTOR_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["key", "operator"],
            "properties": {
                "key": {"type": "string", "minLength": 1},
                "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                "values": {"type": "array", "items": {"type": "string"}},
            },
            "if": {"properties": {"operator": {"enum": ["In", "NotIn"]}}},
            "then": {"required": ["values"], "properties": {"values": {"minItems": 1}}},
            "else": {"properties": {"values": {"maxItems": 0}}},
        }},
    },
}

# (key, operator, values): matchLabels' ``key: value`` is (key, "In", (value,)).
Requirement = tuple[str, str, tuple[str, ...]]


def read_selector(selector: Any) -> tuple[Requirement, ...] | None:
    """The requirements of a LabelSelector read from a cluster object (a snapshot file may hold
    anything); None for one :data:`SELECTOR_SCHEMA` refuses, as the API server would: the caller
    judges nothing from it. Plain Python: a snapshot is read without loading jsonschema."""
    if not isinstance(selector, Mapping) or not set(selector) <= {"matchLabels", "matchExpressions"}:
        return None
    labels, expressions = selector.get("matchLabels", {}), selector.get("matchExpressions", [])
    if not isinstance(labels, Mapping) or not isinstance(expressions, list):
        return None
    if not all(isinstance(value, str) for value in labels.values()):
        return None
    for expression in expressions:
        if not isinstance(expression, Mapping) or not set(expression) <= {"key", "operator", "values"}:
            return None
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values")
        if not isinstance(key, str) or not key or operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
        strings = isinstance(values, list) and all(isinstance(v, str) for v in values)
        if "values" in expression and not strings:
            return None
        if bool(values) != (operator in ("In", "NotIn")):  # In and NotIn need values, the others take none
            return None
    return requirements(selector)


def requirements(selector: Mapping[str, Any] | None) -> tuple[Requirement, ...]:
    """The requirements of a selector valid under :data:`SELECTOR_SCHEMA`, all of which must
    hold (hashable: a selector read once is a key of answers). None has none, as the empty
    selector: what a nil selector means is its owner's (Kueue's managedJobsNamespaceSelector reads
    it as every namespace, a ClusterQueue's namespaceSelector as none)."""
    if selector is None:
        return ()
    labels = selector.get("matchLabels") or {}
    found: list[Requirement] = [(str(k), "In", (str(v),)) for k, v in labels.items()]
    for expression in selector.get("matchExpressions") or ():
        found.append((str(expression["key"]), str(expression["operator"]),
                      tuple(str(v) for v in expression.get("values") or ())))
    return tuple(found)


def selects(required: tuple[Requirement, ...], labels: Mapping[str, str],
            known: Collection[str] | None = None) -> bool | None:
    """Whether an object with ``labels`` is selected. ``known``: the only label keys whose
    presence is known (None: ``labels`` are all the object's labels). None when the answer
    depends on a label not known; an empty selector selects everything."""
    unknown = False
    for key, operator, values in required:
        if known is not None and key not in known:
            unknown = True
            continue
        if not holds(operator, values, labels.get(key)):
            return False
    return None if unknown else True


def selects_namespace(required: tuple[Requirement, ...], namespace: str,
                      labels: Mapping[str, str] | None) -> bool | None:
    """Whether namespace ``namespace`` is selected: from its ``labels`` where a cluster snapshot
    holds the Namespace, else (None) from its name alone, the one label always known."""
    if labels is None:
        return selects(required, {NAME_LABEL: namespace}, (NAME_LABEL,))
    return selects(required, {**labels, NAME_LABEL: namespace})


def holds(operator: Any, values: Sequence[str], value: str | None) -> bool | None:
    """Whether a label whose value is ``value`` (None: the object has no such label) meets one
    requirement: In, NotIn, Exists and DoesNotExist, and a node selector's Gt and Lt (an integer
    value above, or below, the one integer bound). None: a requirement the API server refuses (an
    operator it does not know, In or NotIn without values, a bound that is not one integer)."""
    if operator in ("In", "NotIn"):
        if not values:
            return None
        return (value is not None and value in values) == (operator == "In")
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and len(values) == 1:
        try:
            bound = int(values[0])
        except ValueError:
            return None
        try:
            have = int(value) if value is not None else None
        except ValueError:
            return False
        return have is not None and (have > bound if operator == "Gt" else have < bound)
    return None
