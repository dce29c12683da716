"""The aiohttp applications: HTTPS ``POST /mutate``, ``POST /validate``, ``GET /healthz``,
``GET /livez``, ``GET /readyz``; and, on a port of its own, plain HTTP ``GET /metrics``.

Reviews of ordinary size are evaluated on the event loop thread: they take a fraction of a
millisecond, and the topology they read is updated on the same thread (the watch threads
hand their events over with ``call_soon_threadsafe``), so no lock is needed.

**Large reviews** (bodies over ``OFFLOAD_BYTES``, 128 KiB, or naming more than
``OFFLOAD_POD_TEMPLATES``, 64, pod templates; the API server sends a few KiB for an ordinary
object) are parsed, judged and serialised off the event loop, so that no review
holds it for long (a 3 MB review of the worst shape takes seconds of CPU; parsing 3 MB of JSON
is a single 80 ms C call that holds the interpreter lock, and freeing the parsed review tens of
milliseconds more). Where ``os.fork`` exists, in a forked child, one at a time: the fork is
taken on the loop thread between two callbacks, so the child's copy-on-write snapshot of the
live topology (which the watch threads only ever change through callbacks on the loop) is never
torn; the child has an interpreter of its own, writes the uid as soon as it has parsed the
review and then the answer to a pipe, and is killed at the deadline. Elsewhere, in one worker
thread against *private views* of the snapshots (shallow copies with derived-data caches and an
answer memo of their own, so nothing it computes is seen by other reviews), and the loop
compares the topology's version counters (``Topology.state_versions``, which every mutation
moves) before and after: a run during which the topology changed may have read torn state and
is thrown away, judged once more, and if the topology changed again, without it (feasibility
then answers GG406, not checked). Static snapshots are never mutated, only swapped whole.

**Deadlines and shedding.** The API server gives up on a call after its ``timeoutSeconds``
(1 s for ``/mutate``, 2 s for ``/validate``) and applies the failure policy. gpugate answers
before that: a review that waited (queued behind others: arrival is when its bytes were read
from the socket) longer than ``SHED_AFTER_SECONDS`` (0.5 s), or a large review the
worker has not finished within ``DEADLINE_SECONDS`` (0.8 s / 1.6 s), is *shed*: answered at
once, unchecked, with ``allowed: true`` and the warning ``gpugate: overloaded, not checked``
(or, with ``overload_answer="deny"``, a denial with code 429 for ``/validate``), and counted
in ``gpugate_reviews_shed_total``. Beyond ``MAX_IN_FLIGHT`` reviews being read, queued or
evaluated at once, a new one is answered 429 without being read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from policies.config import Policy
from policies.findings import Severity
from webhook import jsonio
from webhook.admission import (
    MAX_BODY_BYTES,
    ReviewError,
    ScaleTarget,
    admit,
    envelope,
    parse_review,
    scale_target,
)
from webhook.logs import install_log_scrubber
from webhook.metrics import CONTENT_TYPE, Metrics
from webhook.offload import (
    CAN_FORK,
    fingerprint,
    private_views,
    run_in_child,
    without_collections,
)
from webhook.reload import PolicySource
from webhook.static import StaticTopology
from webhook.tls import ReloadingContext

log = logging.getLogger("gpugate.webhook")

RELOAD_INTERVAL_SECONDS = 2.0
# The API server sends a review in one write and gives up after timeoutSeconds (3 s here,
# 30 s at most): a body still incomplete after this is a broken or hostile client.
BODY_TIMEOUT_SECONDS = 5.0
# Idle keep-alive connections (and connections that never finish their headers) are
# closed after this. The API server's webhook client is Go's net/http Transport with
# Kubernetes' defaults: an idle connection is kept in its pool for at most 90 s
# (IdleConnTimeout) and reused for the next call. A server that closes first races the
# client: a call written on a connection the server is closing fails ("EOF", "connection reset")
# and a POST is not retried once any byte was written. So the server waits a little longer
# than 90 s: the client always closes idle connections first, and an idle connection costs
# at most 95 s of a slot (of MAX_CONNECTIONS, 16-40 KiB each).
KEEPALIVE_TIMEOUT_SECONDS = 95.0
# Reviews judged off the event loop (see the module's doc): bodies over this ...
OFFLOAD_BYTES = 128 * 1024
# ... or naming more pod templates than this (counted as "containers" keys in the bytes). A
# review's work grows with its pod templates, each a pod set to judge and place, more than with
# its bytes: against 10,000 nodes, 64 never-seen templates take up to about 90 ms cold, while a
# JobSet of 64 one-pod jobs of one template (78 KB) takes 4.5 ms, and a forked child about 30 ms.
# Within both bounds the worst shapes found (one pod of 128 KiB of containers, resources or
# affinity terms) hold the loop 45-100 ms.
OFFLOAD_POD_TEMPLATES = 64
# Shed a review that waited this long before the loop got to it (see the module's doc) ...
SHED_AFTER_SECONDS = {"mutate": 0.5, "validate": 0.5}
# ... or whose evaluation in the worker has not finished this long after it arrived.
DEADLINE_SECONDS = {"mutate": 0.8, "validate": 1.6}
# Reviews being read, queued or evaluated at once; beyond it, 429 at once.
MAX_IN_FLIGHT = 512
OVERLOAD_WARNING = "gpugate: overloaded, not checked"
# Large request bodies buffered at once. Without a bound every connection uploading a 4 MiB
# body holds 4.6 MiB (about 75 of them exhaust the Deployment's 512 MiB); beyond the budget
# they wait their turn, holding ~1.3 MiB each (measured: what aiohttp and the TLS layer read
# ahead). Reviews from the API server are a few kilobytes: bodies up to SMALL_BODY_BYTES
# never wait, so slow large uploads cannot hold up ordinary reviews.
BODY_BUDGET_BYTES = 32 * 1024 * 1024
SMALL_BODY_BYTES = 256 * 1024


class BodyBudget:
    """At most ``limit`` bytes of request bodies being read at once, first come first served."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reserve(self, size: int) -> AsyncIterator[None]:
        size = max(0, min(size, self.limit))
        async with self._changed:
            await self._changed.wait_for(lambda: self.used + size <= self.limit)
            self.used += size
        try:
            yield
        finally:
            self.used -= size
            async with self._changed:
                self._changed.notify_all()


