"""Kubernetes toleration semantics, shared by usage injection and the feasibility check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_SCHEDULE = "NoSchedule"


def tolerates(toleration: Any, key: str, value: str, effect: str = NO_SCHEDULE) -> bool:
    """Does one ``toleration`` tolerate the taint ``key=value:effect``?

    An empty effect matches every effect; an empty key needs ``operator: Exists`` and
    then matches every taint; ``Equal`` (the default operator) compares values.
    """
    if not isinstance(toleration, dict) and not isinstance(toleration, Mapping):  # dict: no ABC check
        return False
    t_key = toleration.get("key") or ""
    if t_key and t_key != key:  # the usual answer, so asked first (the checks are independent)
        return False
    t_effect = toleration.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    operator = toleration.get("operator") or "Equal"
    if not t_key:
        return operator == "Exists"
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == value


def any_tolerates(tolerations: Any, key: str, value: str, effect: str = NO_SCHEDULE) -> bool:
    """Does any toleration of a pod spec's ``tolerations`` list tolerate the taint?"""
    if not isinstance(tolerations, list):
        return False
    for toleration in tolerations:  # a loop, not any(<generator>): this runs per pod template and taint
        if tolerates(toleration, key, value, effect):
            return True
    return False


def exact_tolerations(tolerations: Any) -> frozenset[tuple[str, str, str]]:
    """(key, value, effect) of every ``Equal`` toleration with a key in a pod spec's
    ``tolerations`` list, effect "" when it has none: each tolerates the taints
    ``key=value:effect`` (any effect for ""). A lookup here answers :func:`any_tolerates`
    for the tolerations a mutating webhook injects; anything not found must still be
    asked of :func:`any_tolerates` (``Exists``, keyless, ...)."""
    if not isinstance(tolerations, list):
        return frozenset()
    found: set[tuple[str, str, str]] = set()
    for toleration in tolerations:
        if type(toleration) is not dict:
            continue
        key = toleration.get("key") or ""
        effect = toleration.get("effect") or ""
        if (type(key) is str and key and type(effect) is str
                and (toleration.get("operator") or "Equal") == "Equal"):
            found.add((key, str(toleration.get("value") or ""), effect))
    return frozenset(found)
