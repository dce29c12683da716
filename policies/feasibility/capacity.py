"""Per-node capacities: how many pods of a pod set each node takes, on the allocatable
(the empty cluster) or on the free resources now.

A job of a shape never asked about (another CPU request per pod) reuses what does not
depend on its requests: per eligibility, the allocatable and the free resources on the
eligible rows only (:func:`_block`, with per-resource bounds that often settle a
capacity without dividing at all). Each is kept against the versions of what it was
computed from, so a warm answer is the answer a cold check gives. A capacity that is one
number on every eligible node (GPU-bound nodes of one kind: the usual case) is known as
such (:data:`_Capacity`): its sum, its zeros, its offers, its supernode slots and its
group placement then follow from that number without reading the array, and nothing is
kept per job shape for it. The free resources now are shared by every check and copied
only when a placement has to write to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from policies.topology import Topology

from .nodes import _Eligibility, _eligibility, _with_plugin
from .questions import Demand
from .specs import _signature_label_keys

_BIG = np.int64(2**62)


def _nonzero(values: np.ndarray) -> np.ndarray:
    """The indexes of the non-zero entries of a 1-d integer array: ``np.flatnonzero``,
    which on int64 costs several times a comparison plus ``nonzero`` on the booleans."""
    return (values != 0).nonzero()[0]  # type: ignore[no-any-return]


@dataclass
class _Set:
    demand: Demand
    cols: np.ndarray            # resource columns the pod requests
    amounts: np.ndarray         # units per pod in those columns
    missing: list[str]          # requested resources no node offers at all
    elig: _Eligibility
    key: tuple[Any, ...] = ()   # (signature, request): what the capacity depends on
    versions: tuple[int, ...] = ()  # topology versions the eligibility depends on
    request: dict[str, int] = field(default_factory=dict)  # the demand's units, as a mapping
    # ``cols`` and ``amounts`` as lists: the per-shape work reads a handful of numbers,
    # cheaper from lists than through numpy calls on tiny arrays.
    col_list: list[int] = field(default_factory=list)
    amount_list: list[int] = field(default_factory=list)

    def capacity(self, free: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Pods of this set each node (row of ``free``) can take on its own (0 where
        ineligible). ``mask``: the eligibility of ``free``'s rows when they are not all
        the topology's slots."""
        mask = self.elig.mask if mask is None else mask
        if self.missing:
            return np.zeros(free.shape[0], dtype=np.int64)
        per = free[:, self.cols] // self.amounts
        cap = per.min(axis=1) if self.cols.size else np.full(free.shape[0], _BIG)
        return np.where(mask, np.maximum(cap, 0), 0)


def _sets(topo: Topology, demands: Sequence[Demand], plugin: bool = False) -> list[_Set]:
    if plugin:  # the ExtendedResourceToleration plugin runs: its tolerations count
        demands = [_with_plugin(d) for d in demands]
    out = []
    # Pod sets of one template (master and workers) share their eligibility, and their
    # request (one units object, see :func:`_shared`): both are worked out once.
    by_signature: dict[str, tuple[_Eligibility, tuple[int, ...]]] = {}
    by_units: dict[int, tuple[np.ndarray, np.ndarray, list[str], tuple[Any, ...], list[int], list[int]]] = {}
    for d in demands:
        request = d.request
        columns = by_units.get(id(d.units))
        if columns is None:
            present = [(topo.res_index[r], v) for r, v in request.items() if r in topo.res_index and v > 0]
            missing = [r for r, v in request.items() if r not in topo.res_index and v > 0]
            col_list = [c for c, _ in present]
            # A request beyond int64 (`cpu: 1e30` parses exactly) fits no node either way:
            # saturate it, as the scheduler does, instead of overflowing the array.
            amount_list = [min(v, int(_BIG)) for _, v in present]
            columns = by_units[id(d.units)] = (np.array(col_list, dtype=np.intp),
                                               np.array(amount_list, dtype=np.int64), missing,
                                               tuple(sorted(request.items())), col_list, amount_list)
        cols, amounts, missing, sorted_request, col_list, amount_list = columns
        signature = d.signature
        known = by_signature.get(signature)
        if known is None:
            versions = topo.versions(_signature_label_keys(signature, d.placement))
            known = by_signature[signature] = (_eligibility(topo, d.placement, signature, versions), versions)
        # Arrays shared by sets of one request: nothing writes to them.
        out.append(_Set(d, cols, amounts, list(missing), known[0], (signature, sorted_request), known[1],
                        request, col_list, amount_list))
    return out


