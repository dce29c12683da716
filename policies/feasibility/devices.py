"""DRA devices in the feasibility check: what a pod's ResourceClaims (and the extended
resources a DeviceClass maps to devices) can get on each node, as resource columns of the
topology, so that packing, gangs and waits work on them unchanged.

- Per-pod claims (from ResourceClaimTemplates): one column per distinct set of a pod's
  requests, whose value on a node is how many pods' claims that node's devices can satisfy
  at once, and whose ``used`` leaves what the devices no ResourceClaim holds can satisfy.
  Each pod takes 1. With the requests' candidate devices known per node, that count is
  exact by Hall's theorem (every subset of requests needs as many devices as it asks
  between them, per pod), when each request has one way to be met and no constraint, or one
  ``matchAttribute`` binding them all (then per value of the attribute, summed).
- A shared claim (``resourceClaimName``, allocated once for every pod naming it): a column
  that is unbounded on the nodes that can reach a satisfying allocation (or that its
  allocation names) and 0 elsewhere.
- An extended resource a DeviceClass maps (``extendedResourceName``, or the implicit
  ``deviceclass.resource.kubernetes.io/<class>``): on nodes that do not advertise it, the
  class's devices count as that resource.

Every count is an upper bound of what the scheduler can allocate (alternatives of
``firstAvailable``, several constraints or ``distinctAttribute`` relax it; network-attached devices
count on every node that reaches them; a device a selector cannot be evaluated on counts as
matching), so a "never" from them is a proof. What makes a count only a bound is a note;
what cannot be read at all (a missing class, claim, template or slice, a selector that
does not evaluate, an opaque driver config) makes any answer but "never" unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.dra.claims import PodClaim, PodDevices
from policies.dra.objects import (
    ALL,
    EXACT,
    IMPLICIT_EXTENDED_PREFIX,
    ClaimSpec,
    DeviceClass,
    SubRequest,
)
from policies.topology import Topology

from .capacity import _Set
from .device_counts import (
    UNBOUNDED,
    Tick,
    _candidates,
    _Devices,
    _free,
    _Limit,
    _Need,
    _no_tick,
    _node_devices,
    _per_node,
    _pods_per_node,
    _reach_label_keys,
    _Reasons,
    _selector_label_keys,
)
from .nodes import _affinity_mask
from .questions import Demand, FitQuestion

__all__ = ["DEVICE_PREFIX", "UNBOUNDED", "DevicePlan", "device_plan", "devices_never", "is_device_column"]

DEVICE_PREFIX = "dra:"          # not a valid resource name: no pod or node can name such a column
MAX_COLUMNS = 64                # device columns a topology keeps (one per distinct claim set)


def is_device_column(resource: str) -> bool:
    return resource.startswith(DEVICE_PREFIX)


@dataclass(frozen=True)
class DevicePlan:
    """A question's demands with their device columns, and what the counts cannot say."""

    demands: tuple[Demand, ...]
    unknown: tuple[str, ...] = ()        # reasons no answer but "never" can be given
    notes: tuple[str, ...] = ()          # counts that are upper bounds only
    # column -> (what it counts, in words; JSON Pointer of the claims)
    columns: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def _claim_spec(topo: Topology, claim: PodClaim, namespace: str, reasons: _Reasons) -> ClaimSpec | None:
    if claim.spec is not None:
        return claim.spec
    if claim.made_by and (namespace, claim.ref) not in topo.claim_templates:
        reasons.add_note(f"spec.resourceClaims {claim.name}: the template a {claim.made_by} makes "
                         "(its channel, not a GPU): not counted")
        return ClaimSpec(())
    if claim.shared:
        record = topo.resource_claims.get((namespace, claim.ref))
        if record is not None:
            return record.spec
        reasons.add_unknown(f"ResourceClaim {claim.ref} is not in the cluster view")
        return None
    spec = topo.claim_templates.get((namespace, claim.ref))
    if spec is None:
        reasons.add_unknown(f"ResourceClaimTemplate {claim.ref or '(none)'} is not in the cluster view")
    return spec


