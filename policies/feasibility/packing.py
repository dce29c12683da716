"""Placing pods on nodes, and proving that they cannot be placed.

Witnesses come from a greedy first-fit packer (:func:`_place`), so ``fits`` is always
backed by a real placement. Every ``never`` comes from a *necessary* condition
(:func:`_necessary`): a pod set fits no node; the eligible nodes cannot hold the pod
set's pods even empty; the gang's total exceeds what the nodes it could use offer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from policies.quantity import format_quantity
from policies.topology import Topology

from .capacity import _Block, _block, _nonzero, _now, _now_versions, _Set
from .nodes import _Eligibility
from .outcomes import _fmt1, fmt


class _Caps:
    """Each distinct set's capacity on one free matrix, kept current while pods are
    placed on it. Sets with the same key (eligibility and request) share one array, and
    a placement recomputes only the rows it touched, not every node.

    ``rows``: the topology slots of ``free``'s rows when ``free`` is a part of the
    cluster (one supernode). ``known``: capacities already computed on ``free`` as it
    is; they are copied before the first write, so the caller's arrays stay valid.
    ``free_owned``: False when ``free`` is the caller's (the free resources now, shared
    by every review): it is copied before the first write, so a placement found before
    (:func:`_placement_key`) never pays for copying the whole matrix."""

    def __init__(self, sets: Sequence[_Set], free: np.ndarray, known: Mapping[Any, np.ndarray] | None = None,
                 rows: np.ndarray | None = None, free_owned: bool = True) -> None:
        self.free = free
        self.free_owned = free_owned
        self.rows = rows
        self.by_key: dict[Any, _Set] = {}
        for s in sets:
            self.by_key.setdefault(s.key, s)
        self.caps: dict[Any, np.ndarray] = dict(known) if known else {}
        self.owned: set[Any] = set()
        self._masks: dict[Any, np.ndarray] = {}

    def _mask(self, key: Any) -> np.ndarray | None:
        if self.rows is None:
            return None
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = self.by_key[key].elig.mask[self.rows]
        return mask

    def get(self, s: _Set) -> np.ndarray:
        """The set's capacity per row of ``free`` as it is now (do not write to it)."""
        cap = self.caps.get(s.key)
        if cap is None:
            cap = self.caps[s.key] = s.capacity(self.free, self._mask(s.key))
            self.owned.add(s.key)
        return cap

    def writable_free(self) -> np.ndarray:
        """``free``, copied first if it is still the caller's."""
        if not self.free_owned:
            self.free = self.free.copy()
            self.free_owned = True
        return self.free

    def adopt(self, trial: _Caps) -> None:
        """Take over a trial's free resources and capacities (the trial is dropped)."""
        self.free, self.free_owned = trial.free, trial.free_owned
        self.caps, self.owned = trial.caps, trial.owned

    def place(self, s: _Set, rows: np.ndarray, take: np.ndarray) -> None:
        """``take[j]`` pods of ``s`` onto row ``rows[j]`` (distinct rows)."""
        if not s.cols.size:
            self.refresh(rows)
            return
        self.writable_free()[rows[:, None], s.cols] -= take[:, None] * s.amounts[None, :]
        own = self.caps.get(s.key)
        if own is None:
            self.refresh(rows)
            return
        # The set's own capacity drops by exactly what it took: each of its columns lost
        # ``take`` times the amount its quotient is taken by (and take <= capacity).
        if s.key not in self.owned:
            own = self.caps[s.key] = own.copy()
            self.owned.add(s.key)
        own[rows] -= take
        self.refresh(rows, skip=s.key)

    def refresh(self, rows: np.ndarray, skip: Any = None) -> None:
        """Recompute every known capacity (but ``skip``'s) on ``rows`` after ``free``
        changed there."""
        if not rows.size or not any(key != skip for key in self.caps):
            return
        local = self.free[rows]
        for key, cap in list(self.caps.items()):
            if key == skip:
                continue
            if key not in self.owned:
                cap = self.caps[key] = cap.copy()
                self.owned.add(key)
            mask = self.by_key[key].elig.mask if self.rows is None else self._mask(key)
            assert mask is not None
            cap[rows] = self.by_key[key].capacity(local, mask[rows])


