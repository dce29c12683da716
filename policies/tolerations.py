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
