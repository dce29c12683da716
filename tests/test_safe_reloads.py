"""Safe reloads (issue 16): a certificate or policy takes effect only when complete and valid.

Certificate (``webhook/tls.py``): parses, key matches, within its validity dates, SANs still
cover the names of the current one; otherwise the old pair stays, an error is logged and
``gpugate_reloads_total{what="certificate",result="rejected"}`` moves. Content, not mtime.

Policy (``webhook/reload.py``): content (SHA-256), not mtime, decides; a new content is taken
only after two polls read the same bytes, then parse + schema; a deleted file keeps the last
good policy, is logged once and counted (``result="missing"``); when it comes back it is loaded.

Before the issue each of these was taken (expired, not-yet-valid, wrong-SAN certificates),
missed (a change that kept the mtime), taken half-written, or unnoticed (a deleted policy).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from webhook_helpers import ServedWebhook, wait_for

from webhook.cli import reload_counter
from webhook.metrics import Metrics
from webhook.reload import PolicySource
from webhook.tls import ReloadingContext, check_pair

NOW = dt.datetime.now(dt.UTC)


def write_pair(directory: Path, name: str = "tls", dns: tuple[str, ...] = ("localhost",),
               ips: tuple[str, ...] = ("127.0.0.1",), not_before: dt.datetime | None = None,
               not_after: dt.datetime | None = None, key: ec.EllipticCurvePrivateKey | None = None,
               key_file_key: ec.EllipticCurvePrivateKey | None = None) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpugate")])
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before or NOW - dt.timedelta(minutes=5))
               .not_valid_after(not_after or NOW + dt.timedelta(days=1)))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes((key_file_key or key).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


def replace(live: tuple[Path, Path], new: tuple[Path, Path]) -> None:
    live[0].write_bytes(new[0].read_bytes())
    live[1].write_bytes(new[1].read_bytes())


BAD_PAIRS = {
    "expired": {"not_before": NOW - dt.timedelta(days=10), "not_after": NOW - dt.timedelta(days=1)},
    "not yet valid": {"not_before": NOW + dt.timedelta(days=1), "not_after": NOW + dt.timedelta(days=30)},
    "wrong SAN": {"dns": ("gpugate.other-namespace.svc",), "ips": ()},
    "SAN drops the address": {"ips": ()},
    "no SAN": {"dns": (), "ips": ()},
    "key of another certificate": {"key_file_key": ec.generate_private_key(ec.SECP256R1())},
}


@pytest.mark.parametrize("name", list(BAD_PAIRS))
def test_an_invalid_new_certificate_is_rejected_logged_and_counted(
        tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture) -> None:
    live = write_pair(tmp_path / "live")
    metrics = Metrics()
    context = ReloadingContext(str(live[0]), str(live[1]), on_reload=reload_counter(metrics, "certificate"))
    replace(live, write_pair(tmp_path / "new", **BAD_PAIRS[name]))  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="gpugate.tls"):
        assert context.maybe_reload() is False
    assert any("rejected" in r.getMessage() for r in caplog.records), name
    rejected = metrics.reloads.labels("certificate", "rejected")._value.get()  # type: ignore[attr-defined]
    assert rejected == 1
    assert context.maybe_reload() is None          # the same bad content is not tried again
    assert context.names == frozenset({"localhost", "127.0.0.1"})


def test_valid_new_certificates_are_taken_by_content_not_mtime(tmp_path: Path) -> None:
    live = write_pair(tmp_path / "live")
    results: list[bool] = []
    context = ReloadingContext(str(live[0]), str(live[1]), on_reload=results.append)
    stamp = time.time_ns() + 5 * 10**9
    os.utime(live[0], ns=(stamp, stamp))           # touched: same content, not a reload
    assert context.maybe_reload() is None
    # more names, a wildcard that covers the old DNS name's siblings: still covers what was served
    replace(live, write_pair(tmp_path / "next", dns=("localhost", "gpugate.gpugate-system.svc")))
    assert context.maybe_reload() is True and results == [True]
    assert "gpugate.gpugate-system.svc" in context.names
    replace(live, write_pair(tmp_path / "wild", dns=("localhost", "*.gpugate-system.svc")))
    assert context.maybe_reload() is True           # the wildcard covers gpugate.gpugate-system.svc


def test_check_pair_names_what_is_wrong(tmp_path: Path) -> None:
    cert, key = write_pair(tmp_path, **BAD_PAIRS["expired"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expired"):
        check_pair(cert.read_bytes(), key.read_bytes())
    cert, key = write_pair(tmp_path, dns=("a.example",), ips=())
    with pytest.raises(ValueError, match="no longer covers localhost"):
        check_pair(cert.read_bytes(), key.read_bytes(), must_cover=frozenset({"localhost"}))


def test_served_handshakes_keep_the_old_certificate_after_a_rejected_reload(tmp_path: Path) -> None:
    with ServedWebhook(cert_dir=tmp_path / "live", reload_interval=0.05) as hook:
        trusted = hook.cert.read_bytes()
        replace((hook.cert, hook.key), write_pair(tmp_path / "expired", **BAD_PAIRS["expired"]))  # type: ignore[arg-type]
        assert wait_for(lambda: hook.tls.maybe_reload() is None)   # the tick has judged it
        context = ssl.create_default_context(cadata=trusted.decode())
        conn = __import__("http.client").client.HTTPSConnection(hook.host, hook.port, context=context)
        conn.request("GET", "/livez")
        assert conn.getresponse().status == 200     # still the old, trusted pair
        conn.close()


# -- the policy --------------------------------------------------------------------------------------

GOOD = "rules: {GG501: off}\n"
NEXT = "rules: {GG501: off, GG104: off}\nfeasibility: {budgetMilliseconds: 150}\n"


def rules_of(source: PolicySource) -> dict[str, object]:
    return dict(source.policy.data.get("rules") or {})


def test_a_half_written_policy_is_never_taken(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    results: list[bool] = []
    source = PolicySource(str(path), on_reload=results.append)
    half = NEXT[: NEXT.index("feasibility") + len("feasibility: {budgetMilli")]
    path.write_text(half)                           # the writer is not done yet
    assert source.maybe_reload() is None            # seen once: wait
    path.write_text(NEXT)                           # done
    assert source.maybe_reload() is None            # changed again: wait
    assert source.maybe_reload() is True            # the same bytes twice: taken
    assert results == [True] and set(rules_of(source)) == {"GG501", "GG104"}


def test_policy_changes_are_seen_by_content_even_with_the_same_mtime(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    source = PolicySource(str(path), settle_polls=1)
    stamp = path.stat().st_mtime_ns
    path.write_text(NEXT)
    os.utime(path, ns=(stamp, stamp))               # e.g. cp -p: the old mtime
    assert source.maybe_reload() is True
    later = time.time_ns() + 5 * 10**9
    os.utime(path, ns=(later, later))               # touched only: nothing to do
    assert source.maybe_reload() is None


def test_a_deleted_policy_keeps_the_last_good_one_says_so_and_comes_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    metrics = Metrics()
    source = PolicySource(str(path), on_reload=reload_counter(metrics, "config"),
                          on_missing=metrics.reloads.labels("config", "missing").inc)
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="gpugate.webhook"):
        assert source.maybe_reload() is False
        assert source.maybe_reload() is None        # said once, not every tick
    assert [r.getMessage() for r in caplog.records if "keeping the last good policy" in r.getMessage()]
    assert metrics.reloads.labels("config", "missing")._value.get() == 1  # type: ignore[attr-defined]
    assert set(rules_of(source)) == {"GG501"} and source.missing
    path.write_text(NEXT)                           # back, with new content
    assert source.maybe_reload() is None and not source.missing
    assert source.maybe_reload() is True
    assert set(rules_of(source)) == {"GG501", "GG104"}
    assert metrics.reloads.labels("config", "ok")._value.get() == 1  # type: ignore[attr-defined]


def test_an_invalid_settled_policy_is_rejected_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    results: list[bool] = []
    source = PolicySource(str(path), on_reload=results.append)
    path.write_text("rules: {GG501: off\n")         # complete, and broken
    assert source.maybe_reload() is None
    assert source.maybe_reload() is False
    assert source.maybe_reload() is None and results == [False]
    assert set(rules_of(source)) == {"GG501"}
