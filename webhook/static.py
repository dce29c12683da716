"""Static topology (``gpugate serve --cluster FILE``): snapshot files read, parsed in a forked
child (:mod:`policies.snapshots` builds the snapshots from the text), watched and swapped whole
when they change; and the heap care that loading large snapshots needs."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from policies.config import Policy
from policies.snapshots import SnapshotError, member_snapshots

log = logging.getLogger("gpugate.webhook")


def read_fleet(paths: Sequence[str], policy: Policy) -> list[Any]:
    """One member cluster per snapshot file, named after the file (its stem, or the path
    when stems clash); ``SnapshotError`` when one cannot be read or parsed."""
    return member_snapshots(paths, policy, read=lambda path: Path(path).read_bytes())


# A file's identity and contents as far as stat tells: (device, inode, size, mtime in ns),
# or the error text when it cannot be stat'ed (a missing file is a state too).
FileState = tuple[int, int, int, int] | str


def _file_states(paths: Sequence[str]) -> tuple[FileState, ...]:
    states: list[FileState] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            states.append(exc.strerror or str(exc))
        else:
            states.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(states)


class StaticTopology:
    """Snapshots from files (``--cluster``), or none at all: ready at once.

    With ``paths``, :meth:`maybe_reload` (called on every reload tick) notices a file whose
    inode, size or mtime changed, parses the whole fleet again in a worker thread (which
    forks the parsing child, see :func:`load_static_clusters`) and swaps all members in at
    once. Reviews read :meth:`clusters` once, so one already running keeps the old fleet.
    A new version that fails (unreadable, unparsable, no objects) is logged and the old
    fleet kept; it is tried again only when a file changes again.
    """

    def __init__(self, snapshots: Sequence[Any] | None = None, *, paths: Sequence[str] = (),
                 policy: Callable[[], Policy] | None = None,
                 on_reload: Callable[[bool], None] | None = None,
                 seen: tuple[FileState, ...] | None = None) -> None:
        self._snapshots = list(snapshots) if snapshots is not None else None
        self.paths = list(paths)
        self._policy = policy or Policy
        self._on_reload = on_reload
        # the files as they were when the current fleet (or the last failed try) was read
        self._seen = seen if seen is not None else _file_states(self.paths)
        self._reloading: asyncio.Task[bool | None] | None = None
        self._cancel = threading.Event()  # set by stop(): ends a parsing child early

    @classmethod
    def from_files(cls, paths: Sequence[str], policy: Callable[[], Policy],
                   on_reload: Callable[[bool], None] | None = None) -> StaticTopology:
        """Load ``paths`` now (``SnapshotError`` if one fails) and watch them for changes."""
        seen = _file_states(paths)  # before reading: a write during the load is seen as a change
        snapshots = load_static_clusters(paths, policy())
        return cls(snapshots, paths=paths, policy=policy, on_reload=on_reload, seen=seen)

    def clusters(self) -> Sequence[Any] | None:
        return self._snapshots

    def ready(self) -> bool:
        return True

    async def start(self, app: web.Application) -> None:
        self._cancel.clear()

    async def stop(self) -> None:
        task, self._reloading = self._reloading, None
        if task is not None:
            self._cancel.set()  # the worker thread kills its parsing child and returns
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def maybe_reload(self) -> asyncio.Task[bool | None] | None:
        """On the event loop: start reloading if a file changed since the last try (the
        task's result: True swapped in, False rejected, None superseded by a newer write)."""
        if not self.paths or self._reloading is not None:
            return None
        states = _file_states(self.paths)
        if states == self._seen:
            return None
        self._seen = states
        self._reloading = asyncio.get_running_loop().create_task(self._reload(states))
        return self._reloading

    async def _reload(self, states: tuple[FileState, ...]) -> bool | None:
        snapshots: list[Any] | None = None
        error = ""
        try:
            snapshots = await self._load(states)
        except _Rejected as exc:
            error = str(exc)
        finally:
            self._reloading = None
        if _file_states(self.paths) != states:
            # written to while we read it (a copy rather than an atomic rename): what we got
            # may be a torn file; the next tick sees the change and reads it again
            log.info("cluster snapshot %s changed while being loaded; loading it again",
                     ", ".join(self.paths))
            return None
        if snapshots is None:
            log.error("cluster snapshot not reloaded, keeping the previous one: %s", error)
            self._counted(False)
            return False
        replaced, self._snapshots = self._snapshots, snapshots  # the whole fleet at once
        log.info("cluster snapshot reloaded from %s (%s)", ", ".join(self.paths),
                 ", ".join(f"{s.name}: {s.topology.counts().get('Node', 0)} nodes" for s in snapshots))
        # counted as it takes effect: the next review already sees the new fleet
        self._counted(True)
        survivors = _weak_topologies(replaced)
        del replaced
        await self._settle(survivors)
        return True

    def _counted(self, ok: bool) -> None:
        if self._on_reload is not None:
            self._on_reload(ok)

    @staticmethod
    async def _settle(replaced: list[weakref.ref[Any]]) -> None:
        """Free the replaced fleet and keep the new one out of the collector's sight."""
        if any(ref() is not None for ref in replaced):
            # Alive after our last reference went: in a reference cycle, which the collector
            # does not see once frozen (or a caller still holds it). Only a collection of the
            # thawed heap frees a cycle: one pause of 0.2-0.3 s at 100,000 pods, rather than
            # keeping every replaced fleet forever.
            log.info("replaced cluster snapshot not freed at once; collecting the whole heap")
            settle_heap(thaw=True)
        else:
            await asyncio.get_running_loop().run_in_executor(None, trim_heap)

    async def _load(self, states: tuple[FileState, ...]) -> list[Any]:

        for path, state in zip(self.paths, states, strict=True):
            if isinstance(state, str):
                raise _Rejected(f"cannot read cluster snapshot {path}: {state}")
        policy = self._policy()  # the policy of this moment (supernode labels, ...)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                None, functools.partial(load_static_clusters, self.paths, policy, cancel=self._cancel))
        except SnapshotError as exc:
            raise _Rejected(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a bad file must never take the old fleet down
            log.exception("loading cluster snapshot %s failed", ", ".join(self.paths))
            raise _Rejected(f"{', '.join(self.paths)}: {type(exc).__name__}: {exc}") from None


def _weak_topologies(snapshots: Sequence[Any] | None) -> list[weakref.ref[Any]]:
    refs: list[weakref.ref[Any]] = []
    for snapshot in snapshots or ():
        with contextlib.suppress(TypeError, AttributeError):  # not weakly referenceable: not watched
            refs.append(weakref.ref(snapshot.topology))
    return refs


class _Rejected(Exception):
    """A new snapshot version that cannot be used."""



def load_static_clusters(paths: Sequence[str], policy: Policy,
                         cancel: threading.Event | None = None) -> list[Any]:
    """``read_fleet`` run in a forked child, the snapshots sent back pickled.

    Parsing a 100,000-pod snapshot peaks at several times what the topology keeps, and the
    heap of a long-lived server would stay fragmented at that peak; in a child the peak
    dies with it. Falls back to loading in this process when fork is not available or the
    child cannot pickle what it loaded (``SnapshotError`` is raised either way; also
    when the child dies, e.g. killed for memory, or ``cancel`` is set). Safe to call from
    a worker thread while the event loop serves: see :func:`_unpickle_stepwise`.
    """
    import multiprocessing
    import pickle


    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return list(read_fleet(list(paths), policy))
    receiver, sender = context.Pipe(duplex=False)
    # only the plain policy data crosses over: compiled custom checks do not pickle
    child = context.Process(target=_load_in_child, args=(sender, list(paths), policy.data),
                            name="gpugate-cluster-load", daemon=True)
    try:
        child.start()
        sender.close()
        outcome, payload = _receive_from_child(receiver, child, paths, cancel)
    finally:
        receiver.close()
        child.join(5)
        if child.exitcode is None:
            child.kill()
            child.join()
    if outcome == "rejected":
        raise SnapshotError(payload)
    try:
        if outcome != "ok":
            raise TypeError(payload)
        snapshots = list(_unpickle_stepwise(payload))
    except (pickle.UnpicklingError, TypeError, AttributeError, ValueError) as exc:
        log.info("loading the cluster snapshot in-process (%s)", exc)
        return list(read_fleet(list(paths), policy))
    for snapshot in snapshots:
        snapshot.topology.policy = policy
    return snapshots


def _receive_from_child(receiver: Any, child: Any, paths: Sequence[str],
                        cancel: threading.Event | None) -> tuple[str, Any]:
    """The child's ``(outcome, payload)``; ``SnapshotError`` if it ends without one."""
    from multiprocessing.connection import wait


    while not wait([receiver, child.sentinel], timeout=0.1 if cancel is not None else None):
        if cancel is not None and cancel.is_set():
            child.kill()
            raise SnapshotError(f"loading cluster snapshot {', '.join(paths)} cancelled")
    try:
        message: tuple[str, Any] = receiver.recv()
        return message
    except (EOFError, OSError):
        child.join(5)
        killed = " (killed: out of memory?)" if child.exitcode == -9 else ""
        raise SnapshotError(f"loading cluster snapshot {', '.join(paths)} failed: the parsing process "
                               f"ended with exit code {child.exitcode}{killed}") from None


def _load_in_child(sender: Any, paths: list[str], data: dict[str, Any]) -> None:
    """In the forked child: load, and send back ``("ok", pickled fleet)``, ``("rejected",
    message)`` for a bad file, or ``("failed", why)`` when the fleet does not pickle."""
    import pickle
    import signal


    # The server's signal handling is not the child's: asyncio's handlers write the signal
    # number to the server's wake-up socket, which the fork shares, so a SIGTERM meant for
    # the child would shut the server down; and the child must die of it.
    signal.set_wakeup_fd(-1)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.nice(10)  # a reload's parse must not take the CPU from reviews (a startup has none)
    try:
        fleet = list(read_fleet(paths, Policy(data=data)))
    except SnapshotError as exc:
        sender.send(("rejected", str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - a file the loader trips over is still a bad file
        sender.send(("rejected", f"cannot load cluster snapshot {', '.join(paths)}: "
                                 f"{type(exc).__name__}: {exc}"))
        return
    try:
        # pickled here, so that the parent unpickles it stepwise (not in ``recv``)
        sender.send(("ok", pickle.dumps(fleet, protocol=pickle.HIGHEST_PROTOCOL)))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        sender.send(("failed", f"{type(exc).__name__}: {exc}"))


class _StepwiseReader:
    """``data`` as a file for ``pickle.Unpickler``, which then fetches each 64 KiB frame
    with a call into Python code: there the interpreter can hand the GIL over to another
    thread. ``pickle.loads`` is one C call that holds it throughout (0.7 s for a fleet of
    100,000 pods, during which the event loop answers no review)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._view = memoryview(data)
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        self._pos = len(self._data) if size < 0 else min(start + size, len(self._data))
        return self._view[start:self._pos].tobytes()

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        size = min(len(target), len(self._data) - self._pos)
        target[:size] = self._view[self._pos:self._pos + size]
        self._pos += size
        return size

    def readline(self) -> bytes:
        end = self._data.find(b"\n", self._pos)
        return self.read(-1 if end < 0 else end + 1 - self._pos)


def _unpickle_stepwise(data: bytes) -> Any:
    """Unpickle ``data`` in steps (see :class:`_StepwiseReader`) and freeze the result
    (``gc.freeze``, like :func:`settle_heap`).

    The ~100,000 containers of a large fleet would trigger collections that scan all of
    them (0.3-0.5 s with the GIL held, possibly in the middle of a review), and so would
    the first one after the collector is back on if they were still young; none of them
    is garbage, so the collector stays off until they are frozen."""
    import pickle

    enabled = gc.isenabled()
    gc.disable()
    try:
        loaded = pickle.Unpickler(_StepwiseReader(data)).load()
        gc.freeze()
        return loaded
    finally:
        if enabled:
            gc.enable()


def settle_heap(thaw: bool = False) -> None:
    """After loading a large snapshot: collect, move what survives out of the collector's
    sight (``gc.freeze``: fewer, shorter pauses while serving), and hand freed arenas back
    to the OS (glibc ``malloc_trim``), so that RSS reflects what is really kept.

    ``thaw``: first put what an earlier call froze back in the collector's sight, so that
    frozen objects that have become cyclic garbage since (a replaced snapshot) are freed;
    this collection scans the whole heap (a few hundred ms for 100,000 pods)."""
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    trim_heap()


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def trim_heap() -> None:
    """Hand the C heap's free memory back to the OS (glibc ``malloc_trim``; elsewhere nothing).
    Runs without the GIL (a ctypes call)."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.malloc_trim(0)

