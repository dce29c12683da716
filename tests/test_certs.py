"""``gpugate certs``: the generated CA and serving certificate really chain, name the Service and
match their keys; ``--check`` exit codes; importable helpers for throwaway certificates."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from gpugate.cli import main as gpugate_main
from webhook.certs import (
    CertError,
    cert_pem,
    check_cert_dir,
    issued_by,
    key_pem,
    keys_match,
    load_cert,
    load_key,
    make_ca,
    make_serving_cert,
    service_dns_names,
    write_cert_set,
)

SERVICE, NAMESPACE = "gpugate", "gpugate-system"
EXPECTED_SANS = {"gpugate", "gpugate.gpugate-system", "gpugate.gpugate-system.svc",
                 "gpugate.gpugate-system.svc.cluster.local"}


def verify_signature(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    """Check the signature by hand with the issuer's public key (independent of the module)."""
    public = issuer.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(public, ec.EllipticCurvePublicKey):
        public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    elif isinstance(public, rsa.RSAPublicKey):
        public.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                      cert.signature_hash_algorithm)
    else:  # pragma: no cover - the module makes only these two
        raise AssertionError(f"unexpected key type {type(public).__name__}")


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("certs")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = gpugate_main(["certs", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out)])
    assert rc == 0
    return out, stdout.getvalue().strip()


def test_cli_writes_the_files_with_private_keys_0600(cert_dir: tuple[Path, str]) -> None:
    out, _ = cert_dir
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml", "caBundle.b64"):
        assert (out / name).is_file(), name
    for private in ("ca.key", "tls.key", "secret.yaml"):
        assert stat.S_IMODE((out / private).stat().st_mode) == 0o600, private
    assert not list(out.glob(".*.tmp"))


def test_serving_cert_chains_to_the_ca_and_names_the_service(cert_dir: tuple[Path, str]) -> None:
    out, _ = cert_dir
    ca, leaf = load_cert(out / "ca.crt"), load_cert(out / "tls.crt")
    verify_signature(leaf, ca)
    verify_signature(ca, ca)
    assert leaf.issuer == ca.subject
    sans = set(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
               .get_values_for_type(x509.DNSName))
    assert sans == EXPECTED_SANS
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)   # the documented default
    assert keys_match(leaf, load_key(out / "tls.key"))
    assert keys_match(ca, load_key(out / "ca.key"))
    assert not keys_match(leaf, load_key(out / "ca.key"))


def test_default_validity_is_ten_years_and_one_year(cert_dir: tuple[Path, str]) -> None:
    out, _ = cert_dir
    ca, leaf = load_cert(out / "ca.crt"), load_cert(out / "tls.crt")
    now = dt.datetime.now(dt.UTC)
    assert abs((ca.not_valid_after_utc - now).days - 3650) <= 1
    assert abs((leaf.not_valid_after_utc - now).days - 365) <= 1
    assert leaf.not_valid_before_utc <= now


