"""Reusable pieces for tests that talk to the real webhook over TLS on loopback.

- :func:`make_cert`: a throwaway self-signed certificate for 127.0.0.1/localhost;
- :class:`ServedWebhook`: ``gpugate serve``'s aiohttp app running in a thread of its own,
  with TLS, on a free loopback port (a context manager);
- :func:`post_review` / :func:`review_for`: build an AdmissionReview for an object, post
  it, return ``(http_status, parsed JSON)``; :func:`decode_patch` reads the JSON Patch.

Plain synchronous code (http.client), so any test can use it without an async plugin::

    with ServedWebhook(policy=Policy(), clusters=None) as hook:
        status, answer = post_review(hook, "validate", review_for(pod))
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import http.client
import ipaddress
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from policies.config import Policy


def make_cert(directory: Path, name: str = "tls", common_name: str = "localhost",
              days: int = 1) -> tuple[Path, Path]:
    """Write ``<name>.crt`` and ``<name>.key`` (self-signed, EC P-256) and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 8.0) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (polled every 20 ms)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def client_context(cert_path: Path | str) -> ssl.SSLContext:
    """A client context that trusts exactly the throwaway certificate."""
    context = ssl.create_default_context(cafile=str(cert_path))
    return context


class WebhookClient:
    """HTTPS requests to a webhook on ``host:port`` whose certificate is ``cert``.

    Keeps one connection alive between requests (not thread-safe: one client per thread).
    ``GET /metrics`` goes to the metrics port (plain HTTP, ``metrics_port``) when there is one:
    the HTTPS port does not serve it.
    """

    def __init__(self, host: str, port: int, cert: Path | str, metrics_port: int | None = None) -> None:
        self.host = host
        self.port = port
        self.cert = Path(cert)
        self.metrics_port = metrics_port
        self._conn: http.client.HTTPSConnection | None = None

    def metrics(self, timeout: float = 10.0) -> str:
        """The text of ``GET /metrics`` from the metrics port."""
        status, data, _ = self.plain_request("GET", "/metrics", timeout=timeout)
        assert status == 200, (status, data[:200])
        return data.decode()

    def plain_request(self, method: str, path: str, body: bytes | None = None,
                      timeout: float = 10.0) -> tuple[int, bytes, Any]:
        """One plain-HTTP request to the metrics port."""
        assert self.metrics_port is not None, "no metrics port"
        conn = http.client.HTTPConnection(self.host, self.metrics_port, timeout=timeout)
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, response.read(), response.headers
        finally:
            conn.close()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext:
        return client_context(self.cert)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10.0,
                keep_alive: bool = True) -> tuple[int, bytes, Any]:
        """One HTTPS request: ``(status, body, headers)``, on a kept-alive connection by default."""
        if path == "/metrics" and method == "GET" and self.metrics_port is not None:
            return self.plain_request(method, path, body, timeout)
        for attempt in (1, 2):
            conn = self._connection(timeout) if keep_alive else self.connect(timeout)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                response = conn.getresponse()
                data = response.read()
                if not keep_alive or response.will_close:
                    conn.close()
                    self._conn = None
                return response.status, data, response.headers
            except (http.client.HTTPException, OSError):
                conn.close()
                self._conn = None
                if attempt == 2 or not keep_alive:
                    raise
        raise AssertionError("unreachable")

    def connect(self, timeout: float = 10.0) -> http.client.HTTPSConnection:
        """A new HTTPS connection to the server (the caller closes it)."""
        return http.client.HTTPSConnection(self.host, self.port, context=self.ssl_context(), timeout=timeout)

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        if self._conn is None:
            self._conn = self.connect(timeout)
        return self._conn


