"""``gpugate certs``: the webhook's own CA and serving certificate, made with ``cryptography``.

The API server calls the webhook over HTTPS and trusts only the ``caBundle`` written into the
webhook configurations, so gpugate needs a CA and a serving certificate for the Service's DNS
names. This module makes both (no openssl, no cert-manager needed), writes them as PEM files
plus a ready ``kubernetes.io/tls`` Secret and the base64 ``caBundle``, and checks how long an
existing set has left (``--check``).

Key type: **ECDSA P-256** by default. The API server (Go's crypto/tls) supports it, the keys
and signatures are small and a TLS handshake costs a fraction of RSA's, which matters for a
webhook answering every workload create. ``--key-type rsa-2048|rsa-3072|rsa-4096`` is there
for environments whose policy demands RSA.

Re-running ``gpugate certs --out DIR`` on a directory that already holds ``ca.crt`` and
``ca.key`` keeps that CA and only issues a new serving certificate, so the ``caBundle`` in the
cluster stays valid across rotations; ``--new-ca`` replaces the CA too, and for that one run the
caBundle (and the Secret's ``ca.crt``) trusts both the new and the previous CA, so the API server
accepts the old serving certificate until the pods have the new one.

Importable: ``make_ca`` and ``make_serving_cert`` make throwaway certificates for tests.
This module must stay free of aiohttp and the kubernetes client (it runs on a laptop).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

KEY_TYPES = ("ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096")
DEFAULT_KEY_TYPE = "ecdsa-p256"
DEFAULT_CA_DAYS = 3650
DEFAULT_LEAF_DAYS = 365
DEFAULT_MIN_DAYS = 30
DEFAULT_SERVICE = "gpugate"
DEFAULT_NAMESPACE = "gpugate-system"
DEFAULT_SECRET = "gpugate-tls"
# Backdating absorbs clock skew between the machine that signs and the API server.
CLOCK_SKEW = dt.timedelta(minutes=5)

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
SECRET_FILE = "secret.yaml"
CA_BUNDLE_FILE = "caBundle.b64"


class CertError(Exception):
    """A certificate set that cannot be made, read or trusted; the message says which file."""


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service (it uses ``<svc>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def generate_key(key_type: str = DEFAULT_KEY_TYPE) -> PrivateKey:
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type in KEY_TYPES:
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type.split("-")[1]))
    raise CertError(f"unknown key type {key_type!r}; choose one of {', '.join(KEY_TYPES)}")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(common_name: str = "gpugate-ca", days: int = DEFAULT_CA_DAYS,
            key_type: str = DEFAULT_KEY_TYPE, now: dt.datetime | None = None
            ) -> tuple[x509.Certificate, PrivateKey]:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    if days < 1:
        raise CertError(f"CA validity must be at least 1 day, not {days}")
    now = now or _now()
    key = generate_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpugate")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving_cert(ca_cert: x509.Certificate, ca_key: PrivateKey,
                      service: str = DEFAULT_SERVICE, namespace: str = DEFAULT_NAMESPACE,
                      days: int = DEFAULT_LEAF_DAYS, key_type: str = DEFAULT_KEY_TYPE,
                      extra_dns: Sequence[str] = (), ip_addresses: Sequence[str] = (),
                      now: dt.datetime | None = None) -> tuple[x509.Certificate, PrivateKey]:
    """A TLS server certificate for the Service's DNS names, signed by ``ca_cert``.

    Its validity is capped at the CA's: a leaf outliving its issuer would fail verification
    on the day the CA expires anyway.
    """
    if days < 1:
        raise CertError(f"serving certificate validity must be at least 1 day, not {days}")
    now = now or _now()
    try:
        ips = [ipaddress.ip_address(ip) for ip in ip_addresses]
    except ValueError as exc:
        raise CertError(f"invalid IP address for the certificate: {exc}") from None
    key = generate_key(key_type)
    dns_names = list(dict.fromkeys([*service_dns_names(service, namespace), *extra_dns]))
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    usage = x509.KeyUsage(digital_signature=True, key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                          content_commitment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False)
    san: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    san += [x509.IPAddress(ip) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


# -- PEM and files ---------------------------------------------------------------------

def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def bundle_pem(trusted: Sequence[x509.Certificate]) -> bytes:
    return b"".join(cert_pem(c) for c in trusted)


def ca_bundle(trusted: x509.Certificate | Sequence[x509.Certificate]) -> str:
    """The webhook configurations' ``clientConfig.caBundle``: base64 of the CAs' PEM."""
    certs = [trusted] if isinstance(trusted, x509.Certificate) else list(trusted)
    return base64.b64encode(bundle_pem(certs)).decode("ascii")


def secret_manifest(trusted: x509.Certificate | Sequence[x509.Certificate], cert: x509.Certificate,
                    key: PrivateKey, name: str = DEFAULT_SECRET, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A ``kubernetes.io/tls`` Secret with ``ca.crt`` (the trusted CAs, the caBundle's source)
    beside the pair."""
    trusted = [trusted] if isinstance(trusted, x509.Certificate) else list(trusted)
    import yaml

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "gpugate",
                                "app.kubernetes.io/component": "webhook-tls"}},
        "type": "kubernetes.io/tls",
        "data": {CA_CERT: b64(bundle_pem(trusted)), TLS_CERT: b64(cert_pem(cert)),
                 TLS_KEY: b64(key_pem(key))},
    }
    header = "# Generated by `gpugate certs`. Contains a private key: do not commit it.\n"
    return header + yaml.safe_dump(manifest, sort_keys=False)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write via a temporary file and rename, so a webhook watching the file never reads half
    of it; private files are created 0600 (never world-readable, not even briefly)."""
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except OSError as exc:
        raise CertError(f"{path}: cannot read certificate: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CertError(f"{path}: not a PEM certificate: {exc}") from None


def load_key(path: Path) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise CertError(f"{path}: cannot read private key: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise CertError(f"{path}: not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{path}: unsupported key type {type(key).__name__} (ECDSA or RSA expected)")
    return key


@dataclass(frozen=True)
class CertSet:
    ca_cert: x509.Certificate
    ca_key: PrivateKey
    cert: x509.Certificate
    key: PrivateKey
    reused_ca: bool
    # What the caBundle trusts: the CA, plus the replaced one during a --new-ca rotation.
    trusted: tuple[x509.Certificate, ...]


def write_cert_set(out: Path, service: str = DEFAULT_SERVICE, namespace: str = DEFAULT_NAMESPACE,
                   ca_days: int = DEFAULT_CA_DAYS, leaf_days: int = DEFAULT_LEAF_DAYS,
                   key_type: str = DEFAULT_KEY_TYPE, secret_name: str = DEFAULT_SECRET,
                   extra_dns: Sequence[str] = (), ip_addresses: Sequence[str] = (),
                   new_ca: bool = False) -> CertSet:
    """Make (or renew) the files in ``out``; an existing CA there is kept unless ``new_ca``."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CertError(f"{out}: cannot create directory: {exc.strerror or exc}") from None
    reused = not new_ca and (out / CA_CERT).is_file() and (out / CA_KEY).is_file()
    if reused:
        ca_cert, ca_key = load_cert(out / CA_CERT), load_key(out / CA_KEY)
        if not keys_match(ca_cert, ca_key):
            raise CertError(f"{out / CA_KEY} does not belong to {out / CA_CERT}; "
                            "use --new-ca to replace both")
    else:
        ca_cert, ca_key = make_ca(f"gpugate-ca.{namespace}", days=ca_days, key_type=key_type)
    trusted = [ca_cert]
    if new_ca and (out / CA_CERT).is_file():
        # Rotation without a gap: the API server trusts the old and the new CA while the pods
        # still serve the old certificate (a Secret takes up to a minute to reach them). The
        # next plain run drops the old CA from the bundle.
        with contextlib.suppress(CertError):
            previous = load_cert(out / CA_CERT)
            if days_left(previous) > 0:
                trusted.append(previous)
    cert, key = make_serving_cert(ca_cert, ca_key, service, namespace, days=leaf_days, key_type=key_type,
                                  extra_dns=extra_dns, ip_addresses=ip_addresses)
    try:
        if not reused:
            _write(out / CA_KEY, key_pem(ca_key), private=True)
            _write(out / CA_CERT, cert_pem(ca_cert))
        # Key before certificate: a reloading server sees the new pair complete once tls.crt lands.
        _write(out / TLS_KEY, key_pem(key), private=True)
        _write(out / TLS_CERT, cert_pem(cert))
        _write(out / SECRET_FILE, secret_manifest(trusted, cert, key, secret_name, namespace).encode(),
               private=True)
        _write(out / CA_BUNDLE_FILE, (ca_bundle(trusted) + "\n").encode())
    except OSError as exc:
        raise CertError(f"{out}: cannot write certificates: {exc.strerror or exc}") from None
    return CertSet(ca_cert, ca_key, cert, key, reused, tuple(trusted))


