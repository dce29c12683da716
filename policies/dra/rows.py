"""Every device of the ResourceSlices a topology holds, as rows of numpy columns.

A slice's devices are written once, when the slice's event is applied (a few microseconds per
device), so that nothing a feasibility check does later reads a slice in Python again: which
devices count (the newest generation of each pool), where they are (a node, or a reach spec:
all nodes or a node selector), whether a ResourceClaim's allocation holds them, and each
attribute and capacity as an int32 code column (0: the device has none), so that the devices
a selector cannot tell apart are found with numpy and the selector is evaluated once for each
distinct kind (:meth:`DeviceRows.distinct`). One slice changing rewrites its own rows only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .objects import Device, Slice

__all__ = ["DeviceKey", "DeviceRows"]

DeviceKey = tuple[str, str, str]       # (driver, pool, device): what an allocation names


def _grown(array: np.ndarray, size: int, fill: Any = 0) -> np.ndarray:
    if array.shape[0] >= size:
        return array
    new = np.full(max(size, 2 * array.shape[0]), fill, dtype=array.dtype)
    new[: array.shape[0]] = array
    return new


class _Interned:
    """Values to small ints (from ``first``), in order of first sight."""

    def __init__(self, first: int = 0) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []
        self.first = first

    def __call__(self, value: Any) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values) + self.first
            self.values.append(value)
        return found


class DeviceRows:
    """Devices in rows (freed rows are reused), slices by id, with what allocations hold."""

    def __init__(self) -> None:
        cap = 64
        self.size = 0                                   # rows in use (alive or freed)
        self.alive = np.zeros(cap, dtype=bool)
        self.slice_of = np.zeros(cap, dtype=np.int32)
        self.node_of = np.zeros(cap, dtype=np.int32)    # node name id; 0: not node-local
        self.reach_of = np.full(cap, -1, dtype=np.int32)  # reach spec id; -1: node-local
        self.driver_of = np.zeros(cap, dtype=np.int32)
        self.multiple = np.zeros(cap, dtype=bool)       # allowMultipleAllocations
        self.held = np.zeros(cap, dtype=bool)           # some ResourceClaim's allocation holds it
        self.devices: list[Device | None] = []          # per row (to evaluate selectors on)
        self.keys: list[DeviceKey | None] = []
        # ("attribute" | "capacity", name as the slice writes it) -> int32 code per row
        self.columns: dict[tuple[str, str], np.ndarray] = {}
        self._codes: dict[tuple[str, str], _Interned] = {}
        self._free_rows: list[int] = []
        self._rows_of_key: dict[DeviceKey, list[int]] = {}
        self._holders: dict[DeviceKey, int] = {}        # claims holding each device
        # slices by id (freed ids are reused)
        self.slice_ids: dict[str, int] = {}
        self.slice_rows: dict[int, np.ndarray] = {}
        self.slice_alive = np.zeros(cap, dtype=bool)
        self.slice_pool = np.zeros(cap, dtype=np.int32)
        self.slice_generation = np.zeros(cap, dtype=np.int64)
        self.slice_count = np.zeros(cap, dtype=np.int64)   # resourceSliceCount announced
        self.slice_node = np.zeros(cap, dtype=np.int32)    # spec.nodeName's id (0: none)
        self._free_slices: list[int] = []
        self.pools = _Interned()                        # (driver, pool)
        self.node_names = _Interned(first=1)            # 0: no node
        self.reach_specs = _Interned()                  # (all nodes, node selector) by repr
        self.reach_values: list[tuple[bool, Any]] = []
        self.drivers = _Interned()

    # -- writing --------------------------------------------------------------------
    def put_slice(self, name: str, found: Slice | None) -> None:
        """Replace the rows of slice ``name`` with those of ``found`` (None: remove it)."""
        sid = self.slice_ids.pop(name, None)
        if sid is not None:
            for row in self.slice_rows.pop(sid).tolist():
                self._free_row(row)
            self.slice_alive[sid] = False
            self._free_slices.append(sid)
        if found is None:
            return
        sid = self._free_slices.pop() if self._free_slices else len(self.slice_ids) + len(self._free_slices)
        for array in ("slice_alive", "slice_pool", "slice_generation", "slice_count", "slice_node"):
            setattr(self, array, _grown(getattr(self, array), sid + 1))
        self.slice_ids[name] = sid
        self.slice_alive[sid] = True
        self.slice_pool[sid] = self.pools((found.driver, found.pool))
        self.slice_generation[sid] = found.generation
        self.slice_count[sid] = found.slice_count
        self.slice_node[sid] = self.node_names(found.node_name) if found.node_name else 0
        driver = self.drivers(found.driver)
        rows = [self._put_device(sid, driver, found, device) for device in found.devices]
        self.slice_rows[sid] = np.array(rows, dtype=np.int64)

    def _new_row(self) -> int:
        if self._free_rows:
            return self._free_rows.pop()
        row = self.size
        self.size += 1
        if row >= self.alive.shape[0]:
            for array in ("alive", "slice_of", "node_of", "driver_of", "multiple", "held"):
                setattr(self, array, _grown(getattr(self, array), row + 1))
            self.reach_of = _grown(self.reach_of, row + 1, -1)
            for column, codes in self.columns.items():
                self.columns[column] = _grown(codes, row + 1)
        self.devices.append(None)
        self.keys.append(None)
        return row

    def _put_device(self, sid: int, driver: int, found: Slice, device: Device) -> int:
        row = self._new_row()
        node, selector, everywhere = (device.node_name, device.node_selector, device.all_nodes) \
            if found.per_device else (found.node_name, found.node_selector, found.all_nodes)
        self.alive[row] = True
        self.slice_of[row] = sid
        self.driver_of[row] = driver
        self.multiple[row] = device.multiple
        if node:
            self.node_of[row] = self.node_names(node)
            self.reach_of[row] = -1
        else:
            self.node_of[row] = 0
            spec = (True, None) if everywhere or selector is None else (False, selector)
            spec_id = self.reach_specs(repr(spec))
            if spec_id == len(self.reach_values):
                self.reach_values.append(spec)
            self.reach_of[row] = spec_id
        for kind, values in (("attribute", device.attributes), ("capacity", device.capacity)):
            for attr, value in values:
                column = (kind, attr)
                codes = self.columns.get(column)
                if codes is None:
                    codes = self.columns[column] = np.zeros(self.alive.shape[0], dtype=np.int32)
                    self._codes[column] = _Interned(first=1)
                # typed: True and 1 are one dict key otherwise
                codes[row] = self._codes[column]((type(value).__name__, value))
        key = (device.driver, device.pool, device.name)
        self.devices[row] = device
        self.keys[row] = key
        self._rows_of_key.setdefault(key, []).append(row)
        self.held[row] = self._holders.get(key, 0) > 0
        return row

    def _free_row(self, row: int) -> None:
        key = self.keys[row]
        if key is not None:
            rows = self._rows_of_key[key]
            rows.remove(row)
            if not rows:
                del self._rows_of_key[key]
        self.alive[row] = False
        self.held[row] = False
        for codes in self.columns.values():
            codes[row] = 0
        self.devices[row] = None
        self.keys[row] = None
        self._free_rows.append(row)

    def hold(self, keys: Iterable[DeviceKey], change: int) -> None:
        """A claim's allocation came (``change`` 1) or went (-1): the rows of the devices
        it names are held while any claim holds them."""
        for key in keys:
            count = self._holders.get(key, 0) + change
            if count > 0:
                self._holders[key] = count
            else:
                self._holders.pop(key, None)
            for row in self._rows_of_key.get(key, ()):
                self.held[row] = count > 0

    # -- reading --------------------------------------------------------------------
    def current_slices(self) -> np.ndarray:
        """The ids of the slices that count: alive, of the newest generation of their pool."""
        alive = np.flatnonzero(self.slice_alive)
        pool_of = self.slice_pool[alive]
        newest = np.full(len(self.pools.values), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(newest, pool_of, self.slice_generation[alive])
        return alive[self.slice_generation[alive] == newest[pool_of]]  # type: ignore[no-any-return]

    def current(self) -> np.ndarray:
        """The rows that count: those of :meth:`current_slices`."""
        counted = np.zeros(self.slice_alive.shape[0], dtype=bool)
        counted[self.current_slices()] = True
        n = self.size
        return np.flatnonzero(self.alive[:n] & counted[self.slice_of[:n]])

    def incomplete_pools(self) -> np.ndarray:
        """Per pool id, whether its newest generation has fewer slices than it announces."""
        current = self.current_slices()
        pools = len(self.pools.values)
        seen = np.bincount(self.slice_pool[current], minlength=pools)
        announced = np.zeros(pools, dtype=np.int64)
        np.maximum.at(announced, self.slice_pool[current], self.slice_count[current])
        return seen < announced  # type: ignore[no-any-return]

    def column_names(self, reads: frozenset[str] | None) -> list[tuple[str, str]]:
        """The columns whose name (its part after a domain) is in ``reads`` (all when None)."""
        if reads is None:
            return list(self.columns)
        return [c for c in self.columns if c[1].rpartition("/")[2] in reads]

    def attribute_values(self, rows: np.ndarray, qualified: str) -> np.ndarray:
        """Per row, a code of its value of the fully qualified attribute ``qualified`` as a
        constraint reads it (-1: the device has none): the name as written, else, for a device
        of the driver the domain names, the name without its domain (upstream's
        ``lookupAttribute``). Equal codes are equal values of one type."""
        out = np.full(len(rows), -1, dtype=np.int64)
        full = self.columns.get(("attribute", qualified))
        domain, slash, short = qualified.partition("/")
        local = self.columns.get(("attribute", short)) if slash and domain in self.drivers.ids else None
        ids: dict[Any, int] = {}

        def unified(column: tuple[str, str], codes: np.ndarray) -> np.ndarray:
            # one Python step per distinct value of the column (not per device)
            values = self._codes[column].values
            return np.array([-1, *(ids.setdefault(v, len(ids)) for v in values)], dtype=np.int64)[codes]

        if local is not None:
            ours = self.driver_of[rows] == self.drivers.ids[domain]
            out = np.where(ours, unified(("attribute", short), local[rows]), out)
        if full is not None:
            codes = full[rows]
            out = np.where(codes > 0, unified(("attribute", qualified), codes), out)
        return out

    def distinct(self, rows: np.ndarray, columns: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """(first row position of each distinct kind, per row its kind): rows that agree on the
        driver, allowMultipleAllocations and ``columns`` are one kind."""
        parts = [self.driver_of[rows], self.multiple[rows].astype(np.int32),
                 *(self.columns[c][rows] for c in columns)]
        key = np.zeros(len(rows), dtype=np.int64)
        span = 1
        for part in parts:
            width = int(part.max()) + 1 if len(part) else 1
            if span * width >= 2**62:       # re-rank what is combined so far: it cannot overflow
                _, key = np.unique(key, return_inverse=True)
                key = key.astype(np.int64)
                span = int(key.max()) + 1 if len(key) else 1
            key = key * width + part
            span *= width
        _, first, kinds = np.unique(key, return_index=True, return_inverse=True)
        return first, kinds.reshape(-1)
