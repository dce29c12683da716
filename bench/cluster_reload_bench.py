"""Reviews while ``gpugate serve --cluster FILE`` reloads its snapshot, against the same
server's reviews with no reload going on, in the same run.

``gpugate serve`` (a subprocess) loads a synthetic static topology (10,000 nodes, 100,000
running pods, as in ``webhook_bench.py``); one keep-alive TLS client posts ``/validate``
reviews of a 64-pod PyTorchJob back to back (concurrency 1). First a baseline window with
no reload, then ``--reloads`` times: the snapshot is replaced by an atomic rename of an
identical copy (a new inode: a real reload, the same verdicts) and the client keeps
reviewing until ``gpugate_reloads_total{what="cluster",result="ok"}`` has moved on.
Prints per window p50/p99/max latency and their ratios to the baseline, how long each
reload took, the server's RSS after each, and how many verdicts differed (must be 0).

    .venv/bin/python bench/cluster_reload_bench.py
    .venv/bin/python bench/cluster_reload_bench.py --nodes 2000 --pods 20000 --reloads 2   # quick
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from webhook_bench import (
    ROOT,
    free_port,
    percentile,
    pytorch_job,
    review_payloads,
    rss_mib,
    stop,
    submitted,
    synthetic_cluster,
    wait_ready,
    write_certs,
)

RELOADS_OK = re.compile(r'^gpugate_reloads_total\{result="ok",what="cluster"\} ([0-9.e+]+)$', re.M)


class Client:
    """One kept-alive HTTPS connection."""

    def __init__(self, port: int, context: ssl.SSLContext, metrics_port: int) -> None:
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        # metrics are served on their own plain-HTTP port
        self.metrics = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=30)

    def post(self, body: bytes) -> tuple[float, bool]:
        started = time.perf_counter()
        self.conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
        answer = json.loads(self.conn.getresponse().read())
        return time.perf_counter() - started, bool(answer["response"]["allowed"])

    def reloads(self) -> float:
        self.metrics.request("GET", "/metrics")
        match = RELOADS_OK.search(self.metrics.getresponse().read().decode())
        return float(match.group(1)) if match else 0.0


def row(name: str, latencies: list[float], base: list[float] | None) -> str:
    p50, p99, worst = (percentile(latencies, 0.50), percentile(latencies, 0.99), max(latencies))
    text = f"  {name:<12} {len(latencies):6d} {p50 * 1e3:8.2f} {p99 * 1e3:8.2f} {worst * 1e3:8.1f}"
    if base:
        text += (f"   p50 x{p50 / percentile(base, 0.50):5.2f}  p99 x{p99 / percentile(base, 0.99):5.2f}"
                 f"  max x{worst / max(base):6.1f}")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--reloads", type=int, default=3)
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpugate-reload-bench-") as tmp:
        directory = Path(tmp)
        ca, cert, key = write_certs(directory)
        context = ssl.create_default_context(cafile=str(ca))
        cluster = directory / "cluster.json"
        text = json.dumps(synthetic_cluster(args.nodes, args.pods))
        cluster.write_text(text)
        print(f"synthetic snapshot: {args.nodes} nodes, {args.pods} pods, {len(text) / 2**20:.0f} MiB JSON")
        port, metrics_port = free_port(), free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--metrics-port", str(metrics_port),
             "--tls-cert", str(cert), "--tls-key", str(key), "--cluster", str(cluster),
             "--log-level", "warning"], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            wait_ready(f"https://127.0.0.1:{port}", context, server, 300)
            client = Client(port, context, metrics_port)
            payloads = review_payloads(submitted(pytorch_job(64)), 2000)
            for body in payloads[:200]:  # warm up: connection, caches
                client.post(body)
            expected = client.post(payloads[0])[1]
            print(f"ready; RSS {rss_mib(server.pid):.0f} MiB; review: PyTorchJob 64 pods x 8 GPUs, "
                  f"POST /validate, concurrency 1, verdict allowed={expected}\n")

            differing = 0
            sent = 0

            def review() -> float:
                nonlocal differing, sent
                latency, allowed = client.post(payloads[sent % len(payloads)])
                sent += 1
                differing += allowed != expected
                return latency

            base: list[float] = []
            end = time.monotonic() + args.baseline_seconds
            while time.monotonic() < end:
                base.append(review())
            print(f"  {'window':<12} {'reviews':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
            print(row("no reload", base, None))
            durations: list[float] = []
            for number in range(1, args.reloads + 1):
                fresh = directory / "cluster.json.new"
                fresh.write_text(text)
                window: list[float] = []
                started = time.monotonic()
                os.replace(fresh, cluster)
                while True:
                    window.append(review())
                    if len(window) % 20 == 0 and client.reloads() >= number:
                        break
                    if time.monotonic() - started > 300:
                        raise RuntimeError("reload not seen within 300 s")
                durations.append(time.monotonic() - started)
                print(row(f"reload {number}", window, base)
                      + f"   took {durations[-1]:.1f} s, RSS {rss_mib(server.pid):.0f} MiB")
            print(f"\nreload (rename to swapped, incl. up to 2 s until the next check): "
                  f"{min(durations):.1f}-{max(durations):.1f} s; "
                  f"verdicts differing from the first: {differing}")
        finally:
            stop(server, timeout=30)
    return 0 if differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
