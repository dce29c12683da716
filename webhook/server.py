"""The aiohttp application: ``POST /mutate``, ``POST /validate``, ``GET /healthz``,
``GET /readyz``, ``GET /metrics``.

Reviews are evaluated on the event loop thread: they take a few milliseconds, and the
topology they read is updated on the same thread (the watch threads hand their events
over with ``call_soon_threadsafe``), so no lock is needed and nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from policies.config import Policy, PolicyError, load_policy
from policies.findings import Severity
from webhook.admission import MAX_BODY_BYTES, ReviewError, admit, envelope, parse_review
from webhook.metrics import CONTENT_TYPE, Metrics
from webhook.tls import ReloadingContext

log = logging.getLogger("gpugate.webhook")

RELOAD_INTERVAL_SECONDS = 2.0
# The API server sends a review in one write and gives up after timeoutSeconds (3 s here,
# 30 s at most): a body still incomplete after this is a broken or hostile client.
BODY_TIMEOUT_SECONDS = 5.0
# Idle keep-alive connections (and connections that never finish their headers) are
# closed after this; longer than the API server's 90 s idle timeout, so that the client,
# not the server, closes idle connections and no request races a server-side close.
KEEPALIVE_TIMEOUT_SECONDS = 120.0
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


class StaticTopology:
    """Snapshots loaded once from files (``--cluster``), or none at all: ready at once."""

    def __init__(self, snapshots: Sequence[Any] | None = None) -> None:
        self._snapshots = list(snapshots) if snapshots is not None else None

    def clusters(self) -> Sequence[Any] | None:
        return self._snapshots

    def ready(self) -> bool:
        return True

    async def start(self, app: web.Application) -> None:
        return None

    async def stop(self) -> None:
        return None


class PolicySource:
    """The policy, re-read when its file changes; an invalid new file is logged, the old kept."""

    def __init__(self, path: str | None = None, policy: Policy | None = None,
                 on_reload: Callable[[bool], None] | None = None) -> None:
        self.path = path
        self._on_reload = on_reload
        self._mtime: int | None = None
        if path is not None:
            self._mtime = self._stat()
            self.policy = load_policy(path)
        else:
            self.policy = policy or Policy()

    def _stat(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns if self.path else None
        except OSError:
            return None

    def maybe_reload(self) -> bool | None:
        """True reloaded, False rejected (old kept), None unchanged."""
        if self.path is None:
            return None
        mtime = self._stat()
        if mtime is None or mtime == self._mtime:
            return None
        self._mtime = mtime
        try:
            policy = load_policy(self.path)
        except PolicyError as exc:
            log.error("policy %s not reloaded, keeping the previous one: %s", self.path, exc)
            ok = False
        else:
            self.policy = policy
            log.info("policy reloaded from %s", self.path)
            ok = True
        if self._on_reload is not None:
            self._on_reload(ok)
        return ok


class Webhook:
    """The server's state: policy, topology, metrics, TLS; builds the aiohttp app."""

    def __init__(self, policy: PolicySource | None = None, topology: TopologySource | None = None,
                 metrics: Metrics | None = None, tls: ReloadingContext | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES,
                 reload_interval: float = RELOAD_INTERVAL_SECONDS,
                 body_timeout: float = BODY_TIMEOUT_SECONDS,
                 body_budget_bytes: int = BODY_BUDGET_BYTES) -> None:
        self.body_timeout = body_timeout
        self.bodies = BodyBudget(body_budget_bytes)
        self.topology = topology or StaticTopology()
        self.metrics = metrics or Metrics(self.topology.clusters)
        self.policy = policy or PolicySource()
        self.tls = tls
        self.max_body_bytes = max_body_bytes
        self.reload_interval = reload_interval
        self._reloader: asyncio.Task[None] | None = None

    # -- handlers -------------------------------------------------------------------
    async def review(self, request: web.Request, endpoint: str) -> web.Response:
        started = time.perf_counter()
        try:
            declared = request.content_length
            if declared is not None and declared > self.max_body_bytes:
                raise ReviewError(f"request body of {declared} bytes exceeds the limit of "
                                  f"{self.max_body_bytes} bytes", 413)
            size = self.max_body_bytes if declared is None else declared  # chunked: assume the worst
            budget = self.bodies.reserve(size) if size > SMALL_BODY_BYTES else contextlib.nullcontext()
            reading = False
            try:
                # A client that trickles its body (slowloris) must not hold a handler forever.
                async with asyncio.timeout(self.body_timeout):
                    async with budget:
                        reading = True
                        body = await request.read()
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
            review_request = parse_review(body, request.headers.get("Content-Type"), self.max_body_bytes)
        except ReviewError as exc:
            self.metrics.malformed.labels(endpoint, str(exc.status)).inc()
            log.warning("malformed review on /%s from %s: %s", endpoint, request.remote, exc.reason)
            return web.json_response({"error": exc.reason, "code": exc.status}, status=exc.status)
        try:
            outcome = admit(review_request, endpoint, self.policy.policy, self.topology.clusters())
        except Exception as exc:  # noqa: BLE001 - fail open with a warning, never a 500
            log.exception("internal error on /%s for uid %r", endpoint, review_request.get("uid"))
            self.metrics.internal_errors.labels(endpoint).inc()
            answer = envelope(review_request["uid"],
                               warnings=[f"gpugate: internal error, object not checked "
                                         f"({type(exc).__name__})"[:119]])
            return web.json_response(answer)
        metrics = self.metrics
        metrics.reviews.labels(endpoint, outcome.kind, outcome.verdict).inc()
        for finding in outcome.findings:
            metrics.findings.labels(endpoint, outcome.kind, finding.rule, str(finding.severity)).inc()
        metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        if outcome.verdict == "denied" or log.isEnabledFor(logging.DEBUG):
            # Names in messages come from the client (unvalidated before admission): escape
            # control characters so that no one can forge log lines; never the object itself.
            log.info("%s %s uid=%r: %s", endpoint, outcome.verdict, review_request["uid"],
                     repr("; ".join(f"{f.rule} {f.message}" for f in outcome.findings
                                    if f.severity >= Severity.WARNING)[:500])[1:-1])
        return web.Response(body=json.dumps(outcome.review, separators=(",", ":")).encode(),
                            content_type="application/json")

    async def mutate(self, request: web.Request) -> web.Response:
        return await self.review(request, "mutate")

    async def validate(self, request: web.Request) -> web.Response:
        return await self.review(request, "validate")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
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

    async def _on_cleanup(self, app: web.Application) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        await self.topology.stop()

    def app(self) -> web.Application:
        # client_max_size makes aiohttp answer 413 itself while reading an oversized body
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=[_never_500])
        app.router.add_post("/mutate", self.mutate)
        app.router.add_post("/validate", self.validate)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app


