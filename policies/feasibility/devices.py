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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.dra.cel import Unknown, compile_failure, compile_selector, matches
from policies.dra.claims import PodClaim, PodDevices
from policies.dra.objects import (
    ALL,
    IMPLICIT_EXTENDED_PREFIX,
    ON_DEMAND_CLASSES,
    ClaimSpec,
    DeviceClass,
    SubRequest,
)
from policies.topology import Topology

from .capacity import _Set
from .nodes import _affinity_mask
from .questions import Demand, FitQuestion

__all__ = ["DEVICE_PREFIX", "UNBOUNDED", "DevicePlan", "device_plan", "devices_never", "is_device_column"]

DEVICE_PREFIX = "dra:"          # not a valid resource name: no pod or node can name such a column
UNBOUNDED = 2**40               # "not limited here": large, yet sums over a million nodes fit int64
MAX_COLUMNS = 64                # device columns a topology keeps (one per distinct claim set)
_MAX_HALL = 8                   # requests per pod up to which every subset is checked


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


# -- the devices each node reaches -----------------------------------------------------------


Tick = Callable[[], None]       # raises when the feasibility budget is spent (check.py)


def _no_tick() -> None:
    return None


@dataclass
class _Devices:
    """The devices of the newest generation of every pool (rows of the topology's
    :class:`DeviceRows`), with the nodes that reach them. Reads slices, the node set and the
    label keys the slices' node selectors read: never claims (see :func:`_free`)."""

    rows: np.ndarray                # the devices' rows in topo.device_rows
    local: np.ndarray               # per device: the slot of its node, -1 (not node-local), -2 (not in view)
    group: np.ndarray               # per device: its reach group (-1: node-local)
    group_masks: list[np.ndarray]   # per reach group: the slots that reach its devices
    multiple: np.ndarray            # per device: allowMultipleAllocations
    incomplete: bool                # some pool has fewer slices than it announces
    open_nodes: np.ndarray          # slots such a pool reaches: what they have is not all known
    missing: bool                   # the cluster view holds no ResourceSlice at all


def _selector_label_keys(selector: Any) -> set[str]:
    """The label keys a NodeSelector reads (node names are the node set's)."""
    keys: set[str] = set()
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for expr in exprs if isinstance(exprs, list) else []:
            if isinstance(expr, Mapping) and isinstance(expr.get("key"), str):
                keys.add(expr["key"])
    return keys


def _reach_label_keys(topo: Topology) -> tuple[str, ...]:
    """The label keys the node selectors of the slices held read."""
    versions = (topo.slice_version,)
    found = topo.cached(("dra-reach-keys",), versions)
    if found is None:
        rows = topo.device_rows
        specs = np.unique(rows.reach_of[: rows.size][rows.alive[: rows.size]])
        keys: set[str] = set()
        for spec in specs[specs >= 0].tolist():
            keys |= _selector_label_keys(rows.reach_values[spec][1])
        found = tuple(sorted(keys))
        topo.remember(("dra-reach-keys",), versions, found)
    return found  # type: ignore[no-any-return]


def _table_versions(topo: Topology) -> tuple[int, ...]:
    return (topo.slice_version, topo.nodeset_version, *topo.versions(_reach_label_keys(topo))[3:])


