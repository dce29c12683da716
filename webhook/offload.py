"""Work off the event loop: large reviews (see :mod:`webhook.app`) and the periodic audit
(:mod:`webhook.periodic_audit`) run in a forked child where ``os.fork`` exists, else in a
thread against private views of the snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import gc
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any

from webhook import jsonio
from webhook.admission import ReviewError

CAN_FORK = hasattr(os, "fork") and hasattr(os, "register_at_fork")


def collect_child(pid: int, fd: int, received: bytearray) -> int:
    """In a thread: what the child writes, until it closes the pipe; then reap it."""
    try:
        while chunk := os.read(fd, 65536):
            received += chunk
    finally:
        os.close(fd)
    return os.waitpid(pid, 0)[1]


async def run_in_child(job: Callable[..., Any], clusters: Sequence[Any] | None,
                       on_cancel: Callable[[bytes], None] | None = None) -> tuple[str, Any]:
    """``job(clusters, tell=...)`` in a child forked now (call it on the loop thread, between
    two topology mutations: the child's copy-on-write snapshot is then never torn), with an
    interpreter of its own; the child's ``(kind, value)`` (see :func:`child_main`). Cancelled
    (a deadline), the child is killed and ``on_cancel`` gets the line it told before (a
    review's uid; empty if none) before the cancellation goes on."""
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; it never returns
        child_main(job, clusters, read_fd, write_fd)
    os.close(write_fd)
    received = bytearray()
    collecting = loop.run_in_executor(None, collect_child, pid, read_fd, received)
    try:
        status = await asyncio.shield(collecting)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if on_cancel is not None:
            on_cancel(bytes(received).partition(b"\n")[0])
        await asyncio.shield(collecting)   # the reader thread ends at the kill's EOF
        raise
    _, _, payload = bytes(received).partition(b"\n")
    if not payload:
        raise RuntimeError(f"the child process ended without an answer (status {status})")
    kind, value = pickle.loads(payload)
    return str(kind), value


def child_main(job: Callable[..., Any], clusters: Sequence[Any] | None, read_fd: int,
                write_fd: int) -> None:  # pragma: no cover - runs in the forked child
    """The forked child: run ``job(clusters, tell=...)``, write ``uid\\n`` as soon as a review's
    uid is told (an empty line otherwise), then the pickled ``(kind, value)``, and leave
    without running any of the parent's clean-up."""
    code = 0
    try:
        os.close(read_fd)
        # The server's signal handling is not the child's (see webhook.static._load_in_child).
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        # Let go of the parent's sockets (listener, connections): a connection the parent
        # closes meanwhile must end now, not when this child exits.
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, 65536)
        gc.disable()                     # collections would touch (and copy) the whole heap
        told: list[str] = []

        def tell(uid: str) -> None:
            write_all(write_fd, jsonio.dumps(uid) + b"\n")
            told.append(uid)

        try:
            result: tuple[str, Any] = ("ok", job(clusters, tell=tell))
        except ReviewError as exc:
            result = ("review-error", (exc.reason, exc.status))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as an internal error
            result = ("error", f"{type(exc).__name__}: {exc}"[:300])
        if not told:
            write_all(write_fd, b"\n")
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(("error", f"answer not transferable: {type(exc).__name__}"))
        write_all(write_fd, data)
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def without_collections(function: Callable[[], Any]) -> Any:
    """``function()`` with the cyclic garbage collector off (in the worker thread).

    A large review is hundreds of thousands of young objects (a 3 MB review: ~300,000): they
    would trigger collections, and a full one scans the whole heap with the interpreter lock
    held, stalling the event loop for ~100 ms. Its objects form no cycles (parsed JSON, findings,
    a patch): reference counting frees them when the review is answered."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return function()
    finally:
        if enabled:
            gc.enable()


def fingerprint(clusters: Sequence[Any] | None) -> tuple[Any, ...]:
    """What moves whenever anything a review reads of ``clusters`` changes: the list and its
    members by identity, and each topology's version counters."""
    if clusters is None:
        return (None,)
    out: list[Any] = [id(clusters)]
    for snapshot in clusters:
        topology = getattr(snapshot, "topology", None)
        versions = getattr(topology, "state_versions", None)
        keys = getattr(topology, "_key_versions", None)
        out += [id(snapshot), id(topology), versions() if versions is not None else None,
                getattr(topology, "label_version", None),
                tuple(keys.items()) if isinstance(keys, dict) else None]
    return tuple(out)


def private_views(clusters: Sequence[Any] | None) -> list[Any] | None:
    """Shallow copies of the snapshots whose topologies have caches and a memo of their own:
    what a worker derives stays with it (it may have read torn state)."""
    if clusters is None:
        return None
    views: list[Any] = []
    for snapshot in clusters:
        topology = getattr(snapshot, "topology", None)
        if topology is None or not dataclasses.is_dataclass(snapshot):
            views.append(snapshot)
            continue
        private = copy.copy(topology)
        memo = getattr(private, "memo", None)   # derived data (policies.memo.SnapshotMemo)
        if memo is not None:
            private.memo = type(memo)(memo.max_entries, memo.max_bytes)
        if hasattr(private, "outcome_memo"):
            private.outcome_memo = None
        views.append(dataclasses.replace(snapshot, topology=private))  # type: ignore[type-var]
    return views
