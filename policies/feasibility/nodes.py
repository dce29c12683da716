"""Which nodes a pod may use, resources aside: taints and cordons, nodeSelector, required
node affinity, nodeName, and the tolerations the ExtendedResourceToleration plugin adds.
Masks over the topology's node slots, kept on the topology per eligibility signature."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.tolerations import any_tolerates
from policies.topology import HARD_EFFECTS, Topology

from .questions import Demand
from .specs import _EXTENDED, GKE_NODE_LABELS, _signature, _signature_label_keys, implied_tolerations

__all__ = ["eligible_mask", "runs_extended_toleration"]


def runs_extended_toleration(mode: str, topo: Topology) -> bool:
    """Whether pods are judged with the plugin's tolerations on ``topo``: ``on``, or
    ``auto`` and some node carries a GKE label (cached until those labels or the nodes change)."""
    if mode != "auto":
        return mode == "on"
    key = ("gke",)
    versions = topo.versions(GKE_NODE_LABELS)
    cached = topo.cached(key, versions)
    if cached is None:
        n = topo.slots
        cached = (any(bool((topo.label_exists(k)[:n] & topo.live[:n]).any()) for k in GKE_NODE_LABELS),)
        topo.remember(key, versions, cached)
    return bool(cached[0])


def _with_plugin(demand: Demand) -> Demand:
    """``demand`` as the plugin leaves its pods: the implied tolerations added, under a
    signature of its own (every cache keyed by signature tells the two apart)."""
    extended = demand.placement.get(_EXTENDED)
    if not extended:
        return demand
    placement = dict(demand.placement)
    tolerations = placement.get("tolerations")
    placement["tolerations"] = [*(tolerations if isinstance(tolerations, list) else []),
                                *implied_tolerations(extended)]
    return dataclasses.replace(demand, signature=demand.signature + "\x00+ExtendedResourceToleration",
                               placement=placement)


def _expression(topo: Topology, expr: Any, field_match: bool) -> np.ndarray:
    """One node selector requirement; malformed ones do not narrow anything (the API
    server rejects them, and a false ``never`` is worse than a missed one)."""
    ones = np.ones(topo.slots, dtype=bool)
    if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
        return ones
    key, operator = expr["key"], expr.get("operator")
    raw_values = expr.get("values")
    values = [str(v) for v in raw_values] if isinstance(raw_values, list) else []
    if operator in ("In", "NotIn") and not values:
        return ones  # invalid (the API server refuses the pod): not ours to judge
    if field_match:
        if key != "metadata.name":
            return ones
        if operator == "In":
            return topo.name_in(values)
        if operator == "NotIn":
            return ~topo.name_in(values)
        return ones
    if operator == "In":
        return topo.label_equals(key, values)
    if operator == "NotIn":
        return ~topo.label_equals(key, values)
    if operator == "Exists":
        return topo.label_exists(key)
    if operator == "DoesNotExist":
        return ~topo.label_exists(key)
    if operator in ("Gt", "Lt") and len(values) == 1:
        try:
            bound = int(values[0])
        except ValueError:
            return ones
        numbers = topo.label_numbers(key)
        with np.errstate(invalid="ignore"):
            return numbers > bound if operator == "Gt" else numbers < bound  # NaN: False
    return ones


def _affinity_mask(topo: Topology, required: Any) -> np.ndarray:
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return np.ones(topo.slots, dtype=bool)
    mask = np.zeros(topo.slots, dtype=bool)
    for term in terms:
        if not isinstance(term, Mapping):
            continue
        exprs = term.get("matchExpressions")
        fields = term.get("matchFields")
        exprs = exprs if isinstance(exprs, list) else []
        fields = fields if isinstance(fields, list) else []
        if not exprs and not fields:
            continue  # an empty term matches no node
        part = np.ones(topo.slots, dtype=bool)
        for e in exprs:
            part &= _expression(topo, e, False)
        for f in fields:
            part &= _expression(topo, f, True)
        mask |= part
    return mask


@dataclass
class _Eligibility:
    mask: np.ndarray            # live, schedulable, tolerated, selected
    cordoned: int
    tainted: int                # schedulable nodes excluded by an untolerated taint
    unselected: int             # ... by nodeSelector / affinity / nodeName
    blocking_taints: list[str]
    count: int = 0              # eligible nodes (mask.sum(), counted once)


def eligible_mask(topo: Topology, spec: Mapping[str, Any], signature: str | None = None) -> _Eligibility:
    """Which nodes a pod with this spec may be scheduled on, resources aside. Cached on
    the topology until the node set, taints, cordons or a label key it reads change."""
    signature = signature if signature is not None else _signature(spec)
    return _eligibility(topo, spec, signature, topo.versions(_signature_label_keys(signature, spec)))


# The taint effects that keep a pod bound by nodeName off a node.
_BOUND_EFFECTS = frozenset({"NoExecute"})
# kube-scheduler's NodeUnschedulable filter lets a pod that tolerates this taint onto a
# cordoned node (DaemonSet pods, pods tolerating everything), taint or no taint on the node.
_CORDON_TAINT = "node.kubernetes.io/unschedulable"


def _eligibility(topo: Topology, spec: Mapping[str, Any], signature: str,
                 versions: tuple[int, ...]) -> _Eligibility:
    """:func:`eligible_mask`, given the topology versions it depends on."""
    key = ("eligible", signature)
    cached = topo.cached(key, versions)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    n = topo.slots
    live = topo.live[:n]
    node_name = spec.get("nodeName")
    node_name = node_name if isinstance(node_name, str) else ""
    bound = bool(node_name)
    tolerations = spec.get("tolerations")
    # A pod with nodeName bypasses the scheduler: the kubelet admits it whatever the
    # cordon and NoSchedule taints say (a NoExecute taint still evicts it).
    cordons_pass = bound or any_tolerates(tolerations, _CORDON_TAINT, "", "NoSchedule")
    schedulable = live if cordons_pass else live & ~topo.unschedulable[:n]
    effects = _BOUND_EFFECTS if bound else HARD_EFFECTS
    untolerated = [col for taint, col in topo.taint_index.items()
                   if taint.effect in effects
                   and not any_tolerates(tolerations, taint.key, taint.value, taint.effect)]
    if untolerated:
        taint_ok = ~topo.taint_matrix[:n][:, untolerated].any(axis=1)
    else:
        taint_ok = np.ones(n, dtype=bool)
    selected = np.ones(n, dtype=bool)
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for k, v in selector.items():
            selected &= topo.label_equals(str(k), [str(v)])
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if isinstance(node_affinity, Mapping):
        selected &= _affinity_mask(topo, node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    if bound:
        selected &= topo.name_in([node_name])
    mask = schedulable & taint_ok & selected
    blocking: list[str] = []
    if untolerated:
        inv = {col: t for t, col in topo.taint_index.items()}
        hit = np.asarray(topo.taint_matrix[:n][schedulable & selected][:, untolerated].any(axis=0))
        blocking = [f"{inv[c].key}={inv[c].value}:{inv[c].effect}" if inv[c].value
                    else f"{inv[c].key}:{inv[c].effect}"
                    for c, h in zip(untolerated, list(hit), strict=True) if h]
    cordoned = 0 if cordons_pass else int((live & topo.unschedulable[:n]).sum())
    result = _Eligibility(mask=mask, cordoned=cordoned,
                          tainted=int((schedulable & ~taint_ok).sum()),
                          unselected=int((schedulable & taint_ok & ~selected).sum()),
                          blocking_taints=blocking, count=int(mask.sum()))
    topo.remember(key, versions, result)
    return result
