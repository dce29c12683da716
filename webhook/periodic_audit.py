"""The periodic audit of ``gpugate serve --audit-interval SECONDS``: every SECONDS, the pending
workloads of the cluster judged against the live topology (:func:`policies.audit.audit`, the
engine of ``gpugate audit``), a Warning Event on each one that will never run, and the counts
by verdict and cause in the metrics.

**Never on the reviews' time.** A run starts only while the live topology is synced and
fresh (:meth:`webhook.watch.LiveTopology.ready`; otherwise it is skipped and counted), and
never while the previous one is still going. It is a child forked on the event loop thread,
between two topology updates, as for large reviews (:func:`webhook.offload.run_in_child`): its
copy-on-write copy of the topology is consistent, and it has an interpreter of its own, so
neither its CPU work nor its interpreter lock ever holds a review. The child runs at low CPU
priority (``nice`` 10), offers itself first to the OOM killer, lists the pods, Volcano pod
groups and workload objects with an API client of its own (:func:`webhook.kube.workload_resources`,
:func:`webhook.watch.export_topology`), judges the pending ones against its copy of the
topology, writes the Events and sends back a summary of a few numbers. A run still going after
``max(interval, 10 min)`` is killed (counted as an error). Where ``os.fork`` does not exist the
run is a thread of this process: it shares the interpreter lock with the reviews (answers may
be slower while it runs) and reads the topology while the watch changes it.

**Events.** core/v1 Events, ``type: Warning``, ``reason: GpugateNeverFits``, message ``<why>
(<rule ID>)`` (at most 1,024 characters), ``source.component`` and ``reportingComponent``
``gpugate``, ``reportingInstance`` the pod's host name, on the subject (the object at the top of
the ownership tree: the Job, not its pods), in its namespace (``default`` for a cluster-scoped
one). The name is fixed by the subject's uid and the cause (``<name>.gpugate.<hash>``): a later
run finds it (409 AlreadyExists) and adds 1 to its ``count`` and moves ``lastTimestamp`` rather
than writing a second Event. An Event updated less than half an interval ago is left as it is:
with two replicas auditing, the second one's run does not count the same observation twice.
The API server deletes Events an hour after their last update (``--event-ttl``): one for a
workload that stopped being hopeless goes away by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import hashlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from policies.audit import VERDICTS, Entry, audit
from webhook import jsonio
from webhook.kube import RESOURCES, WatchOptions, close_response, namespace_terminating, workload_resources
from webhook.offload import CAN_FORK, private_views, run_in_child
from webhook.watch import export_topology

if TYPE_CHECKING:
    from policies.config import Policy
    from webhook.metrics import Metrics
    from webhook.watch import LiveTopology

log = logging.getLogger("gpugate.audit")

EVENT_REASON = "GpugateNeverFits"
COMPONENT = "gpugate"
MESSAGE_LIMIT = 1024            # what Kubernetes' own event recorders keep of a message
NAME_LIMIT = 253                # a DNS subdomain
# A run still going after this long (or after the interval, if longer) is killed.
RUN_TIMEOUT_SECONDS = 600.0
# Of the topology's kinds, what an audit lists in full: the pods of each tree (bound or not)
# and Volcano's pod groups (whether a gang is held back). Nodes, queues and quotas come from
# the live topology.
TREE_KINDS = frozenset({("", "pods"), ("scheduling.volcano.sh", "podgroups")})
# Connect and read timeouts of each Event request.
REQUEST_TIMEOUT = (2.0, 10.0)
_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")
# Event write outcomes counted in gpugate_audit_events_total ("unchanged" is not a write).
WRITES = ("created", "updated", "failed")


@dataclasses.dataclass
class AuditSummary:
    """What a run sends back to the server: numbers and words, no object."""

    by_cause: dict[tuple[str, str], int]     # pending subjects by (verdict, cause)
    events: dict[str, int]                  # created / updated / unchanged / failed
    errors: list[str]                       # the first few failed writes, in words
    seconds: float
    pid: int                                # the process that ran it (the child's)
    listed: int = 0                         # objects listed
    absent: dict[str, str] = dataclasses.field(default_factory=dict)   # kinds not listed, why


@dataclasses.dataclass(frozen=True)
class AuditJob:
    """One run's parameters, taken on the loop when it starts."""

    configuration: k8s.Configuration        # the live topology's API access
    policy: Policy
    instance: str                           # reportingInstance of the Events
    refresh_after: float                    # an Event updated more recently is left as it is
    options: WatchOptions


