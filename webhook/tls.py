"""The serving TLS context, reloaded in place when the certificate or key changes on disk.

A Kubernetes Secret mounted as a volume is updated by swapping a symlink, so the files'
mtimes change; we poll them. A new pair is first loaded into a scratch context from a
private copy of both files (so that a half-written pair, cert updated before key, is
caught); only a pair that loads is put into the live context, whose next handshakes use
it. Connections already open keep going. A bad pair is logged and the old one kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger("gpugate.tls")


class TLSConfigError(ValueError):
    pass


def _new_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # No client-initiated renegotiation (a CPU sink for whoever can connect); TLS 1.2 only
    # with forward-secret AEAD suites (TLS 1.3 suites are all of that kind), which every
    # Go client (the API server, kubelet probes, Prometheus) offers.
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")
    # aiohttp speaks HTTP/1.1 only; say so, so that the API server's Go client does not try h2
    context.set_alpn_protocols(["http/1.1"])
    return context


def _mtimes(*paths: str) -> tuple[int, ...]:
    return tuple(os.stat(p).st_mtime_ns for p in paths)


@contextlib.contextmanager
def _private_copies(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Paths to private copies of the pair as read: in-memory files (memfd) where the
    kernel has them, so that a read-only root filesystem is no obstacle; else a temporary
    directory."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = [os.memfd_create(name) for name in ("tls.crt", "tls.key")]
        try:
            for fd, data in zip(fds, (cert, key), strict=True):
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="gpugate-tls-") as tmp:
        paths = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        paths[0].write_bytes(cert)
        paths[1].write_bytes(key)
        yield str(paths[0]), str(paths[1])


class ReloadingContext:
    """An ``ssl.SSLContext`` for the server plus :meth:`maybe_reload` to pick up new files."""

    def __init__(self, cert_file: str, key_file: str,
                 on_reload: Callable[[bool], None] | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = _new_context()
        self._on_reload = on_reload
        try:
            self._seen = _mtimes(cert_file, key_file)
            self.context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(f"cannot load TLS certificate {cert_file} and key {key_file}: "
                                 f"{exc}") from None

    def maybe_reload(self) -> bool | None:
        """Reload if either file changed: True loaded, False rejected (old kept), None unchanged."""
        try:
            mtimes = _mtimes(self.cert_file, self.key_file)
        except OSError as exc:
            log.warning("TLS files not readable (%s); keeping the current certificate", exc)
            return None
        if mtimes == self._seen:
            return None
        self._seen = mtimes  # try each new version once; a later write triggers another try
        try:
            pair = Path(self.cert_file).read_bytes(), Path(self.key_file).read_bytes()
            with _private_copies(*pair) as (cert, key):
                _new_context().load_cert_chain(cert, key)   # validate the pair first
                self.context.load_cert_chain(cert, key)     # then swap it into the live context
        except (OSError, ssl.SSLError) as exc:
            log.error("new TLS certificate %s / key %s rejected (%s); keeping the old pair",
                      self.cert_file, self.key_file, exc)
            self._notify(False)
            return False
        log.info("TLS certificate reloaded from %s", self.cert_file)
        self._notify(True)
        return True

    def _notify(self, ok: bool) -> None:
        if self._on_reload is not None:
            self._on_reload(ok)
