"""Kueue's quota objects as a cluster holds them: ClusterQueues (resource groups of flavors with
nominal quotas, borrowing and lending limits, their cohort, whether they are stopped, and the
quota their admitted workloads reserve), Cohorts (a parent and quotas of their own),
ResourceFlavors (the node labels, taints and tolerations that tie a flavor to nodes, and the
Topology it is placed by), Topologies (their levels' node labels) and AdmissionChecks (whether
their controller says they are active). Read from ``v1beta2`` and
``v1beta1`` (``spec.cohortName`` or ``spec.cohort``; a Cohort's ``spec.parentName`` or,
``v1alpha1``, ``spec.parent``; Topologies from ``v1alpha1`` too).

Amounts are kept in scheduler units (:func:`policies.quantity.scheduler_units`: millicores,
bytes, devices). What the quotas allow is :mod:`policies.feasibility.kueue`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.labelselectors import Requirement, read_selector
from policies.topology.nodes import _key, _mapping, units_of

__all__ = ["KueueQuota", "KueueResourceGroup", "KueueClusterQueue", "KueueCohort", "KueueFlavor",
           "KueueObjects"]


@dataclass(frozen=True)
class KueueQuota:
    nominal: int
    borrowing: int | None = None    # borrowingLimit; None: no limit
    lending: int | None = None      # lendingLimit; None: all of it may be lent


@dataclass(frozen=True)
class KueueResourceGroup:
    covered: tuple[str, ...]
    # (flavor, {resource: quota}) in the order Kueue tries them
    flavors: tuple[tuple[str, Mapping[str, KueueQuota]], ...]


@dataclass(frozen=True)
class KueueClusterQueue:
    name: str
    cohort: str | None
    groups: tuple[KueueResourceGroup, ...]
    stopped: bool                       # stopPolicy Hold or HoldAndDrain: no new admissions
    usage: Mapping[tuple[str, str], int]    # (flavor, resource) -> reserved now (status)
    # spec.namespaceSelector: the namespaces whose workloads it admits. None: no selector, which
    # Kueue reads as selecting no namespace (`{}` selects every one).
    namespaces: tuple[Requirement, ...] | None
    # the AdmissionChecks it names (spec.admissionChecks, or admissionChecksStrategy's rules)
    checks: tuple[str, ...]


@dataclass(frozen=True)
class KueueCohort:
    name: str
    parent: str | None
    groups: tuple[KueueResourceGroup, ...]


@dataclass(frozen=True)
class KueueFlavor:
    """What a ResourceFlavor says of its nodes: Kueue matches pod sets against them, then adds the
    labels as nodeSelector and the tolerations to the admitted pods."""

    node_labels: Mapping[str, str]
    node_taints: tuple[Mapping[str, Any], ...]     # as written: key, value, effect
    tolerations: tuple[Mapping[str, Any], ...]
    topology: str | None                            # spec.topologyName: placed by Topology Aware Scheduling


def _flavor(spec: Mapping[str, Any]) -> KueueFlavor:
    labels = spec.get("nodeLabels")
    taints = spec.get("nodeTaints")
    tolerations = spec.get("tolerations")
    return KueueFlavor(
        {str(k): str(v) for k, v in labels.items() if v is not None} if isinstance(labels, Mapping) else {},
        tuple(t for t in taints if isinstance(t, Mapping) and isinstance(t.get("key"), str))
        if isinstance(taints, list) else (),
        tuple(t for t in tolerations if isinstance(t, Mapping)) if isinstance(tolerations, list) else (),
        _text(spec.get("topologyName")))


def _levels(spec: Mapping[str, Any]) -> tuple[str, ...]:
    levels = spec.get("levels")
    return tuple(label for level in (levels if isinstance(levels, list) else [])
                 if isinstance(label := _mapping(level).get("nodeLabel"), str) and label)


def _units(resource: str, value: Any) -> int | None:
    return units_of({resource: value}).get(resource)


def _namespaces(spec: Mapping[str, Any]) -> tuple[Requirement, ...] | None:
    """A ClusterQueue's ``spec.namespaceSelector`` (see :attr:`KueueClusterQueue.namespaces`). One
    the API server would refuse selects every namespace here: nothing is judged from it."""
    selector = spec.get("namespaceSelector")
    if selector is None:
        return None
    read = read_selector(selector)
    return () if read is None else read


def _checks(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The AdmissionChecks a ClusterQueue names: ``spec.admissionChecks`` (v1beta1) and the names of
    ``spec.admissionChecksStrategy.admissionChecks`` (whatever flavors a rule is for: Kueue holds
    the whole ClusterQueue inactive for any of them)."""
    named = spec.get("admissionChecks")
    rules = _mapping(spec.get("admissionChecksStrategy")).get("admissionChecks")
    found: list[Any] = list(named) if isinstance(named, list) else []
    found += [_mapping(r).get("name") for r in rules] if isinstance(rules, list) else []
    return tuple(sorted({c for c in found if isinstance(c, str) and c}))


