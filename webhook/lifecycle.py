"""Serving ``gpugate serve``: the HTTPS listener with its limits, the metrics listener, and
the graceful stop.

- **Connection cap** (``max_connections``, 1,024): counted from ``accept()`` to ``close()``
  of each TCP connection, TLS handshakes included. Beyond the cap a new connection is closed
  at once with a reset (before any TLS work), counted in ``gpugate_connections_refused_total``;
  the API server sees the call fail immediately and applies its failure policy.
- **Per-connection buffers**: asyncio reads TLS records through a 256 KiB buffer per
  connection, allocated (and touched) when the connection is accepted, which made an idle
  TLS connection cost ~285 KiB; :func:`limit_tls_buffers` makes it 16 KiB (a TLS record's
  plaintext is at most 16 KiB). The HTTP reader pauses a connection past 64 KiB unread.
- **Timeouts**: the TLS handshake must finish within ``handshake_timeout`` (10 s, the Go
  client's own ``TLSHandshakeTimeout``); an idle keep-alive connection is closed after
  ``keepalive_timeout`` (see ``webhook.app.KEEPALIVE_TIMEOUT_SECONDS``).
- **Arrival time**: each connection stamps the loop time its last bytes were read, so that a
  review knows how long it waited behind others before the loop got to it (shedding, see
  ``webhook.app``).
- **No request bytes in logs**: aiohttp's own error log for malformed HTTP framing quotes up
  to ~740 bytes of what was received (the body included); :class:`_Handler` logs the
  exception's type and status only, and :func:`install_log_scrubber` strips exception text
  and byte strings from every record of aiohttp's loggers, at every level.
- **Graceful stop** (:meth:`Serving.run_until_signalled`): on SIGTERM ``/readyz`` answers
  503 at once while reviews are still served for ``drain_seconds`` (the time for the endpoint
  to leave the Service; answers in that window close their connection, so the API server's
  next call opens a new one, to a ready pod); then the listener closes, idle connections are
  closed, and reviews in flight finish within ``shutdown_seconds``. A second signal skips what
  is left of the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from webhook.app import KEEPALIVE_TIMEOUT_SECONDS
from webhook.logs import describe_exception, install_log_scrubber

log = logging.getLogger("gpugate.webhook")

MAX_CONNECTIONS = 1024
TLS_READ_BUFFER_BYTES = 16 * 1024
HANDSHAKE_TIMEOUT_SECONDS = 10.0
# Reviews in flight when SIGTERM's drain ends get this long to finish (the API server waits
# at most 2 s for one call).
SHUTDOWN_SECONDS = 10.0
# gpugate's own part of the drain, after the pod's preStop sleep (deploy/base/deployment.yaml).
DRAIN_SECONDS = 5.0
METRICS_PORT = 9090


def limit_tls_buffers(size: int = TLS_READ_BUFFER_BYTES) -> None:
    """Make asyncio's per-connection TLS read buffer ``size`` bytes (256 KiB by default).

    A class attribute of ``asyncio.sslproto.SSLProtocol``, so it holds for every asyncio TLS
    connection of the process; only the server's are many and long-lived."""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", None) != size:
        sslproto.SSLProtocol.max_size = size


class _Handler(RequestHandler):
    """aiohttp's connection handler, plus the arrival time of the last bytes read and
    error logs that never carry request bytes."""

    __slots__ = ("arrived",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived = 0.0

    def data_received(self, data: bytes) -> None:
        self.arrived = self._loop.time()
        super().data_received(data)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        error = exc if isinstance(exc, BaseException) else None
        remote = args[1] if len(args) > 1 else "?"
        self.logger.warning("bad request from %s: %s", remote, describe_exception(error))

    def log_debug(self, *args: Any, **kw: Any) -> None:
        if self._loop.get_debug():
            exc = kw.get("exc_info")
            error = exc if isinstance(exc, BaseException) else None
            self.logger.debug("%s (%s)", args[0] if args else "", describe_exception(error))


# -- the connection cap -----------------------------------------------------------------------

class ConnectionGate:
    """How many connections are open, and the cap."""

    def __init__(self, limit: int, on_refused: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0
        self._on_refused = on_refused

    def acquire(self) -> bool:
        if self.open >= self.limit:
            self.refused += 1
            if self._on_refused is not None:
                self._on_refused()
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class _CountedSocket(socket.socket):
    """An accepted connection that gives its place back when closed."""

    __slots__ = ("_gate",)
    _gate: ConnectionGate | None

    def close(self) -> None:
        gate = getattr(self, "_gate", None)
        if gate is not None:
            self._gate = None
            gate.release()
        super().close()


class _GatedListener(socket.socket):
    """A listening socket whose ``accept()`` (called by asyncio) resets connections beyond
    the gate's cap at once, and hands out counted ones otherwise."""

    __slots__ = ("gate",)
    gate: ConnectionGate

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]  # BlockingIOError: none left
            if self.gate.acquire():
                conn = _CountedSocket(self.family, self.type, self.proto, fileno=fd)
                conn._gate = self.gate
                return conn, address
            refused = socket.socket(self.family, self.type, self.proto, fileno=fd)
            with contextlib.suppress(OSError):
                refused.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            refused.close()   # a reset now, rather than a connection nobody will serve


def _gated_listener(host: str, port: int, gate: ConnectionGate) -> _GatedListener:
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = _GatedListener(family, kind, proto)
    sock.gate = gate
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class _GatedSite(web.BaseSite):
    __slots__ = ("_host", "_port", "_gate", "_handler_kwargs", "_handshake_timeout", "_socket")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, ssl_context: Any, gate: ConnectionGate,
                 handler_kwargs: dict[str, Any], handshake_timeout: float, backlog: int = 1024) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port = host, port
        self._gate = gate
        self._handler_kwargs = handler_kwargs
        self._handshake_timeout = handshake_timeout
        self._socket: socket.socket | None = None

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1]) if self._socket is not None else self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        manager = self._runner.server
        assert manager is not None
        kwargs = self._handler_kwargs

        def factory() -> _Handler:
            return _Handler(manager, loop=loop, **kwargs)

        self._socket = _gated_listener(self._host, self._port, self._gate)
        self._server = await loop.create_server(
            factory, sock=self._socket, ssl=self._ssl_context, backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout if self._ssl_context is not None else None)