class _Block(NamedTuple):   # a tuple, so that the cache counts the bytes of its arrays
    """A resource matrix (the allocatable, or the free resources now) on the rows of one
    eligibility only, clipped at 0, one contiguous row per resource column. It depends on
    the eligibility and the matrix, not on what a pod set requests, so every job shape
    of one template reuses it; a capacity is then a few divisions over eligible rows."""

    rows: np.ndarray            # the eligible slots, ascending
    values: np.ndarray          # resources x rows
    low: np.ndarray             # per resource column: the smallest value, the largest,
    high: np.ndarray            # and the sum over the rows
    total: np.ndarray


_ASKED_ONCE = "asked once"     # a block's cache entry before it is worth building


def _block(topo: Topology, s: _Set, matrix: np.ndarray, which: str, versions: tuple[Any, ...],
           build: bool = True) -> _Block | None:
    """``matrix`` (``which``: "empty" or "now", computed at ``versions``) on the rows
    ``s`` is eligible for; cached on the topology per eligibility signature. Building
    one costs about two capacities computed on the whole matrix, so it is built the
    second time it is asked for at the same versions (a second job shape of the
    placement): None the first time, or when not ``build``ing and there is none yet."""
    key = ("block", which, s.demand.signature)
    versions = (s.versions, versions)
    cached = topo.cached(key, versions)
    if isinstance(cached, _Block) or not build:
        return cached if isinstance(cached, _Block) else None
    if cached is None:
        topo.remember(key, versions, _ASKED_ONCE)
        return None
    mask = s.elig.mask
    rows = np.flatnonzero(mask)
    values = np.compress(mask, matrix, axis=0)
    # Clipping at 0 changes no capacity: a negative free value gives 0 pods either way.
    np.maximum(values, 0, out=values)
    values = np.ascontiguousarray(values.T)
    if rows.size:
        low, high = values.min(axis=1), values.max(axis=1)
    else:
        low = high = np.zeros(values.shape[0], dtype=np.int64)
    block = _Block(rows, values, low, high, values.sum(axis=1))
    for array in block:
        array.setflags(write=False)
    topo.remember(key, versions, block)
    return block


def _block_capacity(topo: Topology, s: _Set, block: _Block, which: str,
                    versions: tuple[Any, ...]) -> np.ndarray:
    """:func:`_block_capacity_of`'s capacity."""
    return _block_capacity_of(topo, s, block, which, versions)[0]


# A capacity, and its value when it is that one number on every eligible node and 0
# elsewhere (:func:`_uniform_capacity`), else None: what it sums to, where it is 0 and
# which group placement it gives are then known without reading the array.
_Capacity = tuple[np.ndarray, int | None]