def _needs(spec: ClaimSpec, where: str, reasons: _Reasons,
           first: int = 0) -> tuple[list[_Need], list[_Limit]]:
    """The claim's requests, and its constraints over them (``first``: the position of its first
    request in the pod's needs)."""
    for problem in spec.problems:
        reasons.add_unknown(f"{where}: {problem}")
    if spec.configured:
        reasons.add_unknown(f"{where}: a driver's opaque config, which only the driver checks")
    limits = []
    for constraint in spec.constraints:
        attribute = constraint.match_attribute or constraint.distinct_attribute
        if not attribute:
            reasons.add_note(f"{where}: constraint {constraint.other} not checked "
                             "(devices counted without it)")
            continue
        listed = set(constraint.requests)
        bound: list[int] = []
        for i, request in enumerate(spec.requests):
            if not listed or request.name in listed or all(s.name in listed for s in request.alternatives):
                bound.append(first + i)
            elif any(s.name in listed for s in request.alternatives):
                # binds some of its firstAvailable alternatives only: counted without it
                reasons.add_note(f"{where}: a constraint on {attribute} binding some alternatives of request "
                                 f"{request.name}: counted without it")
        if bound:
            limits.append(_Limit(attribute, tuple(bound), not constraint.match_attribute, where))
    return [_Need(r.alternatives, f"{where} request {r.name}") for r in spec.requests], limits


def _describe(needs: Sequence[_Need]) -> str:
    parts = []
    for need in needs:
        alts = []
        for sub in need.alternatives:
            many = "all" if sub.mode == ALL else str(sub.count)
            alts.append(f"{many} of class {sub.device_class}" + (" with selectors" if sub.selectors else ""))
        parts.append(f"{need.where.rsplit(' request ', 1)[-1]}: {' or '.join(alts)}")
    return "; ".join(parts)


def _column_name(kind: str, content: Any) -> str:
    digest = hashlib.blake2b(repr(content).encode(), digest_size=6).hexdigest()
    return f"{DEVICE_PREFIX}{kind}:{digest}"


def _write(topo: Topology, name: str, full: np.ndarray, free: np.ndarray, keep: Collection[str]) -> None:
    """Put a device column in the topology's matrices: ``full`` as allocatable, what
    ``free`` leaves as used; the columns named in ``keep`` are never reused for it."""
    col = topo.res_index.get(name)
    if col is None:
        ours = [c for c, r in enumerate(topo.resources) if is_device_column(r) and r not in keep]
        if len(ours) + len(keep) >= MAX_COLUMNS and ours:
            col = ours[0]                  # reuse one: every cache keys on the name and alloc_version
            del topo.res_index[topo.resources[col]]
            topo.resources[col] = name
            topo.res_index[name] = col
            topo.alloc_version += 1
            topo.used_version += 1
            topo.dra_columns_epoch += 1
        else:
            col = topo.column(name)
    n = topo.slots
    used = full - np.minimum(free, full)
    if not np.array_equal(topo.alloc[:n, col], full):
        topo.alloc[:n, col] = full
        topo.alloc_version += 1
    if not np.array_equal(topo.used[:n, col], used):
        topo.used[:n, col] = used
        topo.used_version += 1


@dataclass
class _Reads:
    """What a plan read besides the DRA objects, the node set and the device table."""

    label_keys: set[str] = field(default_factory=set)   # shared claims' allocation node selectors
    plugin: bool = False                # device-plugin columns (a DRA-mapped extended resource)


def _plan_versions(topo: Topology) -> tuple[int, ...]:
    """What every plan reads: the DRA objects, each kind by its own counter (a claim allocated
    or released moves ``claim_version`` only: the device table stays), the node set, and the
    device columns as written (``alloc_version``: a node's new allocatable clears
    its row; another plan's column may take a reused one: ``dra_columns_epoch``)."""
    return (topo.slice_version, topo.class_version, topo.claim_version, topo.template_version,
            topo.nodeset_version, topo.alloc_version, topo.dra_columns_epoch)


def _read_versions(topo: Topology, reads: _Reads) -> tuple[int, ...]:
    """The versions of what ``reads`` names and the device table's label keys."""
    keys = (*_reach_label_keys(topo), *sorted(reads.label_keys))
    plugin = (topo.used_version,) if reads.plugin else ()
    return (*topo.versions(keys)[3:], *plugin)


def device_plan(question: FitQuestion, topo: Topology, tick: Tick = _no_tick) -> DevicePlan | None:
    """The question's demands with device columns in place of claims and DRA-mapped extended
    resources; None when it asks nothing of DRA. ``tick`` raises when the feasibility budget is
    spent: what was worked out by then is kept (selector answers, the device table), so a
    later check goes on from there."""
    mapped = _extended_classes(topo) if topo.device_classes else {}
    if question.devices is None and not any(r in mapped for d in question.demands for r, _ in d.units):
        return None
    key = ("dra-plan", question)
    cached = topo.cached(key, _plan_versions(topo))
    if cached is not None:
        plan, reads, read_versions = cached
        current = read_versions == _read_versions(topo, reads)
        if current and all(name in topo.res_index for name in plan.columns):
            return plan  # type: ignore[no-any-return]
    reads = _Reads()
    plan = _build_plan(question, topo, mapped, reads, tick)
    topo.remember(key, _plan_versions(topo), (plan, reads, _read_versions(topo, reads)))
    return plan