# -- serving and stopping ---------------------------------------------------------------------

class Serving:
    """``webhook`` (a :class:`webhook.app.Webhook`) served: HTTPS on ``host:port`` with its
    limits, and ``/metrics`` in plain HTTP on ``metrics_host:metrics_port`` (None: not served).
    Port 0 picks a free port (:attr:`port`, :attr:`metrics_port` once started)."""

    def __init__(self, webhook: Any, host: str, port: int, ssl_context: Any, *,
                 metrics_host: str | None = None, metrics_port: int | None = METRICS_PORT,
                 max_connections: int = MAX_CONNECTIONS, keepalive_timeout: float | None = None,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
                 shutdown_seconds: float = SHUTDOWN_SECONDS) -> None:
        self.webhook = webhook
        self.host, self._port = host, port
        self.ssl_context = ssl_context
        self.metrics_host = host if metrics_host is None else metrics_host
        self._metrics_port = metrics_port
        self.gate = ConnectionGate(max_connections, on_refused=webhook.metrics.connections_refused.inc)
        self.keepalive_timeout = KEEPALIVE_TIMEOUT_SECONDS if keepalive_timeout is None else keepalive_timeout
        self.handshake_timeout = handshake_timeout
        self.shutdown_seconds = shutdown_seconds
        self._runner: web.AppRunner | None = None
        self._site: _GatedSite | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._metrics_site: web.TCPSite | None = None
        webhook.metrics.connections.set_function(lambda: self.gate.open)

    @property
    def port(self) -> int:
        return self._site.port if self._site is not None else self._port

    @property
    def metrics_port(self) -> int | None:
        if self._metrics_runner is not None:
            for address in self._metrics_runner.addresses:
                return int(address[1])
        return self._metrics_port

    async def start(self) -> None:
        limit_tls_buffers()
        install_log_scrubber()
        handler_kwargs: dict[str, Any] = {"keepalive_timeout": self.keepalive_timeout, "access_log": None}
        self._runner = web.AppRunner(self.webhook.app(), handle_signals=False,
                                     shutdown_timeout=self.shutdown_seconds, **handler_kwargs)
        await self._runner.setup()
        self._site = _GatedSite(self._runner, self.host, self._port, self.ssl_context, self.gate,
                                handler_kwargs, self.handshake_timeout)
        await self._site.start()
        if self._metrics_port is not None:
            self._metrics_runner = web.AppRunner(self.webhook.metrics_app(), handle_signals=False,
                                                 access_log=None, keepalive_timeout=30.0)
            await self._metrics_runner.setup()
            self._metrics_site = web.TCPSite(self._metrics_runner, self.metrics_host, self._metrics_port)
            await self._metrics_site.start()

    async def stop(self, drain_seconds: float = 0.0, skip_drain: asyncio.Event | None = None) -> None:
        """Not ready at once; serve on for ``drain_seconds`` (``skip_drain`` set ends it early);
        then stop accepting, close idle connections and let reviews in flight finish within
        ``shutdown_seconds``; then stop the metrics listener."""
        webhook = self.webhook
        webhook.draining = True
        webhook.metrics.draining.set(1)
        started = time.monotonic()
        if drain_seconds > 0:
            log.info("shutting down: /readyz answers 503 from now on; serving reviews for %g s more while "
                     "the endpoint is removed", drain_seconds)
            waiter = skip_drain or asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), drain_seconds)
        in_flight = webhook.in_flight
        log.info("closing the listener; %d review(s) in flight get at most %g s to finish", in_flight,
                 self.shutdown_seconds)
        if self._runner is not None:
            await self._runner.cleanup()   # listener closed, idle connections closed, in-flight awaited
            self._runner = None
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
            self._metrics_runner = None
        log.info("stopped %.1f s after the signal; answered %s", time.monotonic() - started,
                 webhook.answered_summary())

    async def run_until_signalled(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """Start, serve until SIGTERM or SIGINT, then :meth:`stop` with the drain."""
        loop = asyncio.get_running_loop()
        stop, hurry = asyncio.Event(), asyncio.Event()

        def signalled(number: int) -> None:
            if stop.is_set():
                log.info("%s again: skipping the rest of the drain", signal.Signals(number).name)
                hurry.set()
            else:
                log.info("%s received", signal.Signals(number).name)
                stop.set()

        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, signalled, number)
        await self.start()
        log.info("gpugate webhook listening on https://%s:%d, metrics on http://%s:%s/metrics "
                 "(at most %d connections)", self.host, self.port, self.metrics_host,
                 self.metrics_port if self.metrics_port is not None else "-", self.gate.limit)
        try:
            await stop.wait()
        finally:
            await self.stop(drain_seconds, hurry)
