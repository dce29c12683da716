"""How many of a pod's DRA device requests each node's devices can satisfy (for
:mod:`policies.feasibility.devices`): the devices of the newest generation of every pool and
the nodes that reach them, which devices a request can use (class and request CEL selectors),
and the per-node count, exact by Hall's theorem where the docstring of
:mod:`policies.feasibility.devices` says, an upper bound everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.dra.cel import Unknown, compile_failure, compile_selector, matches
from policies.dra.objects import (
    ALL,
    ON_DEMAND_CLASSES,
    DeviceClass,
    SubRequest,
)
from policies.topology import Topology

from .nodes import _affinity_mask

UNBOUNDED = 2**40               # "not limited here": large, yet sums over a million nodes fit int64
_MAX_HALL = 8                   # requests per pod up to which every subset is checked


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