# -- checks ------------------------------------------------------------------------------

def keys_match(cert: x509.Certificate, key: PrivateKey) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


def issued_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """True when ``ca_cert`` is the issuer and its key signed ``cert``."""
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def days_left(cert: x509.Certificate, now: dt.datetime | None = None) -> float:
    return (cert.not_valid_after_utc - (now or _now())).total_seconds() / 86400


@dataclass(frozen=True)
class CheckResult:
    lines: list[str]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_cert_dir(directory: Path, min_days: float = DEFAULT_MIN_DAYS,
                   now: dt.datetime | None = None) -> CheckResult:
    """Days left on the CA and the serving certificate, and whether the set hangs together."""
    now = now or _now()
    ca_cert, cert = load_cert(directory / CA_CERT), load_cert(directory / TLS_CERT)
    lines: list[str] = []
    problems: list[str] = []
    for label, path, c in (("CA", directory / CA_CERT, ca_cert),
                           ("serving certificate", directory / TLS_CERT, cert)):
        left = days_left(c, now)
        expires = c.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
        lines.append(f"{label}: {path} expires {expires}, {left:.0f} days left")
        if left <= 0:
            problems.append(f"{label} {path} expired {-left:.0f} days ago")
        elif left < min_days:
            problems.append(f"{label} {path} expires in {left:.0f} days, under the threshold of {min_days:g}")
    if not issued_by(cert, ca_cert):
        problems.append(f"{directory / TLS_CERT} is not signed by {directory / CA_CERT}")
    key_path = directory / TLS_KEY
    if key_path.exists() and not keys_match(cert, load_key(key_path)):
        problems.append(f"{key_path} does not belong to {directory / TLS_CERT}")
    return CheckResult(lines, problems)


