"""GPU groups: units of GPUs (gpu-group-size G, atomic-gpu-group-size A) that must each
sit inside one supernode (a node label value, or a tier-1 Volcano HyperNode).

The supernode slots of a uniform capacity, with the supernode holding the most and their
sum (:func:`_uniform_slots`), are kept with the eligible members they are worked out
from; group placements depend on nothing but the capacities (:func:`_placement_key`), and
the witness of a kept one is kept per pod set names (:class:`_KeptPlacement`; every
caller gets a copy).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.topology import SupernodeLayout, Topology

from .capacity import _nonzero, _Set
from .packing import _Caps, _greedy, _KeptPlacement, _place, _Sparse, _sparse
from .questions import FitQuestion


@dataclass
class _Groups:
    unit: int                   # GPUs that must share one supernode (A, else G)
    per_pod: int                # g
    pods_per_unit: int
    units: int                  # units the gang needs
    gpu_sets: list[int]         # indexes into sets
    resource: str
    size: int
    atomic_explicit: bool
    path: str


def _group_plan(question: FitQuestion, sets: list[_Set]) -> _Groups | None:
    """How the GPU pods form units (G, A: ``question.groups``)."""
    spec = question.groups
    if spec is None or not spec.gpu_pod_sets:
        return None
    resources = set(question.gpu_resources)  # those requested with a positive amount
    if len(resources) != 1:
        return None
    resource = resources.pop()
    gpu_sets = [i for i, s in enumerate(sets) if s.request.get(resource, 0) > 0]
    per_pod = {sets[i].request[resource] for i in gpu_sets}
    if len(per_pod) != 1:
        return None  # mixed g: the group size rules judge the sizes; units cannot be chunked
    g = per_pod.pop()
    unit = spec.atomic
    if unit % g:
        return None
    total = sum(sets[i].demand.want for i in gpu_sets) * g
    hard_total = sum(sets[i].demand.hard for i in gpu_sets) * g
    return _Groups(unit=unit, per_pod=g, pods_per_unit=unit // g, units=min(total, hard_total) // unit,
                   gpu_sets=gpu_sets, resource=resource, size=spec.size,
                   atomic_explicit=spec.atomic_explicit, path=spec.atomic_path or spec.size_path)


def _supernode_slots(topo: Topology, sets: list[_Set], plan: _Groups, caps: Sequence[np.ndarray],
                     supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                     free: np.ndarray) -> np.ndarray:
    """Units each supernode can hold at most: an upper bound on the GPU pods its nodes
    can take together. ``caps``: each set's capacity on ``free``, the free resources in
    question; ``labels``: the supernode labels ``supernodes`` was found by."""
    first = sets[plan.gpu_sets[0]]
    if all(sets[i].key == first.key for i in plan.gpu_sets):
        # One kind of pod (sets of one template): a node takes at most its capacity. Where
        # that is one number on every eligible node, a supernode holds that many times its
        # eligible nodes.
        best = caps[plan.gpu_sets[0]]
        uniform = _uniform(best, first.elig.count)
        if uniform is not None:
            return _uniform_slots(topo, first, supernodes, labels, uniform, plan.pods_per_unit)[0]
        return topo.supernode_totals(best, supernodes) // plan.pods_per_unit
    # Pods of different kinds can share a node where neither kind fits twice (a CPU-heavy
    # and a memory-heavy pod of 4 GPUs on an 8-GPU node): the kinds' capacities add up,
    # and no node holds more GPU pods than its free GPUs allow.
    kinds = {sets[i].key: caps[i] for i in plan.gpu_sets}
    pods = np.sum(list(kinds.values()), axis=0)
    column = topo.res_index.get(plan.resource)
    if column is not None:
        pods = np.minimum(pods, np.maximum(free[:, column], 0) // plan.per_pod)
    return topo.supernode_totals(pods, supernodes) // plan.pods_per_unit


def _uniform(cap: np.ndarray, eligible: int) -> int | None:
    """The capacity's value when it is the same on all ``eligible`` nodes where it is
    not 0 by eligibility (a capacity is 0 on every other node), else None."""
    if not eligible:
        return 0
    most = int(cap.max())
    if most and int(np.count_nonzero(cap == most)) == eligible:
        return most
    return None


# Units per supernode for a uniform capacity (read-only), the supernode holding the most
# (first of equals, as ``np.argmax``) and their sum: (slots, best, total).
_UniformSlots = tuple[np.ndarray, int, int]


def _members_entry(topo: Topology, s: _Set, supernodes: list[tuple[str, np.ndarray]],
                   labels: tuple[str, ...]) -> tuple[np.ndarray, dict[tuple[int, int], _UniformSlots]]:
    """How many nodes of each supernode ``s`` is eligible for (read-only; cached until the
    eligibility or the supernodes change), with the uniform slots worked out from it so far (see
    :func:`_uniform_slots`), which are valid exactly as long as it is."""
    key = ("supernode-eligible", s.demand.signature, labels)
    versions = (s.versions, topo.supernode_versions(labels))
    cached = topo.cached(key, versions)
    if cached is None:
        members = topo.supernode_totals(s.elig.mask.astype(np.int64), supernodes)
        members.setflags(write=False)
        cached = (members, {})
        topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _uniform_slots(topo: Topology, s: _Set, supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                   uniform: int, pods_per_unit: int) -> _UniformSlots:
    """Units per supernode when ``s``'s capacity is ``uniform`` on every eligible node:
    ``uniform`` times the supernode's eligible nodes, over the pods a unit takes. A
    function of two small numbers and the eligible members, so it is kept with those
    (the job shapes of a sweep on GPU-bound nodes share one)."""
    members, derived = _members_entry(topo, s, supernodes, labels)
    found = derived.get((uniform, pods_per_unit))
    if found is None:
        if len(derived) >= 32:      # bounded: a few values per eligibility in practice
            derived.clear()
        slots = uniform * members // pods_per_unit
        slots.setflags(write=False)
        best = int(np.argmax(slots)) if slots.size else -1
        found = derived[(uniform, pods_per_unit)] = (slots, best, int(slots.sum()))
    return found


def _empty_supernode_slots(topo: Topology, sets: list[_Set], plan: _Groups, caps_empty: Sequence[np.ndarray],
                           supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                           alloc: np.ndarray, uniform: int | None = None) -> np.ndarray:
    """:func:`_supernode_slots` on the empty cluster, cached until the GPU sets'
    eligibility, the allocatable or the supernodes change. Read-only. ``uniform``: the
    first GPU set's capacity's uniform value, if it has one: when every GPU set has that
    capacity, the slots are that many pods times each supernode's eligible nodes (what
    :func:`_supernode_slots` computes after finding the value), not worth a cache entry
    per job shape."""
    return _empty_supernode_slots_of(topo, sets, plan, caps_empty, supernodes, labels, alloc, uniform)[0]


def _empty_supernode_slots_of(topo: Topology, sets: list[_Set], plan: _Groups,
                              caps_empty: Sequence[np.ndarray], supernodes: list[tuple[str, np.ndarray]],
                              labels: tuple[str, ...], alloc: np.ndarray, uniform: int | None = None
                              ) -> _UniformSlots | tuple[np.ndarray]:
    """:func:`_empty_supernode_slots`; for a uniform capacity with the supernode holding the
    most and the sum (:data:`_UniformSlots`), else as a one-tuple."""
    gpu_sets = [sets[i] for i in plan.gpu_sets]
    first = gpu_sets[0]
    if uniform and first.elig.count and all(s.key == first.key for s in gpu_sets):
        return _uniform_slots(topo, first, supernodes, labels, uniform, plan.pods_per_unit)
    key = ("supernode-slots", tuple(s.key for s in gpu_sets), plan.pods_per_unit, labels)
    versions = (tuple(s.versions for s in gpu_sets), topo.alloc_version, topo.supernode_versions(labels))
    cached = topo.cached(key, versions)
    if cached is None:
        cached = _supernode_slots(topo, sets, plan, caps_empty, supernodes, labels, alloc)
        cached.setflags(write=False)
        topo.remember(key, versions, cached)
    return (cached,)


def _unit_label(plan: _Groups) -> str:
    if plan.atomic_explicit:
        return f"atomic part of {plan.unit} GPUs (atomic-gpu-group-size, group {plan.size})"
    return f"group of {plan.unit} GPUs (gpu-group-size)"


def _groups_never(topo: Topology, plan: _Groups, alloc: np.ndarray, supernodes: list[tuple[str, np.ndarray]],
                  slots: np.ndarray, summary: tuple[int, int] | None = None) -> str | None:
    """Why the GPU groups can never form; ``slots``: units per supernode when empty;
    ``summary``: the supernode holding the most (``np.argmax``) and the sum, when known."""
    if summary is None:
        best = int(np.argmax(slots)) if slots.size else -1
        total = int(slots.sum())
    else:
        best, total = summary
    if not slots.size or slots[best] == 0:
        # what new pods could ever use: cordoned nodes give them nothing
        column = topo.res_index.get(plan.resource)
        gpus = [0 if column is None else
                int(np.maximum(alloc[rows, column], 0)[~topo.unschedulable[rows]].sum())
                for _, rows in supernodes]
        i = max(range(len(gpus)), key=lambda j: gpus[j])
        return (f"no supernode can ever hold one {_unit_label(plan)} of {plan.pods_per_unit} pods x "
                f"{plan.per_pod} {plan.resource}: the largest of {len(supernodes)} supernodes, "
                f"{supernodes[i][0]}, has {gpus[i]} {plan.resource} in total")
    if total < plan.units:
        return (f"the gang forms {plan.units} units ({_unit_label(plan)}) that must each sit inside one "
                f"supernode; the {len(supernodes)} supernodes can hold at most {total} of them even "
                f"when empty (largest: {supernodes[best][0]}, {slots[best]})")
    return None


def _unit_runs(sets: list[_Set], plan: _Groups) -> tuple[list[tuple[list[int], int]], list[int]]:
    """The gang's units as runs of identical composition ((pods per set, how many units)),
    and the pods outside units (placed anywhere). The GPU pods are taken set after set, so
    there are at most two runs per GPU set, whatever the gang's size."""
    per = plan.pods_per_unit
    runs: list[tuple[list[int], int]] = []
    rest = [0] * len(sets)
    partial = [0] * len(sets)           # the unit being filled, which may span two sets
    partial_pods = 0
    units_left = plan.units
    for i in plan.gpu_sets:
        left = sets[i].demand.want
        if partial_pods and units_left:
            take = min(left, per - partial_pods)
            partial[i] += take
            partial_pods += take
            left -= take
            if partial_pods == per:
                runs.append((partial, 1))
                partial, partial_pods = [0] * len(sets), 0
                units_left -= 1
        if units_left and left >= per:
            whole = min(left // per, units_left)
            comp = [0] * len(sets)
            comp[i] = per
            runs.append((comp, whole))
            left -= whole * per
            units_left -= whole
        if units_left and left and not partial_pods:
            partial[i] += left
            partial_pods += left
            left = 0
        rest[i] += left
    for i in range(len(sets)):
        rest[i] += partial[i]           # a unit never completed: not grouped
        if i not in plan.gpu_sets:
            rest[i] = sets[i].demand.want
    return runs, rest


def _place_groups(topo: Topology, sets: list[_Set], plan: _Groups, caps: _Caps,
                  supernodes: list[tuple[str, np.ndarray]], labels: tuple[str, ...],
                  tick: Any, uniform: Mapping[Any, int | None] | None = None) -> _Sparse | None:
    """Units of GPU pods, each inside one supernode, then everything else anywhere.
    Supernodes are visited in order; per supernode as many units of a run as fit at
    once (halving on failure), so the cost grows with supernodes, not with the gang's
    size. ``caps`` (free resources and capacities) is updated in place, except when the
    placement is one found before (see :func:`_placement_key`); ``labels``: the
    supernode labels ``supernodes`` was found by; ``uniform``: the uniform values of
    the capacities in ``caps`` (by set key), where known. The placement per set, sparse."""
    n = caps.free.shape[0]
    runs, rest_counts = _unit_runs(sets, plan)
    layout = topo.supernode_layout(supernodes)
    found = _placement_key(topo, sets, runs, rest_counts, layout, caps, labels, uniform or {})
    if found is not None:
        key, versions, cap, exact = found
        known = topo.cached(key, versions)
        if known is not None and (exact or known[0] is cap or np.array_equal(known[0], cap)):
            if not exact and known[0] is not cap:
                # Equal, not the same array: keep this one, so the next hit needs no comparing.
                topo.remember(key, versions, (cap, known[1]))
            return known[1]  # type: ignore[no-any-return]  # read-only arrays
    placed = [np.zeros(n, dtype=np.int64) for _ in sets]
    if found is not None:
        result = _place_group_runs(topo, sets, runs, layout, caps, supernodes, tick, placed)
        sparse = None if result is None else _KeptPlacement(_sparse(result))
        for arrays in sparse or ():
            for array in arrays:
                array.setflags(write=False)
        topo.remember(key, versions, (cap, sparse))
        return sparse
    sn = 0
    for comp, count in runs:
        tick()
        parts = [(i, c) for i, c in enumerate(comp) if c]
        # One set per unit, or one unit of sets that share their capacity: the loop below
        # reduces to first fit over the supernodes' nodes in order, done in array steps.
        shared = len(parts) == 1 or (count == 1 and len({sets[i].key for i, _ in parts}) == 1)
        if layout.disjoint and shared:
            at = _place_run(supernodes, layout, sets, parts, count, sn, caps, placed)
        else:
            # Units each supernode could take now. Free resources only shrink during a
            # run, so a supernode without room now is one the loop would pass over anyway.
            bound = np.full(len(supernodes), count, dtype=np.int64)
            for i, c in parts:
                np.minimum(bound, topo.supernode_totals(caps.get(sets[i]), supernodes) // c, out=bound)
            at = _place_run_per_supernode(sets, comp, count, bound, sn, caps, placed, supernodes, tick)
        if at is None:
            return None
        sn = at
    tick()
    if not any(rest_counts):
        return _sparse(placed)
    rest = _place(caps, sets, rest_counts)
    if rest is None:
        return None
    return _sparse([a + b for a, b in zip(placed, rest, strict=True)])


def _placement_key(topo: Topology, sets: list[_Set], runs: list[tuple[list[int], int]], rest: list[int],
                   layout: SupernodeLayout, caps: _Caps, labels: tuple[str, ...],
                   uniform: Mapping[Any, int | None]) -> tuple[Any, tuple[Any, ...], np.ndarray, bool] | None:
    """(cache key, versions, capacity, exact) of a group placement that depends on nothing
    but one capacity array: every unit of one capacity (sets of one template), disjoint
    supernodes (so each run is :func:`_place_run`'s first fit, which reads capacities
    only, and lowers the set's own capacity by what it takes) and no pods outside units.
    Job shapes that differ in what the nodes hold the same number of pods of (a sweep
    of CPU requests on GPU-bound nodes) then share one placement. None otherwise.

    ``exact``: the key determines the capacity (a uniform one, ``uniform`` by set key,
    is its value on the rows of one eligibility), so an entry found needs no comparing;
    else the key holds a checksum and the entry's capacity must be compared."""
    if not layout.disjoint or any(rest) or not runs:
        return None
    used = [i for comp, _ in runs for i, c in enumerate(comp) if c]
    s = sets[used[0]]
    if any(sets[i].key != s.key for i in used):
        return None
    cap = caps.get(s)
    if cap.flags.writeable:     # kept with the placement: must not change after
        cap = cap.copy()
        cap.setflags(write=False)
    shape = tuple((tuple(comp), count) for comp, count in runs)
    versions = (topo.nodeset_version, topo.supernode_versions(labels))
    # Still the capacity the value was known for: nothing placed, not computed again here.
    value = uniform.get(s.key) if s.key not in caps.owned else None
    if value is not None:
        exact = ("group-placement", shape, labels, cap.shape[0], "uniform", s.demand.signature, s.versions)
        return (*exact, value), versions, cap, True
    # The checksum picks the entry; the capacity kept with it is compared in full. Pods
    # per node are small numbers: below 256 (capacities are never negative) one byte
    # per node holds them exactly, and checksumming an eighth of the bytes is cheaper.
    narrow = cap.astype(np.uint8) if cap.size and int(cap.max()) < 256 else cap
    key = ("group-placement", shape, labels, cap.shape[0], narrow.dtype.itemsize,
           zlib.crc32(np.ascontiguousarray(narrow).data))
    return key, versions, cap, False


def _place_group_runs(topo: Topology, sets: list[_Set], runs: list[tuple[list[int], int]],
                      layout: SupernodeLayout, caps: _Caps, supernodes: list[tuple[str, np.ndarray]],
                      tick: Any, placed: list[np.ndarray]) -> list[np.ndarray] | None:
    """The runs of :func:`_place_groups` when each is one :func:`_place_run`."""
    sn = 0
    for comp, count in runs:
        tick()
        parts = [(i, c) for i, c in enumerate(comp) if c]
        at = _place_run(supernodes, layout, sets, parts, count, sn, caps, placed)
        if at is None:
            return None
        sn = at
    tick()
    return placed


def _place_run(supernodes: list[tuple[str, np.ndarray]], layout: SupernodeLayout, sets: list[_Set],
               parts: list[tuple[int, int]], count: int, sn: int, caps: _Caps,
               placed: list[np.ndarray]) -> int | None:
    """``count`` units of ``parts`` ((set, pods per unit); several sets only when they
    share one capacity and ``count`` is 1), supernode after supernode from ``sn``
    (disjoint supernodes), first fit inside each, the sets' pods one set after another:
    what :func:`_place_run_per_supernode` does, in a few array operations. The
    supernode the run ends in, or None."""
    s = sets[parts[0][0]]
    per_unit = sum(c for _, c in parts)
    cap_all = caps.get(s)
    lo = int(layout.starts[sn])
    # Units per supernode from sn on, over a window that grows until it holds the run:
    # a run usually ends a few supernodes after it starts.
    width = max(2 * count, 32)
    while True:
        stop = min(len(supernodes), sn + width)
        hi = int(layout.ends[stop - 1])
        cap = cap_all[layout.members[lo:hi]]
        room = np.add.reduceat(cap, layout.starts[sn:stop] - lo) // per_unit
        if stop == len(supernodes) or int(room.sum()) >= count:
            break
        width *= 4
    before = np.cumsum(room) - room
    units = np.minimum(np.maximum(count - before, 0), room)
    if int(units.sum()) < count:
        return None
    last = int(_nonzero(units)[-1])
    hi = int(layout.ends[sn + last])
    members = layout.members[lo:hi]
    owner = layout.owner[lo:hi] - sn
    cap = cap[: hi - lo]
    cum = np.cumsum(cap)
    already = cum - cap                           # pods the earlier members take, from lo
    first = layout.starts[sn: sn + last + 1] - lo
    already -= already[first][owner]              # ... within the member's own supernode
    units = units[: last + 1][owner]              # per member: its supernode's units
    take = np.minimum(np.maximum(units * per_unit - already, 0), cap)
    hit = _nonzero(take)
    rows, take = members[hit], take[hit]
    if len(parts) == 1:             # one set takes every pod of the run
        placed[parts[0][0]][rows] += take
        caps.place(s, rows, take)
        return sn + last
    already, units = already[hit], units[hit]
    start = 0
    for i, c in parts:                            # set i takes pods [start, end) of the unit(s)
        end = start + c
        mine = np.minimum(already + take, units * end) - np.maximum(already, units * start)
        placed[i][rows] += np.maximum(mine, 0)
        start = end
    caps.place(s, rows, take)
    return sn + last


def _place_run_per_supernode(sets: list[_Set], comp: list[int], count: int, bound: np.ndarray, sn: int,
                             caps: _Caps, placed: list[np.ndarray], supernodes: list[tuple[str, np.ndarray]],
                             tick: Any) -> int | None:
    """``count`` units of ``comp`` (pods per set), one supernode at a time from ``sn``:
    the general case (several sets per unit, or supernodes sharing nodes). The
    supernode the run ends in, or None."""
    left = count
    candidates = (_nonzero(bound[sn:]) + sn).tolist()
    while left:
        while candidates and candidates[0] < sn:
            candidates.pop(0)
        if not candidates:
            return None
        sn = candidates[0]
        tick()
        rows = supernodes[sn][1]
        fit = min([left] + [int(caps.get(sets[i])[rows].sum()) // c for i, c in enumerate(comp) if c])
        got = None
        while fit > 0:
            local = _Caps(sets, caps.free[rows], {k: v[rows] for k, v in caps.caps.items()}, rows)
            got = _greedy(local, sets, [c * fit for c in comp], range(len(sets)))
            if got is not None:
                caps.writable_free()[rows] = local.free
                caps.refresh(rows)
                for i, g in enumerate(got):
                    placed[i][rows] += g
                left -= fit
                break
            fit //= 2
        if got is None or left:
            sn += 1             # this supernode is full for this run
    return sn
