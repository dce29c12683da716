"""Nodes of a :class:`policies.topology.Topology`: allocatable and used resources as
``slots x resources`` int64 matrices, labels as int32 code columns, hard taints as a
boolean matrix, and the queries node eligibility is computed with."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.config import Policy
from policies.memo import SnapshotMemo
from policies.quantity import QuantityError, parse_quantity, scheduler_units

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_BASE_RESOURCES = ("cpu", "memory", "pods")
_NO_LABELS = hash(frozenset())
DEFAULT_MAX_PODS = 110   # the kubelet's default when a node does not report ``pods``
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

log = logging.getLogger("gpugate.topology")

Units = dict[str, int]

# Node annotations in which a device-sharing scheduler's device plugin registers each device with
# its memory (MiB): HAMi's, "{uuid},{split count},{memory},{cores},{type},{numa},{healthy}:" per
# device, and Volcano vGPU's (HAMi-based), "{uuid},{split count},{memory},{type},{healthy}[,mode]:";
# in newer releases of both a JSON list of objects with "devmem". Read for the largest device a
# node has (policies.feasibility.shares).
DEVICE_REGISTERS = ("hami.io/node-nvidia-register", "volcano.sh/node-vgpu-register")
_MAX_REGISTER_CHARS = 64 * 1024


def registered_device_memory(text: Any) -> int | None:
    """The largest device memory (MiB) a device-register annotation names; None when it names no
    device or cannot be read whole (never a guess: it bounds what a pod may ask of a device)."""
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_REGISTER_CHARS:
        return None
    largest: int | None = None
    try:
        if text.lstrip().startswith("["):
            devices = json.loads(text)
            if not isinstance(devices, list):
                return None
            for device in devices:
                memory = device.get("devmem") if isinstance(device, dict) else None
                if type(memory) is not int or memory < 0:
                    return None
                largest = memory if largest is None else max(largest, memory)
            return largest
        for device in text.split(":"):
            if not device.strip():
                continue
            fields = device.split(",")
            if len(fields) < 4:
                return None
            memory = int(fields[2])
            if memory < 0:
                return None
            largest = memory if largest is None else max(largest, memory)
    except (ValueError, RecursionError):
        return None
    return largest


def units_of(values: Any) -> Units:
    """A resource list (``{cpu: "4", memory: 6Gi}``) in scheduler units; bad values skipped.

    Topology objects come from the API server, which has validated them already; a
    value that still does not parse is dropped rather than guessed.
    """
    out: Units = {}
    if not isinstance(values, Mapping):
        return out
    for name, raw in values.items():
        try:
            out[str(name)] = scheduler_units(str(name), parse_quantity(raw))
        except QuantityError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str



def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata"))
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) else "", name if isinstance(name, str) else "")


def _mapping(value: Any) -> Mapping[str, Any]:
    # a dict first: the Mapping ABC check costs ten times more, once per field of every event
    return value if isinstance(value, (dict, Mapping)) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _taints(value: Any) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, Mapping) and item.get("effect") in HARD_EFFECTS:
            out.append(Taint(str(item.get("key") or ""), str(item.get("value") or ""), str(item["effect"])))
    return tuple(out)



class NodeArrays:
    """Nodes in slots: allocatable and used resources, cordons, label code columns and
    the hard-taint matrix, with the version counters derived data is checked against."""

    def __init__(self, policy: Policy, memo: SnapshotMemo) -> None:
        self.policy = policy
        # Derived data (eligibility masks, supernodes, ...), each kept with the versions it
        # was computed from: see cached() and remember().
        self.memo = memo
        self.resources: list[str] = list(_BASE_RESOURCES)
        self.res_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        cap = 16
        self.alloc = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self.used = np.zeros((cap, len(self.resources)), dtype=np.int64)
        self.live = np.zeros(cap, dtype=bool)
        self.unschedulable = np.zeros(cap, dtype=bool)
        self.slots = 0                          # rows in use (live or freed)
        self.node_index: dict[str, int] = {}
        self.node_names: list[str | None] = []
        self._free_slots: list[int] = []
        # Per slot, hashes to tell a heartbeat from a change without keeping the dicts
        # (labels live in the code columns below; 50 labels x 10,000 nodes add up).
        self._label_hash: list[int] = []
        self._node_taints: list[tuple[Taint, ...]] = []
        self._alloc_hash: list[int | None] = []
        # label key -> int32 codes per slot (0 = absent); value tables per key
        self._label_codes: dict[str, np.ndarray] = {}
        self._label_values: dict[str, dict[str, int]] = {}
        self._label_names: dict[str, list[str]] = {}
        # distinct hard taints -> column of a bool matrix
        self.taint_index: dict[Taint, int] = {}
        self.taint_matrix = np.zeros((cap, 0), dtype=bool)
        # Version counters: derived data remembers the versions it was computed from.
        self.label_version = 0                  # any eligibility input changed
        self.nodeset_version = 0                # a node came or went (slots, names)
        self.taint_version = 0
        self.cordon_version = 0
        self.alloc_version = 0                  # a node's allocatable changed
        self.used_version = 0                   # what the pods on a node hold changed
        self._key_versions: dict[str, int] = {}  # per label key
        # device-register annotation -> slot -> the largest device's memory (DEVICE_REGISTERS)
        self.device_memory: dict[str, dict[int, int]] = {key: {} for key in DEVICE_REGISTERS}
        self.device_version = 0

    def cached(self, key: Any, versions: Any) -> Any:
        """Derived data remembered under ``key``, if computed from these ``versions``."""
        return self.memo.get(key, versions)

    def remember(self, key: Any, versions: Any, value: Any) -> None:
        """Keep derived data computed from ``versions`` (bounded: see SnapshotMemo)."""
        self.memo.put(key, versions, value)

    def _bound_requests(self, node: str) -> Iterator[tuple[int, int]]:
        """(resource column, units) of every pod bound to ``node`` (see PodUsage)."""
        return iter(())

    # -- resources ------------------------------------------------------------------
    def column(self, resource: str) -> int:
        """The column of a resource, added (rarely) when first seen."""
        index = self.res_index.get(resource)
        if index is None:
            index = len(self.resources)
            self.resources.append(resource)
            self.res_index[resource] = index
            pad = np.zeros((self.alloc.shape[0], 1), dtype=np.int64)
            self.alloc = np.hstack([self.alloc, pad])
            self.used = np.hstack([self.used, pad])
            self.alloc_version += 1
            self.used_version += 1
        return index

    @property
    def n_nodes(self) -> int:
        return len(self.node_index)

    def cluster_total(self, include_cordoned: bool = False) -> np.ndarray:
        """Allocatable summed over live (and, unless asked, schedulable) nodes. Read-only:
        cached until a node comes, goes, is cordoned or changes its allocatable."""
        key = ("cluster_total", include_cordoned)
        versions = (self.nodeset_version, self.cordon_version, self.alloc_version)
        cached = self.cached(key, versions)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        rows = self.live[: self.slots]
        if not include_cordoned:
            rows = rows & ~self.unschedulable[: self.slots]
        total = self.alloc[: self.slots][rows].sum(axis=0)
        total.setflags(write=False)
        self.remember(key, versions, total)
        return total
    # -- nodes ----------------------------------------------------------------------
    def _grow(self) -> None:
        cap = self.alloc.shape[0] * 2
        for name in ("alloc", "used", "taint_matrix"):
            old = getattr(self, name)
            new = np.zeros((cap, old.shape[1]), dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        for name in ("live", "unschedulable"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=bool)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        for key, codes in self._label_codes.items():
            new_codes = np.zeros(cap, dtype=np.int32)
            new_codes[: codes.shape[0]] = codes
            self._label_codes[key] = new_codes

    def _new_slot(self, name: str) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
            self.node_names[slot] = name
        else:
            if self.slots == self.alloc.shape[0]:
                self._grow()
            slot = self.slots
            self.slots += 1
            self.node_names.append(name)
            self._label_hash.append(_NO_LABELS)
            self._node_taints.append(())
            self._alloc_hash.append(None)
        self.node_index[name] = slot
        self.live[slot] = True
        self.label_version += 1
        self.nodeset_version += 1
        return slot

    def _set_labels(self, slot: int, labels: dict[str, str]) -> None:
        digest = hash(frozenset(labels.items()))
        if digest == self._label_hash[slot]:
            return
        versions = self._key_versions
        for key, codes in self._label_codes.items():
            if codes[slot] and key not in labels:
                codes[slot] = 0
                versions[key] = versions.get(key, 0) + 1
        for key, value in labels.items():
            found = self._label_codes.get(key)
            if found is None:
                key = sys.intern(key)
                codes = self._label_codes[key] = np.zeros(self.alloc.shape[0], dtype=np.int32)
                self._label_values[key] = {}
                self._label_names[key] = [""]
            else:
                codes = found
            table = self._label_values[key]
            code = table.get(value)
            if code is None:
                code = table[value] = len(self._label_names[key])
                self._label_names[key].append(value)
            if codes[slot] != code:
                codes[slot] = code
                versions[key] = versions.get(key, 0) + 1
        self._label_hash[slot] = digest
        self.label_version += 1

    def _set_taints(self, slot: int, taints: tuple[Taint, ...]) -> None:
        if self._node_taints[slot] == taints:
            return
        self.taint_matrix[slot, :] = False
        for taint in taints:
            col = self.taint_index.get(taint)
            if col is None:
                col = self.taint_index[taint] = self.taint_matrix.shape[1]
                pad = np.zeros((self.taint_matrix.shape[0], 1), dtype=bool)
                self.taint_matrix = np.hstack([self.taint_matrix, pad])
            self.taint_matrix[slot, col] = True
        self._node_taints[slot] = taints
        self.label_version += 1
        self.taint_version += 1

    def _set_devices(self, slot: int, annotations: Mapping[str, Any]) -> None:
        for key, by_slot in self.device_memory.items():
            found = registered_device_memory(annotations.get(key))
            if by_slot.get(slot) == found:
                continue
            if found is None:
                del by_slot[slot]
            else:
                by_slot[slot] = found
            self.device_version += 1

    def largest_registered_device(self, key: str) -> int | None:
        """The largest device memory any node registers in the annotation ``key``
        (:data:`DEVICE_REGISTERS`); None when no node does."""
        found = self.device_memory.get(key)
        return max(found.values()) if found else None

    def _apply_node(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        slot = self.node_index.get(name)
        if deleted:
            if slot is None:
                return
            del self.node_index[name]
            self.node_names[slot] = None
            self.live[slot] = False
            self.unschedulable[slot] = False
            self.alloc[slot] = 0
            self.used[slot] = 0
            self.used_version += 1
            self._set_labels(slot, {})
            self._set_taints(slot, ())
            self._set_devices(slot, {})
            self._alloc_hash[slot] = None
            self._free_slots.append(slot)
            self.label_version += 1
            self.nodeset_version += 1
            self.alloc_version += 1
            return
        meta = _mapping(obj.get("metadata"))
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        raw = status.get("allocatable")
        if raw is None:
            raw = status.get("capacity")
        raw_hash = hash(repr(raw))
        units: Units | None = None
        if slot is None or raw_hash != self._alloc_hash[slot]:
            units = units_of(raw)
            units.setdefault("pods", DEFAULT_MAX_PODS)
            too_large = sorted(r for r, v in units.items() if not _INT64_MIN <= v <= _INT64_MAX)
            if too_large:
                # all of the node or none of it: a half-applied node would skew every verdict
                log.warning("node %s left out of the topology: allocatable %s beyond 64-bit range",
                            name[:253], ", ".join(too_large)[:200])
                self._apply_node(obj, deleted=True)
                return
        if slot is None:
            slot = self._new_slot(name)
            fresh = True
        else:
            fresh = False
        self._set_labels(slot, _str_map(meta.get("labels")))
        self._set_taints(slot, _taints(spec.get("taints")))
        self._set_devices(slot, _mapping(meta.get("annotations")))
        unschedulable = spec.get("unschedulable") is True
        if bool(self.unschedulable[slot]) != unschedulable:
            self.unschedulable[slot] = unschedulable
            self.label_version += 1
            self.cordon_version += 1
        if units is not None:
            row = np.zeros(len(self.resources), dtype=np.int64)
            for r, v in units.items():
                col = self.column(r)
                if col >= row.shape[0]:
                    row = np.pad(row, (0, col + 1 - row.shape[0]))
                row[col] = v
            self.alloc[slot, :] = 0
            self.alloc[slot, : row.shape[0]] = row
            self._alloc_hash[slot] = raw_hash
            self.alloc_version += 1
        if fresh:
            self.used[slot] = 0
            for col, v in self._bound_requests(name):
                self.used[slot, col] += v
            self.used_version += 1

    # -- label and taint queries (used by policies.feasibility) --------------------------
    def label_equals(self, key: str, values: Iterable[str]) -> np.ndarray:
        """Slots whose label ``key`` has one of ``values``."""
        codes = self._label_codes.get(key)
        if codes is None:
            return np.zeros(self.slots, dtype=bool)
        table = self._label_values[key]
        wanted = [table[v] for v in values if v in table]
        if not wanted:
            return np.zeros(self.slots, dtype=bool)
        if len(wanted) == 1:
            return codes[: self.slots] == wanted[0]  # the common case: a comparison, not isin
        return np.isin(codes[: self.slots], wanted)

    def label_exists(self, key: str) -> np.ndarray:
        codes = self._label_codes.get(key)
        if codes is None:
            return np.zeros(self.slots, dtype=bool)
        return codes[: self.slots] != 0

    def label_numbers(self, key: str) -> np.ndarray:
        """The label's value as an integer per slot (NaN when absent or not an integer)."""
        codes = self._label_codes.get(key)
        if codes is None:
            return np.full(self.slots, np.nan)
        table = np.array([_as_int(v) for v in self._label_names[key]], dtype=float)
        return table[codes[: self.slots]]  # type: ignore[no-any-return]

    def name_in(self, names: Iterable[str]) -> np.ndarray:
        mask = np.zeros(self.slots, dtype=bool)
        for name in names:
            slot = self.node_index.get(name)
            if slot is not None:
                mask[slot] = True
        return mask

    def node_labels(self, slot: int) -> dict[str, str]:
        """A node's labels, read back from the code columns."""
        return {key: self._label_names[key][int(codes[slot])]
                for key, codes in self._label_codes.items() if codes[slot]}

    def versions(self, label_keys: Iterable[str] = ()) -> tuple[int, ...]:
        """The versions node eligibility depends on: node set, taints, cordons, and the
        given label keys."""
        return (self.nodeset_version, self.taint_version, self.cordon_version,
                *[self._key_versions.get(k, 0) for k in label_keys])



def _as_int(text: str) -> float:
    try:
        return float(int(text))
    except ValueError:
        return float("nan")

