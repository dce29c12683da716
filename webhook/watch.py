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
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from webhook.kube import (
    READ_TIMEOUT_SECONDS,
    RESOURCES,
    GcGuard,
    Resource,
    ResourceWatcher,
    WatchOptions,
    close_response,
    list_objects,
)

if TYPE_CHECKING:
    from aiohttp import web

    from policies.config import Policy
    from webhook.metrics import Metrics

log = logging.getLogger("gpugate.watch")


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
                close_response(getattr(response, "response", response))

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
            items = _list_served(api_client, resource, options)
        except ApiException as exc:
            if not resource.optional or exc.status not in (403, 404):
                raise ExportFailed(resource, exc) from exc
            versions = "|".join([resource.version, *resource.older_versions])
            export.absent[resource.label] = (
                f"{resource.plural}.{resource.group}/{versions} is not served (CRD not installed)"
                if exc.status == 404 else
                f"listing {resource.plural}.{resource.group} is forbidden (403) for these credentials")
            log.info("%s: %s; skipped", resource.label, export.absent[resource.label])
            continue
        export.objects.extend(items)
        export.counts[resource.label] = len(items)
    return export


def _list_served(api_client: k8s.ApiClient, resource: Resource,
                 options: WatchOptions | None) -> list[dict[str, Any]]:
    """The objects of ``resource`` at the first of its versions the server serves; the last
    404 when it serves none."""
    *newer, oldest = resource.at_versions()
    for candidate in newer:
        try:
            return list_objects(api_client, candidate, options)[0]
        except ApiException as exc:
            if exc.status != 404:
                raise
    return list_objects(api_client, oldest, options)[0]


def snapshot_objects(api_client: k8s.ApiClient, resources: Iterable[Resource] = RESOURCES,
                     options: WatchOptions | None = None) -> list[dict[str, Any]]:
    """Every object of the topology kinds (see :func:`export_topology`)."""
    return export_topology(api_client, resources, options).objects


def default_kubeconfig() -> str | None:
    """kubectl's kubeconfig: the first file of ``$KUBECONFIG``, else ``~/.kube/config``; None
    when neither exists (then the in-cluster service account is used)."""
    for candidate in (*os.environ.get("KUBECONFIG", "").split(os.pathsep), "~/.kube/config"):
        path = os.path.expanduser(candidate) if candidate else ""
        if path and os.path.isfile(path):
            return path
    return None


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
