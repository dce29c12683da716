"""The serving TLS context, reloaded in place when the certificate or key changes on disk.

A Kubernetes Secret mounted as a volume is updated by swapping a symlink, so the files'
contents change; we poll them. A new pair is first loaded into a scratch context from a
private copy of both files (so that a half-written pair, cert updated before key, is
caught); only a pair that loads is put into the live context, whose next handshakes use
it. Connections already open keep going.

A new pair takes effect only if it is complete and valid (:func:`check_pair`): both files
parse, the key is the certificate's, the certificate is within its validity dates, and its
subjectAltNames still cover every name the current certificate covers (so the API server,
which checks the SAN against the Service name or URL host, keeps validating). Otherwise the
old pair stays, an error is logged and ``on_reload(False)`` counts it (``gpugate_reloads_total
{what="certificate",result="rejected"}``). Files are compared by content, so a touch is not a
reload, and a changed pair that was rejected is not tried again until it changes again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger("gpugate.tls")


class TLSConfigError(ValueError):
    pass


class PairRejected(ValueError):
    """A new certificate/key pair that must not replace the current one."""


def certificate_names(cert_pem: bytes) -> frozenset[str]:
    """The DNS names and IP addresses in the leaf certificate's subjectAltName."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    names = {n.lower() for n in san.get_values_for_type(x509.DNSName)}
    names |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return frozenset(names)


def _covers(names: frozenset[str], wanted: str) -> bool:
    if wanted in names:
        return True
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(wanted)
        return False                      # an address is matched exactly, never by a wildcard
    head, _, rest = wanted.partition(".")
    return bool(rest) and f"*.{rest}" in names


def check_pair(cert_pem: bytes, key_pem: bytes, must_cover: frozenset[str] = frozenset(),
               now: dt.datetime | None = None) -> frozenset[str]:
    """Check a serving pair before it is used; its SAN names, or :class:`PairRejected`.

    The pair must parse (PEM certificate, unencrypted PEM key), the key must be the
    certificate's, the certificate must be valid now (not expired, not yet valid), and its
    SANs must cover every name of ``must_cover`` (the names the current certificate serves)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise PairRejected(f"the certificate does not parse ({exc})") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise PairRejected(f"the key does not parse ({str(exc)[:100]})") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):  # type: ignore[union-attr]
        raise PairRejected("the key does not match the certificate")
    now = now or dt.datetime.now(dt.UTC)
    if now < cert.not_valid_before_utc:
        raise PairRejected(f"the certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M}")
    if now > cert.not_valid_after_utc:
        raise PairRejected(f"the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    names = certificate_names(cert_pem)
    missing = sorted(n for n in must_cover if not _covers(names, n))
    if missing:
        named = ", ".join(sorted(names)[:8]) or "nothing"
        raise PairRejected(f"the certificate's subjectAltName no longer covers {', '.join(missing[:5])}"
                           f"{' ...' if len(missing) > 5 else ''} (it names {named})")
    return names


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


def _read_pair(cert_file: str, key_file: str) -> tuple[bytes, bytes]:
    return Path(cert_file).read_bytes(), Path(key_file).read_bytes()


def _digest(pair: tuple[bytes, bytes]) -> bytes:
    return hashlib.sha256(pair[0] + b"\0" + pair[1]).digest()


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
            pair = _read_pair(cert_file, key_file)
            self.context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(f"cannot load TLS certificate {cert_file} and key {key_file}: "
                                 f"{exc}") from None
        self._seen = _digest(pair)
        try:
            self.names = check_pair(*pair)
        except PairRejected as exc:
            # served anyway (it is what the operator gave us), but said loudly
            log.error("TLS certificate %s: %s", cert_file, exc)
            self.names = certificate_names(pair[0])

    def maybe_reload(self) -> bool | None:
        """Reload if either file changed: True loaded, False rejected (old kept), None unchanged."""
        try:
            pair = _read_pair(self.cert_file, self.key_file)
        except OSError as exc:
            if self._seen != b"missing":
                self._seen = b"missing"
                log.error("TLS files not readable (%s); keeping the current certificate", exc)
                self._notify(False)
                return False
            return None
        digest = _digest(pair)
        if digest == self._seen:
            return None
        self._seen = digest  # try each new version once; a later write triggers another try
        try:
            names = check_pair(*pair, must_cover=self.names)
            with _private_copies(*pair) as (cert, key):
                _new_context().load_cert_chain(cert, key)   # validate the pair first
                self.context.load_cert_chain(cert, key)     # then swap it into the live context
        except (OSError, ssl.SSLError, PairRejected) as exc:
            log.error("new TLS certificate %s / key %s rejected (%s); keeping the old pair",
                      self.cert_file, self.key_file, exc)
            self._notify(False)
            return False
        self.names = names
        log.info("TLS certificate reloaded from %s", self.cert_file)
        self._notify(True)
        return True

    def _notify(self, ok: bool) -> None:
        if self._on_reload is not None:
            self._on_reload(ok)