def test_secret_and_ca_bundle(cert_dir: tuple[Path, str]) -> None:
    out, printed = cert_dir
    ca_pem = (out / "ca.crt").read_bytes()
    assert base64.b64decode(printed) == ca_pem
    assert (out / "caBundle.b64").read_text().strip() == printed
    secret = yaml.safe_load((out / "secret.yaml").read_text())
    assert secret["kind"] == "Secret" and secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {**secret["metadata"], "name": "gpugate-tls", "namespace": NAMESPACE}
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {"ca.crt": ca_pem, "tls.crt": (out / "tls.crt").read_bytes(),
                    "tls.key": (out / "tls.key").read_bytes()}
    # The Secret's ca.crt is, byte for byte, the caBundle the overlay copies into the webhooks.
    assert secret["data"]["ca.crt"] == printed


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl binary")
def test_openssl_verifies_the_chain(cert_dir: tuple[Path, str]) -> None:
    out, _ = cert_dir
    result = subprocess.run(["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(out / "ca.crt"),
                             str(out / "tls.crt")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout
    other_ca, _ = make_ca()
    (out.parent / "other-ca.crt").write_bytes(cert_pem(other_ca))
    wrong = subprocess.run(["openssl", "verify", "-CAfile", str(out.parent / "other-ca.crt"),
                            str(out / "tls.crt")], capture_output=True, text=True, timeout=30)
    assert wrong.returncode != 0


def test_check_exit_codes(cert_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = cert_dir
    assert gpugate_main(["certs", "--check", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CA:" in text and "serving certificate:" in text and "days left" in text
    assert gpugate_main(["certs", "--check", str(out), "--min-days", "400"]) == 1
    assert "under the threshold of 400" in capsys.readouterr().out
    assert gpugate_main(["certs", "--check", str(out), "--min-days", "4000"]) == 1
    assert gpugate_main(["certs", "--check", str(out / "missing")]) == 2
    assert "cannot read certificate" in capsys.readouterr().err


def test_check_flags_expired_and_foreign_certificates(tmp_path: Path) -> None:
    write_cert_set(tmp_path, leaf_days=5)
    result = check_cert_dir(tmp_path, min_days=30)
    assert not result.ok and any("expires in 5 days" in p for p in result.problems)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=10)
    assert any("expired" in p for p in check_cert_dir(tmp_path, 30, now=later).problems)
    # A serving certificate from another CA is reported even when it has years left.
    other_ca, other_key = make_ca()
    leaf, _ = make_serving_cert(other_ca, other_key)
    (tmp_path / "tls.crt").write_bytes(cert_pem(leaf))
    problems = check_cert_dir(tmp_path, 1).problems
    assert any("is not signed by" in p for p in problems)
    assert any("does not belong to" in p for p in problems)


def test_rerun_keeps_the_ca_and_renews_the_leaf(tmp_path: Path) -> None:
    first = write_cert_set(tmp_path)
    second = write_cert_set(tmp_path)
    assert second.reused_ca and second.ca_cert == first.ca_cert
    assert second.cert.serial_number != first.cert.serial_number
    assert issued_by(load_cert(tmp_path / "tls.crt"), first.ca_cert)
    third = write_cert_set(tmp_path, new_ca=True)
    assert not third.reused_ca and third.ca_cert != first.ca_cert
    assert issued_by(load_cert(tmp_path / "tls.crt"), third.ca_cert)
    assert load_cert(tmp_path / "ca.crt") == third.ca_cert


def bundle_certs(directory: Path) -> list[x509.Certificate]:
    bundle = base64.b64decode((directory / "caBundle.b64").read_text())
    secret = yaml.safe_load((directory / "secret.yaml").read_text())
    assert base64.b64decode(secret["data"]["ca.crt"]) == bundle
    return x509.load_pem_x509_certificates(bundle)


def test_new_ca_rotation_trusts_both_cas_for_one_run(tmp_path: Path) -> None:
    old = write_cert_set(tmp_path)
    assert bundle_certs(tmp_path) == [old.ca_cert]
    rotated = write_cert_set(tmp_path, new_ca=True)
    # Old serving certificate (still on the pods) and new one both verify against the bundle.
    assert bundle_certs(tmp_path) == [rotated.ca_cert, old.ca_cert]
    assert len(rotated.trusted) == 2
    renewed = write_cert_set(tmp_path)
    assert renewed.reused_ca and bundle_certs(tmp_path) == [rotated.ca_cert]


def test_rsa_and_options(tmp_path: Path) -> None:
    made = write_cert_set(tmp_path, service="gg", namespace="ops", key_type="rsa-2048", ca_days=30,
                          leaf_days=365, extra_dns=["gg.example.com"], ip_addresses=["127.0.0.1"])
    public = made.cert.public_key()
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 2048
    verify_signature(made.cert, made.ca_cert)
    san = made.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {*service_dns_names("gg", "ops"), "gg.example.com"}
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # The leaf never outlives its CA.
    assert made.cert.not_valid_after_utc <= made.ca_cert.not_valid_after_utc


def test_importable_helpers_make_a_working_pair() -> None:
    ca, ca_key = make_ca(days=2)
    leaf, key = make_serving_cert(ca, ca_key, "svc", "ns", days=1)
    verify_signature(leaf, ca)
    assert keys_match(leaf, key) and issued_by(leaf, ca)
    stranger, _ = make_ca()
    assert not issued_by(leaf, stranger)
    with pytest.raises(InvalidSignature):
        verify_signature(leaf, stranger)


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert gpugate_main(["certs"]) == 2
    assert "exactly one of --out DIR or --check DIR" in capsys.readouterr().err
    assert gpugate_main(["certs", "--out", str(tmp_path), "--check", str(tmp_path)]) == 2
    assert gpugate_main(["certs", "--out", str(tmp_path / "a"), "--ip", "not-an-ip"]) == 2
    assert "invalid IP address" in capsys.readouterr().err
    assert gpugate_main(["certs", "--out", str(tmp_path / "b"), "--days", "0"]) == 2
    assert gpugate_main(["certs", "--key-type", "dsa", "--out", str(tmp_path)]) == 2
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "ca.crt").write_text("not a certificate")
    (tmp_path / "junk" / "tls.crt").write_text("")
    assert gpugate_main(["certs", "--check", str(tmp_path / "junk")]) == 2
    assert "not a PEM certificate" in capsys.readouterr().err
    # A CA whose key was swapped is refused rather than silently replaced.
    write_cert_set(tmp_path / "c")
    other_ca, other_key = make_ca()
    (tmp_path / "c" / "ca.key").write_bytes(key_pem(other_key))
    with pytest.raises(CertError, match="does not belong to"):
        write_cert_set(tmp_path / "c")
    assert gpugate_main(["certs", "--help"]) == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(CertError, match="cannot write"):
        write_cert_set(locked)


def test_module_does_not_import_network_stacks() -> None:
    code = ("import sys, webhook.certs; "
            "bad = [m for m in ('aiohttp', 'kubernetes') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parent.parent)
