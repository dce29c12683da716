"""Logging: the server's handlers and formats, and the scrubber that keeps request bytes out of
aiohttp's log records (see :mod:`webhook.lifecycle`)."""

from __future__ import annotations

import json
import logging


def describe_exception(exc: BaseException | None) -> str:
    """An exception's type and HTTP status, never its text (which may quote the request)."""
    if exc is None:
        return "no exception"
    code = getattr(exc, "code", None) or getattr(exc, "status", None)
    return f"{type(exc).__name__}{f' {code}' if isinstance(code, int) else ''}"


class _Scrubber(logging.Filter):
    """On aiohttp's loggers: no exception text or traceback (aiohttp's HTTP parser errors
    quote the bytes received) and no byte strings among the arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({describe_exception(exc)})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        elif record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            if any(isinstance(a, bytes | bytearray | memoryview | BaseException) for a in args):
                record.args = tuple(f"<{len(a)} bytes>" if isinstance(a, bytes | bytearray | memoryview)
                                    else describe_exception(a) if isinstance(a, BaseException) else a
                                    for a in args)
        record.stack_info = None
        return True


_SCRUBBER = _Scrubber()
AIOHTTP_LOGGERS = ("aiohttp", "aiohttp.access", "aiohttp.client", "aiohttp.internal", "aiohttp.server",
                   "aiohttp.web", "aiohttp.websocket")


def install_log_scrubber() -> None:
    """Attach the scrubber to each of aiohttp's loggers (a logger's filters do not apply to
    its children's records, so each one); idempotent."""
    for name in AIOHTTP_LOGGERS:
        logger = logging.getLogger(name)
        if _SCRUBBER not in logger.filters:
            logger.addFilter(_SCRUBBER)


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
