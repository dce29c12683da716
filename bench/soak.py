"""Soak: many reviews against ``gpugate serve`` while its live topology keeps changing.

Three processes share the machine:

- the API server double (``tests/fake_apiserver.py``, run by this file's ``--serve-api``
  mode) holding a synthetic GPU cluster (default 10,000 nodes, 50,000 running pods) and
  applying a stream of changes to it (default 100 events/s: pods bound and deleted,
  nodes relabelled), which it sends to every open watch;
- ``gpugate serve --kubeconfig`` watching it (list + watch, as in a cluster);
- this driver: an aiohttp TLS client with keep-alive connections posting ``--reviews``
  AdmissionReviews at ``--concurrency`` (a mix: a 64-pod PyTorchJob that fits, one that
  never fits, a Volcano Job with a bad GPU group size, each to /validate, and the raw
  PyTorchJob to /mutate), every one with its own uid.

It reports throughput, latency percentiles (p50/p99/p999), errors (a non-200, a wrong uid,
an unexpected verdict, a transport error: the goal is 0), the server's RSS after a warm-up
and at the end (goal: growth under 10%), the topology's age and pod count as the server
reports them (so the watch demonstrably kept up), and ratios against the same run's own
baseline: latency of the last 10% of reviews over the first 10%.

    .venv/bin/python bench/soak.py                        # 100,000 reviews (minutes)
    .venv/bin/python bench/soak.py --reviews 20000        # shorter
    .venv/bin/python bench/soak.py --reviews 500 --nodes 1000 --pods 5000 --json out.json  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from webhook_bench import (  # noqa: E402 - bench/ is not a package
    free_port,
    percentile,
    pytorch_job,
    rss_mib,
    stop,
    submitted,
    synthetic_cluster,
    wait_ready,
    write_certs,
)

UID_SLOT = "00000000-0000-0000-0000-000000000000"
SOAK_NAMESPACE = "soak"
MAX_SOAK_PODS = 3000


# -- the API server double with a stream of changes (its own process) -----------------------------

class EventStream:
    """Changes applied to the double at a steady rate, as a busy cluster produces them."""

    def __init__(self, server: Any, nodes: list[dict[str, Any]], rate: float, seed: int = 1) -> None:
        self.server = server
        self.nodes = nodes
        self.rate = rate
        self.random = random.Random(seed)
        self.applied = 0
        self.pods: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._serial = 0
        self._stop = threading.Event()

    def one(self) -> None:
        roll = self.random.random()
        if roll < 0.45 and len(self.pods) < MAX_SOAK_PODS:
            self._serial += 1
            node = self.random.choice(self.nodes)["metadata"]["name"]
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"soak-{self._serial:07d}", "namespace": SOAK_NAMESPACE},
                   "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app:1", "resources": {
                       "requests": {"cpu": "250m", "memory": "512Mi"}}}]},
                   "status": {"phase": "Running"}}
            self.server.add(pod)
            self.pods.append(pod)
        elif roll < 0.75 and self.pods:
            pod = self.pods.pop(self.random.randrange(len(self.pods)))
            if self.random.random() < 0.5:
                self.server.delete(pod)
            else:  # finished: a MODIFIED to Succeeded releases its resources
                pod = {**pod, "status": {"phase": "Succeeded"}}
                self.server.modify(pod)
        else:
            node = self.random.choice(self.nodes)
            labels = node["metadata"]["labels"]
            labels["soak.gpugate.io/generation"] = str(self.applied)
            self.server.modify(node)
        self.applied += 1

    def run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.one()
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -1.0:  # fell behind by more than a second: do not try to catch up in a burst
                next_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()


def serve_api(cluster_file: str, port: int, rate: float) -> None:
    """``--serve-api``: the double on 127.0.0.1:PORT plus the event stream, until SIGTERM;
    then prints ``events N seconds T``."""
    from fake_apiserver import FakeApiServer

    with open(cluster_file, "rb") as fh:
        items = [o for o in json.load(fh)["items"] if isinstance(o, dict)]
    server = FakeApiServer()
    nodes = [o for o in items if o.get("kind") == "Node"]
    server.preload(items)
    server.fixed_port = port
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with server:
        stream = EventStream(server, nodes, rate)
        print("ready", server.port, flush=True)
        thread = threading.Thread(target=stream.run, daemon=True)
        if rate > 0:
            thread.start()
        done.wait()
        stream.stop()
        thread.join(5)
        print(f"events {stream.applied} seconds {time.monotonic() - stream.started:.1f}", flush=True)


# -- the load ----------------------------------------------------------------------------------------

def review_template(obj: dict[str, Any], operation: str = "CREATE") -> bytes:
    """The review as bytes with a fixed-width uid slot, so each request only swaps the uid."""
    api_version = obj["apiVersion"]
    group, _, version = api_version.rpartition("/")
    meta = obj["metadata"]
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID_SLOT, "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
        "namespace": meta["namespace"], "name": meta["name"], "operation": operation,
        "userInfo": {"username": "soak"}, "object": obj, "dryRun": False}}
    return json.dumps(review).encode()


def bad_group_job() -> dict[str, Any]:
    """A Volcano Job denied by GG202 (a GPU group of 12 with 8 GPUs per pod)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "bad-group", "namespace": "research",
                         "labels": {"maip.mxsf.io/usage": "training"}},
            "spec": {"schedulerName": "volcano", "minAvailable": 2, "queue": "research", "tasks": [{
                "name": "worker", "replicas": 2,
                "template": {"metadata": {"annotations": {"metax-tech.com/gpu-group-size": "12"}},
                             "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                                      "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                          "limits": {"nvidia.com/gpu": "8"}}}]}}}]}}