def _active(status: Mapping[str, Any]) -> bool:
    """Whether an AdmissionCheck's controller says it is active (its ``Active`` condition is
    ``True``): Kueue holds a ClusterQueue naming one that is not (or has no such condition yet)."""
    conditions = status.get("conditions")
    return any(_mapping(c).get("type") == "Active" and _mapping(c).get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else ()))


def _groups(spec: Mapping[str, Any]) -> tuple[KueueResourceGroup, ...]:
    """The resource groups as written; a quota that does not parse is left out (the API server
    refuses such objects; a missing quota only ever makes a smaller one)."""
    out: list[KueueResourceGroup] = []
    groups = spec.get("resourceGroups")
    for group in groups if isinstance(groups, list) else []:
        group = _mapping(group)
        covered = group.get("coveredResources")
        flavors: list[tuple[str, Mapping[str, KueueQuota]]] = []
        raw_flavors = group.get("flavors")
        for flavor in raw_flavors if isinstance(raw_flavors, list) else []:
            flavor = _mapping(flavor)
            name = flavor.get("name")
            if not isinstance(name, str):
                continue
            quotas: dict[str, KueueQuota] = {}
            raw_resources = flavor.get("resources")
            for item in raw_resources if isinstance(raw_resources, list) else []:
                item = _mapping(item)
                resource = item.get("name")
                if not isinstance(resource, str):
                    continue
                nominal = _units(resource, item.get("nominalQuota", 0))
                if nominal is None:
                    continue
                borrowing = _units(resource, item["borrowingLimit"]) if "borrowingLimit" in item else None
                lending = _units(resource, item["lendingLimit"]) if "lendingLimit" in item else None
                quotas[resource] = KueueQuota(max(nominal, 0), borrowing, lending)
            flavors.append((name, quotas))
        names = tuple(r for r in covered if isinstance(r, str)) if isinstance(covered, list) else ()
        out.append(KueueResourceGroup(names, tuple(flavors)))
    return tuple(out)