class ServedWebhook(WebhookClient):
    """The webhook app with TLS on ``127.0.0.1:<free port>``, served from a background thread.

    Pass either a ready :class:`webhook.app.Webhook` (``webhook=``) or a policy and
    cluster snapshots. ``cert_dir`` receives the throwaway certificate (a temporary
    directory if omitted).
    """

    def __init__(self, policy: Policy | None = None, clusters: Sequence[Any] | None = None, *,
                 webhook: Any = None, cert_dir: Path | None = None, config_path: str | None = None,
                 reload_interval: float = 0.2, max_body_bytes: int | None = None,
                 **serving_options: Any) -> None:
        import tempfile

        from webhook.admission import MAX_BODY_BYTES
        from webhook.app import PolicySource, StaticTopology, Webhook
        from webhook.tls import ReloadingContext

        self._tmp = None
        if cert_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gpugate-test-")
            cert_dir = Path(self._tmp.name)
        self.cert, self.key = make_cert(cert_dir)
        self.tls = ReloadingContext(str(self.cert), str(self.key))
        if webhook is None:
            source = PolicySource(config_path) if config_path else PolicySource(policy=policy or Policy())
            webhook = Webhook(policy=source, topology=StaticTopology(clusters), tls=self.tls,
                              reload_interval=reload_interval,
                              max_body_bytes=max_body_bytes or MAX_BODY_BYTES)
        else:
            webhook.tls = self.tls
        self.webhook = webhook
        super().__init__("127.0.0.1", free_port(), self.cert, metrics_port=free_port())
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._runner: Any = None
        self.serving_options = serving_options   # webhook.lifecycle.Serving's keywords

    def __enter__(self) -> ServedWebhook:
        self._thread = threading.Thread(target=self._serve, name="webhook-test-server", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("webhook did not start within 10 s")
        if self._error is not None:
            raise RuntimeError(f"webhook failed to start: {self._error!r}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self._runner.stop(), self.loop).result(15)
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        if self._tmp is not None:
            self._tmp.cleanup()

    def _serve(self) -> None:
        from webhook.lifecycle import Serving

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            # as ``gpugate serve`` serves it (connection cap, buffers, timeouts), in this thread
            self._runner = Serving(self.webhook, self.host, self.port, self.tls.context,
                                   metrics_port=self.metrics_port, **self.serving_options)
            loop.run_until_complete(self._runner.start())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._started.set()
            loop.close()
            return
        self.loop = loop
        self._started.set()
        loop.run_forever()
        # connections a test left open (on purpose, for the hostile ones) end with the loop
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    def call(self, function: Any, *args: Any) -> Any:
        """Run ``function(*args)`` on the server's loop thread and return its result."""
        assert self.loop is not None

        async def run() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

def review_for(obj: Any, operation: str = "CREATE", uid: str | None = None, namespace: str | None = None,
               dry_run: bool = False, old_object: Any = None) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it for ``obj``."""
    api_version = obj.get("apiVersion", "") if isinstance(obj, dict) else ""
    group, _, version = api_version.rpartition("/")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": f"{str(kind).lower()}s"},
        "name": meta.get("name", ""),
        "namespace": namespace if namespace is not None else meta.get("namespace", "default"),
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": None if operation == "DELETE" else obj,
        "oldObject": old_object if operation != "CREATE" else None,
        "dryRun": dry_run,
        "options": None,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def post_review(hook: WebhookClient, endpoint: str, review: Any, *,
                content_type: str = "application/json") -> tuple[int, Any]:
    """POST a review (a dict, or raw bytes/str as sent) to ``/mutate`` or ``/validate``."""
    if isinstance(review, bytes):
        body = review
    elif isinstance(review, str):
        body = review.encode()
    else:
        body = json.dumps(review).encode()
    status, data, _ = hook.request("POST", f"/{endpoint}", body, {"Content-Type": content_type})
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode(errors="replace")


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of an AdmissionReview response (empty when there is none)."""
    patch = response.get("patch")
    if not patch:
        return []
    assert response.get("patchType") == "JSONPatch"
    return json.loads(base64.b64decode(patch))


class ServeProcess:
    """``gpugate serve`` as the command line runs it, in a subprocess on a loopback port.

    ``with ServeProcess(cert, key, "--cluster", path) as served:`` starts it (``args`` after
    the host, port and TLS flags); on leaving, it is terminated and ``returncode`` and
    ``stderr`` (its log) are set.
    """

    def __init__(self, cert: Path, key: Path, *args: str) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--metrics-port", str(self.metrics_port), "--drain-seconds", "0",
             "--tls-cert", str(cert), "--tls-key", str(key), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent)
        self.client = WebhookClient("127.0.0.1", self.port, cert, metrics_port=self.metrics_port)
        self.returncode: int | None = None
        self.stderr = ""

    def wait_until_answering(self, path: str, timeout: float = 20.0) -> bool:
        """Whether ``GET path`` answered 200 within ``timeout`` with the process still running."""
        def answering() -> bool:
            try:
                return self.client.request("GET", path, keep_alive=False, timeout=1)[0] == 200
            except OSError:
                return self.process.poll() is not None   # died: stop waiting
        return wait_for(answering, timeout) and self.process.poll() is None

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.process.terminate()
        _, err = self.process.communicate(timeout=15)
        self.returncode, self.stderr = self.process.returncode, err.decode()
