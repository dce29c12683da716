"""Webhook latency and throughput over TLS on loopback, against a baseline in the same run.

(a) ``gpugate serve`` (a subprocess) with a synthetic static topology of 10,000 nodes and
    100,000 running pods, answering ``/validate`` for a 64-pod PyTorchJob (8 GPUs per pod,
    GPU groups, a Volcano queue) with the feasibility checks on;
(b) an empty aiohttp TLS handler (also a subprocess) that answers ``allowed: true``.

Every review is a different job (its own uid and name). A keep-alive aiohttp client drives
both servers closed-loop at concurrency 1, 16 and 64, then open-loop at a fixed arrival rate
(``--rate``, 1,000 reviews/s), and prints p50/p99 latency, reviews/s, the server's CPU time
per review, and the ratios of (a) to (b). (a) runs twice: with jobs of one shape (a sweep,
which the feasibility memo answers) and with every job a different shape (no memo hits).
Then the RSS of (a), the in-process cost of a review, and the same with a live watch.

    .venv/bin/python bench/webhook_bench.py            # full size
    .venv/bin/python bench/webhook_bench.py --nodes 2000 --pods 20000 --requests 500   # quick
    .venv/bin/python bench/webhook_bench.py --job jobset --no-live    # a JobSet of 64 replicated jobs
    .venv/bin/python bench/webhook_bench.py --job lws --no-live       # a LeaderWorkerSet of 32 groups
    .venv/bin/python bench/webhook_bench.py --replicas 2 --no-live    # deploy/base's two replicas

With ``--replicas N`` each server runs as N processes (the empty handler too), the reviews
spread over them in turn as a Service spreads connections over the webhook's pods, and the CPU
per review is that of all N.

The client shares the machine's cores with the server, so absolute figures understate the
server; the ratios against (b), measured under the same conditions, are what to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE_SERVER = """
import json, ssl, sys
from aiohttp import web

async def allow(request):
    review = await request.json()
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], "allowed": True}})

context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.minimum_version = ssl.TLSVersion.TLSv1_2
context.load_cert_chain(sys.argv[2], sys.argv[3])
app = web.Application()
app.router.add_post("/validate", allow)
app.router.add_get("/readyz", lambda r: web.Response(text="ok"))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=context, access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_certs(directory: Path) -> tuple[Path, Path, Path]:
    from webhook.certs import cert_pem, key_pem, make_ca, make_serving_cert

    ca, ca_key = make_ca("gpugate-bench-ca", days=1)
    cert, key = make_serving_cert(ca, ca_key, extra_dns=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    paths[0].write_bytes(cert_pem(ca))
    paths[1].write_bytes(cert_pem(cert))
    paths[2].write_bytes(key_pem(key))
    return paths


def synthetic_cluster(nodes: int, pods: int) -> dict[str, Any]:
    """A GPU cluster: 8-GPU nodes in supernodes of 8 (training, inference, hybrid pools),
    pods spread evenly, a few Volcano queues."""
    items: list[dict[str, Any]] = []
    pools = ["training", "training", "hybrid", "inference"]
    for i in range(nodes):
        usage = pools[(i // 8) % len(pools)]  # a supernode (clique) of 8 nodes is one pool
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gpu-{i:05d}", "labels": {
                "kubernetes.io/hostname": f"gpu-{i:05d}", "maip.mxsf.io/node.usage": usage,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.clique": f"clique-{i // 8}",
                "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
            "spec": {"taints": [{"key": "maip.mxsf.io/node.usage", "value": usage, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "126", "memory": "1980Gi", "nvidia.com/gpu": "8",
                                       "pods": "110", "ephemeral-storage": "3500Gi"}}})
    for j in range(pods):
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{j:06d}", "namespace": f"team-{j % 50}"},
            "spec": {"nodeName": f"gpu-{j % nodes:05d}", "containers": [{
                "name": "main", "image": "app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}})
    for name in ("default", "research", "production"):
        items.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                      "metadata": {"name": name}, "spec": {"weight": 1}, "status": {"state": "Open"}})
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


_GPU_POD: dict[str, Any] = {
    "schedulerName": "volcano",
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "containers": [{"name": "main", "image": "pytorch/pytorch:2.2.0",
                    "resources": {"limits": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
                                  "requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}}}]}
_METADATA = {"namespace": "research", "labels": {"maip.mxsf.io/usage": "training"}}


def pytorch_job(pods: int = 64) -> dict[str, Any]:
    """A PyTorchJob gang of ``pods`` pods x 8 GPUs, GPU groups of 64, Volcano queue research."""
    def replica(count: int, group: bool) -> dict[str, Any]:
        template: dict[str, Any] = {"spec": json.loads(json.dumps(_GPU_POD))}
        template["spec"]["containers"][0]["name"] = "pytorch"  # the training-operator's default container
        if group:
            template["metadata"] = {"annotations": {"metax-tech.com/gpu-group-size": "64"}}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": template}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "llm-pretrain", **_METADATA},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": pods, "queue": "research"}},
                     "pytorchReplicaSpecs": {"Master": replica(1, True), "Worker": replica(pods - 1, False)}}}


def jobset(replicated_jobs: int = 64) -> dict[str, Any]:
    """A JobSet of ``replicated_jobs`` replicated jobs, each one pod x 8 GPUs."""
    def job(i: int) -> dict[str, Any]:
        return {"name": f"slice-{i}", "replicas": 1,
                "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                                      "template": {"spec": {**json.loads(json.dumps(_GPU_POD)),
                                                            "restartPolicy": "Never"}}}}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm-slices", **_METADATA,
                         "annotations": {"scheduling.volcano.sh/queue-name": "research"}},
            "spec": {"replicatedJobs": [job(i) for i in range(replicated_jobs)]}}


