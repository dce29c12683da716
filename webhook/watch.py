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

The threads never touch the topology themselves: they pass each change to ``sink``
(``loop.call_soon_threadsafe`` in the server), so the topology is only ever read and
written on the event loop thread, in order. ``updated_at`` of the snapshot is the time
of last confirmed contact (a successful list, an event, a bookmark, a watch stream that
is open and has delivered, or one that opened and stayed quiet without error); a stream
that answers garbage confirms nothing. When it falls behind, the feasibility rules
report GG406 instead of judging.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import socket
import threading
import time
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
    connect_timeout: float = 5.0
    # A watch that stays silent this long is re-opened (cheap: from the last version), so a
    # half-dead connection is noticed well before the topology counts as stale.
    read_timeout: float = 15.0
    list_timeout: float = 60.0
    watch_timeout_seconds: int = 300         # server side: the API server ends the stream
    min_backoff: float = 0.2
    max_backoff: float = 30.0
    crd_retry_seconds: float = 60.0
    heartbeat_seconds: float = 0.5


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

    synced: bool = False          # a full list has been handed over at least once
    applied: bool = False         # ... and the loop has put it into the topology
    connected: bool = False       # a watch stream is open right now
    skipped: bool = False         # CRD not installed (404): not part of the topology
    last_contact: float | None = None
    resource_version: str | None = None
    restarts: dict[str, int] = field(default_factory=dict)


class ResourceWatcher:
    """List then watch one resource in a thread of its own, forever, until :meth:`stop`.

    A (re)list is streamed: each page goes to the topology as it arrives (only one page of
    objects is ever held here, however many pods the cluster runs), the keys seen are
    remembered, and at the end the objects the list no longer has are deleted, which is
    ``Topology.replace_all`` done page by page.
    """

    def __init__(self, resource: Resource, api_client: k8s.ApiClient, sink: Sink,
                 apply: Callable[[str, dict[str, Any]], None],
                 options: WatchOptions | None = None, metrics: Metrics | None = None) -> None:
        self.resource = resource
        self.api_client = api_client
        self.options = options or WatchOptions()
        self.state = WatchState()
        self._sink = sink
        self._apply = apply
        self._metrics = metrics
        self._known: set[tuple[str, str]] = set()   # (namespace, name) the topology holds
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._events = 0   # events and bookmarks seen on the current watch stream

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
            try:
                if self.state.resource_version is None:
                    self._list()
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
                if not self._events:  # 410 again right after a relist: the server is unwell
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
                    self.state.resource_version = None
                    self._restart("gone")
                    backoff = self._back_off(backoff)
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
        self.state.synced = True
        self._sink(self._mark_applied)

    def _list(self) -> None:
        while True:
            seen: set[tuple[str, str]] = set()
            version: str | None = None
            try:
                for items, page_version in iter_pages(self.api_client, self.resource, self.options):
                    version = page_version
                    seen.update(object_key(item) for item in items)
                    self._known.update(object_key(item) for item in items)
                    self._sink(self._apply_all, "MODIFIED", items)
                    self._contact()
            except ListRestarted:
                log.info("list of %s: continue token expired, listing again", self.resource.plural)
                continue
            break
        self._prune(seen)
        self.state.skipped = False
        self.state.resource_version = version or "0"
        self.state.synced = True
        self._sink(self._mark_applied)   # after the pages handed over above: the loop runs them in order
        self._contact()

    def _mark_applied(self) -> None:
        """On the loop thread: the list is in the topology, the kind can be judged on."""
        self.state.applied = True

    def _prune(self, keep: set[tuple[str, str]]) -> None:
        """Delete from the topology what it holds of this kind beyond ``keep``."""
        stale = self._known - keep
        self._known = set(keep)
        if stale:
            stubs = [{"apiVersion": self.resource.api_version, "kind": self.resource.kind,
                      "metadata": {"namespace": ns, "name": name}} for ns, name in stale]
            self._sink(self._apply_all, "DELETED", stubs)

    def _apply_all(self, event: str, objects: list[dict[str, Any]]) -> None:
        """On the loop thread: one call per page rather than one per object."""
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
        previous_contact = self.state.last_contact
        self.state.connected = True
        self._contact()
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
            # A stream that failed or ended at once with nothing in it (a proxy's error page
            # answered 200, a truncated body) confirmed nothing: it must not keep the
            # topology fresh while every reconnect fails the same way.
            if not (quiet or self._events) and time.monotonic() - (self.state.last_contact or 0.0) < 1.0:
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


class LiveTopology:
    """The live cluster as one ``ClusterSnapshot``, kept current by one watcher per kind.

    Implements the server's ``TopologySource``: :meth:`start` on the event loop starts
    the threads and a heartbeat that maintains ``updated_at``.
    """

    def __init__(self, api_client: k8s.ApiClient, policy: Policy | None = None, name: str = "cluster",
                 resources: Iterable[Resource] = RESOURCES, options: WatchOptions | None = None,
                 metrics: Metrics | None = None) -> None:
        from policies.topology import ClusterSnapshot, Topology

        self.api_client = api_client
        self.options = options or WatchOptions()
        self.metrics = metrics
        # Never synced: as stale as can be, so that nothing is judged on an empty cluster.
        self.snapshot = ClusterSnapshot(name=name, topology=Topology.from_objects([], policy),
                                        updated_at=float("-inf"))
        self.resources = tuple(resources)
        self.watchers: list[ResourceWatcher] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat: asyncio.Task[None] | None = None

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

    def ready(self) -> bool:
        return bool(self.watchers) and all(w.state.applied for w in self.watchers)

    def _sink(self, function: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closing during shutdown
                loop.call_soon_threadsafe(self._guarded, function, *args)

    @staticmethod
    def _guarded(function: Callable[..., None], *args: Any) -> None:
        try:
            function(*args)
        except Exception:  # noqa: BLE001 - one odd object must not stop the updates
            log.exception("topology update %s failed", getattr(function, "__name__", function))

    def refresh_updated_at(self) -> None:
        """``updated_at`` = the oldest confirmed contact over the kinds that exist."""
        now = time.monotonic()
        oldest = now
        for watcher in self.watchers:
            state = watcher.state
            if state.skipped and state.applied:
                continue
            if not state.applied:
                oldest = float("-inf")
                break
            # an open stream counts as contact only once it has delivered something valid
            contact = now if watcher.streaming else (state.last_contact or float("-inf"))
            oldest = min(oldest, contact)
        if self.watchers:
            self.snapshot.updated_at = oldest

    async def _beat(self) -> None:
        while True:
            self.refresh_updated_at()
            await asyncio.sleep(self.options.heartbeat_seconds)

    async def start(self, app: web.Application | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        topology = self.snapshot.topology
        self.watchers = [ResourceWatcher(r, self.api_client, self._sink, topology.apply, self.options,
                                         self.metrics) for r in self.resources]
        for watcher in self.watchers:
            watcher.start()
        self._heartbeat = self._loop.create_task(self._beat())

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        for watcher in self.watchers:
            watcher.request_stop()
        await asyncio.get_running_loop().run_in_executor(None, self._join)

    def _join(self) -> None:
        for watcher in self.watchers:
            watcher.stop(timeout=2.0)


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
