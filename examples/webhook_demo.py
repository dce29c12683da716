"""The webhook part of ``make demo``: start ``gpugate serve`` on loopback with a throwaway
certificate and the example cluster, send it AdmissionReviews as the API server would
(a gang that can never run, one that waits, one that gets mutated), print the answers,
stop it. Run on its own with ``python examples/webhook_demo.py``.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "examples" / "cluster" / "cluster.yaml"
REVIEWS = [  # (what it shows, endpoint, manifest, expected allowed)
    ("a gang that can never be placed: denied", "validate", "examples/feasibility/rejected.yaml", False),
    ("a gang that fits the cluster but waits for its queue: allowed, with a warning", "validate",
     "examples/feasibility/waits.yaml", True),
    ("a training job without usage affinity: patched by /mutate", "mutate",
     "examples/usage/training-job.yaml", True),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    sys.path.insert(0, str(ROOT))
    from webhook.certs import cert_pem, key_pem, make_ca, make_serving_cert

    ca, ca_key = make_ca("gpugate-demo-ca", days=1)
    cert, key = make_serving_cert(ca, ca_key, extra_dns=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    for path, data in zip(paths, (cert_pem(ca), cert_pem(cert), key_pem(key)), strict=True):
        path.write_bytes(data)
    return paths


def _review(obj: dict[str, Any]) -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata", {})
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
        "namespace": meta.get("namespace", "default"), "name": meta.get("name", ""), "operation": "CREATE",
        "userInfo": {"username": "demo"}, "object": obj, "dryRun": False}}).encode()


def _post(url: str, body: bytes, context: ssl.SSLContext) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return dict(json.loads(response.read()))


def _show(response: dict[str, Any]) -> None:
    print(f"  allowed: {response['allowed']}")
    if "status" in response:
        print(f"  status {response['status']['code']}: {response['status']['message']}")
    for warning in response.get("warnings", []):
        print(f"  warning: {warning}")
    if response.get("patch"):
        for op in json.loads(base64.b64decode(response["patch"])):
            print(f"  patch: {op['op']} {op['path']} {json.dumps(op.get('value'))[:90]}")


def run() -> bool:
    """Start the webhook, send the reviews, stop it; True when every answer is as expected."""
    with tempfile.TemporaryDirectory(prefix="gpugate-demo-") as tmp:
        ca, cert, key = _certificates(Path(tmp))
        context = ssl.create_default_context(cafile=str(ca))
        port = _free_port()
        url = f"https://127.0.0.1:{port}"
        command = [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(port),
                   "--tls-cert", str(cert), "--tls-key", str(key),
                   "--cluster", str(CLUSTER.relative_to(ROOT)), "--log-level", "warning"]
        print("$ gpugate serve --host 127.0.0.1 --port", port, "--tls-cert tls.crt --tls-key tls.key "
              f"--cluster {CLUSTER.relative_to(ROOT)}", flush=True)
        server = subprocess.Popen(command, cwd=ROOT)
        ok = True
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=1):
                        break
                except (urllib.error.URLError, OSError):
                    if server.poll() is not None or time.monotonic() > deadline:
                        print("the webhook did not start")
                        return False
                    time.sleep(0.2)
            print(f"ready: GET {url}/readyz -> 200", flush=True)
            for what, endpoint, manifest, allowed in REVIEWS:
                obj = yaml.safe_load((ROOT / manifest).read_text())
                print(f"\nPOST /{endpoint}  {manifest}  ({what})")
                response = _post(f"{url}/{endpoint}", _review(obj), context)["response"]
                _show(response)
                ok &= response["allowed"] is allowed
        finally:
            server.terminate()
            server.wait(10)
        print("\nwebhook stopped", flush=True)
        return ok


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