# -- the Events ---------------------------------------------------------------------------------

def _timestamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(entry: Entry) -> str:
    """``<name>.gpugate.<hash of the uid and the cause>``: the same Event for the same
    subject and cause on every run (and every replica), a new one when the cause changes."""
    assert entry.gang is not None
    ref = entry.subject.ref
    key = entry.subject.uid or f"{ref.api_version}/{ref.kind}/{ref.namespace}/{ref.name}"
    suffix = f".gpugate.{hashlib.sha256(f'{key}/{entry.gang.cause}'.encode()).hexdigest()[:10]}"
    head = _NOT_IN_NAME.sub("-", (ref.name or "").lower())[:NAME_LIMIT - len(suffix)].strip(".-")
    return (head or "object") + suffix


def event_message(entry: Entry) -> str:
    """``<why> (<rule ID>)``, the why cut to fit in :data:`MESSAGE_LIMIT` characters."""
    assert entry.gang is not None
    tail = f" ({entry.gang.rule})" if entry.gang.rule else ""
    reason = entry.gang.reason.strip()
    if len(reason) + len(tail) > MESSAGE_LIMIT:
        reason = reason[:MESSAGE_LIMIT - len(tail) - 1].rstrip() + "…"
    return reason + tail


def event_for(entry: Entry, now: dt.datetime, instance: str) -> dict[str, Any]:
    """The core/v1 Event saying that ``entry``'s subject will never run."""
    ref = entry.subject.ref
    involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name or ""}
    if ref.namespace:
        involved["namespace"] = ref.namespace
    if uid := entry.subject.uid:
        involved["uid"] = uid
    stamp = _timestamp(now)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name(entry), "namespace": ref.namespace or "default",
                         "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
            "involvedObject": involved, "type": "Warning", "reason": EVENT_REASON,
            "message": event_message(entry), "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": instance,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


