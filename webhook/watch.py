"""Live topology: list, then watch, the objects the feasibility rules need.

One thread per resource kind runs the Kubernetes list/watch protocol with the official
client, reading raw JSON (``_preload_content=False``) so that objects stay the camelCase
dicts the API serves:

- list (paginated), hand each page to ``Topology.apply`` as it comes and, at the end,
  delete what the list no longer has (``replace_all`` page by page, so that a relist of
  100,000 pods never holds them all at once), remember the list's ``resourceVersion``;
- watch from it with ``allowWatchBookmarks``; every event goes to ``Topology.apply``,
  every event or BOOKMARK moves the resourceVersion on;
- an ERROR event with code 410 (Gone) or a 410 answer means the version is too old:
  relist; a stream that ends (server timeout) or goes quiet past the read timeout is
  re-watched from the last version; errors and dropped connections back off
  exponentially; a CRD that is not installed (404) is skipped with one log line and
  retried periodically.

The threads never touch the topology themselves: they pass each change to ``sink``,
which queues it for one task on the event loop (:meth:`LiveTopology._drain`) that applies
the queue in order, a page of a list in slices of a few milliseconds with the loop free
for reviews in between; so the topology is only ever read and written on the event loop
thread, in order, and a relist of 100,000 pods never stalls admission. A relist only
adds and updates until its last page, and deletes what it did not see at the very end:
no intermediate state lacks a node that exists (no false "never fits").

Freshness: each kind remembers its last confirmed contact with the API server (a list
page, a watch event, a BOOKMARK, the opening of a watch stream), and a probe thread
asks the API server ``GET /readyz`` every second (``probe_seconds``): an answer confirms,
as of the moment it was asked, every kind whose watch stream was open then and still is
(the server answers and has not closed the stream: nothing was missed). A server that is
gone, refuses, stops answering while keeping its connections open, or answers garbage
confirms nothing, so ``updated_at`` of the snapshot (the oldest kind's contact, or the
oldest change still waiting to be applied, whichever is older) falls behind at once and
``feasibility.staleAfterSeconds`` later the feasibility rules answer GG406 instead of
judging. A stream that answers garbage or ends at once with nothing in it confirms
nothing. Reconnects back off from 0.2 s to 1 s (jittered), so the watch is back within
about a second of the API server's return.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from webhook import jsonio

if TYPE_CHECKING:
    from aiohttp import web

    from policies.config import Policy
    from webhook.metrics import Metrics

log = logging.getLogger("gpugate.watch")

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# A scale-up waits for its target object: well within the validating webhook's timeout.
READ_TIMEOUT_SECONDS = 1.0

Sink = Callable[..., None]   # sink(function, *args): run function(*args) where the topology lives
# A list of at least this many objects holds off full collections, then freezes (GcGuard).
LARGE_LIST = 2000


@dataclass(frozen=True)
class Resource:
    """One kind the topology is built from, and how to list/watch it."""

    kind: str
    group: str              # "" for the core API group
    version: str
    plural: str
    optional: bool = False  # a CRD that may not be installed: 404 is skipped, not an error
    field_selector: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def lister(self, api_client: k8s.ApiClient) -> Callable[..., Any]:
        """The client call that lists (or, with ``watch=True``, watches) this resource cluster-wide."""
        if not self.group:
            core = k8s.CoreV1Api(api_client)
            return getattr(core, _CORE_LISTERS[self.plural])
        custom = k8s.CustomObjectsApi(api_client)
        return functools.partial(custom.list_cluster_custom_object, self.group, self.version, self.plural)


_CORE_LISTERS = {"nodes": "list_node", "pods": "list_pod_for_all_namespaces"}

# The server filters out finished pods; we filter again on our side for servers (and
# MODIFIED events) that still show them.
RESOURCES: tuple[Resource, ...] = (
    Resource("Node", "", "v1", "nodes"),
    Resource("Pod", "", "v1", "pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"),
    Resource("Queue", "scheduling.volcano.sh", "v1beta1", "queues", optional=True),
    Resource("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", optional=True),
    Resource("HyperNode", "topology.volcano.sh", "v1alpha1", "hypernodes", optional=True),
    Resource("ElasticQuotaTree", "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", optional=True),
)


@dataclass
class WatchOptions:
    page_size: int = 500
    connect_timeout: float = 2.0
    # A watch that stays silent this long is re-opened (cheap: from the last version), so a
    # connection that died without a word (a NAT entry dropped) is replaced; the probe below
    # is what notices an API server that is gone.
    read_timeout: float = 15.0
    list_timeout: float = 60.0
    watch_timeout_seconds: int = 300         # server side: the API server ends the stream
    min_backoff: float = 0.2
    # Reconnects are tried at most this far apart (jittered 0.8-1.2x): the watch is back
    # within about a second of the API server's return.
    max_backoff: float = 1.0
    crd_retry_seconds: float = 60.0
    heartbeat_seconds: float = 0.5
    # GET /readyz of the API server this often (0: never); an answer within probe_timeout
    # confirms every kind whose watch stream stayed open meanwhile.
    probe_seconds: float = 1.0
    probe_timeout: float = 1.0
    # A stream that ends (or fails) within this long with nothing valid in it confirmed nothing.
    min_stream_seconds: float = 1.0
    # The loop applies queued changes for at most this long before it lets reviews run.
    apply_slice_seconds: float = 0.005


class Gone(Exception):
    """The resourceVersion is too old (HTTP 410 or an ERROR event with code 410): relist."""


class WatchFailed(Exception):
    """An ERROR event other than 410."""


def is_terminated(obj: dict[str, Any]) -> bool:
    status = obj.get("status")
    return isinstance(status, dict) and status.get("phase") in TERMINATED_PHASES


def _resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    value = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return value if isinstance(value, str) and value else None


def _normalise(obj: dict[str, Any], resource: Resource) -> None:
    """``apiVersion``/``kind`` filled in (list items come without them); ``managedFields``
    dropped: often the largest part of an object, and nothing gpugate reads."""
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def _close(response: Any) -> None:
    with contextlib.suppress(Exception):
        response.close()
    with contextlib.suppress(Exception):
        response.release_conn()


class ListRestarted(Exception):
    """A paginated list had to start over (its continue token expired): pages already
    handed out are superseded by the ones that follow."""


def iter_pages(api_client: k8s.ApiClient, resource: Resource,
               options: WatchOptions | None = None) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
    """The pages of a list of ``resource``: ``(items, resourceVersion so far)``; the version
    of the last page is the list's. Finished pods are dropped; items get ``apiVersion`` and
    ``kind`` (list items come without them) and lose ``managedFields``.

    A continue token that expired (410) raises :class:`ListRestarted` so that the caller
    can start over; other API errors (404 for a CRD that is not installed) raise
    :class:`ApiException`, connection problems whatever urllib3 raises.
    """
    options = options or WatchOptions()
    lister = resource.lister(api_client)
    token: str | None = None
    version: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": options.page_size}
        if token:
            kwargs["_continue"] = token
        if resource.field_selector:
            kwargs["field_selector"] = resource.field_selector
        try:
            response = lister(_preload_content=False,
                              _request_timeout=(options.connect_timeout, options.list_timeout), **kwargs)
        except ApiException as exc:
            if exc.status == 410 and token:
                raise ListRestarted(resource.plural) from None
            raise
        try:
            page = jsonio.loads(response.data)
        finally:
            _close(response)
        if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
            raise WatchFailed(f"list of {resource.plural} is not a list object")
        items = []
        for item in page.get("items") or []:
            if isinstance(item, dict) and not is_terminated(item):
                _normalise(item, resource)
                items.append(item)
        meta = page.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        version = meta.get("resourceVersion") or version
        token = meta.get("continue") or None
        yield items, version
        if not token:
            return


def list_objects(api_client: k8s.ApiClient, resource: Resource,
                 options: WatchOptions | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """All objects of ``resource`` at once (see :func:`iter_pages`) and the list's resourceVersion."""
    while True:
        items: list[dict[str, Any]] = []
        version: str | None = None
        try:
            for page, page_version in iter_pages(api_client, resource, options):
                items.extend(page)
                version = page_version
        except ListRestarted:
            log.info("list of %s: continue token expired, listing again", resource.plural)
            continue
        return items, version


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass
class WatchState:
    """What one resource's thread knows; read by the heartbeat on the loop thread."""

    applied: bool = False         # a full list is in the topology (set on the loop thread)
    connected: bool = False       # a watch stream is open right now
    skipped: bool = False         # CRD not installed (404): not part of the topology
    last_contact: float | None = None
    resource_version: str | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    stream: int = 0               # how many watch streams were opened (the current one's number)