def leader_worker_set(groups: int = 32) -> dict[str, Any]:
    """A LeaderWorkerSet of ``groups`` groups of 4 pods (leader and 3 workers) x 8 GPUs."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "llm-serve", **_METADATA},
            "spec": {"replicas": groups, "leaderWorkerTemplate": {
                "size": 4, "workerTemplate": {"spec": json.loads(json.dumps(_GPU_POD))}}}}


JOBS = {
    "pytorchjob": ("PyTorchJob with {n} pods x 8 GPUs, GPU groups of 64, queue research", pytorch_job, 64),
    "jobset": ("JobSet of {n} replicated jobs, one pod x 8 GPUs each", jobset, 64),
    "lws": ("LeaderWorkerSet of {n} groups of 4 pods x 8 GPUs", leader_worker_set, 32),
}


def submitted(job: dict[str, Any]) -> dict[str, Any]:
    """The job as /validate sees it: after the mutating webhook added affinities and tolerations."""
    from policies.config import Policy
    from policies.engine import evaluate

    return evaluate(job, Policy()).mutated or job


def review_body(obj: dict[str, Any]) -> dict[str, Any]:
    from policies.kinds import kind_spec

    group, _, version = obj["apiVersion"].rpartition("/")
    spec = kind_spec(obj["apiVersion"], obj["kind"])
    assert spec is not None, f"{obj['kind']} is not a kind of policies/kinds.py"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": spec.resource},
        "namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"], "operation": "CREATE",
        "userInfo": {"username": "bench"}, "object": obj, "dryRun": False}}


def _containers(value: Any) -> list[dict[str, Any]]:
    """Every container of every pod template inside ``value``."""
    if isinstance(value, list):
        return [c for item in value for c in _containers(item)]
    if not isinstance(value, dict):
        return []
    found = [c for c in value.get("containers", []) if isinstance(c, dict)] \
        if isinstance(value.get("containers"), list) else []
    return found + [c for key, item in value.items() if key != "containers" for c in _containers(item)]


def review_payloads(job: dict[str, Any], count: int, distinct_shapes: bool = False) -> list[bytes]:
    """``count`` review bodies, each a different job (own uid and name), as a sweep submits them.

    ``distinct_shapes``: every job also asks for a different CPU request per pod, so no two
    reviews put the same question to the topology (what memoisation cannot help with)."""
    bodies = []
    for i in range(count):
        obj = json.loads(json.dumps(job))
        obj["metadata"]["name"] = f"{job['metadata']['name']}-{i:05d}"
        if distinct_shapes:
            for container in _containers(obj["spec"]):
                for section in ("requests", "limits"):
                    container["resources"][section]["cpu"] = f"{32000 - i % 30000}m"
        bodies.append(json.dumps(review_body(obj)).encode())
    return bodies


def wait_ready(url: str, context: ssl.SSLContext, process: subprocess.Popen[bytes], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready within {timeout:.0f} s")


def stop(*processes: subprocess.Popen[Any] | None, timeout: float = 10) -> None:
    """Terminate the processes (None: never started), then wait for each; kill what outlives
    ``timeout``."""
    started = [p for p in processes if p is not None]
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """What one load level measured against one server."""

    latencies: list[float]
    wall: float
    verdicts: dict[str, int]
    cpu_per_review: float = float("nan")   # server CPU seconds per review
    lags: list[float] = field(default_factory=list)  # open loop: client's lateness per send

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall


async def _post(session: Any, url: str, payload: bytes, verdicts: dict[str, int]) -> None:
    async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as response:
        answer = await response.json(content_type=None)
        status = response.status
    review = answer.get("response") if isinstance(answer, dict) else None
    # an overloaded server sheds: a review answered unchecked, or an HTTP error (counted, shown)
    shed = isinstance(review, dict) and any("not checked" in w for w in review.get("warnings") or ())
    verdict = (f"HTTP {status}" if not isinstance(review, dict) else "shed" if shed else
               "allowed" if review.get("allowed") else "denied")
    verdicts[verdict] = verdicts.get(verdict, 0) + 1


async def drive(urls: list[str], context: ssl.SSLContext, payloads: list[bytes], concurrency: int,
                requests: int) -> Run:
    """Closed loop: ``requests`` reviews over ``concurrency`` keep-alive connections (per
    server process of ``urls``), each connection sending its next review as soon as the last is
    answered; review ``i`` goes to ``urls[i % len(urls)]``."""
    import aiohttp

    latencies: list[float] = []
    verdicts: dict[str, int] = {}
    sent = 0
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency, ssl=context))
                for _ in urls]
    try:
        async def worker() -> None:
            nonlocal sent
            while sent < requests:
                index = sent
                sent += 1
                started = time.perf_counter()
                await _post(sessions[index % len(urls)], urls[index % len(urls)],
                            payloads[index % len(payloads)], verdicts)
                latencies.append(time.perf_counter() - started)

        for session, url in zip(sessions, urls, strict=True):
            await _warm_up(session, url, payloads, concurrency)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    finally:
        for session in sessions:
            await session.close()
    return Run(latencies, wall, verdicts)


async def drive_rate(urls: list[str], context: ssl.SSLContext, payloads: list[bytes], rate: float,
                     seconds: float, connections: int = 64) -> Run:
    """Open loop: reviews sent at ``rate`` per second whether or not earlier ones were
    answered, the way the API server's clients arrive, over at most ``connections``.

    Latency counts from the moment the client starts a review, so a review waiting for a
    free connection (the server falling behind) is charged to the server. The client's own
    lateness against the schedule (its timers wake in whole milliseconds) is not: it is
    reported as the send lag instead, to show whether the client kept up. Review ``i`` goes to
    ``urls[i % len(urls)]``, each server process with its own ``connections``."""
    import aiohttp

    latencies: list[float] = []
    lags: list[float] = []
    verdicts: dict[str, int] = {}
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections, ssl=context))
                for _ in urls]
    try:
        for session, url in zip(sessions, urls, strict=True):
            await _warm_up(session, url, payloads, connections)

        async def one(i: int, due: float) -> None:
            started = time.perf_counter()
            lags.append(started - due)
            await _post(sessions[i % len(urls)], urls[i % len(urls)], payloads[i % len(payloads)], verdicts)
            latencies.append(time.perf_counter() - started)

        total = int(rate * seconds)
        tasks = []
        begun = time.perf_counter()
        sent = 0
        while sent < total:
            now = time.perf_counter()
            while sent < total and begun + sent / rate <= now:   # everything due by now
                tasks.append(asyncio.create_task(one(sent, begun + sent / rate)))
                sent += 1
            if sent < total:
                await asyncio.sleep(max(0.0, begun + sent / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - begun
    finally:
        for session in sessions:
            await session.close()
    return Run(latencies, wall, verdicts, lags=lags)


async def _warm_up(session: Any, url: str, payloads: list[bytes], connections: int) -> None:
    """Open the connections (TLS handshakes) and warm the server's caches; not measured."""
    scratch: dict[str, int] = {}
    for start in range(0, min(connections * 4, 200), connections):
        await asyncio.gather(*(_post(session, url, payloads[(start + i) % len(payloads)], scratch)
                               for i in range(connections)))