def _greedy(caps: _Caps, sets: list[_Set], counts: list[int], order: Iterable[int],
            node_order: str = "index") -> list[np.ndarray] | None:
    """Greedy placement of ``counts[i]`` pods of each set, in ``order``; per-set node
    counts, or None. Nodes are filled in slot order (first fit), roomiest first
    (``most``) or tightest first (``least``, best fit). ``caps.free`` is updated in place."""
    placed: list[np.ndarray] = list(np.zeros((len(sets), caps.free.shape[0]), dtype=np.int64))
    for i in order:
        want = counts[i]
        if want <= 0:
            continue
        s = sets[i]
        cap = caps.get(s)
        if int(cap.sum()) < want:
            return None
        idx = _nonzero(cap)
        if node_order == "most":
            idx = idx[np.argsort(-cap[idx], kind="stable")]
        elif node_order == "least":
            idx = idx[np.argsort(cap[idx], kind="stable")]
        sorted_cap = cap[idx]
        cum = np.cumsum(sorted_cap)
        last = int(np.searchsorted(cum, want))
        take = sorted_cap[: last + 1].copy()
        take[-1] -= int(cum[last]) - want
        rows = idx[: last + 1]
        placed[i][rows] += take
        caps.place(s, rows, take)
    return placed


def _place(caps: _Caps, sets: list[_Set], counts: list[int]) -> list[np.ndarray] | None:
    """A few greedy orders; the first that places everything wins. ``caps`` is updated
    (free resources and capacities) only by the winning order. Sets of one key (the same
    eligibility and request: a JobSet's 64 replicated jobs of one template) are placed as one
    set of their pods together, then shared out: their pods cannot be told apart."""
    if not any(c > 0 for c in counts):
        return list(np.zeros((len(sets), caps.free.shape[0]), dtype=np.int64))
    members: dict[Any, list[int]] = {}
    for i, s in enumerate(sets):
        members.setdefault(s.key, []).append(i)
    if len(members) < len(sets):
        groups = list(members.values())
        merged = _place(caps, [sets[g[0]] for g in groups], [sum(counts[i] for i in g) for g in groups])
        return None if merged is None else _share_out(merged, groups, counts, len(sets))
    scarcity = []
    for i, s in enumerate(sets):
        total = int(caps.get(s).sum())
        scarcity.append(total / counts[i] if counts[i] else float("inf"))
    by_scarcity = sorted(range(len(sets)), key=lambda i: scarcity[i])
    tries = [(by_scarcity, "index"), (by_scarcity[::-1], "index"), (by_scarcity, "least"),
             (by_scarcity[::-1], "least"), (by_scarcity, "most")]
    for order, node_order in tries:
        trial = _Caps(sets, caps.free.copy(), caps.caps)
        placed = _greedy(trial, sets, counts, order, node_order)
        if placed is not None:
            caps.adopt(trial)
            return placed
    return None


def _share_out(merged: list[np.ndarray], groups: list[list[int]], counts: list[int],
               size: int) -> list[np.ndarray]:
    """Per set, the nodes of its ``counts`` pods, from each group's nodes (``merged``): the
    group's members take its pods in turn, node after node."""
    placed = list(np.zeros((size, merged[0].shape[0] if merged else 0), dtype=np.int64))
    for nodes, group in zip(merged, groups, strict=True):
        if len(group) == 1:
            placed[group[0]] = nodes
            continue
        rows = _nonzero(nodes)
        room = nodes[rows].tolist()
        at = 0
        for i in group:
            want = counts[i]
            while want > 0:
                take = min(want, room[at])
                placed[i][rows[at]] += take
                room[at] -= take
                want -= take
                if room[at] == 0:
                    at += 1
    return placed


def _place_flexible(caps: _Caps, sets: list[_Set], need: int) -> list[np.ndarray] | None:
    """Any ``need`` pods of the sets (a flexible gang): take from the roomiest sets first."""
    for roomiest_first in (True, False):
        trial = _Caps(sets, caps.free.copy(), caps.caps)
        left = need
        rooms = [int(trial.get(s).sum()) for s in sets]
        order = sorted(range(len(sets)), key=lambda i: -rooms[i] if roomiest_first else rooms[i])
        placed = [np.zeros(caps.free.shape[0], dtype=np.int64) for _ in sets]
        for i in order:
            if left == 0:
                break
            take = min(left, sets[i].demand.replicas, int(trial.get(sets[i]).sum()))
            if take <= 0:
                continue
            counts = [0] * len(sets)
            counts[i] = take
            got = _greedy(trial, sets, counts, [i])
            if got is None:
                continue
            placed[i] += got[i]
            left -= take
        if left == 0:
            caps.adopt(trial)
            return placed
    return None


# A placement per set as (slots, pods on each): a few dozen numbers, not arrays over all nodes.
_Sparse = list[tuple[np.ndarray, np.ndarray]]


def _sparse(placed: list[np.ndarray]) -> _Sparse:
    """Per-set pods per node (arrays over all slots) as (slots, pods) where not 0."""
    return [(hit, array[hit]) for array in placed for hit in (_nonzero(array),)]


class _KeptPlacement(list[tuple[np.ndarray, np.ndarray]]):
    """A placement kept on the topology (see :func:`_placement_key`), shared by every job
    shape it is the answer for, with the witnesses worked out from it by pod set names:
    the entry is kept against the node set's version, so its slots name the same nodes."""

    def __init__(self, placed: _Sparse) -> None:
        super().__init__(placed)
        self.witnesses: dict[tuple[str, ...], dict[str, dict[str, int]]] = {}