def _block_capacity_of(topo: Topology, s: _Set, block: _Block, which: str,
                       versions: tuple[Any, ...]) -> _Capacity:
    """What :meth:`_Set.capacity` gives on the block's matrix (see :func:`_block` for
    ``which`` and ``versions``), computed on the eligible rows only. A column whose
    smallest quotient is at least another column's largest never decides the minimum, so
    it is skipped; when one column decides and its quotient is the same on every row, the
    capacity is that number on every eligible row, an array shared (read-only) by every
    shape that gets the same number."""
    slots = topo.slots
    if s.missing or not block.rows.size:
        return np.zeros(slots, dtype=np.int64), None
    if not s.cols.size:
        return _uniform_capacity(topo, s, block, which, versions, int(_BIG)), int(_BIG)
    cols, amounts = s.col_list, s.amount_list
    lows, highs = block.low.tolist(), block.high.tolist()
    low: list[int] = []
    high: list[int] = []
    for c, a in zip(cols, amounts, strict=True):  # a loop: a handful of columns, per job shape
        low.append(lows[c] // a)
        high.append(highs[c] // a)
    bound = min(high)
    decides = high.index(bound)     # the first column with the smallest quotient
    needed = [j for j in range(len(low)) if j == decides or low[j] < bound]
    if len(needed) == 1 and low[decides] == bound:  # needed is [decides]: it always holds it
        return _uniform_capacity(topo, s, block, which, versions, bound), bound
    out = np.zeros(slots, dtype=np.int64)
    cap = block.values[cols[needed[0]]] // amounts[needed[0]]
    if len(needed) > 1:
        part = np.empty_like(cap)
        for j in needed[1:]:
            np.floor_divide(block.values[cols[j]], amounts[j], out=part)
            np.minimum(cap, part, out=cap)
    out[block.rows] = cap
    return out, None


def _uniform_capacity(topo: Topology, s: _Set, block: _Block, which: str, versions: tuple[Any, ...],
                      value: int) -> np.ndarray:
    """``value`` on the block's rows, 0 elsewhere (read-only): cached like the block."""
    key = ("uniform", which, s.demand.signature, value)
    versions = (s.versions, versions)
    cached = topo.cached(key, versions)
    if cached is None:
        cached = np.zeros(topo.slots, dtype=np.int64)
        cached[block.rows] = value
        cached.setflags(write=False)
        topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _empty_capacity(topo: Topology, s: _Set) -> np.ndarray:
    """Pods of a set each empty node takes: cached until labels or allocatable change."""
    return _empty_capacity_of(topo, s)[0]


def _empty_capacity_of(topo: Topology, s: _Set) -> _Capacity:
    """:func:`_empty_capacity`, with its uniform value. A uniform one is not kept per job
    shape: it is one cached lookup away (the block's), and kept per shape it would crowd
    the cache with entries of no use to any other shape."""
    key = ("capacity", s.key)
    versions = (s.versions, topo.alloc_version)
    cached = topo.cached(key, versions)
    if cached is None:
        alloc = topo.alloc[: topo.slots]
        block = _block(topo, s, alloc, "empty", (topo.alloc_version,))
        cached = (s.capacity(alloc), None) if block is None else \
            _block_capacity_of(topo, s, block, "empty", (topo.alloc_version,))
        cached[0].setflags(write=False)
        if cached[1] is None:
            topo.remember(key, versions, cached)
    return cached  # type: ignore[no-any-return]


def _now(topo: Topology) -> tuple[np.ndarray, dict[Any, _Capacity]]:
    """The free resources now (read-only) and the capacities computed on them so far:
    kept until a pod or node event changes what is free, so a burst of reviews between
    events does the node-wide work once."""
    versions = _now_versions(topo)
    cached = topo.cached(("now",), versions)
    if cached is None:
        n = topo.slots
        free = topo.alloc[:n] - topo.used[:n]
        free.setflags(write=False)
        cached = (free, {})
        topo.remember(("now",), versions, cached)
    return cached  # type: ignore[no-any-return]


def _now_versions(topo: Topology) -> tuple[int, ...]:
    return (topo.nodeset_version, topo.alloc_version, topo.used_version)


def _now_capacity(topo: Topology, known: dict[Any, _Capacity], s: _Set, free_now: np.ndarray) -> np.ndarray:
    """A set's capacity on the free resources now (read-only), from ``known`` (see
    :func:`_now`) while its eligibility is unchanged."""
    return _now_capacity_of(topo, known, s, free_now)[0]


def _now_capacity_of(topo: Topology, known: dict[Any, _Capacity], s: _Set, free_now: np.ndarray) -> _Capacity:
    """:func:`_now_capacity`, with its uniform value."""
    key = (s.key, s.versions)
    found = known.get(key)
    if found is None:
        if len(known) >= 64:    # bounded: one-off pod sets must not pile up
            known.clear()
        versions = _now_versions(topo)
        block = _block(topo, s, free_now, "now", versions)
        found = (s.capacity(free_now), None) if block is None else \
            _block_capacity_of(topo, s, block, "now", versions)
        known[key] = found
        found[0].setflags(write=False)
    return found


def _capacity_sum(cap: np.ndarray, uniform: int | None, eligible: int) -> int:
    """``int(cap.sum())``; for a uniform capacity on ``eligible`` nodes, without reading it
    (where the product fits int64, as numpy's sum does)."""
    if uniform is not None:
        total = uniform * eligible
        if total < 2**63:
            return total
    return int(cap.sum())


def _full(uniform: int | None) -> bool | None:
    """Whether a capacity is non-zero on every eligible node, when its uniform value
    tells (a uniform capacity has at least one eligible node); None: read it."""
    return None if uniform is None else uniform != 0