def _extended_classes(topo: Topology) -> dict[str, DeviceClass]:
    versions = (topo.class_version,)
    found = topo.cached(("dra-extended",), versions)
    if found is None:
        found = {}
        for device_class in topo.device_classes.values():
            found[IMPLICIT_EXTENDED_PREFIX + device_class.name] = device_class
            if device_class.extended_resource:
                found[device_class.extended_resource] = device_class
        topo.remember(("dra-extended",), versions, found)
    return found  # type: ignore[no-any-return]


@dataclass
class _Build:
    """One plan being built: what it reads and the columns it has written."""

    topo: Topology
    table: _Devices
    free: np.ndarray                # per device: no claim's allocation holds it
    reasons: _Reasons
    reads: _Reads
    tick: Tick
    # the columns written so far (never reused for another while this plan is built)
    columns: dict[str, tuple[str, str]] = field(default_factory=dict)

    def write(self, name: str, full: np.ndarray, free: np.ndarray, what: str, path: str) -> None:
        self.columns[name] = (what, path)
        _write(self.topo, name, full, free, self.columns.keys())


def _build_plan(question: FitQuestion, topo: Topology, mapped: Mapping[str, DeviceClass], reads: _Reads,
                tick: Tick) -> DevicePlan:
    reasons = _Reasons()
    table = _node_devices(topo, tick)
    if table.missing:
        reasons.add_unknown("the cluster view holds no ResourceSlice")
    if table.incomplete:
        reasons.add_unknown("a device pool has fewer ResourceSlices than it announces (being updated)")
    if (table.local == -2).any():
        reasons.add_note("some ResourceSlices name nodes not in the cluster view")
    if table.group_masks:
        reasons.add_note("network-attached devices counted on every node that reaches them")
    build = _Build(topo, table, _free(topo, table), reasons, reads, tick)
    demands = []
    devices = question.devices or (None,) * len(question.demands)
    for demand, pod in zip(question.demands, devices, strict=True):
        units = list(demand.units)
        extra: list[tuple[str, int]] = []
        for resource, amount in demand.units:
            device_class = mapped.get(resource)
            if device_class is None or amount <= 0:
                continue
            name = _column_name("ext", (resource, device_class))
            if name not in build.columns:
                _extended_column(build, name, resource, device_class, demand.path)
            units = [(r, v) for r, v in units if r != resource]
            extra.append((name, amount))
        if pod is not None:
            extra.extend(_claim_columns(build, demand, pod))
        if extra:
            demand = dataclasses.replace(demand, units=tuple(units) + tuple(extra))
        demands.append(demand)
    return DevicePlan(tuple(demands), tuple(reasons.unknown), tuple(reasons.notes), build.columns)


def _extended_column(build: _Build, name: str, resource: str, device_class: DeviceClass, path: str) -> None:
    """The column of an extended resource a DeviceClass maps: the node's allocatable where a
    device plugin advertises it, the class's devices elsewhere."""
    topo, table = build.topo, build.table
    build.reads.plugin = True
    sub = SubRequest(resource, device_class.name, (), EXACT, 1)
    found = _candidates(topo, table, sub, build.reasons, build.tick)
    col = topo.res_index.get(resource)
    none = np.zeros(topo.slots, dtype=np.int64)
    plugin = topo.alloc[: topo.slots, col] if col is not None else none
    plugin_used = topo.used[: topo.slots, col] if col is not None else none
    if found is None:
        dra_full = dra_free = np.full(topo.slots, UNBOUNDED, dtype=np.int64)
    else:
        unseen = table.open_nodes
        dra_full = np.where(unseen, UNBOUNDED, _per_node(topo, table, found))
        dra_free = np.where(unseen, UNBOUNDED, _per_node(topo, table, found & build.free))
    # Nodes that advertise the resource serve it by their device plugin; the others by DRA.
    full = np.where(plugin > 0, plugin, dra_full)
    free = np.where(plugin > 0, plugin - plugin_used, dra_free)
    build.write(name, full, free, f"{resource} (DeviceClass {device_class.name})", path)