class TopologySource(Protocol):
    """Where the cluster snapshots come from: a static file or the live watch."""

    def clusters(self) -> Sequence[Any] | None: ...

    def ready(self) -> bool: ...

    async def start(self, app: web.Application) -> None: ...

    async def stop(self) -> None: ...


class BackgroundTask(Protocol):
    """Work the server runs beside the reviews (the periodic audit), started once the
    topology is and stopped before it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclasses.dataclass
class _Judged:
    """What the worker sends back for a large review: no part of the parsed review."""

    uid: str
    shed: bool = False
    kind: str = ""
    verdict: str = ""
    findings: list[Any] = dataclasses.field(default_factory=list)
    answer: bytes = b""
    line: str | None = None     # the log line's findings, for a denial (or at debug level)


def _findings_line(findings: Sequence[Any]) -> str:
    # Names in messages come from the client (unvalidated before admission): escape control
    # characters so that no one can forge log lines; never the object itself.
    return repr("; ".join(f"{f.rule} {f.message}" for f in findings
                          if f.severity >= Severity.WARNING)[:500])[1:-1]


def _judge_large(body: bytes, content_type: str | None, max_body_bytes: int, endpoint: str,
                 policy: Policy, shed_at: float, seen: dict[str, str],
                 clusters: Sequence[Any] | None, tell: Callable[[str], None] | None = None) -> _Judged:
    """In the forked child (or the worker thread): parse, judge, serialise one large review
    (``ReviewError`` when malformed); ``seen["uid"]`` and ``tell(uid)`` as soon as it is
    known. A scale request is never this large: its object is not read."""
    began = time.monotonic()            # the loop's clock (asyncio's loop.time() is monotonic)
    request = parse_review(body, content_type, max_body_bytes)
    uid: str = request["uid"]
    seen["uid"] = uid
    if tell is not None:
        tell(uid)
    if began > shed_at:                 # waited too long for its turn (its own parse is not waiting)
        return _Judged(uid, shed=True)
    target = scale_target(request, endpoint)
    outcome = admit(request, endpoint, policy, clusters, parent=None,
                    parent_error="the scale request is too large" if target is not None else "")
    line = (_findings_line(outcome.findings)
            if outcome.verdict == "denied" or log.isEnabledFor(logging.DEBUG) else None)
    return _Judged(uid, False, outcome.kind, outcome.verdict, list(outcome.findings),
                   jsonio.dumps(outcome.review), line)


class Webhook:
    """The server's state: policy, topology, metrics, TLS; builds the aiohttp apps."""

    def __init__(self, policy: PolicySource | None = None, topology: TopologySource | None = None,
                 metrics: Metrics | None = None, tls: ReloadingContext | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES,
                 reload_interval: float = RELOAD_INTERVAL_SECONDS,
                 body_timeout: float = BODY_TIMEOUT_SECONDS,
                 body_budget_bytes: int = BODY_BUDGET_BYTES,
                 offload_bytes: int = OFFLOAD_BYTES,
                 offload_pod_templates: int = OFFLOAD_POD_TEMPLATES,
                 shed_after: dict[str, float] | None = None,
                 deadline: dict[str, float] | None = None,
                 max_in_flight: int = MAX_IN_FLIGHT,
                 overload_answer: str = "allow",
                 background: Sequence[BackgroundTask] = ()) -> None:
        self.body_timeout = body_timeout
        self.bodies = BodyBudget(body_budget_bytes)
        self.topology = topology or StaticTopology()
        self.metrics = metrics or Metrics(self.topology.clusters)
        self.policy = policy or PolicySource()
        self.tls = tls
        self.max_body_bytes = max_body_bytes
        self.reload_interval = reload_interval
        self.offload_bytes = offload_bytes
        self.offload_pod_templates = offload_pod_templates
        self.shed_after = dict(shed_after or SHED_AFTER_SECONDS)
        self.deadline = dict(deadline or DEADLINE_SECONDS)
        self.max_in_flight = max_in_flight
        if overload_answer not in ("allow", "deny"):
            raise ValueError(f"overload_answer must be allow or deny, not {overload_answer!r}")
        self.overload_answer = overload_answer
        self.background = tuple(background)
        self.in_flight = 0
        self.draining = False
        self.answered: dict[str, int] = {}
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._child_slot: asyncio.Semaphore | None = None
        self._reloader: asyncio.Task[None] | None = None
        self.metrics.in_flight.set_function(lambda: self.in_flight)

    def answered_summary(self) -> str:
        parts = [f"{endpoint} {count}" for endpoint, count in sorted(self.answered.items())]
        return f"{sum(self.answered.values())} review(s) ({', '.join(parts) or 'none'})"

    def _count_answer(self, endpoint: str) -> None:
        self.answered[endpoint] = self.answered.get(endpoint, 0) + 1

    # -- shedding ---------------------------------------------------------------------
    def _shed(self, endpoint: str, uid: str, reason: str, waited: float) -> web.Response:
        """The documented answer for a review gpugate cannot judge in time."""
        self.metrics.shed.labels(endpoint, reason).inc()
        self._count_answer(endpoint)
        log.warning("/%s uid=%r shed (%s, %.0f ms after it arrived): answered unchecked", endpoint,
                    uid, reason, waited * 1000)
        if endpoint == "validate" and self.overload_answer == "deny":
            answer = envelope(uid, allowed=False, status={
                "code": 429, "reason": "TooManyRequests",
                "message": f"{OVERLOAD_WARNING}; retry"})
        else:
            answer = envelope(uid, warnings=[OVERLOAD_WARNING])
        return self._respond(jsonio.dumps(answer))

    def _respond(self, body: bytes) -> web.Response:
        response = web.Response(body=body, content_type="application/json")
        if self.draining:
            # SIGTERM received: the API server's next call should open a new connection,
            # which the Service sends to a ready pod
            response.force_close()
        return response

    def _arrived(self, request: web.Request, fallback: float) -> float:
        arrived = getattr(request.protocol, "arrived", 0.0)
        return arrived if arrived > 0 else fallback

    # -- handlers -------------------------------------------------------------------
    async def review(self, request: web.Request, endpoint: str) -> web.Response:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        arrived = self._arrived(request, loop.time())
        if self.in_flight >= self.max_in_flight:
            self.metrics.shed.labels(endpoint, "in-flight").inc()
            self.metrics.malformed.labels(endpoint, "429").inc()
            log.warning("/%s: %d reviews in flight, answering 429 without reading", endpoint, self.in_flight)
            response = web.json_response({"error": f"server busy: {self.in_flight} reviews in flight; retry",
                                          "code": 429}, status=429)
            response.force_close()
            return response
        self.in_flight += 1
        try:
            return await self._review(request, endpoint, started, arrived)
        finally:
            self.in_flight -= 1

    async def _read_body(self, request: web.Request) -> bytes:
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:
            raise ReviewError(f"request body of {declared} bytes exceeds the limit of "
                              f"{self.max_body_bytes} bytes", 413)
        size = self.max_body_bytes if declared is None else declared  # chunked: assume the worst
        budget = self.bodies.reserve(size) if size > SMALL_BODY_BYTES else contextlib.nullcontext()
        reading = False
        try:
            if size <= SMALL_BODY_BYTES and request.content.is_eof():
                # The usual case: the whole body came with the headers; nothing to wait for.
                return await request.read()
            # A client that trickles its body (slowloris) must not hold a handler forever.
            async with asyncio.timeout(self.body_timeout):
                async with budget:
                    reading = True
                    return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ReviewError(f"request body exceeds the limit of {self.max_body_bytes} bytes",
                              413) from None
        except ConnectionError:  # the client went away mid-body: nobody to answer, no traceback
            raise ReviewError("client closed the connection while sending the body") from None
        except TimeoutError:
            if not reading:
                raise ReviewError(f"server busy: {self.bodies.limit} bytes of other large request "
                                  f"bodies were being read for {self.body_timeout:g} s; retry",
                                  429) from None
            raise ReviewError(f"request body not received within {self.body_timeout:g} s", 408) from None

    async def _review(self, request: web.Request, endpoint: str, started: float,
                      arrived: float) -> web.Response:
        loop = asyncio.get_running_loop()
        content_type = request.headers.get("Content-Type")
        try:
            body = await self._read_body(request)
            if len(body) > self.offload_bytes or body.count(b'"containers"') > self.offload_pod_templates:
                return await self._review_large(request, endpoint, body, content_type, started, arrived)
            review_request = parse_review(body, content_type, self.max_body_bytes)
        except ReviewError as exc:
            return self._malformed(request, endpoint, exc)
        uid = review_request["uid"]
        waited = loop.time() - arrived
        if waited > self.shed_after[endpoint]:
            return self._shed(endpoint, uid, "waited", waited)
        parent: dict[str, Any] | None = None
        parent_error = ""
        target = scale_target(review_request, endpoint)
        if target is not None:
            parent, parent_error = await self._read_parent(target)
        try:
            outcome = admit(review_request, endpoint, self.policy.policy, self.topology.clusters(),
                            parent=parent, parent_error=parent_error)
        except Exception as exc:  # noqa: BLE001 - fail open with a warning, never a 500
            return self._internal_error(endpoint, uid, exc)
        self.metrics.count_review(endpoint, outcome.kind, outcome.verdict, outcome.findings,
                                  time.perf_counter() - started)
        self._count_answer(endpoint)
        if outcome.verdict == "denied" or log.isEnabledFor(logging.DEBUG):
            log.info("%s %s uid=%r: %s", endpoint, outcome.verdict, uid, _findings_line(outcome.findings))
        return self._respond(jsonio.dumps(outcome.review))

    def _malformed(self, request: web.Request, endpoint: str, exc: ReviewError) -> web.Response:
        self.metrics.malformed.labels(endpoint, str(exc.status)).inc()
        log.warning("malformed review on /%s from %s: %s", endpoint, request.remote, exc.reason)
        return web.json_response({"error": exc.reason, "code": exc.status}, status=exc.status)

    def _internal_error(self, endpoint: str, uid: str, exc: BaseException) -> web.Response:
        log.error("internal error on /%s for uid %r", endpoint, uid, exc_info=exc)
        self.metrics.internal_errors.labels(endpoint).inc()
        self._count_answer(endpoint)
        answer = envelope(uid, warnings=[f"gpugate: internal error, object not checked "
                                         f"({type(exc).__name__})"[:119]])
        return self._respond(jsonio.dumps(answer))

    # -- large reviews: in the worker thread ----------------------------------------
    async def _review_large(self, request: web.Request, endpoint: str, body: bytes,
                            content_type: str | None, started: float, arrived: float) -> web.Response:
        """Parse, judge and serialise in the worker, so that neither the work nor freeing the
        parsed review (hundreds of thousands of objects) happens on the loop."""
        loop = asyncio.get_running_loop()
        self.metrics.offloaded.labels(endpoint).inc()
        seen: dict[str, str] = {}     # the uid, once the worker has parsed the review
        job = functools.partial(_judge_large, body, content_type, self.max_body_bytes, endpoint,
                                self.policy.policy, arrived + self.shed_after[endpoint], seen)
        size = len(body)
        del body
        remaining = arrived + self.deadline[endpoint] - loop.time()
        try:
            if CAN_FORK:
                judged = await asyncio.wait_for(self._judge_in_child(job, seen), max(0.0, remaining))
            else:
                judged = await asyncio.wait_for(asyncio.shield(self._judge_consistently(job)),
                                                max(0.0, remaining))
        except TimeoutError:
            if "uid" in seen:
                return self._shed(endpoint, seen["uid"], "deadline", loop.time() - arrived)
            self.metrics.shed.labels(endpoint, "deadline").inc()
            log.warning("/%s: a %d-byte review not even parsed within its deadline; answering 503",
                        endpoint, size)
            return web.json_response({"error": "server busy: not judged in time; retry", "code": 503},
                                     status=503)
        except ReviewError as exc:
            return self._malformed(request, endpoint, exc)
        except Exception as exc:  # noqa: BLE001 - fail open with a warning, never a 500
            return self._internal_error(endpoint, seen.get("uid", ""), exc)
        if judged.shed:
            return self._shed(endpoint, judged.uid, "waited", loop.time() - arrived)
        self.metrics.count_review(endpoint, judged.kind, judged.verdict, judged.findings,
                                  time.perf_counter() - started)
        self._count_answer(endpoint)
        if judged.line is not None:
            log.info("%s %s uid=%r: %s", endpoint, judged.verdict, judged.uid, judged.line)
        return self._respond(judged.answer)

    async def _judge_in_child(self, job: Callable[..., _Judged], seen: dict[str, str]) -> _Judged:
        """``job(clusters)`` in a forked child: a copy-on-write snapshot of this process taken
        on the loop thread, between two topology mutations (so never torn), with an interpreter
        of its own (no C call of the evaluation, such as parsing 3 MB of JSON, holds this
        process's interpreter lock), killed when the deadline passes. One child at a time."""
        if self._child_slot is None:
            self._child_slot = asyncio.Semaphore(1)

        def told(head: bytes) -> None:   # killed at the deadline: the uid, if it was parsed
            with contextlib.suppress(ValueError, TypeError):
                seen["uid"] = str(jsonio.loads(head)) if head else seen.get("uid", "")
            if not seen.get("uid"):
                seen.pop("uid", None)

        async with self._child_slot:
            kind, value = await run_in_child(job, self.topology.clusters(), told)
        if kind == "ok":
            judged: _Judged = value
            return judged
        if kind == "review-error":
            raise ReviewError(*value)
        raise RuntimeError(value)

    async def _in_worker(self, function: Callable[[], Any]) -> Any:
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpugate-review")
        return await asyncio.get_running_loop().run_in_executor(self._worker, without_collections, function)

    async def _judge_consistently(self, job: Callable[..., _Judged]) -> _Judged:
        """``job(clusters)`` in the worker against private views of the snapshots; a run during
        which the topology changed is not used (see the module's doc)."""
        for attempt in (1, 2):
            clusters = self.topology.clusters()
            before = fingerprint(clusters)       # on the loop thread: between two mutations
            judged: _Judged = await self._in_worker(functools.partial(job, private_views(clusters)))
            if judged.shed or fingerprint(self.topology.clusters()) == before:
                return judged
            log.info("uid=%r: the topology changed during an evaluation in the worker (attempt %d)",
                     judged.uid, attempt)
        # changing too often for a consistent read: judge without it (feasibility: GG406)
        last: _Judged = await self._in_worker(functools.partial(job, []))
        return last

    async def _read_parent(self, target: ScaleTarget) -> tuple[dict[str, Any] | None, str]:
        """The object a scale-up scales, read from the API server (live topology only)."""
        read = getattr(self.topology, "read_object", None)
        if read is None:
            return None, "no API server access with a static topology"
        try:
            found = await read(target.group, target.version, target.resource, target.namespace, target.name)
        except Exception as exc:  # noqa: BLE001 - the read decides nothing but "not checked"
            log.warning("reading %s %s/%s for a scale-up failed: %s", target.resource, target.namespace,
                        target.name, type(exc).__name__)
            return None, f"reading it failed: {type(exc).__name__}"
        if not isinstance(found, dict):
            return None, "the API server returned no object"
        return found, ""

    async def mutate(self, request: web.Request) -> web.Response:
        return await self.review(request, "mutate")

    async def validate(self, request: web.Request) -> web.Response:
        return await self.review(request, "validate")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def livez(self, request: web.Request) -> web.Response:
        """The process serves HTTPS; never depends on the API server (a liveness probe that
        did would restart every replica at once during an API server outage)."""
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.draining:
            return web.Response(text="shutting down\n", status=503)
        if self.topology.ready():
            return web.Response(text="ok\n")
        return web.Response(text="topology not synced yet\n", status=503)

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        response = web.Response(body=self.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    # -- reloads --------------------------------------------------------------------
    def reload_once(self) -> None:
        self.policy.maybe_reload()
        if self.tls is not None:
            self.tls.maybe_reload()
        reload_topology = getattr(self.topology, "maybe_reload", None)  # static snapshot files
        if reload_topology is not None:
            reload_topology()

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                self.reload_once()
            except Exception:  # noqa: BLE001 - a reload problem must not stop the reloads
                log.exception("reload check failed")

    async def _on_startup(self, app: web.Application) -> None:
        self._reloader = asyncio.get_running_loop().create_task(self._reload_loop())
        await self.topology.start(app)
        for task in self.background:
            await task.start()

    async def _on_cleanup(self, app: web.Application) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        for task in self.background:
            await task.stop()
        await self.topology.stop()
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None

    def app(self) -> web.Application:
        """The HTTPS application (no ``/metrics``: see :meth:`metrics_app`)."""
        install_log_scrubber()
        # client_max_size makes aiohttp answer 413 itself while reading an oversized body
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/mutate", _never_500(self.mutate))
        app.router.add_post("/validate", _never_500(self.validate))
        app.router.add_get("/healthz", _never_500(self.healthz))
        app.router.add_get("/livez", _never_500(self.livez))
        app.router.add_get("/readyz", _never_500(self.readyz))
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    def metrics_app(self) -> web.Application:
        """The metrics application: ``GET /metrics`` only (plain HTTP, its own port)."""
        app = web.Application(client_max_size=1024)
        app.router.add_get("/metrics", _never_500(self.metrics_endpoint))
        return app


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _never_500(handler: Handler) -> Handler:
    """Last line of defence: an unexpected error is a 400 with a reason, not a 500.

    A wrapper per route rather than an aiohttp middleware: the middleware chain is rebuilt
    for every request, which costs more than a review's whole HTTP handling budget allows."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("unhandled error on %s %s", request.method, request.path)
            return web.json_response({"error": f"request could not be processed ({type(exc).__name__})",
                                      "code": 400}, status=400)

    return guarded