def workload_mix(nodes: int) -> list[tuple[str, bytes, Callable[[dict[str, Any]], bool]]]:
    """(endpoint, body template, check of the response) in the proportions sent."""
    fits = submitted(pytorch_job(64))
    never = submitted(pytorch_job((nodes // 8 + 1) * 8))  # more 8-GPU pods than there are nodes
    never["metadata"]["name"] = "too-big"

    def allowed(response: dict[str, Any]) -> bool:
        return response.get("allowed") is True

    def denied_by(rule: str) -> Callable[[dict[str, Any]], bool]:
        return lambda response: (response.get("allowed") is False
                                 and rule in response.get("status", {}).get("message", ""))

    def patched(response: dict[str, Any]) -> bool:
        return response.get("allowed") is True and response.get("patchType") == "JSONPatch"

    return [("validate", review_template(fits), allowed),
            ("validate", review_template(fits), allowed),
            ("validate", review_template(never), denied_by("GG40")),  # GG403 (or GG405: the groups)
            ("validate", review_template(bad_group_job()), denied_by("GG202")),
            ("mutate", review_template(pytorch_job(64)), patched)]


def metric_values(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            labels, _, value = line.rpartition(" ")
            out[labels[len(name):]] = float(value)
    return out


async def drive(base: str, metrics_url: str, context: ssl.SSLContext, mix: list[tuple[str, bytes, Any]],
                reviews: int,
                concurrency: int, warmup: int, on_warm: Callable[[], None],
                sample: Callable[[str], None]) -> dict[str, Any]:
    import aiohttp

    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def one(index: int) -> None:
            endpoint, template, expected = mix[index % len(mix)]
            uid = str(uuid.uuid4())
            body = template.replace(UID_SLOT.encode(), uid.encode(), 1)
            try:
                async with session.post(f"{base}/{endpoint}", data=body, headers=headers) as response:
                    status = response.status
                    answer = await response.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            if status != 200:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
            elif answer.get("response", {}).get("uid") != uid:
                errors["uid not echoed"] = errors.get("uid not echoed", 0) + 1
            elif not expected(answer["response"]):
                key = f"unexpected verdict on {endpoint} #{index % len(mix)}"
                errors[key] = errors.get(key, 0) + 1

        async def worker(count: list[int], record: bool) -> None:
            nonlocal sent
            while count[0] > 0:
                count[0] -= 1
                index = sent
                sent += 1
                started = time.perf_counter()
                await one(index)
                if record:
                    latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker([warmup // concurrency + 1], False) for _ in range(concurrency)))
        errors.clear()
        on_warm()

        async def sampler() -> None:
            while True:
                try:
                    async with session.get(metrics_url) as response:
                        sample(await response.text())
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(1.0)

        sampling = asyncio.get_running_loop().create_task(sampler())
        remaining = [reviews]
        started = time.perf_counter()
        await asyncio.gather(*(worker(remaining, True) for _ in range(concurrency)))
        wall = time.perf_counter() - started
        sampling.cancel()
        async with session.get(metrics_url) as response:
            sample(await response.text())
    return {"latencies": latencies, "wall": wall, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=50_000, help="running pods in the cluster at the start")
    parser.add_argument("--events-per-second", type=float, default=100.0)
    parser.add_argument("--warmup", type=int, default=None, help="reviews before measuring (default: 2%%, "
                                                                 "at least 200)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--serve-api", nargs=2, metavar=("CLUSTER_JSON", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_api:
        serve_api(args.serve_api[0], int(args.serve_api[1]), args.events_per_second)
        return 0
    warmup = args.warmup if args.warmup is not None else max(200, args.reviews // 50)

    import yaml

    with tempfile.TemporaryDirectory(prefix="gpugate-soak-") as tmp:
        directory = Path(tmp)
        ca, cert, key = write_certs(directory)
        context = ssl.create_default_context(cafile=str(ca))
        cluster = directory / "cluster.json"
        cluster.write_text(json.dumps(synthetic_cluster(args.nodes, args.pods)))
        api_port, gate_port, metrics_port = free_port(), free_port(), free_port()
        api = subprocess.Popen([sys.executable, __file__, "--serve-api", str(cluster), str(api_port),
                                "--events-per-second", str(args.events_per_second)],
                               cwd=ROOT, stdout=subprocess.PIPE)
        gate: subprocess.Popen[bytes] | None = None
        try:
            assert api.stdout is not None
            if not api.stdout.readline().startswith(b"ready"):
                raise RuntimeError("the API server double did not start")
            kubeconfig = directory / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "soak",
                "clusters": [{"name": "soak", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
                "users": [{"name": "soak", "user": {"token": "soak"}}],
                "contexts": [{"name": "soak", "context": {"cluster": "soak", "user": "soak"}}]}))
            started = time.perf_counter()
            gate = subprocess.Popen(
                [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(gate_port),
                 "--tls-cert", str(cert), "--tls-key", str(key), "--kubeconfig", str(kubeconfig),
                 "--log-level", "warning", "--metrics-port", str(metrics_port)], cwd=ROOT)
            base = f"https://127.0.0.1:{gate_port}"
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            wait_ready(base, context, gate, 900)
            synced = time.perf_counter() - started
            rss: dict[str, float] = {"ready": rss_mib(gate.pid)}
            samples: list[dict[str, Any]] = []
            gate_pid = gate.pid

            def on_warm() -> None:
                rss["start"] = rss_mib(gate_pid)

            def sample(text: str) -> None:
                ages = metric_values(text, "gpugate_topology_age_seconds")
                pods = metric_values(text, "gpugate_topology_objects")
                seconds = metric_values(text, "gpugate_review_duration_seconds_sum")
                counts = metric_values(text, "gpugate_review_duration_seconds_count")
                samples.append({"rss": rss_mib(gate_pid), "age": max(ages.values(), default=float("nan")),
                                "server_seconds": sum(seconds.values()), "server_count": sum(counts.values()),
                                "pods": next((v for k, v in pods.items() if 'kind="Pod"' in k), float("nan")),
                                "internal_errors": sum(metric_values(text, "gpugate_internal_errors_total")
                                                       .values())})

            mix = workload_mix(args.nodes)
            result = asyncio.run(drive(base, metrics_url, context, mix, args.reviews, args.concurrency,
                                       warmup, on_warm, sample))
            rss["end"] = rss_mib(gate.pid)
            rss["max"] = max([s["rss"] for s in samples] + [rss["end"]])
        finally:
            stop(gate, timeout=15)  # the webhook first: its watches would log the API server going away
            api.terminate()
            events_line = ""
            try:
                events_line = api.communicate(timeout=15)[0].decode().strip().splitlines()[-1]
            except (subprocess.TimeoutExpired, IndexError):
                api.kill()

    latencies = result["latencies"]
    errors = result["errors"]
    tenth = max(1, len(latencies) // 10)
    first, last = latencies[:tenth], latencies[-tenth:]
    parts = events_line.split()
    events = int(parts[1]) if len(parts) >= 4 and parts[0] == "events" else 0
    event_seconds = float(parts[3]) if len(parts) >= 4 else float("nan")
    figures = {
        "reviews": len(latencies), "concurrency": args.concurrency, "nodes": args.nodes, "pods": args.pods,
        "first_sync_seconds": round(synced, 2),
        "throughput_per_second": round(len(latencies) / result["wall"], 1),
        "wall_seconds": round(result["wall"], 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1e3, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 2),
        "p999_ms": round(percentile(latencies, 0.999) * 1e3, 2),
        "errors": sum(errors.values()), "error_kinds": errors,
        "internal_errors": samples[-1]["internal_errors"] if samples else None,
        "rss_mib": {k: round(v, 1) for k, v in rss.items()},
        "rss_growth_percent": round(100 * (rss["end"] - rss["start"]) / rss["start"], 1),
        "events_applied": events, "events_per_second": round(events / event_seconds, 1) if events else 0.0,
        "topology_age_max_seconds": round(max((s["age"] for s in samples), default=float("nan")), 2),
        "topology_pods_start_end": [samples[0]["pods"], samples[-1]["pods"]] if samples else None,
        "server_mean_ms": round(1e3 * (samples[-1]["server_seconds"] - samples[0]["server_seconds"])
                                / max(1.0, samples[-1]["server_count"] - samples[0]["server_count"]), 2)
        if samples else None,
        "ratio_p50_last_over_first_tenth": round(percentile(last, 0.5) / percentile(first, 0.5), 2),
        "ratio_p99_last_over_first_tenth": round(percentile(last, 0.99) / percentile(first, 0.99), 2),
    }
    print(f"soak: {figures['reviews']:,} reviews at concurrency {args.concurrency} against gpugate serve "
          f"(live topology: {args.nodes:,} nodes, {args.pods:,} pods, "
          f"first sync {figures['first_sync_seconds']} s)")
    print(f"  throughput {figures['throughput_per_second']:,} reviews/s over {figures['wall_seconds']} s; "
          f"p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, p999 {figures['p999_ms']} ms")
    print(f"  time inside the server per review (its histogram): {figures['server_mean_ms']} ms on average; "
          f"the rest of the client's latency is queueing at concurrency {args.concurrency} on 2 shared cores")
    print(f"  errors {figures['errors']} {errors or ''} (internal errors counted by the server: "
          f"{figures['internal_errors']})")
    print(f"  RSS ready {rss['ready']:.0f} MiB, after warm-up {rss['start']:.0f} MiB, "
          f"end {rss['end']:.0f} MiB, "
          f"max {rss['max']:.0f} MiB: growth {figures['rss_growth_percent']}% (goal < 10%)")
    print(f"  watch: {events:,} events applied ({figures['events_per_second']}/s); topology age at most "
          f"{figures['topology_age_max_seconds']} s (stale after 30 s); pods in the topology "
          f"{figures['topology_pods_start_end']}")
    print(f"  drift (same run): p50 last/first tenth {figures['ratio_p50_last_over_first_tenth']}x, "
          f"p99 {figures['ratio_p99_last_over_first_tenth']}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0 if figures["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