def _node_devices(topo: Topology, tick: Tick = _no_tick) -> _Devices:
    versions = _table_versions(topo)
    cached = topo.cached(("dra-devices",), versions)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    tick()
    store = topo.device_rows
    n = topo.slots
    live = topo.live[:n]
    rows = store.current()
    # node name id -> slot (-2: a node not in the view)
    slot_of = np.full(len(store.node_names.values) + 1, -2, dtype=np.int64)
    slot_of[0] = -1
    index = topo.node_index
    for name_id, name in enumerate(store.node_names.values, start=1):
        slot = index.get(name)
        if slot is not None:
            slot_of[name_id] = slot
    local = slot_of[store.node_of[rows]]
    reach = store.reach_of[rows]
    specs = np.unique(reach[reach >= 0])
    group = np.full(len(rows), -1, dtype=np.int64)
    group_masks: list[np.ndarray] = []
    for g, spec in enumerate(specs.tolist()):
        tick()
        everywhere, selector = store.reach_values[spec]
        group[reach == spec] = g
        group_masks.append(live.copy() if everywhere else _affinity_mask(topo, selector) & live)
    incomplete_pools = store.incomplete_pools()
    open_nodes = np.zeros(n, dtype=bool)
    if incomplete_pools.any():
        partial = incomplete_pools[store.slice_pool[store.slice_of[rows]]]
        open_nodes[local[partial & (local >= 0)]] = True
        for g in np.unique(group[partial & (group >= 0)]).tolist():
            open_nodes |= group_masks[g]
        # a slice of such a pool that has no devices still names its node
        sids = store.current_slices()
        named = slot_of[store.slice_node[sids]]
        open_nodes[named[incomplete_pools[store.slice_pool[sids]] & (named >= 0)]] = True
    missing = not topo.resource_slices
    if missing:
        open_nodes = live.copy()        # no slice at all: the view was taken without them
    found = _Devices(rows, local, group, group_masks, store.multiple[rows], bool(incomplete_pools.any()),
                     open_nodes, missing)
    topo.remember(("dra-devices",), versions, found)
    return found


def _free(topo: Topology, table: _Devices) -> np.ndarray:
    """Per device of ``table``: no ResourceClaim's allocation holds it (a gather: the claims'
    events keep ``held`` up to date)."""
    return ~topo.device_rows.held[table.rows]  # type: ignore[no-any-return]


def _per_node(topo: Topology, table: _Devices, chosen: np.ndarray) -> np.ndarray:
    """How many of the ``chosen`` devices each node slot reaches."""
    n = topo.slots
    slots = table.local[chosen & (table.local >= 0)]
    counts = np.zeros(n, dtype=np.int64)
    if slots.size:
        counts += np.bincount(slots, minlength=n)[:n]
    for g, mask in enumerate(table.group_masks):
        many = int(np.count_nonzero(chosen & (table.group == g)))
        if many:
            counts += many * mask
    return counts


# -- which devices a request can use ------------------------------------------------------------


@dataclass
class _Reasons:
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_unknown(self, text: str) -> None:
        if text not in self.unknown and len(self.unknown) < 8:
            self.unknown.append(text)

    def add_note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 8:
            self.notes.append(text)


def _candidates(topo: Topology, table: _Devices, sub: SubRequest, reasons: _Reasons,
                tick: Tick = _no_tick) -> np.ndarray | None:
    """Per device, whether ``sub`` can use it (a device a selector cannot be evaluated on
    counts: an upper bound); None when the class is unknown (any device might do)."""
    device_class: DeviceClass | None = topo.device_classes.get(sub.device_class)
    if device_class is None:
        reasons.add_unknown(f"DeviceClass {sub.device_class or '(none)'} is not in the cluster view")
        return None
    if device_class.configured:
        reasons.add_unknown(f"DeviceClass {device_class.name} carries a driver's opaque config, which "
                            "only the driver checks")
    for problem in device_class.problems:
        reasons.add_unknown(f"DeviceClass {device_class.name}: {problem}")
    found = np.ones(len(table.rows), dtype=bool)
    unknown: list[str] = []
    for expression in (*device_class.selectors, *sub.selectors):
        answer, why = _selector_answers(topo, table, expression, tick)
        found &= answer
        unknown += [w for w in why if w not in unknown]
    for reason in unknown[:3]:
        reasons.add_unknown(reason)
    return found