def _usage(status: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    usage: dict[tuple[str, str], int] = {}
    flavors = status.get("flavorsReservation")
    for flavor in flavors if isinstance(flavors, list) else []:
        flavor = _mapping(flavor)
        name = flavor.get("name")
        resources = flavor.get("resources")
        if not isinstance(name, str) or not isinstance(resources, list):
            continue
        for item in resources:
            item = _mapping(item)
            resource = item.get("name")
            if not isinstance(resource, str):
                continue
            total = _units(resource, item.get("total", 0))
            if total is not None:
                usage[(name, resource)] = max(total, 0)
    return usage


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class KueueObjects:
    """ClusterQueues, Cohorts and ResourceFlavors by name (all cluster-scoped). A change moves
    ``queue_version`` (of the class this is mixed into), as any queue's does."""

    queue_version: int
    slots: int
    _label_codes: dict[str, np.ndarray]

    def _init_kueue(self) -> None:
        self.cluster_queues: dict[str, KueueClusterQueue] = {}
        self.cohorts: dict[str, KueueCohort] = {}
        self.resource_flavors: dict[str, KueueFlavor] = {}
        self.kueue_topologies: dict[str, tuple[str, ...]] = {}   # Topology -> its levels' node labels
        self.admission_checks: dict[str, bool] = {}     # AdmissionCheck -> whether it is active
        self._kueue_keys: tuple[int, tuple[str, ...]] | None = None  # (queue_version, kueue_label_keys())

    def label_domains(self, key: str) -> np.ndarray:
        """Per node slot, a code of its value of label ``key`` (0: no such label): nodes of one
        code are one domain of a topology level. Read only."""
        codes = self._label_codes.get(key)
        return np.zeros(self.slots, dtype=np.int32) if codes is None else codes[: self.slots]

    def kueue_label_keys(self) -> tuple[str, ...]:
        """The node label keys Kueue's flavors and topologies name (what its verdicts read of nodes
        besides the pods' own placement)."""
        known = self._kueue_keys
        if known is None or known[0] != self.queue_version:
            keys = {k for f in self.resource_flavors.values() for k in f.node_labels}
            keys.update(level for levels in self.kueue_topologies.values() for level in levels)
            known = self._kueue_keys = (self.queue_version, tuple(sorted(keys)))
        return known[1]

    def _store(self, store: dict[str, Any], obj: Mapping[str, Any], deleted: bool, value: Any) -> None:
        _, name = _key(obj)
        if not name:
            return
        if deleted:
            if store.pop(name, None) is not None:
                self.queue_version += 1
            return
        if store.get(name) != value:
            self.queue_version += 1
        store[name] = value

    def _apply_cluster_queue(self, obj: Mapping[str, Any], deleted: bool) -> None:
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        _, name = _key(obj)
        stop = spec.get("stopPolicy")
        value = None if deleted else KueueClusterQueue(
            name, _text(spec.get("cohortName")) or _text(spec.get("cohort")), _groups(spec),
            isinstance(stop, str) and stop != "None", _usage(status), _namespaces(spec), _checks(spec))
        self._store(self.cluster_queues, obj, deleted, value)

    def _apply_cohort(self, obj: Mapping[str, Any], deleted: bool) -> None:
        spec = _mapping(obj.get("spec"))
        _, name = _key(obj)
        value = None if deleted else KueueCohort(
            name, _text(spec.get("parentName")) or _text(spec.get("parent")), _groups(spec))
        self._store(self.cohorts, obj, deleted, value)

    def _apply_resource_flavor(self, obj: Mapping[str, Any], deleted: bool) -> None:
        spec = _mapping(obj.get("spec"))
        self._store(self.resource_flavors, obj, deleted, None if deleted else _flavor(spec))

    def _apply_kueue_topology(self, obj: Mapping[str, Any], deleted: bool) -> None:
        spec = _mapping(obj.get("spec"))
        self._store(self.kueue_topologies, obj, deleted, None if deleted else _levels(spec))

    def _apply_admission_check(self, obj: Mapping[str, Any], deleted: bool) -> None:
        status = _mapping(obj.get("status"))
        self._store(self.admission_checks, obj, deleted, None if deleted else _active(status))

    def inactive(self, cq: KueueClusterQueue) -> str | None:
        """Why Kueue holds ClusterQueue ``cq`` inactive, admitting nothing (its cache's
        ``inactiveReason``), or None: stopped, or naming a ResourceFlavor or an AdmissionCheck that
        does not exist, or one whose controller does not say it is active. What does not exist is
        judged only where the snapshot holds objects of that kind at all."""
        if cq.stopped:
            return "is stopped (stopPolicy)"
        if self.resource_flavors:
            missing = sorted({f for g in cq.groups for f, _ in g.flavors} - set(self.resource_flavors))
            if missing:
                return f"is inactive: ResourceFlavor `{missing[0]}` does not exist"
        if self.admission_checks:
            for check in cq.checks:
                active = self.admission_checks.get(check)
                if active is None:
                    return f"is inactive: AdmissionCheck `{check}` does not exist"
                if not active:
                    return f"is inactive: AdmissionCheck `{check}` is not active"
        return None