def measured(processes: list[subprocess.Popen[bytes]], run: Any) -> Run:
    """``run()`` (a coroutine factory), with the CPU time per review of the server's processes."""
    def spent() -> float:
        return sum(cpu_seconds(p.pid) for p in processes)

    before = spent()
    result: Run = asyncio.run(run())
    result.cpu_per_review = (spent() - before) / max(1, len(result.latencies))
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--job", choices=sorted(JOBS), default="pytorchjob",
                        help="the workload reviewed: a PyTorchJob gang, a JobSet, a LeaderWorkerSet")
    parser.add_argument("--job-pods", type=int, default=0,
                        help="pods of the PyTorchJob, replicated jobs of the JobSet, groups of the "
                             "LeaderWorkerSet (default 64, 64, 32)")
    parser.add_argument("--requests", type=int, default=2000, help="reviews per concurrency level")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="open-loop arrival rate in reviews/s (0: skip that part)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the open-loop run")
    parser.add_argument("--no-live", action="store_true",
                        help="skip the live-watch run (gpugate serve syncing from an API server double)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="server processes each (deploy/base runs 2), the reviews spread over them")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    with tempfile.TemporaryDirectory(prefix="gpugate-bench-") as tmp:
        directory = Path(tmp)
        ca, cert, key = write_certs(directory)
        context = ssl.create_default_context(cafile=str(ca))
        started = time.perf_counter()
        cluster = directory / "cluster.json"
        cluster.write_text(json.dumps(synthetic_cluster(args.nodes, args.pods)))
        print(f"synthetic snapshot: {args.nodes} nodes, {args.pods} pods, "
              f"{cluster.stat().st_size / 2**20:.0f} MiB JSON, "
              f"written in {time.perf_counter() - started:.1f} s")

        gate_ports = [free_port() for _ in range(args.replicas)]
        base_ports = [free_port() for _ in range(args.replicas)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        gates = [subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--tls-cert", str(cert), "--tls-key", str(key), "--cluster", str(cluster),
             "--log-level", "warning", "--metrics-port", "0"],
            cwd=ROOT, env=env) for port in gate_ports]
        bases = [subprocess.Popen([sys.executable, "-c", BASELINE_SERVER, str(port), str(cert), str(key)],
                                  cwd=ROOT, env=env) for port in base_ports]
        what, build, default_size = JOBS[args.job]
        size = args.job_pods or default_size
        job = submitted(build(size))
        pool = max(args.requests, int(args.rate * args.seconds), 1)
        same_shape = review_payloads(job, pool)
        distinct = review_payloads(job, pool, distinct_shapes=True)
        gc.collect()
        gc.freeze()  # the client's own collections must not land in one server's run only
        try:
            started = time.perf_counter()
            for port, gate in zip(gate_ports, gates, strict=True):
                wait_ready(f"https://127.0.0.1:{port}", context, gate, 300)
            replicas = f", {args.replicas} processes" if args.replicas > 1 else ""
            print(f"gpugate serve ready in {time.perf_counter() - started:.1f} s "
                  f"(loads and indexes the snapshot{replicas})")
            for port, base in zip(base_ports, bases, strict=True):
                wait_ready(f"https://127.0.0.1:{port}", context, base, 60)
            print(f"review: {what.format(n=size)}, "
                  f"POST /validate, every review a different job (own uid and name)\n"
                  f"  gpugate        jobs of one shape (a sweep: the topology is asked the same question)\n"
                  f"  gpugate/shapes every job a different CPU request: no two questions alike\n")
            def urls(ports: list[int]) -> list[str]:
                return [f"https://127.0.0.1:{port}/validate" for port in ports]

            servers = (("empty", bases, urls(base_ports), same_shape),
                       ("gpugate", gates, urls(gate_ports), same_shape),
                       ("gpugate/shapes", gates, urls(gate_ports), distinct))
            print(f"closed loop: {args.requests} reviews per level over keep-alive TLS connections")
            _print_table("concurrency", [
                (str(level), name, measured(processes, lambda u=targets, p=payloads, c=level:
                                            drive(u, context, p, c, args.requests)))
                for level in levels for name, processes, targets, payloads in servers])
            if args.rate > 0:
                print(f"\nopen loop: {args.rate:.0f} reviews/s for {args.seconds:g} s, up to 64 connections; "
                      f"latency from the start of each review (waiting for a connection included); "
                      f"goal at 1,000/s and 10,000 nodes: gpugate/shapes p99 < 10 ms")
                rows = []
                for name, processes, targets, payloads in servers:
                    asyncio.run(drive_rate(targets, context, payloads, args.rate, 1.0))   # warm-up, not shown
                    run = measured(processes, lambda u=targets, p=payloads:
                                   drive_rate(u, context, p, args.rate, args.seconds))
                    rows.append((f"{args.rate:.0f}/s", name, run))
                _print_table("rate", rows)
                # One process judges on one core (its event loop), beside the client on the same cores:
                # past about one core of demand it cannot keep up, and the queue sets the p99. N
                # processes share the machine's cores with the client: past them, the same.
                print("  CPU the rate asks of the server (cpu ms x rate): " + ", ".join(
                    f"{name} {run.cpu_per_review * args.rate:.2f} cores" for _, name, run in rows))
            print(f"\ngpugate serve RSS with {args.nodes} nodes / {args.pods} pods: "
                  f"{rss_mib(gates[0].pid):.0f} MiB "
                  f"(empty handler: {rss_mib(bases[0].pid):.0f} MiB){' each' if args.replicas > 1 else ''}")
        finally:
            stop(*gates, *bases)
        in_process_breakdown(cluster, same_shape, distinct)
        if not args.no_live:
            live_watch(directory, cluster, cert, key, context, same_shape, args.requests)
    return 0