def _selector_answers(topo: Topology, table: _Devices, expression: str,
                      tick: Tick) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per device, whether the selector matches it or cannot be evaluated on it (an upper
    bound), and why not for those. Evaluated once per kind of device the selector cannot tell
    apart (:meth:`DeviceRows.distinct`), kept until a slice changes."""
    key = ("dra-selector", expression)
    versions = (topo.slice_version,)        # table.rows are the slices' alone
    cached = topo.cached(key, versions)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    selector = compile_selector(expression)
    store = topo.device_rows
    rows = table.rows
    unknown: list[str] = []
    failed = compile_failure(selector)
    if failed is not None or not len(rows):
        if failed is not None and len(rows):
            unknown.append(failed.reason)
        answer = np.ones(len(rows), dtype=bool)
    else:
        first, kinds = store.distinct(rows, store.column_names(selector.reads))
        per_kind = np.ones(len(first), dtype=bool)
        for i, position in enumerate(first.tolist()):
            if i % 256 == 0:
                tick()
            device = store.devices[int(rows[position])]
            assert device is not None       # a current row is alive
            result = matches(selector, device)
            if isinstance(result, Unknown):
                if len(unknown) < 3 and result.reason not in unknown:
                    unknown.append(result.reason)
            else:
                per_kind[i] = result
        answer = per_kind[kinds]
    answer.setflags(write=False)
    found = (answer, tuple(unknown))
    topo.remember(key, versions, found)
    return found


# -- how many pods' claims a node's devices satisfy -------------------------------------------------


@dataclass(frozen=True)
class _Need:
    """One request of a pod's claims, as the count reads it."""

    alternatives: tuple[SubRequest, ...]
    where: str


@dataclass(frozen=True)
class _Limit:
    """A claim's ``matchAttribute`` (or ``distinctAttribute``) constraint, as the count reads it."""

    attribute: str              # fully qualified
    needs: tuple[int, ...]      # the positions of the requests it binds in the pod's needs
    distinct: bool
    where: str


def _attribute_values(topo: Topology, table: _Devices, attribute: str) -> tuple[np.ndarray, np.ndarray]:
    """Per device of ``table``, a code of its value of ``attribute`` (-1: none), and whether it
    has one."""
    key = ("dra-attribute", attribute)
    versions = (topo.slice_version,)        # table.rows are the slices' alone
    found = topo.cached(key, versions)
    if found is None:
        values = topo.device_rows.attribute_values(table.rows, attribute)
        has = values >= 0
        for array in (values, has):
            array.setflags(write=False)
        found = (values, has)
        topo.remember(key, versions, found)
    return found  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Groups:
    """The node-local devices that have an attribute, grouped by (node, value)."""

    of: np.ndarray              # per device: its group (-1: not node-local, or no value)
    node: np.ndarray            # per group: its node slot