def _claim_columns(build: _Build, demand: Demand, pod: PodDevices) -> list[tuple[str, int]]:
    """The device columns of one pod set's claims: (column, units per pod)."""
    topo, table, reasons = build.topo, build.table, build.reasons
    extra: list[tuple[str, int]] = []
    per_pod: list[_Need] = []
    per_pod_limits: list[_Limit] = []
    unresolved = False
    every = np.ones(len(table.rows), dtype=bool)
    for claim in pod.claims:
        where = f"spec.resourceClaims {claim.name or claim.ref}"
        spec = _claim_spec(topo, claim, pod.namespace, reasons)
        if spec is None:
            unresolved = True
            continue
        needs, limits = _needs(spec, where, reasons, 0 if claim.shared else len(per_pod))
        if not claim.shared:
            per_pod.extend(needs)
            per_pod_limits.extend(limits)
            continue
        name = _column_name("shared", (pod.namespace, claim.ref, spec))
        if name not in build.columns:
            record = topo.resource_claims.get((pod.namespace, claim.ref))
            if record is not None and record.is_allocated:
                # allocated: its pods go where the allocation is reachable from
                selector = record.allocation_nodes
                build.reads.label_keys |= _selector_label_keys(selector)
                ok = topo.live[: topo.slots] if selector is None else \
                    _affinity_mask(topo, selector) & topo.live[: topo.slots]
            else:
                ok = _pods_per_node(topo, table, needs, every, reasons, build.tick, limits) > 0
            full = np.where(ok, UNBOUNDED, 0).astype(np.int64)
            build.write(name, full, full, f"the shared ResourceClaim {claim.ref} ({_describe(needs)})",
                        claim.path)
            if demand.replicas > 1:
                reasons.add_note(f"{where}: one claim shared by several pods, which must all reach "
                                 "its devices")
        extra.append((name, 1))
    if unresolved and not per_pod:
        return extra
    if per_pod:
        name = _column_name("pod", (tuple((n.alternatives, n.where) for n in per_pod), tuple(per_pod_limits)))
        if name not in build.columns:
            full = _pods_per_node(topo, table, per_pod, every, reasons, build.tick, per_pod_limits)
            free = _pods_per_node(topo, table, per_pod, build.free, reasons, build.tick, per_pod_limits)
            path = next((c.path for c in pod.claims if not c.shared), demand.path)
            build.write(name, full, free, _describe(per_pod), path.rsplit("/", 1)[0])
        extra.append((name, 1))
    return extra


# -- never, in DRA's words --------------------------------------------------------------------


def devices_never(topo: Topology, plan: DevicePlan, sets: Sequence[_Set],
                  counts: Sequence[int]) -> tuple[str, str, dict[str, Any]] | None:
    """(reason, JSON Pointer, facts) when the device columns alone prove the gang never fits
    the empty cluster: a pod set whose claims no eligible node can satisfy, or pods needing
    more than the devices of the nodes they may use satisfy in all."""
    if not plan.columns:
        return None
    n = topo.slots
    total_need: dict[str, int] = {}
    total_rows: dict[str, np.ndarray] = {}
    for s, want in zip(sets, counts, strict=True):
        if want <= 0:
            continue
        for resource, amount in s.demand.units:
            if resource not in plan.columns:
                continue
            values = np.maximum(topo.alloc[:n, topo.res_index[resource]], 0)
            mask = s.elig.mask
            what, path = plan.columns[resource]
            most = int((values[mask] // amount).sum())
            if most == 0:
                best = int(values[topo.live[:n]].max()) if topo.n_nodes else 0
                return (f"0 of {s.elig.count} eligible nodes have the devices pod set {s.demand.name} "
                        f"asks for ({what}; the most any node has: {_amount(best, amount)}), even when "
                        "empty", path,
                        {"pod_set": s.demand.name, "eligible": s.elig.count, "devices": what})
            if most < want:
                return (f"{want} pods of pod set {s.demand.name} need devices ({what}); the devices of its "
                        f"{s.elig.count} eligible nodes serve at most {most} of them, even when empty", path,
                        {"pod_set": s.demand.name, "needed": want, "most": most, "devices": what})
            total_need[resource] = total_need.get(resource, 0) + want * amount
            rows = total_rows.get(resource)
            total_rows[resource] = mask.copy() if rows is None else rows | mask
    for resource, needed in total_need.items():
        offered = int(np.maximum(topo.alloc[:n, topo.res_index[resource]], 0)[total_rows[resource]].sum())
        if needed > offered:
            what, path = plan.columns[resource]
            return (f"the gang needs {needed} of {what} in total; the devices of the nodes its pods may use "
                    f"offer {offered}, even when empty", path,
                    {"needed": needed, "offered": offered, "devices": what})
    return None


def _amount(best: int, amount: int) -> str:
    if best >= UNBOUNDED:
        return "unbounded"
    return str(best // max(amount, 1)) + (" pods" if amount == 1 else "")