class ResourceWatcher:
    """List then watch one resource in a thread of its own, forever, until :meth:`stop`.

    A (re)list is streamed: each page goes to the topology as it arrives (only one page of
    objects is ever held here, however many pods the cluster runs), the keys seen are
    remembered, and at the end the objects the list no longer has are deleted, which is
    ``Topology.replace_all`` done page by page.
    """

    def __init__(self, resource: Resource, api_client: k8s.ApiClient, sink: Sink,
                 apply: Callable[[str, dict[str, Any]], None],
                 options: WatchOptions | None = None, metrics: Metrics | None = None,
                 gc_guard: GcGuard | None = None) -> None:
        self.resource = resource
        self.api_client = api_client
        self.options = options or WatchOptions()
        self.state = WatchState()
        self._sink = sink
        self._apply = apply
        self._metrics = metrics
        self._gc_guard = gc_guard
        self._known: set[tuple[str, str]] = set()   # (namespace, name) the topology holds
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._events = 0   # events and bookmarks seen on the current watch stream
        self._lock = threading.Lock()   # contact of a stream vs. the probe's confirmation

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.resource.plural}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:  # unblock a thread sitting in a socket read
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def streaming(self) -> bool:
        """A watch stream is open and has delivered valid events or bookmarks."""
        return self.state.connected and self._events > 0

    def open_stream(self) -> int | None:
        """The number of the watch stream open right now, or None (for :meth:`confirm`)."""
        state = self.state
        return state.stream if state.connected else None

    def confirm(self, stream: int, at: float) -> bool:
        """The API server answered a request sent at ``at`` while watch stream ``stream``
        was open: if it still is, everything up to ``at`` has been seen (the server had not
        closed the stream, and delivers in order), so ``at`` counts as contact."""
        with self._lock:
            state = self.state
            if not state.connected or state.stream != stream:
                return False
            if state.last_contact is None or state.last_contact < at:
                state.last_contact = at
            return True

    # -- the loop -------------------------------------------------------------------
    def _contact(self) -> None:
        self.state.last_contact = time.monotonic()

    def _restart(self, reason: str) -> None:
        self.state.restarts[reason] = self.state.restarts.get(reason, 0) + 1
        if self._metrics is not None:
            self._metrics.watch_restarts.labels(self.resource.kind, reason).inc()

    def run(self) -> None:
        backoff = self.options.min_backoff
        logged_missing = False
        while not self._stop.is_set():
            listed = False   # this round listed: a 410 now means the server is unwell, back off
            try:
                if self.state.resource_version is None:
                    self._list()
                    listed = True
                    if logged_missing:
                        log.info("%s: resource now available, watching it", self.resource.plural)
                        logged_missing = False
                started, self._events = time.monotonic(), 0
                quiet = self._watch()
                if quiet or self._events or time.monotonic() - started >= 1.0:
                    backoff = self.options.min_backoff     # a healthy stream resets the backoff
                else:  # a stream closed at once with nothing in it: do not spin on it
                    self._restart("closed")
                    backoff = self._back_off(backoff)
            except Gone:
                log.info("%s: resourceVersion %s expired (410), relisting", self.resource.plural,
                         self.state.resource_version)
                self.state.resource_version = None
                self._restart("gone")
                if listed and not self._events:  # 410 again right after a relist: the server is unwell
                    backoff = self._back_off(backoff)
            except ApiException as exc:
                # An optional kind we cannot read (CRD not installed, or RBAC does not grant it)
                # must not hold readiness back: skip it, say so once, look again now and then.
                if exc.status in (403, 404) and self.resource.optional:
                    if not logged_missing:
                        why = "CRD not installed?" if exc.status == 404 else "forbidden: check the RBAC rules"
                        log.info("%s (%s) not readable (%s %s); skipped, retrying every %.0fs",
                                 self.resource.plural, self.resource.api_version, exc.status, why,
                                 self.options.crd_retry_seconds)
                        logged_missing = True
                    self._skip()
                    self._stop.wait(self.options.crd_retry_seconds)
                    continue
                if exc.status == 410:
                    self._restart("gone")
                    if listed or self.state.resource_version is None:  # right after (or on) a list
                        backoff = self._back_off(backoff)
                    self.state.resource_version = None
                    continue
                log.warning("%s: API error %s %s; retrying in %.1fs", self.resource.plural, exc.status,
                            (exc.reason or "").strip(), backoff)
                self._restart("api-error")
                backoff = self._back_off(backoff)
            except Exception as exc:  # noqa: BLE001 - connection errors of any shape: back off, retry
                if self._stop.is_set():
                    break
                log.warning("%s: watch interrupted (%s: %s); retrying in %.1fs", self.resource.plural,
                            type(exc).__name__, exc, backoff)
                self._restart("connection")
                backoff = self._back_off(backoff)

    def _back_off(self, delay: float) -> float:
        self._stop.wait(delay * random.uniform(0.8, 1.2))
        return min(delay * 2, self.options.max_backoff)

    def _skip(self) -> None:
        if not self.state.skipped:
            self.state.skipped = True
            self.state.resource_version = None
            self._prune(set())
        self._sink(self._mark_applied)

    def _list(self) -> None:
        listed = 0        # objects handed over so far
        guarded = False   # full collections held off for this list (see GcGuard)
        try:
            while True:
                seen: set[tuple[str, str]] = set()
                version: str | None = None
                try:
                    for items, page_version in iter_pages(self.api_client, self.resource, self.options):
                        listed += len(items)
                        if not guarded and listed >= LARGE_LIST and self._gc_guard is not None:
                            self._gc_guard.enter()
                            guarded = True
                        version = page_version
                        seen.update(object_key(item) for item in items)
                        self._known.update(object_key(item) for item in items)
                        self._sink(self._apply_all, "MODIFIED", items)   # applied in slices, in order
                        self._contact()
                except ListRestarted:
                    log.info("list of %s: continue token expired, listing again", self.resource.plural)
                    continue
                break
            self._prune(seen)
            self.state.skipped = False
            self.state.resource_version = version or "0"
            self._sink(self._mark_applied)   # after the pages handed over above: the loop runs them in order
            self._contact()
        finally:
            if guarded and self._gc_guard is not None:
                self._sink(self._gc_guard.leave)   # once this list's pages and prune are in

    def _mark_applied(self) -> None:
        """On the loop thread: the list is in the topology, the kind can be judged on."""
        self.state.applied = True

    def _prune(self, keep: set[tuple[str, str]]) -> None:
        """Delete from the topology what it holds of this kind beyond ``keep`` (which this
        watcher owns from now on). A loop in Python, not a set difference: the C one holds
        the GIL for 40 ms over 100,000 pods, and the event loop with it."""
        stale = [key for key in self._known if key not in keep]
        self._known = keep
        if stale:
            stubs = [{"apiVersion": self.resource.api_version, "kind": self.resource.kind,
                      "metadata": {"namespace": ns, "name": name}} for ns, name in stale]
            self._sink(self._apply_all, "DELETED", stubs)

    def _apply_all(self, event: str, objects: list[dict[str, Any]]) -> None:
        """On the loop thread: a page of objects (or, from :meth:`LiveTopology._drain`, a
        slice of one) rather than one call per object."""
        for obj in objects:
            try:
                self._apply(event, obj)
            except Exception:  # noqa: BLE001 - one odd object must not stop the page
                log.exception("topology %s of %s %s failed", event, self.resource.kind, object_key(obj))

    def _watch(self) -> bool:
        """Follow one watch stream to its end; True when it ended by going quiet (read timeout)."""
        kwargs: dict[str, Any] = {"watch": True, "allow_watch_bookmarks": True,
                                  "resource_version": self.state.resource_version,
                                  "timeout_seconds": self.options.watch_timeout_seconds}
        if self.resource.field_selector:
            kwargs["field_selector"] = self.resource.field_selector
        timeouts = (self.options.connect_timeout, self.options.read_timeout)
        response = self.resource.lister(self.api_client)(_preload_content=False, _request_timeout=timeouts,
                                                         **kwargs)
        self._response = response
        with self._lock:
            previous_contact = self.state.last_contact
            opened = time.monotonic()
            self.state.stream += 1
            self.state.connected = True
            self.state.last_contact = opened   # the server answered: the stream is open
        quiet = False
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    return False
                self._event(line)
            return False  # the server ended the stream (its timeoutSeconds)
        except Exception as exc:
            if _is_read_timeout(exc):
                quiet = True
                return True  # quiet stream: re-watch from the same version, no backoff
            raise
        finally:
            with self._lock:
                # A stream that failed or ended at once with nothing in it (a proxy's error page
                # answered 200, a truncated body) confirmed nothing, nor did the probe while it
                # was open: it must not keep the topology fresh while every reconnect fails the
                # same way.
                brief = time.monotonic() - opened < self.options.min_stream_seconds
                if not (quiet or self._events) and brief:
                    self.state.last_contact = previous_contact
                self.state.connected = False
            self._response = None
            _close(response)

    def _event(self, line: str) -> None:
        try:
            event = jsonio.loads(line)
        except ValueError:
            raise WatchFailed(f"undecodable watch event: {line[:200]!r}") from None
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise WatchFailed(f"watch event without object: {line[:200]!r}")
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise WatchFailed(f"watch error {obj.get('code')}: {obj.get('message')}")
        version = _resource_version(obj)
        self._events += 1
        if kind == "BOOKMARK":
            if version:
                self.state.resource_version = version
            self._contact()
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise WatchFailed(f"unknown watch event type {kind!r}")
        _normalise(obj, self.resource)
        if kind != "DELETED" and is_terminated(obj):
            kind = "DELETED"  # a finished pod no longer holds resources
        if kind == "DELETED":
            self._known.discard(object_key(obj))
        else:
            self._known.add(object_key(obj))
        self._sink(self._apply, kind, obj)
        if version:
            self.state.resource_version = version
        self._contact()