def _call(api_client: k8s.ApiClient, method: str, path: str, body: Any = None,
          content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    """One request to the API server: its status and its JSON answer ({} when not an object).
    Raw JSON rather than the client's models: the Event stays the dict it was written as."""
    response = None
    try:
        method, url, headers, data, post = api_client.param_serialize(
            method, path, header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body, auth_settings=["BearerToken"])
        response = api_client.call_api(method, url, header_params=headers, body=data, post_params=post,
                                       _request_timeout=REQUEST_TIMEOUT)
        raw = response.read()
        status = int(response.status)
    except ApiException as exc:
        return int(exc.status or 0), {}
    finally:
        if response is not None:
            close_response(getattr(response, "response", response))
    try:
        answer = jsonio.loads(raw) if raw else {}
    except ValueError:
        answer = {}
    return status, answer if isinstance(answer, dict) else {}


class EventWriter:
    """Writes the Events of one run and counts what it did (:data:`WRITES` and ``unchanged``)."""

    MAX_ERRORS = 5   # failures kept in words (all are counted)

    def __init__(self, api_client: k8s.ApiClient, instance: str, refresh_after: float,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.api_client = api_client
        self.instance = instance
        self.refresh_after = refresh_after
        self.clock = clock
        self.counts = dict.fromkeys((*WRITES, "unchanged"), 0)
        self.errors: list[str] = []
        self._forbidden = False

    def write(self, entry: Entry) -> None:
        """The Event of a subject that will never run: created, or its count moved on."""
        if self._forbidden:   # one 403 says it for every Event of the run
            self.counts["failed"] += 1
            return
        body = event_for(entry, self.clock(), self.instance)
        try:
            outcome = self._write(body)
        except Exception as exc:  # noqa: BLE001 - refused, reset, timed out: counted, the run goes on
            outcome = f"{type(exc).__name__}: {exc}"[:200]
        if outcome in self.counts:
            self.counts[outcome] += 1
            return
        self.counts["failed"] += 1
        meta = body["metadata"]
        if len(self.errors) < self.MAX_ERRORS:
            self.errors.append(f"Event {meta['namespace']}/{meta['name']}: {outcome}")

    def _write(self, body: dict[str, Any]) -> str:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        events = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        for _ in (1, 2):   # a second time if the Event expired between the create and the read
            status, answer = _call(self.api_client, "POST", events, body)
            if status in (200, 201):
                return "created"
            if status != 409:
                return self._refused(status, answer)
            path = f"{events}/{quote(name, safe='')}"
            status, current = _call(self.api_client, "GET", path)
            if status == 404:
                continue
            if status != 200:
                return self._refused(status, current)
            return self._count_again(path, body, current)
        return "unchanged"   # created and deleted again meanwhile: nothing to add

    def _count_again(self, path: str, body: dict[str, Any], current: dict[str, Any]) -> str:
        """The Event exists: one more observation, unless one was counted a moment ago."""
        now = self.clock()
        last = current.get("lastTimestamp")
        with contextlib.suppress(TypeError, ValueError):
            if (now - dt.datetime.fromisoformat(str(last))).total_seconds() < self.refresh_after:
                return "unchanged"
        count = current.get("count")
        meta = current.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        patch: dict[str, Any] = {"count": (count if isinstance(count, int) else 1) + 1,
                                 "lastTimestamp": _timestamp(now), "message": body["message"],
                                 "reportingInstance": self.instance}
        if isinstance(version, str) and version:
            # a merge patch on the version read: a replica that updated it meanwhile wins (409)
            patch["metadata"] = {"resourceVersion": version}
        status, answer = _call(self.api_client, "PATCH", path, patch, "application/merge-patch+json")
        if status == 200:
            return "updated"
        if status == 409:
            return "unchanged"
        return self._refused(status, answer)

    def _refused(self, status: int, answer: dict[str, Any]) -> str:
        if namespace_terminating(status, answer):    # that namespace only: the run goes on
            return "the namespace is being deleted"
        if status == 403:
            self._forbidden = True
            return "forbidden (403): grant create, get and patch on events (deploy/components/audit)"
        message = answer.get("message")
        return f"answered {status}" + (f": {str(message)[:160]}" if message else "")


# -- one run ------------------------------------------------------------------------------------

def run_audit(job: AuditJob, clusters: Sequence[Any] | None,
              tell: Callable[[str], None] | None = None) -> AuditSummary:
    """List the workloads, judge the pending ones against ``clusters[0]`` and write the Events
    (in the forked child, or a thread). ``tell`` is the child's channel for a review's uid:
    unused."""
    started = time.monotonic()
    if not clusters:
        raise RuntimeError("no topology to judge against")
    # The copy was fresh when the run started (it only starts then): judged as of that moment,
    # however long the listing takes, never reported stale.
    snapshot = dataclasses.replace(clusters[0], updated_at=None)
    api_client = k8s.ApiClient(job.configuration)
    try:
        resources = (*(r for r in RESOURCES if (r.group, r.plural) in TREE_KINDS),
                     *workload_resources(api_client))
        export = export_topology(api_client, resources, job.options)
        found = audit(export.objects, snapshot, job.policy, scan=False)
        writer = EventWriter(api_client, job.instance, job.refresh_after)
        for entry in found.pending:
            if entry.gang is not None and entry.gang.verdict == "never":
                writer.write(entry)
    finally:
        api_client.close()
    return AuditSummary(found.by_cause(), writer.counts, writer.errors, time.monotonic() - started,
                        os.getpid(), len(export.objects), export.absent)


def _run_in_child(job: AuditJob, clusters: Sequence[Any] | None,
                  tell: Callable[[str], None] | None = None) -> AuditSummary:  # pragma: no cover - child
    """:func:`run_audit` in the forked child: behind the reviews for the CPU, first in line
    for the OOM killer (it holds every pod listed; the server must not be the one killed)."""
    os.nice(10)
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")
    # kinds the cluster does not serve: the server says so once, not the child at every run
    logging.getLogger("gpugate.watch").setLevel(logging.WARNING)
    return run_audit(job, clusters, tell)


# -- the schedule -------------------------------------------------------------------------------

class PeriodicAudit:
    """Runs an audit every ``interval`` seconds beside the reviews (a
    :class:`webhook.app.BackgroundTask`): the first as soon as the live topology is ready, then
    on a fixed beat; a beat is skipped while the previous run is still going, or while the
    topology is not synced or stale. ``policy`` returns the policy in force."""

    def __init__(self, topology: LiveTopology, policy: Callable[[], Policy], metrics: Metrics,
                 interval: float, *, timeout: float | None = None, refresh_after: float | None = None,
                 instance: str | None = None, options: WatchOptions | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"the audit interval must be positive, not {interval}")
        self.topology = topology
        self.policy = policy
        self.metrics = metrics
        self.interval = interval
        self.timeout = max(RUN_TIMEOUT_SECONDS, interval) if timeout is None else timeout
        self.refresh_after = interval / 2 if refresh_after is None else refresh_after
        self.instance = instance or socket.gethostname()
        self.options = options or WatchOptions()
        self.last: AuditSummary | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._run: asyncio.Task[str] | None = None
        self._absent: dict[str, str] = {}
        self._said_thread = False

    async def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._beat())
        log.info("audit every %g s (Warning Events %s on workloads that will never run)", self.interval,
                 EVENT_REASON)

    async def stop(self) -> None:
        """Stop the beat, and a run in progress (its child is killed)."""
        for task in (self._ticker, self._run):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        first = loop.time() + self.interval
        while not self.topology.ready() and loop.time() < first:
            await asyncio.sleep(min(1.0, self.interval))
        due = loop.time()
        while True:
            if self._run is not None and not self._run.done():
                log.info("audit skipped: the previous run is still going")
                self._count("skipped_busy")
            else:
                self._run = loop.create_task(self.run_once())
            due += self.interval
            await asyncio.sleep(max(0.0, due - loop.time()))

    def _count(self, result: str) -> str:
        self.metrics.audit_runs.labels(result).inc()
        return result

    async def run_once(self) -> str:
        """One audit now, unless the topology is not synced or stale; its result, as counted in
        ``gpugate_audit_runs_total`` (ok, error, skipped_stale)."""
        if not self.topology.ready():
            state = "not synced yet" if not self.topology.synced() else f"{self.topology.age():.0f} s old"
            log.info("audit skipped: the live topology is %s", state)
            return self._count("skipped_stale")
        job = AuditJob(self.topology.api_client.configuration, self.policy(), self.instance,
                       self.refresh_after, self.options)
        started = time.monotonic()
        try:
            summary = await self._run_job(job)
        except TimeoutError:
            log.error("audit: not finished within %g s; stopped", self.timeout)
            return self._failed(started)
        except Exception as exc:  # noqa: BLE001 - an audit problem must not touch the serving
            log.error("audit failed: %s", f"{type(exc).__name__}: {exc}"[:500])
            return self._failed(started)
        return self._record(summary)

    async def _run_job(self, job: AuditJob) -> AuditSummary:
        if CAN_FORK:
            # the fork happens in this task's next step, on the loop thread: between two updates
            kind, value = await asyncio.wait_for(
                run_in_child(functools.partial(_run_in_child, job), self.topology.clusters()), self.timeout)
            if kind != "ok":
                raise RuntimeError(str(value))
            summary: AuditSummary = value
            return summary
        if not self._said_thread:
            log.warning("os.fork is not available: the audit runs in a thread of the server, sharing the "
                        "interpreter lock with the reviews (answers may be slower while it runs)")
            self._said_thread = True
        views = private_views(self.topology.clusters())
        loop = asyncio.get_running_loop()
        done: AuditSummary = await loop.run_in_executor(None, run_audit, job, views)
        return done

    def _failed(self, started: float) -> str:
        self.metrics.audit_duration.set(time.monotonic() - started)
        return self._count("error")

    def _record(self, summary: AuditSummary) -> str:
        self.last = summary
        metrics = self.metrics
        metrics.set_audit_pending(summary.by_cause)
        metrics.audit_duration.set(summary.seconds)
        for result in WRITES:
            if summary.events.get(result):
                metrics.audit_events.labels(result).inc(summary.events[result])
        if summary.absent != self._absent:
            for kind, why in sorted(summary.absent.items()):
                log.info("audit: %s not listed: %s", kind, why)
            self._absent = dict(summary.absent)
        verdicts = dict.fromkeys(VERDICTS, 0)
        for (verdict, _), count in summary.by_cause.items():
            verdicts[verdict] = verdicts.get(verdict, 0) + count
        log.info("audit: %d pending (%s) of %d objects listed; Events: %s; %.1f s",
                 sum(verdicts.values()), ", ".join(f"{v} {n}" for v, n in verdicts.items()),
                 summary.listed, ", ".join(f"{n} {w}" for w, n in summary.events.items() if n) or "none",
                 summary.seconds)
        for error in summary.errors:
            log.warning("audit: %s", error)
        if summary.errors:
            return self._count("error")
        metrics.audit_last_success.set(time.time())
        return self._count("ok")