def _print_table(level: str, rows: list[tuple[str, str, Run]]) -> None:
    """One line per (level, server); ratios against the empty handler at the same level."""
    header = (f"{level:>11} {'server':<15} {'p50 ms':>7} {'p99 ms':>7} {'reviews/s':>9} {'cpu ms':>7} "
              f"{'p50 x':>6} {'p99 x':>6} {'rate x':>6}  verdicts")
    print(header)
    print("-" * len(header))
    base: dict[str, Run] = {}
    for label, name, run in rows:
        if name == "empty":
            base[label] = run
        ref = base[label]
        p50, p99 = percentile(run.latencies, 0.5), percentile(run.latencies, 0.99)
        print(f"{label:>11} {name:<15} {p50 * 1e3:>7.2f} {p99 * 1e3:>7.2f} {run.rate:>9.0f} "
              f"{run.cpu_per_review * 1e3:>7.2f} {p50 / percentile(ref.latencies, 0.5):>6.2f} "
              f"{p99 / percentile(ref.latencies, 0.99):>6.2f} {run.rate / ref.rate:>6.2f}  {run.verdicts}"
              + (f"  send lag p99 {percentile(run.lags, 0.99) * 1e3:.1f} ms" if run.lags else ""))


def live_watch(directory: Path, cluster: Path, cert: Path, key: Path, context: ssl.SSLContext,
               payloads: list[bytes], requests: int) -> None:
    """The same topology from a list/watch API server double (tests/fake_apiserver.py, a
    subprocess) instead of a file: time to the first full sync, RSS, latency at concurrency 1."""
    import yaml

    api_port, gate_port = free_port(), free_port()
    api = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_apiserver.py"), str(cluster),
                            str(api_port)], cwd=ROOT, stdout=subprocess.PIPE)
    gate = None
    try:
        assert api.stdout is not None
        if not api.stdout.readline().startswith(b"ready"):
            raise RuntimeError("the API server double did not start")
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
            "users": [{"name": "bench", "user": {"token": "bench"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
        started = time.perf_counter()
        gate = subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(gate_port),
             "--tls-cert", str(cert), "--tls-key", str(key), "--kubeconfig", str(kubeconfig),
             "--log-level", "warning", "--metrics-port", "0"], cwd=ROOT)
        wait_ready(f"https://127.0.0.1:{gate_port}", context, gate, 600)
        synced = time.perf_counter() - started
        run = measured([gate], lambda: drive([f"https://127.0.0.1:{gate_port}/validate"], context,
                                             payloads, 1, requests))
        p50 = percentile(run.latencies, 0.5)
        print(f"live watch: first full sync (paginated lists of 500) in {synced:.1f} s; RSS "
              f"{rss_mib(gate.pid):.0f} MiB; concurrency 1: p50 {p50 * 1e3:.2f} ms, "
              f"p99 {percentile(run.latencies, 0.99) * 1e3:.2f} ms, {run.rate:.0f} reviews/s, "
              f"{run.cpu_per_review * 1e3:.2f} ms server CPU per review {run.verdicts}")
    finally:
        stop(gate, api)


def in_process_breakdown(cluster: Path, same_shape: list[bytes], distinct: list[bytes],
                         rounds: int = 500) -> None:
    """Where a review's time goes without HTTP and TLS: parse + admit() in this process."""
    from lint.cluster import load_clusters
    from policies.config import Policy
    from webhook.admission import admit, parse_review

    policy = Policy()
    clusters = list(load_clusters([str(cluster)], policy))
    print("\nin-process parse_review + admit(), no HTTP/TLS:")
    for label, payloads, topology in (("rules only, no topology", same_shape, None),
                                      ("with feasibility, one shape", same_shape, clusters),
                                      ("with feasibility, distinct shapes", distinct, clusters)):
        for raw in payloads[:20]:
            admit(parse_review(raw, "application/json"), "validate", policy, topology)
        timings = []
        for i in range(rounds):
            raw = payloads[(20 + i) % len(payloads)]
            started = time.perf_counter()
            admit(parse_review(raw, "application/json"), "validate", policy, topology)
            timings.append(time.perf_counter() - started)
        print(f"  {label:<36} p50 {percentile(timings, 0.5) * 1e3:.3f} ms, "
              f"p99 {percentile(timings, 0.99) * 1e3:.3f} ms")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