def _lines(response: Any) -> Iterator[str]:
    for line in iter_resp_lines(response):
        if line:
            yield line


def _is_read_timeout(exc: BaseException) -> bool:
    import urllib3.exceptions as u3

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (u3.ReadTimeoutError, socket.timeout, TimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
        if seen is exc:
            break
    return False


class GcGuard:
    """Full garbage collections held off while large lists are applied, then what they
    built frozen (``gc.freeze``, as :func:`webhook.server.settle_heap` does for snapshot
    files).

    A full collection visits every container the cyclic collector tracks, with the GIL
    held: for a topology of 100,000 pods that is about 0.2 s in which no review is
    answered, and a (re)list of that size would set off several as the heap grows. So
    while any list of :data:`LARGE_LIST` objects or more is being applied, the oldest
    generation's threshold is raised out of reach (the young generations are still
    collected as usual), and when the last one is in: the young generations are collected
    (cheap) and everything that survives is frozen, out of the collector's sight for good.
    What a later relist replaces is freed by reference counting (the topology holds no
    cycles), and only objects created since are ever scanned. The price: a reference cycle
    that is garbage at the moment of freezing (rare: it has to have reached the oldest
    generation, during a list) stays until the process ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved: tuple[int, int, int] | None = None

    def enter(self) -> None:
        """A large list starts (any thread)."""
        with self._lock:
            self._active += 1
            if self._active == 1:
                self._saved = gc.get_threshold()
                gc.set_threshold(self._saved[0], self._saved[1], 1 << 30)

    def leave(self) -> None:
        """A large list is in the topology (on the loop, after its pages)."""
        with self._lock:
            self._active = max(0, self._active - 1)
            if self._active or self._saved is None:
                return
            gc.collect(1)
            gc.freeze()
            gc.set_threshold(*self._saved)
            self._saved = None


class LiveTopology:
    """The live cluster as one ``ClusterSnapshot``, kept current by one watcher per kind.

    Implements the server's ``TopologySource``: :meth:`start` on the event loop starts
    the threads, the probe of the API server, the task that applies their changes in
    order (:meth:`_drain`) and a heartbeat that maintains ``updated_at``.

    ``policy`` is the policy the topology is built with; ``policy_source``, when given,
    returns the policy in force now (reloads), whose ``feasibility.staleAfterSeconds``
    :meth:`ready` reads.
    """

    def __init__(self, api_client: k8s.ApiClient, policy: Policy | None = None, name: str = "cluster",
                 resources: Iterable[Resource] = RESOURCES, options: WatchOptions | None = None,
                 metrics: Metrics | None = None,
                 policy_source: Callable[[], Policy] | None = None) -> None:
        from policies.topology import ClusterSnapshot, Topology

        self.api_client = api_client
        self.options = options or WatchOptions()
        self.metrics = metrics
        self.policy = policy
        self.policy_source = policy_source
        # Never synced: as stale as can be, so that nothing is judged on an empty cluster.
        self.snapshot = ClusterSnapshot(name=name, topology=Topology.from_objects([], policy),
                                        updated_at=float("-inf"))
        self.resources = tuple(resources)
        self.watchers: list[ResourceWatcher] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        # (queued at, function, args): changes from the threads, applied in order by _drain
        self._pending: deque[tuple[float, Callable[..., None], tuple[Any, ...]]] = deque()
        self._work: asyncio.Event | None = None
        self._probe_thread: threading.Thread | None = None
        self._probe_stop = threading.Event()
        self.probe_path = "/readyz"
        self.last_probe_ok: float | None = None   # when the last answered probe was sent
        self.gc_guard = GcGuard()

    def clusters(self) -> list[Any]:
        self.refresh_updated_at()  # exact at review time (a few attribute reads), not a beat late
        return [self.snapshot]

    async def read_object(self, group: str, version: str, resource: str, namespace: str,
                          name: str) -> Any:
        """One namespaced object of an API group from the API server (a scale-up's target),
        read in a worker thread with a short timeout: the review waits for it."""
        api = k8s.CustomObjectsApi(self.api_client)   # any /apis/GROUP/VERSION path, not only CRDs
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(
            api.get_namespaced_custom_object, group, version, namespace, resource, name,
            _request_timeout=READ_TIMEOUT_SECONDS))

    def stale_after(self) -> float:
        """``feasibility.staleAfterSeconds`` of the policy in force."""
        policy = self.policy_source() if self.policy_source is not None else self.policy
        if policy is None:
            from policies.config import DEFAULT_POLICY

            return float(DEFAULT_POLICY["feasibility"]["staleAfterSeconds"])
        return float(policy.feasibility.get("staleAfterSeconds", 5))

    def synced(self) -> bool:
        """Every kind has been listed and is in the topology (or is skipped: CRD not installed)."""
        return bool(self.watchers) and all(w.state.applied for w in self.watchers)

    def age(self) -> float:
        """Seconds since the view was last confirmed in full (``inf`` before the first sync)."""
        self.refresh_updated_at()
        updated = self.snapshot.updated_at
        return float("inf") if updated is None or updated == float("-inf") else \
            max(0.0, time.monotonic() - updated)

    def ready(self) -> bool:
        """A usable view: synced, and confirmed within ``feasibility.staleAfterSeconds``.
        Never asks the API server: a few attribute reads."""
        return self.synced() and self.age() <= self.stale_after()

    def _sink(self, function: Callable[..., None], *args: Any) -> None:
        """From a watch thread: queue ``function(*args)`` for the loop (:meth:`_drain`)."""
        loop, work = self._loop, self._work
        if loop is None or work is None or loop.is_closed():
            return
        self._pending.append((time.monotonic(), function, args))
        with contextlib.suppress(RuntimeError):  # loop closing during shutdown
            loop.call_soon_threadsafe(work.set)

    @staticmethod
    def _guarded(function: Callable[..., None], *args: Any) -> None:
        try:
            function(*args)
        except Exception:  # noqa: BLE001 - one odd object must not stop the updates
            log.exception("topology update %s failed", getattr(function, "__name__", function))

    async def _drain(self) -> None:
        """Apply the queued changes in order, on the loop, never for longer than
        ``apply_slice_seconds`` at a time: a page of a list is applied in slices, with the
        loop free for reviews in between. Order is kept (one consumer, first in first out),
        so a page's last slice is in before the next page, event or prune."""
        assert self._work is not None
        pending, work = self._pending, self._work
        budget = self.options.apply_slice_seconds
        chunk = 8   # a node costs up to ~0.5 ms to apply: a slice ends within a few ms of its budget
        while True:
            await work.wait()
            work.clear()
            since = time.perf_counter()
            while pending:
                _, function, args = pending[0]
                batch = getattr(function, "__func__", None) is ResourceWatcher._apply_all and len(args) == 2
                objects = args[1] if batch else None
                if isinstance(objects, list) and len(objects) > chunk:
                    for start in range(0, len(objects), chunk):
                        self._guarded(function, args[0], objects[start:start + chunk])
                        if time.perf_counter() - since > budget:
                            await asyncio.sleep(0)
                            since = time.perf_counter()
                else:
                    self._guarded(function, *args)
                pending.popleft()   # only now: until it is all in, the view is as old as its queueing
                if time.perf_counter() - since > budget:
                    await asyncio.sleep(0)
                    since = time.perf_counter()

    def refresh_updated_at(self) -> None:
        """``updated_at`` = the oldest confirmed contact over the kinds that exist, or the
        time the oldest change still waiting to be applied was received, if that is older."""
        now = time.monotonic()
        oldest = now
        for watcher in self.watchers:
            state = watcher.state
            if state.skipped and state.applied:
                continue
            if not state.applied:
                oldest = float("-inf")
                break
            oldest = min(oldest, state.last_contact or float("-inf"))
        if self._pending:
            with contextlib.suppress(IndexError):  # emptied meanwhile
                oldest = min(oldest, self._pending[0][0])
        if self.watchers:
            self.snapshot.updated_at = oldest

    async def _beat(self) -> None:
        while True:
            self.refresh_updated_at()
            await asyncio.sleep(self.options.heartbeat_seconds)

    # -- the probe ------------------------------------------------------------------
    def probe_once(self) -> bool:
        """Ask the API server whether it is there (``GET /readyz``, which also checks its
        etcd); when it answers 200, confirm every watch stream that was open when the
        question was asked and still is. ``/version`` instead if ``/readyz`` is not granted."""
        streams = [(w, w.open_stream()) for w in self.watchers]
        asked = time.monotonic()
        status = self._get(self.probe_path)
        if status in (401, 403, 404) and self.probe_path != "/version":
            log.info("API server probe: GET %s answered %s; probing GET /version instead", self.probe_path,
                     status)
            self.probe_path = "/version"
            streams = [(w, w.open_stream()) for w in self.watchers]
            asked = time.monotonic()
            status = self._get(self.probe_path)
        if status != 200:
            return False
        self.last_probe_ok = asked
        for watcher, stream in streams:
            if stream is not None:
                watcher.confirm(stream, asked)
        return True

    def _get(self, path: str) -> int | None:
        """The status of ``GET path`` on the API server, None when it did not answer in time."""
        response = None
        try:
            method, url, headers, body, post = self.api_client.param_serialize(
                "GET", path, header_params={"Accept": "application/json, */*"},
                auth_settings=["BearerToken"])
            response = self.api_client.call_api(
                method, url, header_params=headers, body=body, post_params=post,
                _request_timeout=(self.options.connect_timeout, self.options.probe_timeout))
            response.read()
            return int(response.status)
        except ApiException as exc:
            return int(exc.status or 0)
        except Exception:  # noqa: BLE001 - refused, reset, timed out: no answer
            return None
        finally:
            if response is not None:
                _close(getattr(response, "response", response))

    def _probe_loop(self) -> None:
        interval = self.options.probe_seconds
        failing = False
        while not self._probe_stop.wait(interval if not failing else min(interval, 0.5)):
            ok = self.probe_once()
            if ok and failing:
                log.info("API server answers again (GET %s)", self.probe_path)
            elif not ok and not failing:
                log.warning("API server does not answer GET %s: the topology is getting older",
                            self.probe_path)
            failing = not ok

    # -- lifecycle ------------------------------------------------------------------
    async def start(self, app: web.Application | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._work = asyncio.Event()
        topology = self.snapshot.topology
        self.watchers = [ResourceWatcher(r, self.api_client, self._sink, topology.apply, self.options,
                                         self.metrics, gc_guard=self.gc_guard) for r in self.resources]
        self._drainer = self._loop.create_task(self._drain())
        for watcher in self.watchers:
            watcher.start()
        self._heartbeat = self._loop.create_task(self._beat())
        if self.options.probe_seconds > 0:
            self._probe_stop.clear()
            self._probe_thread = threading.Thread(target=self._probe_loop, name="watch-probe", daemon=True)
            self._probe_thread.start()

    async def stop(self) -> None:
        for task in (self._heartbeat, self._drainer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._probe_stop.set()
        for watcher in self.watchers:
            watcher.request_stop()
        await asyncio.get_running_loop().run_in_executor(None, self._join)

    def _join(self) -> None:
        for watcher in self.watchers:
            watcher.stop(timeout=2.0)
        if self._probe_thread is not None:
            self._probe_thread.join(self.options.connect_timeout + self.options.probe_timeout + 1.0)


@dataclass
class TopologyExport:
    """What ``gpugate snapshot`` writes: the objects, and which kinds could not be read.

    ``counts`` has every kind that was listed (0 when the kind is served but has no object);
    ``absent`` every optional kind that was not, with the reason (CRD not installed: 404, or
    not readable with these credentials: 403).
    """

    objects: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)


class ExportFailed(Exception):
    """A required kind (Nodes, Pods) could not be listed: no snapshot."""

    def __init__(self, resource: Resource, error: ApiException) -> None:
        super().__init__(f"cannot list {resource.plural}: the API server answered {error.status} "
                         f"{(error.reason or '').strip()}".rstrip())
        self.resource = resource
        self.error = error


def export_topology(api_client: k8s.ApiClient, resources: Iterable[Resource] = RESOURCES,
                    options: WatchOptions | None = None) -> TopologyExport:
    """Every object of the topology kinds, listed once (same code as the watch's lists).

    The optional kinds (Volcano Queues and PodGroups, HyperNodes, ElasticQuotaTrees) are
    CRDs that a cluster may not have: a 404 (not installed) or 403 (not granted) for one of
    them leaves it out and says so in ``absent``; for Nodes and Pods it is
    :class:`ExportFailed`. Connection problems raise what urllib3 raises.
    """
    export = TopologyExport()
    for resource in resources:
        try:
            items, _ = list_objects(api_client, resource, options)
        except ApiException as exc:
            if not resource.optional or exc.status not in (403, 404):
                raise ExportFailed(resource, exc) from exc
            export.absent[resource.kind] = (
                f"{resource.plural}.{resource.group}/{resource.version} is not served (CRD not installed)"
                if exc.status == 404 else
                f"listing {resource.plural}.{resource.group} is forbidden (403) for these credentials")
            log.info("%s: %s; skipped", resource.kind, export.absent[resource.kind])
            continue
        export.objects.extend(items)
        export.counts[resource.kind] = len(items)
    return export


def snapshot_objects(api_client: k8s.ApiClient, resources: Iterable[Resource] = RESOURCES,
                     options: WatchOptions | None = None) -> list[dict[str, Any]]:
    """Every object of the topology kinds (see :func:`export_topology`)."""
    return export_topology(api_client, resources, options).objects


def api_client_for(kubeconfig: str | None = None, context: str | None = None) -> tuple[k8s.ApiClient, str]:
    """An ApiClient from a kubeconfig file, or the in-cluster service account when none is given,
    and a name for the cluster (the kubeconfig context, or ``in-cluster``)."""
    from kubernetes import config

    configuration = k8s.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        name = context or (active or {}).get("name") or "cluster"
    else:
        config.load_incluster_config(client_configuration=configuration)
        name = "in-cluster"
    return watch_api_client(configuration), name


def watch_api_client(configuration: k8s.Configuration) -> k8s.ApiClient:
    """An ApiClient tuned for the watchers: no transparent urllib3 retries (the watch loop
    retries with its own backoff and decides between re-watch and relist), and a pool with
    room for one long-lived connection per watched kind plus lists."""
    configuration.retries = 0
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                2 * len(RESOURCES))
    return k8s.ApiClient(configuration)
