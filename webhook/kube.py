"""The Kubernetes list/watch protocol for the live topology: the resources watched, paginated
lists, and one :class:`ResourceWatcher` thread per kind (see :mod:`webhook.watch` for how
:class:`~webhook.watch.LiveTopology` applies what they hand over)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from policies.kinds import KINDS
from webhook import jsonio

if TYPE_CHECKING:
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
    name: str = ""          # what the topology files it under (policies.topology.WATCHED); "": kind
    # Versions read when ``version`` is not served (404), in order: an alpha API changes its
    # version with each Kubernetes release, and a cluster serves the one of its release.
    older_versions: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """Its name in counts, metrics and logs (two kinds are called Queue)."""
        return self.name or self.kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def at_versions(self) -> list[Resource]:
        """This resource at ``version``, then at each of ``older_versions``."""
        return [self, *(dataclasses.replace(self, version=v, older_versions=()) for v in self.older_versions)]

    def lister(self, api_client: k8s.ApiClient) -> Callable[..., Any]:
        """The client call that lists (or, with ``watch=True``, watches) this resource cluster-wide."""
        if not self.group:
            core = k8s.CoreV1Api(api_client)
            return getattr(core, _CORE_LISTERS[self.plural])
        custom = k8s.CustomObjectsApi(api_client)
        return functools.partial(custom.list_cluster_custom_object, self.group, self.version, self.plural)


_CORE_LISTERS = {"nodes": "list_node", "pods": "list_pod_for_all_namespaces", "namespaces": "list_namespace"}

# The server filters out finished pods; we filter again on our side for servers (and
# MODIFIED events) that still show them.
RESOURCES: tuple[Resource, ...] = (
    Resource("Node", "", "v1", "nodes"),
    Resource("Pod", "", "v1", "pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"),
    # their labels: whether Kueue manages a namespace's jobs (queues.kueueManagedJobsNamespaceSelector)
    Resource("Namespace", "", "v1", "namespaces", optional=True),
    Resource("Queue", "scheduling.volcano.sh", "v1beta1", "queues", optional=True),
    Resource("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", optional=True),
    Resource("HyperNode", "topology.volcano.sh", "v1alpha1", "hypernodes", optional=True),
    Resource("ElasticQuotaTree", "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", optional=True),
    # v1beta1: served by every Kueue release that has LocalQueues (v1beta2 only by the newest)
    Resource("LocalQueue", "kueue.x-k8s.io", "v1beta1", "localqueues", optional=True),
    # Kueue's quota objects: whether a ClusterQueue can ever admit a workload (v1beta2 from Kueue
    # 0.15, v1beta1 before; Cohorts were v1alpha1 until 0.11)
    Resource("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", optional=True,
             older_versions=("v1beta1",)),
    Resource("Cohort", "kueue.x-k8s.io", "v1beta2", "cohorts", optional=True,
             older_versions=("v1beta1", "v1alpha1")),
    Resource("ResourceFlavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors", optional=True,
             older_versions=("v1beta1",)),
    # Topology Aware Scheduling's levels (v1alpha1 before Kueue 0.14)
    Resource("Topology", "kueue.x-k8s.io", "v1beta2", "topologies", optional=True, name="KueueTopology",
             older_versions=("v1beta1", "v1alpha1")),
    # a ClusterQueue naming one missing or not active admits nothing
    Resource("AdmissionCheck", "kueue.x-k8s.io", "v1beta2", "admissionchecks", optional=True,
             older_versions=("v1beta1",)),
    Resource("Queue", "scheduling.run.ai", "v2", "queues", optional=True, name="KAIQueue"),
    # what a TrainJob names: judged with its runtime's pods
    Resource("TrainingRuntime", "trainer.kubeflow.org", "v1alpha1", "trainingruntimes", optional=True),
    Resource("ClusterTrainingRuntime", "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes",
             optional=True),
    # what a Pod names as its gang (the Workload API): a Workload's group in 1.35, a PodGroup
    # from 1.36 (policies/workload_api.py)
    Resource("Workload", "scheduling.k8s.io", "v1alpha1", "workloads", optional=True),
    Resource("PodGroup", "scheduling.k8s.io", "v1alpha3", "podgroups", optional=True,
             name="WorkloadAPIPodGroup", older_versions=("v1alpha2",)),
    # DRA (policies/feasibility/devices.py): v1 from 1.34, the betas still served before it
    *(Resource(kind, "resource.k8s.io", "v1", plural, optional=True, older_versions=("v1beta2", "v1beta1"))
      for kind, plural in (("DeviceClass", "deviceclasses"), ("ResourceSlice", "resourceslices"),
                           ("ResourceClaim", "resourceclaims"),
                           ("ResourceClaimTemplate", "resourceclaimtemplates"))),
)

# Kueue's record of each job it queues (admitted or not): ``gpugate audit`` reads it beside
# the workload kinds. Not the Workload API's Workload (scheduling.k8s.io), which is above.
KUEUE_WORKLOADS = Resource("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", optional=True,
                           name="KueueWorkload", older_versions=("v1beta1",))


def namespace_terminating(status: int, answer: Any) -> bool:
    """Whether the API server refused a write because its namespace is being deleted (the
    NamespaceLifecycle admission plugin: 403 with the cause ``NamespaceTerminating``), not for
    want of permission. ``answer``: the Status object it sent."""
    details = answer.get("details") if isinstance(answer, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    return status == 403 and isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def workload_resources(api_client: k8s.ApiClient) -> tuple[Resource, ...]:
    """The kinds of the kinds table (policies.kinds) that :data:`RESOURCES` does not list (Jobs,
    JobSets, RayClusters, Deployments, ...), each at the version the API server prefers for its
    group (one discovery call), and Kueue's Workloads; a group the server does not serve is left
    out. All optional: a kind these credentials may not list is skipped and named."""
    preferred = {"": "v1"}
    for group in k8s.ApisApi(api_client).get_api_versions().groups or []:
        if group.preferred_version is not None:
            preferred[group.name] = group.preferred_version.version
    listed = {(r.group, r.plural) for r in RESOURCES}
    found: list[Resource] = []
    for spec in KINDS:
        version = preferred.get(spec.group)
        if version is None or (spec.group, spec.resource) in listed:
            continue
        listed.add((spec.group, spec.resource))
        found.append(Resource(spec.kind, spec.group, version, spec.resource, optional=True,
                              name=spec.label))
    if "kueue.x-k8s.io" in preferred:
        found.append(KUEUE_WORKLOADS)
    return tuple(found)


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


def close_response(response: Any) -> None:
    with contextlib.suppress(Exception):
        response.close()
    with contextlib.suppress(Exception):
        response.release_conn()


class ListRestarted(Exception):
    """A paginated list had to start over (its continue token expired): pages already
    handed out are superseded by the ones that follow."""


def _served(versions: list[Resource]) -> str:
    """The API versions tried for a resource, for messages: ``group/v2`` or ``group/v2|v1``."""
    return "|".join([versions[0].api_version, *(r.version for r in versions[1:])])


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
            close_response(response)
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
        self._versions = resource.at_versions()     # self.resource is the one being read
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
            self._metrics.watch_restarts.labels(self.resource.label, reason).inc()

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
                if exc.status == 404 and self._next_version():
                    continue
                if exc.status in (403, 404) and self.resource.optional:
                    if not logged_missing:
                        why = "CRD not installed?" if exc.status == 404 else "forbidden: check the RBAC rules"
                        log.info("%s (%s) not readable (%s %s); skipped, retrying every %.0fs",
                                 self.resource.plural, _served(self._versions), exc.status, why,
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

    def _next_version(self) -> bool:
        """On to the next version of the resource (``Resource.older_versions``) after a 404;
        False when none is left (and back to the first, for the next look)."""
        index = self._versions.index(self.resource) + 1
        self.resource = self._versions[index % len(self._versions)]
        self.state.resource_version = None
        return index < len(self._versions)

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
                log.exception("topology %s of %s %s failed", event, self.resource.label, object_key(obj))

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
            close_response(response)

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
    built frozen (``gc.freeze``, as :func:`webhook.static.settle_heap` does for snapshot
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