# -- command line ------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpugate certs",
        description="Create the webhook's CA and serving certificate (PEM files, a kubernetes.io/tls "
                    "Secret and the base64 caBundle, which is also printed on stdout), or check an "
                    "existing set with --check.")
    p.add_argument("--service", default=DEFAULT_SERVICE, help="Service name (default: %(default)s)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="namespace (default: %(default)s)")
    p.add_argument("--out", type=Path, help="directory to write ca.crt, ca.key, tls.crt, tls.key, "
                                            f"{SECRET_FILE} and {CA_BUNDLE_FILE}")
    p.add_argument("--secret-name", default=DEFAULT_SECRET, help="Secret name (default: %(default)s)")
    p.add_argument("--ca-days", type=int, default=DEFAULT_CA_DAYS, help="CA validity (default: %(default)s)")
    p.add_argument("--days", type=int, default=DEFAULT_LEAF_DAYS,
                   help="serving certificate validity (default: %(default)s)")
    p.add_argument("--key-type", choices=KEY_TYPES, default=DEFAULT_KEY_TYPE,
                   help="key algorithm (default: %(default)s)")
    p.add_argument("--dns", action="append", default=[], metavar="NAME",
                   help="extra DNS name for the serving certificate (repeatable)")
    p.add_argument("--ip", action="append", default=[], metavar="ADDR",
                   help="extra IP address for the serving certificate (repeatable)")
    p.add_argument("--new-ca", action="store_true", help="replace an existing CA in --out (the caBundle "
                                                         "in the cluster must then be updated)")
    p.add_argument("--check", type=Path, metavar="DIR", help="report days until expiry of DIR's CA and "
                                                              "serving certificate")
    p.add_argument("--min-days", type=float, default=DEFAULT_MIN_DAYS,
                   help="with --check: exit 1 when either expires sooner (default: %(default)s)")
    return p


def certs_main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 done / all good, 1 --check found a problem, 2 usage or I/O error."""
    parser = _parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse exits 0 for --help and 2 for usage errors
        return int(exc.code or 0)
    if (args.check is None) == (args.out is None):
        parser.print_usage(sys.stderr)
        print("gpugate certs: give exactly one of --out DIR or --check DIR", file=sys.stderr)
        return 2
    try:
        if args.check is not None:
            result = check_cert_dir(args.check, args.min_days)
            for line in result.lines:
                print(line)
            for problem in result.problems:
                print(f"PROBLEM: {problem}")
            return 0 if result.ok else 1
        made = write_cert_set(args.out, args.service, args.namespace, ca_days=args.ca_days,
                              leaf_days=args.days, key_type=args.key_type, secret_name=args.secret_name,
                              extra_dns=args.dns, ip_addresses=args.ip, new_ca=args.new_ca)
    except CertError as exc:
        print(f"gpugate certs: {exc}", file=sys.stderr)
        return 2
    ca_note = "kept the existing CA" if made.reused_ca else "new CA"
    if len(made.trusted) > 1:
        ca_note += "; the caBundle trusts the previous CA too until the next run"
    print(f"gpugate certs: wrote {args.out} ({ca_note}; serving certificate for "
          f"{', '.join(service_dns_names(args.service, args.namespace))}, valid until "
          f"{made.cert.not_valid_after_utc:%Y-%m-%d})", file=sys.stderr)
    # stdout carries only the caBundle, so that CA_BUNDLE=$(gpugate certs ...) works.
    print(ca_bundle(made.trusted))
    return 0