@web.middleware
async def _never_500(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Last line of defence: an unexpected error is a 400 with a reason, not a 500."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001
        log.exception("unhandled error on %s %s", request.method, request.path)
        return web.json_response({"error": f"request could not be processed ({type(exc).__name__})",
                                  "code": 400}, status=400)


def load_static_clusters(paths: Sequence[str], policy: Policy) -> list[Any]:
    """``lint.cluster.load_clusters`` run in a forked child, the snapshots sent back pickled.

    Parsing a 100,000-pod snapshot peaks at several times what the topology keeps, and the
    heap of a long-lived server would stay fragmented at that peak; in a child the peak
    dies with it. Falls back to loading in this process when fork or pickling is not
    available (``ClusterFileError`` is raised either way).
    """
    import multiprocessing
    import multiprocessing.pool
    import pickle

    from lint.cluster import ClusterFileError, load_clusters

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return list(load_clusters(list(paths), policy))
    unpicklable: type[Exception] = getattr(multiprocessing.pool, "MaybeEncodingError", TypeError)
    try:
        with context.Pool(1) as pool:
            # only the plain policy data crosses over: compiled custom checks do not pickle
            snapshots = list(pool.apply(_load_clusters_from_data, (list(paths), policy.data)))
    except ClusterFileError:
        raise
    except (OSError, pickle.PicklingError, TypeError, AttributeError, unpicklable) as exc:
        log.info("loading the cluster snapshot in-process (%s)", exc)
        return list(load_clusters(list(paths), policy))
    for snapshot in snapshots:
        snapshot.topology.policy = policy
    return snapshots


def _load_clusters_from_data(paths: list[str], data: dict[str, Any]) -> list[Any]:
    from lint.cluster import load_clusters

    return list(load_clusters(paths, Policy(data=data)))


def settle_heap() -> None:
    """After loading a large snapshot: collect, move what survives out of the collector's
    sight (``gc.freeze``: fewer, shorter pauses while serving), and hand freed arenas back
    to the OS (glibc ``malloc_trim``), so that RSS reflects what is really kept."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    gc.freeze()
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record), "level": record.levelname.lower(), "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)

