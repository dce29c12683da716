"""TLS handshake cost by serving-key type (why ``gpugate certs`` defaults to ECDSA P-256).

The API server opens TLS connections to the webhook (and reconnects after idle timeouts), so
the server's handshake cost is part of admission latency. This measures full handshakes on
loopback with certificates from ``webhook.certs`` for each key type and prints the median and
the ratio against ECDSA P-256 measured in the same run.

Run: .venv/bin/python bench/tls_handshake_bench.py [handshakes per key type, default 300]
"""

from __future__ import annotations

import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from webhook.certs import KEY_TYPES, cert_pem, key_pem, make_ca, make_serving_cert

HOSTNAME = "gpugate.gpugate-system.svc"


def serve(server_context: ssl.SSLContext, listener: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)      # the client sends one byte once the handshake is done
        except (OSError, ssl.SSLError):
            pass


def measure(key_type: str, count: int, workdir: Path) -> list[float]:
    ca, ca_key = make_ca(key_type=key_type)
    leaf, key = make_serving_cert(ca, ca_key, key_type=key_type)
    (workdir / "tls.crt").write_bytes(cert_pem(leaf))
    (workdir / "tls.key").write_bytes(key_pem(key))
    (workdir / "ca.crt").write_bytes(cert_pem(ca))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
    client_context = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(server_context, listener, stop), daemon=True)
    thread.start()
    times: list[float] = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            with socket.create_connection(("127.0.0.1", port)) as raw, \
                    client_context.wrap_socket(raw, server_hostname=HOSTNAME) as tls:
                times.append(time.perf_counter() - start)
                tls.sendall(b"x")
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)
    return times


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 300
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key_type in KEY_TYPES:
            measure(key_type, 20, Path(tmp))              # warm-up
            results[key_type] = statistics.median(measure(key_type, count, Path(tmp)))
    baseline = results["ecdsa-p256"]
    print(f"TLS handshake on loopback, median of {count} (client + server in one process)")
    for key_type, median in results.items():
        print(f"  {key_type:<11} {median * 1e3:7.3f} ms   x{median / baseline:5.2f} vs ecdsa-p256")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
