"""Every value gpugate derives and keeps, in one place: three lifetimes and one switch.

A check must give the same answer whether or not anything was remembered; memoisation
only saves the work of deriving a value again. So every store of derived values is made
here, and all of them obey one switch: with ``GPUGATE_MEMO=off`` in the environment (or
inside :func:`disabled`) no store keeps anything and every value is derived afresh.
``tests/test_memo_switch.py`` runs the verdicts of the rule examples, the corpus and the
feasibility fixtures both ways and compares them.

The three lifetimes:

* **per review or file** (:class:`Scratch`): a plain mapping that lives on one workload
  (``Workload.memo``, ``PodSet.memo``) or one loaded policy (``Policy.memo``) and goes with
  it. Nothing outlives the object it was derived from. (What an evaluation works out once
  for several rules, ``Context.answers``, is the evaluation's state, not a memo.)
* **per snapshot version** (:class:`SnapshotMemo`, :class:`StampedMemo`): values derived
  from a cluster snapshot, each kept with the version counters it was computed from; a
  lookup with other versions misses. ``Topology.cached``/``remember`` (eligibility masks,
  capacity blocks, queue facts) and the topology's memo of feasibility outcomes. Bounded in
  entries (and bytes: arrays of 10,000 nodes are large).
* **per process** (:func:`process_cache` and :class:`ContentMemo`): pure functions of
  their arguments (quantities, schemas, JSON Pointers) and facts of a pod spec keyed by
  its exact content (``PodSet.facts``, ``PodSet.blind_facts``), fit questions, resolved
  YAML tags. Bounded; :func:`inventory` lists them.

A new cache goes here (or is made with the classes here) and earns its keep in a
benchmark of ``bench/``; docs/architecture.md says how.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = ["enabled", "set_enabled", "disabled", "Scratch", "SnapshotMemo", "StampedMemo", "ContentMemo",
           "process_cache", "inventory", "clear_all"]

P = ParamSpec("P")
R = TypeVar("R")

_enabled = os.environ.get("GPUGATE_MEMO", "on").strip().lower() not in ("off", "0", "false", "no")


def enabled() -> bool:
    """Whether stores keep what they are given (``GPUGATE_MEMO=off`` turns them off)."""
    return _enabled


def set_enabled(on: bool) -> None:
    """Turn all memoisation on or off for this process; every store is emptied."""
    global _enabled
    _enabled = bool(on)
    for store in list(_CONTENT_MEMOS):
        store._switch(_enabled)
    clear_all()


@contextmanager
def disabled() -> Iterator[None]:
    """Within the block nothing is remembered and nothing remembered before is used."""
    before = _enabled
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(before)


_PROCESS_STORES: list[tuple[str, Callable[[], int], Callable[[], None]]] = []


def _register(name: str, size: Callable[[], int], clear: Callable[[], None]) -> None:
    _PROCESS_STORES.append((name, size, clear))


def inventory() -> list[tuple[str, int]]:
    """(name, entries held) of every per-process store: what this process remembers."""
    return [(name, size()) for name, size, _ in _PROCESS_STORES]


def clear_all() -> None:
    """Empty every per-process store (snapshot memos are emptied by their topology)."""
    for _, _, clear in _PROCESS_STORES:
        clear()
    for memo in list(_SNAPSHOT_MEMOS):
        memo.clear()


class Scratch(dict[Any, Any]):
    """A per-review, per-workload or per-policy store: a dict that keeps nothing when
    memoisation is off (``get`` then always misses, so the value is derived again)."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if _enabled:
            dict.__setitem__(self, key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if _enabled:
            return dict.setdefault(self, key, default)
        return default


def process_cache(maxsize: int, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``functools.lru_cache(maxsize)`` that obeys the switch and is listed in :func:`inventory`.
    For pure functions of hashable arguments only."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if _enabled:
                return cached(*args, **kwargs)  # type: ignore[arg-type]
            return fn(*args, **kwargs)

        _register(name or f"{fn.__module__}.{fn.__qualname__}",
                  lambda: cached.cache_info().currsize, cached.cache_clear)
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return call

    return wrap


class ContentMemo:
    """A per-process store keyed by content (bytes or other hashable keys), oldest out
    first past ``maxsize`` entries. ``get`` gives None when memoisation is off; while it is
    on, ``get`` is the dict's own (stores on hot paths, such as the YAML resolver's, are
    read once per scalar)."""

    def __init__(self, name: str, maxsize: int) -> None:
        self.name = name
        self.maxsize = maxsize
        self._data: dict[Any, Any] = {}
        self.get: Callable[[Any], Any] = self._data.get if _enabled else _missing
        _register(name, lambda: len(self._data), self._data.clear)
        _CONTENT_MEMOS.add(self)

    def _switch(self, on: bool) -> None:
        self.get = self._data.get if on else _missing

    def put(self, key: Any, value: Any) -> Any:
        """Keep ``value`` under ``key`` (evicting the oldest entry when full); returns it."""
        if _enabled:
            if key not in self._data and len(self._data) >= self.maxsize:
                self._data.pop(next(iter(self._data)), None)
            self._data[key] = value
        return value

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


def _missing(key: Any) -> None:
    return None


_CONTENT_MEMOS: weakref.WeakSet[ContentMemo] = weakref.WeakSet()


_SNAPSHOT_MEMOS: weakref.WeakSet[SnapshotMemo] = weakref.WeakSet()  # emptied by clear_all()


def _nbytes(value: Any) -> int:
    """Roughly what a kept value holds: its arrays' bytes, a little for anything else."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (tuple, list)):
        return 64 + sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return 64 + sum(_nbytes(v) for v in value.values())
    return 64


class SnapshotMemo:
    """Values derived from one cluster snapshot, each kept with the versions it was computed
    from; a lookup with other versions misses. Least recently used out first, bounded in
    entries and bytes: jobs of ever new shapes each leave per-node arrays behind, which
    must not grow the server's memory."""

    def __init__(self, max_entries: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: dict[Any, tuple[Any, Any, int]] = {}   # key -> (versions, value, bytes)
        self.bytes = 0

    def get(self, key: Any, versions: Any) -> Any:
        """The value kept under ``key`` if computed from these ``versions``, else None."""
        entry = self.entries.get(key)
        if entry is not None and entry[0] == versions:
            # A hit moves the entry to the back, so data every review reads is not evicted
            # by a stream of one-off job shapes.
            self.entries[key] = self.entries.pop(key)
            return entry[1]
        return None

    def put(self, key: Any, versions: Any, value: Any) -> None:
        if not _enabled:
            return
        _SNAPSHOT_MEMOS.add(self)
        size = _nbytes(value)
        old = self.entries.pop(key, None)
        if old is not None:
            self.bytes -= old[2]
        while self.entries and (len(self.entries) >= self.max_entries or self.bytes + size > self.max_bytes):
            self.bytes -= self.entries.pop(next(iter(self.entries)))[2]
        self.entries[key] = (versions, value, size)
        self.bytes += size

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0


class StampedMemo:
    """Answers kept per key with the versions they were computed from, and the stamp at
    which those versions were last found current, least recently used out first.

    A per-snapshot-version store for answers that are cheap to key but dear to compute
    (the feasibility outcome of a question): :meth:`current` answers by the stamp alone
    while nothing at all has changed (a stamp is one number that moves with any version),
    :meth:`get` by the versions. Nothing is kept or given while memoisation is off."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[Any, tuple[tuple[Any, ...], Any, int | None]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any, versions: tuple[Any, ...], stamp: int | None = None) -> Any:
        """The answer kept for ``key`` if computed at ``versions``; do not mutate it.
        ``stamp``: the stamp now, remembered with a hit (see :meth:`current`)."""
        entry = self.entries.get(key) if _enabled else None
        if entry is None or entry[0] != versions:
            if entry is not None:
                del self.entries[key]   # versions only grow: it can never match again
            self.misses += 1
            return None
        if stamp is not None and entry[2] != stamp:
            self.entries[key] = (versions, entry[1], stamp)
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def current(self, key: Any, stamp: int) -> Any:
        """The answer kept for ``key`` if its versions were found current at ``stamp``
        (nothing has changed since, so they still are); None: ask :meth:`get`."""
        entry = self.entries.get(key) if _enabled else None
        if entry is None or entry[2] != stamp:
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def put(self, key: Any, versions: tuple[Any, ...], value: Any, stamp: int | None = None) -> None:
        if not _enabled:
            self.entries.clear()
            return
        self.entries[key] = (versions, value, stamp)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self.entries)