def _witness(topo: Topology, sets: list[_Set], placed: _Sparse) -> dict[str, dict[str, int]]:
    """Pod set name -> node name -> pods, the caller's own."""
    if not isinstance(placed, _KeptPlacement):
        return _witness_of(topo, sets, placed)
    names = tuple(s.demand.name for s in sets)
    kept = placed.witnesses.get(names)
    if kept is None:
        if len(placed.witnesses) >= 16:     # bounded: pod set names come from the jobs
            placed.witnesses.clear()
        kept = placed.witnesses[names] = _witness_of(topo, sets, placed)
    return {name: nodes.copy() for name, nodes in kept.items()}


def _witness_of(topo: Topology, sets: list[_Set], placed: _Sparse) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    names = topo.node_names
    for s, (hit, pods) in zip(sets, placed, strict=True):
        slots, counts = hit.tolist(), pods.tolist()
        placed_on = [names[slot] for slot in slots]
        nodes = out.get(s.demand.name)
        if nodes is None and None not in placed_on:
            # A slot holds one node, so the names are distinct: no counts to add up.
            out[s.demand.name] = dict(zip(placed_on, counts, strict=True))  # type: ignore[arg-type]
            continue
        nodes = out.setdefault(s.demand.name, {})
        for name, count in zip(placed_on, counts, strict=True):
            if name is not None:
                nodes[name] = nodes.get(name, 0) + count
    return out


# -- necessary conditions ----------------------------------------------------------------


def _exclusions(e: _Eligibility) -> str:
    """Why nodes are not eligible: ``1 cordoned; 8 with taints it does not tolerate (...)``."""
    reasons = []
    if e.cordoned:
        reasons.append(f"{e.cordoned} cordoned")
    if e.tainted:
        taints = f" ({', '.join(e.blocking_taints[:3])})" if e.blocking_taints else ""
        reasons.append(f"{e.tainted} with taints it does not tolerate{taints}")
    if e.unselected:
        reasons.append(f"{e.unselected} not matching its nodeSelector/affinity")
    return "; ".join(reasons)


def _why_no_node(topo: Topology, s: _Set, alloc: np.ndarray) -> str:
    """Why no node, even empty, takes one pod of ``s``: the failing number first."""
    d = s.demand
    e = s.elig
    who = f"pod set {d.name}"
    if s.missing:
        return f"no node offers {', '.join(s.missing)} ({who} asks for it)"
    eligible = int(e.mask.sum())
    excluded = _exclusions(e)
    if eligible == 0:
        return f"0 of {topo.n_nodes} nodes eligible for {who} ({excluded or 'no nodes'})"
    also = f"; not eligible: {excluded}" if excluded else ""
    rows = alloc[e.mask][:, s.cols] if s.cols.size else np.zeros((eligible, 0), dtype=np.int64)
    short = []
    for j, col in enumerate(s.cols):
        best = int(rows[:, j].max())
        if best < s.amounts[j]:
            name = topo.resources[col]
            short.append(f"{name} {format_quantity(name, int(s.amounts[j]))} asked per pod, the largest "
                         f"eligible node offers {format_quantity(name, best)}")
    if short:
        return f"{'; '.join(short)} ({who}, {eligible} eligible nodes{also}), even when empty"
    # every resource fits somewhere, never all on one node: show the closest node
    ratio = (rows / s.amounts[None, :]).min(axis=1)
    best_row = int(np.argmax(ratio))
    slot = int(np.flatnonzero(e.mask)[best_row])
    offer = ", ".join(_fmt1(topo.resources[c], int(alloc[slot, c])) for c in s.cols
                      if topo.resources[c] != "pods")
    return (f"no eligible node has all of {fmt(d.request)} per pod at once, even when empty ({who}; "
            f"closest: {topo.node_names[slot]} with {offer}{also})")