def _value_groups(topo: Topology, table: _Devices, attribute: str) -> _Groups:
    key = ("dra-attribute-groups", attribute)
    versions = _table_versions(topo)        # the nodes of table.local
    found = topo.cached(key, versions)
    if found is None:
        values, has = _attribute_values(topo, table, attribute)
        inside = has & (table.local >= 0)
        span = int(values.max()) + 1 if len(values) else 1
        unique, inverse = np.unique(table.local[inside] * span + values[inside], return_inverse=True)
        of = np.full(len(values), -1, dtype=np.int64)
        of[inside] = inverse.reshape(-1)
        found = _Groups(of, unique // span)
        topo.remember(key, versions, found)
    return found  # type: ignore[no-any-return]


def _pods_per_node(topo: Topology, table: _Devices, needs: Sequence[_Need], usable: np.ndarray,
                   reasons: _Reasons, tick: Tick = _no_tick, limits: Sequence[_Limit] = ()) -> np.ndarray:
    """Per node, an upper bound of how many pods' ``needs`` its ``usable`` devices satisfy
    at once (exact for requests with one way to be met, by Hall's theorem: every subset of
    requests needs, per pod, as many devices as it asks between them; with one
    ``matchAttribute`` binding them all, by that count per value, summed)."""
    n = topo.slots
    multiple = table.multiple
    candidates: list[np.ndarray] = []   # per need: the devices any of its alternatives can use
    asks: list[int] = []                # per need: the fewest devices one pod takes
    endless: list[np.ndarray | None] = []   # per need: nodes reaching a device it may share
    position: dict[int, int] = {}       # need -> its place in candidates (the needs counted)
    # a device a constrained request takes must have the constraint's attribute
    has = {limit.attribute: _attribute_values(topo, table, limit.attribute)[1] for limit in limits}
    capped = False
    for index, need in enumerate(needs):
        union = np.zeros(len(table.rows), dtype=bool)
        least: int | None = None
        unbounded = False
        for sub in need.alternatives:
            if sub.device_class in ON_DEMAND_CLASSES:
                reasons.add_note(f"{need.where}: class {sub.device_class} is published once its domain "
                                 "forms (a ComputeDomain channel): not counted")
                unbounded = True
                continue
            found = _candidates(topo, table, sub, reasons, tick)
            if found is None:
                unbounded = True
                continue
            union |= found
            take = 0 if sub.admin else 1 if sub.mode == ALL else sub.count
            least = take if least is None else min(least, take)
            capped = capped or sub.mode == ALL
        if unbounded:
            continue    # any device might do: this request bounds nothing
        for limit in limits:
            if index in limit.needs:
                union &= has[limit.attribute]
        position[index] = len(candidates)
        if len(need.alternatives) > 1:
            reasons.add_note(f"{need.where}: firstAvailable counted as any of its alternatives "
                             "(an upper bound)")
        shared = union & multiple
        if shared.any():
            reasons.add_note(f"{need.where}: devices that allow multiple allocations are not consumed")
            endless.append(_per_node(topo, table, shared) > 0)
        else:
            endless.append(None)
        candidates.append(union & usable & ~multiple)
        asks.append(least or 0)
    result = np.full(n, UNBOUNDED, dtype=np.int64)
    if len(candidates) > _MAX_HALL:
        reasons.add_note(f"more than {_MAX_HALL} requests per pod: each request counted on its own")
        subsets: Iterable[tuple[int, ...]] = [(i,) for i in range(len(candidates))]
    else:
        subsets = [tuple(i for i in range(len(candidates)) if mask >> i & 1)
                   for mask in range(1, 1 << len(candidates))]
    for subset in subsets:
        tick()
        asked = sum(asks[i] for i in subset)
        chosen = np.zeros(len(table.rows), dtype=bool)
        for i in subset:
            chosen |= candidates[i]
        reached = _per_node(topo, table, chosen)
        # admin access takes nothing, but some device must be there
        pods = np.where(reached > 0, UNBOUNDED, 0) if asked == 0 else reached // asked
        for i in subset:
            spare = endless[i]
            if spare is not None:
                pods = np.where(spare, UNBOUNDED, pods)
        np.minimum(result, pods, out=result)
    for limit in limits:
        members = frozenset(position[i] for i in limit.needs if i in position)
        if not members:
            continue
        bound_by = _distinct_bound if limit.distinct else _match_bound
        kind = "distinctAttribute" if limit.distinct else "matchAttribute"
        if table.group_masks and any((candidates[i] & (table.group >= 0)).any() for i in members):
            reasons.add_note(f"{limit.where}: {kind} {limit.attribute} over network-attached devices: "
                             "only devices with the attribute counted")
            continue
        groups = _value_groups(topo, table, limit.attribute)
        np.minimum(result, bound_by(topo, table, groups, members, candidates, asks, endless, subsets, tick),
                   out=result)
        if limit.distinct:
            reasons.add_note(f"{limit.where}: distinctAttribute {limit.attribute} checked for one pod "
                             "per node (an upper bound)")
        elif len(limits) > 1 or len(members) < len(candidates):
            reasons.add_note(f"{limit.where}: matchAttribute {limit.attribute} counted per value of the "
                             "requests it binds (an upper bound with other requests or constraints)")
    if capped:
        np.minimum(result, 1, out=result)   # allocationMode All takes every matching device
    result[table.open_nodes] = UNBOUNDED    # a pool not all seen: its missing slices may hold anything
    return result


_Spare = np.ndarray | None        # nodes reaching a device a request may share (None: none)


def _match_bound(topo: Topology, table: _Devices, groups: _Groups, members: frozenset[int],
                 candidates: Sequence[np.ndarray], asks: Sequence[int], endless: Sequence[_Spare],
                 subsets: Iterable[tuple[int, ...]], tick: Tick) -> np.ndarray:
    """Per node, an upper bound of the pods whose ``members`` requests all take devices of one
    value: each pod picks a value, so the pods of a node are the sum over its values of the Hall
    count in which the members' devices are those of that value (the others' any of the node's)."""
    count = len(groups.node)
    per_group = np.full(count, UNBOUNDED, dtype=np.int64)
    for subset in subsets:
        bound = [i for i in subset if i in members]
        if not bound:
            continue    # the node's own Hall count bounds it already
        tick()
        free = [i for i in subset if i not in members]
        asked = sum(asks[i] for i in subset)
        valued = candidates[bound[0]]
        for i in bound[1:]:
            valued = valued | candidates[i]
        anywhere = None
        for i in free:
            anywhere = candidates[i] if anywhere is None else anywhere | candidates[i]
        if anywhere is not None:
            valued = valued & ~anywhere
        # shifted by one: devices of nodes not in the view have no group (-1), no node counts them
        reached = np.bincount(groups.of[valued] + 1, minlength=count + 1)[1 : count + 1]
        if anywhere is not None:
            reached = reached + _per_node(topo, table, anywhere)[groups.node]
        pods = np.where(reached > 0, UNBOUNDED, 0) if asked == 0 else reached // asked
        for i in subset:
            spare = endless[i]
            if spare is not None:
                pods = np.where(spare[groups.node], UNBOUNDED, pods)
        np.minimum(per_group, pods, out=per_group)
    # float sums are exact below 2**53; past UNBOUNDED they are clipped to it anyway
    total = np.bincount(groups.node, weights=per_group.astype(np.float64), minlength=topo.slots)
    return np.minimum(total[: topo.slots], UNBOUNDED).astype(np.int64)  # type: ignore[no-any-return]


def _distinct_bound(topo: Topology, table: _Devices, groups: _Groups, members: frozenset[int],
                    candidates: Sequence[np.ndarray], asks: Sequence[int], endless: Sequence[_Spare],
                    subsets: Iterable[tuple[int, ...]], tick: Tick) -> np.ndarray:
    """Per node, 0 where one pod's ``members`` requests cannot take devices of pairwise different
    values (fewer values among a subset's devices than it asks), unbounded elsewhere."""
    n = topo.slots
    result = np.full(n, UNBOUNDED, dtype=np.int64)
    for subset in subsets:
        asked = sum(asks[i] for i in subset)
        if asked == 0 or not members.issuperset(subset):
            continue
        tick()
        chosen = np.zeros(len(table.rows), dtype=bool)
        for i in subset:
            chosen |= candidates[i]
        present = np.unique(groups.of[chosen & (groups.of >= 0)])
        values = np.bincount(groups.node[present], minlength=n)[:n]
        bound = np.where(values >= asked, UNBOUNDED, 0)
        for i in subset:
            spare = endless[i]
            if spare is not None:
                bound = np.where(spare, UNBOUNDED, bound)
        np.minimum(result, bound, out=result)
    return result


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


def _write(topo: Topology, name: str, full: np.ndarray, free: np.ndarray, keep: set[str]) -> None:
    """Put a device column in the topology's matrices: ``full`` as allocatable, what
    ``free`` leaves as used."""
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
    columns: dict[str, tuple[str, str]] = field(default_factory=dict)
    keep: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)

    def write(self, name: str, full: np.ndarray, free: np.ndarray, what: str, path: str) -> None:
        self.keep.add(name)
        _write(self.topo, name, full, free, self.keep)
        self.written.add(name)
        self.columns[name] = (what, path)


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
            if name not in build.written:
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
    sub = SubRequest(resource, device_class.name, (), "ExactCount", 1)
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
        if name not in build.written:
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
        if name not in build.written:
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