def _necessary(topo: Topology, sets: list[_Set], counts: list[int], free: np.ndarray,
               flexible_min: int, what: str, caps: list[np.ndarray],
               sums: list[int], full: Sequence[bool | None] | None = None) -> tuple[str, str] | None:
    """(reason, JSON Pointer) why no placement of ``counts`` can exist on ``free`` (each
    set's capacity there: ``caps``, summed: ``sums``; ``full``: see :func:`_offers`), or
    None. Every check here is a necessary condition, so a returned reason is a proof."""
    if flexible_min:
        most = sum(sums)
        if most < flexible_min:
            return (f"the gang needs {flexible_min} pods; the eligible nodes hold at most {most} "
                    f"of them {what}"), ""
        return None
    for s, most, want in zip(sets, sums, counts, strict=True):
        if want <= 0:
            continue
        if most == 0:               # capacities are never negative
            if what == "even when empty":
                return _why_no_node(topo, s, free), s.demand.path
            return (f"0 pods of pod set {s.demand.name} ({fmt(s.request)} each) fit the free "
                    f"resources {what}", s.demand.path)
        if most < want:
            return (f"{want} pods of pod set {s.demand.name} needed, its {s.elig.count} eligible nodes "
                    f"hold at most {most} {what} ({fmt(s.request)} each)", s.demand.path)
    # Totals: a resource can only come from nodes where some pod using it fits.
    total_cols: dict[int, int] = {}
    for s, want in zip(sets, counts, strict=True):
        if want <= 0:
            continue
        for col, amount in zip(s.col_list, s.amount_list, strict=True):
            total_cols[col] = total_cols.get(col, 0) + want * amount
    active = [(s, cap) for s, cap, want in zip(sets, caps, counts, strict=True) if want > 0]
    active_full = None if full is None else [f for f, want in zip(full, counts, strict=True) if want > 0]
    offers = _offers(topo, active, free, empty=what == "even when empty", full=active_full)
    for col, needed in total_cols.items():
        offered, nodes = offers[col]
        if needed > offered:
            resource = topo.resources[col]
            return (f"the gang needs {_fmt1(resource, needed)} in total; the "
                    f"{nodes} nodes its pods fit offer {format_quantity(resource, offered)} "
                    f"{what}"), ""
    return None


def _offers(topo: Topology, active: list[tuple[_Set, np.ndarray]], free: np.ndarray,
            empty: bool, full: Sequence[bool | None] | None = None) -> Mapping[int, tuple[int, int]]:
    """Per resource column the sets request: (what ``free`` offers on the nodes where a
    pod of some set requesting it fits, how many such nodes). ``empty``: ``free`` is the
    allocatable, so the answer keeps until the sets' eligibility or allocatable change;
    else it is the free resources now (:func:`_now`). ``full``: per active set, whether
    its capacity is non-zero on every eligible node, where known without reading it."""
    whole = _whole_block(topo, active, empty, full)
    if whole is not None:
        # Every set's pods fit every node of one eligibility: the offers are the block's
        # sums, whatever the shape, so not worth a cache entry per shape.
        totals, nodes = whole.total.tolist(), int(whole.rows.size)
        return {col: (totals[col], nodes) for s, _ in active for col in s.col_list}
    cache = empty
    key = ("offers", tuple(s.key for s, _ in active))
    versions = (tuple(s.versions for s, _ in active), topo.alloc_version)
    if cache:
        cached = topo.cached(key, versions)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
    users: dict[int, list[int]] = {}          # column -> the active sets requesting it
    for j, (s, _) in enumerate(active):
        for col in s.col_list:
            users.setdefault(col, []).append(j)
    out: dict[int, tuple[int, int]] = {}
    by_users: dict[frozenset[Any], np.ndarray] = {}   # columns mostly share their users
    blocks: dict[frozenset[Any], _Block | None] = {}
    for col, js in users.items():
        ids = frozenset(active[j][0].key for j in js)
        if ids not in blocks:
            blocks[ids] = _whole_block(topo, [active[j] for j in js], empty)
        block = blocks[ids]
        if block is not None:
            out[col] = (int(block.total[col]), int(block.rows.size))
            continue
        rows = by_users.get(ids)
        if rows is None:
            usable = np.zeros(free.shape[0], dtype=bool)
            for j in js:
                usable |= active[j][1] > 0
            rows = by_users[ids] = np.flatnonzero(usable)
        out[col] = (int(np.maximum(free[rows, col], 0).sum()), int(rows.size))
    if cache:
        topo.remember(key, versions, MappingProxyType(out))  # read-only; a few numbers, no arrays
    return out


def _whole_block(topo: Topology, users: list[tuple[_Set, np.ndarray]], empty: bool,
                 full: Sequence[bool | None] | None = None) -> _Block | None:
    """When the ``users`` (sets with their capacities) share one eligibility and a pod of
    each fits every eligible node, the nodes where some pod fits are exactly the eligible
    ones: their block (whose sums are the offers, whatever the shape). Else None.
    ``full``: see :func:`_offers`."""
    if not users:
        return None
    first = users[0][0]
    if any(s.demand.signature != first.demand.signature or s.versions != first.versions for s, _ in users):
        return None
    for j, (s, cap) in enumerate(users):
        known = None if full is None else full[j]
        if not (known if known is not None else int(np.count_nonzero(cap)) == s.elig.count):
            return None
    if empty:
        return _block(topo, first, topo.alloc[: topo.slots], "empty", (topo.alloc_version,), build=False)
    return _block(topo, first, _now(topo)[0], "now", _now_versions(topo), build=False)
