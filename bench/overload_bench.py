"""gpugate under overload and hostile load, over TLS on loopback (prints figures, asserts nothing).

``gpugate serve`` runs as a subprocess with a synthetic static topology (``--nodes``,
``--pods``); the client is this process. Four parts:

1. **idle connections**: ``--connections`` (5,000) TLS connections opened (handshake done)
   and held idle; the server's RSS before and after, how many were kept and how many were
   reset at once (the connection cap). ``--all-accepted`` adds a run with the cap above that
   number, to show what each kept connection costs.
2. **steady**: reviews arriving at ``--rate`` (1,000/s) for ``--seconds`` (open loop, over up
   to 64 keep-alive connections): p50/p99, every answer checked (uid echoed, AdmissionReview).
3. **burst**: ``--burst`` (2,000) reviews written at the same moment, one per connection (the
   connections opened first, the cap raised above their number for this run), read by a minimal
   HTTP client so that the client is not the bottleneck: p50/p99/max, answers valid (status 200,
   an AdmissionReview, the uid echoed), how many were shed (``allowed`` with the warning
   ``gpugate: overloaded, not checked``). Also the same burst from an aiohttp client over
   ``--burst-connections`` (1,000) keep-alive connections, whose own CPU dominates on 2 cores.
4. **loop stall**: one AdmissionReview of ``--big-mb`` (3 MB; 256 pod sets of a node-selector
   heavy template, the most expensive shape per byte) posted while a probe sends ``GET
   /healthz`` every 5 ms on its own connection: the probe's worst latency during the review
   (what every other request waited at most), and the review's own answer time.

``--root DIR`` runs the ``gpugate`` found in DIR instead (e.g. an older tree exported with
``git archive HEAD | tar -x -C DIR``), with only the flags it knows, for before/after figures.

    .venv/bin/python bench/overload_bench.py
    .venv/bin/python bench/overload_bench.py --root /tmp/gpugate-head   # the same, older code
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from webhook_bench import (  # noqa: E402
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

OVERLOAD_WARNING = "gpugate: overloaded, not checked"


def start_server(root: Path, cert: Path, key: Path, cluster: Path, port: int, new: bool,
                 *extra: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert", str(cert), "--tls-key", str(key), "--cluster", str(cluster), "--log-level", "error"]
    if new:
        args += ["--metrics-port", "0", "--drain-seconds", "0", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(root)}
    return subprocess.Popen(args, cwd=root, env=env)


# -- 1. idle connections ------------------------------------------------------------------------

async def open_idle(port: int, context: ssl.SSLContext, count: int) -> tuple[list[Any], int]:
    """``count`` TLS connections, handshakes done, in batches; (the open ones, how many failed)."""
    opened: list[Any] = []
    failed = 0

    async def one() -> None:
        nonlocal failed
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"), 30)
        except (OSError, TimeoutError, ssl.SSLError):
            failed += 1
            return
        opened.append(writer)

    for start in range(0, count, 250):
        await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    await asyncio.sleep(1.0)
    alive = []
    for writer in opened:  # a connection reset by the server after its handshake reads EOF
        if writer.is_closing() or writer.transport.get_extra_info("socket") is None:
            failed += 1
        else:
            alive.append(writer)
    return alive, failed


async def idle_run(process: subprocess.Popen[bytes], port: int, context: ssl.SSLContext,
                   count: int) -> dict[str, float]:
    before = rss_mib(process.pid)
    opened, failed = await open_idle(port, context, count)
    await asyncio.sleep(2.0)
    # connections the server reset show up as EOF on the next read
    kept = 0
    for writer in opened:
        writer.write(b"")
    await asyncio.sleep(0.5)
    kept = sum(1 for w in opened if not w.is_closing())
    after = rss_mib(process.pid)
    for writer in opened:
        writer.close()
    return {"before": before, "after": after, "kept": kept, "refused": count - kept, "failed": failed}


# -- 2./3. steady and burst -----------------------------------------------------------------------

def check_answer(status: int, text: bytes, uid: str) -> str:
    """'ok', 'shed' or what was wrong."""
    if status != 200:
        return f"status {status}"
    try:
        answer = json.loads(text)
        response = answer["response"]
    except (ValueError, KeyError, TypeError):
        return "not an AdmissionReview"
    if answer.get("kind") != "AdmissionReview" or response.get("uid") != uid:
        return "wrong uid"
    return "shed" if OVERLOAD_WARNING in (response.get("warnings") or []) else "ok"


async def post(session: Any, url: str, body: bytes, outcomes: dict[str, int]) -> float:
    uid = json.loads(body)["request"]["uid"]
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            text = await response.read()
            outcome = check_answer(response.status, text, uid)
    except Exception as exc:  # noqa: BLE001 - counted as an invalid answer
        outcome = type(exc).__name__
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return time.perf_counter() - started


async def steady(url: str, context: ssl.SSLContext, payloads: list[bytes], rate: float,
                 seconds: float) -> tuple[list[float], dict[str, int]]:
    import aiohttp

    outcomes: dict[str, int] = {}
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=64, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(post(session, url, payloads[i], {}) for i in range(64)))  # warm
        total = int(rate * seconds)
        begun = time.perf_counter()
        tasks = []

        async def one(i: int) -> None:
            latencies.append(await post(session, url, payloads[i % len(payloads)], outcomes))

        for i in range(total):
            delay = begun + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return latencies, outcomes


async def burst(url: str, context: ssl.SSLContext, payloads: list[bytes], count: int,
                connections: int) -> tuple[list[float], dict[str, int], float]:
    import aiohttp

    outcomes: dict[str, int] = {}
    connector = aiohttp.TCPConnector(limit=connections, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        for start in range(0, connections, 200):  # open the connections first (not measured)
            await asyncio.gather(*(post(session, url, payloads[(start + i) % len(payloads)], {})
                                   for i in range(min(200, connections - start))))
        begun = time.perf_counter()
        latencies = await asyncio.gather(*(post(session, url, payloads[i % len(payloads)], outcomes)
                                           for i in range(count)))
        wall = time.perf_counter() - begun
    return list(latencies), outcomes, wall


async def burst_raw(port: int, context: ssl.SSLContext, payloads: list[bytes], count: int
                    ) -> tuple[list[float], dict[str, int], float]:
    """``count`` connections opened first (not measured), then one review written on each at
    the same moment; a minimal HTTP/1.1 reader (the client must not be the bottleneck)."""
    outcomes: dict[str, int] = {}
    streams = []
    for start in range(0, count, 250):
        streams += await asyncio.gather(*(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
            for _ in range(min(250, count - start))))
    requests = []
    for i in range(count):
        body = payloads[i % len(payloads)]
        uid = json.loads(body)["request"]["uid"]
        head = (b"POST /validate HTTP/1.1\r\nHost: gpugate\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        requests.append((uid, head + body))

    async def one(i: int, begun: float) -> float:
        reader, writer = streams[i]
        uid, request = requests[i]
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            outcome = check_answer(status, await reader.readexactly(length), uid)
        except Exception as exc:  # noqa: BLE001 - counted as an invalid answer
            outcome = type(exc).__name__
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return time.perf_counter() - begun

    begun = time.perf_counter()
    latencies = await asyncio.gather(*(one(i, begun) for i in range(count)))
    wall = time.perf_counter() - begun
    for _, writer in streams:
        writer.close()
    return list(latencies), outcomes, wall


# -- 4. loop stall ----------------------------------------------------------------------------------

def big_review(megabytes: float) -> bytes:
    """A Volcano Job of 256 tasks whose templates carry many node-selector terms, ~``megabytes``."""
    terms_per_task = max(1, int(megabytes * 1e6 / 256 / 94))
    terms = [{"matchExpressions": [{"key": f"example.com/k{t}", "operator": "In", "values": [f"v{t}"]}]}
             for t in range(terms_per_task)]
    tasks = [{"name": f"t{i}", "replicas": 1, "template": {"spec": {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}},
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}
        for i in range(256)]
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "big", "namespace": "default"},
           "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": tasks}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"},
        "resource": {"group": "batch.volcano.sh", "version": "v1alpha1", "resource": "jobs"},
        "namespace": "default", "name": "big", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": job, "dryRun": False}}
    return json.dumps(review).encode()


async def stall(base: str, context: ssl.SSLContext, body: bytes, endpoint: str) -> dict[str, Any]:
    import aiohttp

    probes: list[tuple[float, float]] = []   # (start, latency)
    done = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=4, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def probe() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with session.get(f"{base}/healthz") as response:
                    await response.read()
                probes.append((started, time.perf_counter() - started))
                await asyncio.sleep(0.005)

        for _ in range(20):  # warm the probe's connection
            async with session.get(f"{base}/healthz") as response:
                await response.read()
        prober = asyncio.create_task(probe())
        await asyncio.sleep(0.2)
        quiet = [lat for _, lat in probes]
        outcomes: dict[str, int] = {}
        started = time.perf_counter()
        answered = await post(session, f"{base}/{endpoint}", body, outcomes)
        ended = time.perf_counter()
        await asyncio.sleep(0.2)
        done.set()
        await prober
    during = [lat for start, lat in probes if start < ended and start + lat > started]
    return {"answer_s": answered, "outcome": outcomes, "probe_max_ms": max(during, default=0) * 1e3,
            "probe_quiet_ms": max(quiet, default=0) * 1e3, "probes": len(during)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the gpugate tree to run (default: this one)")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--all-accepted", action="store_true",
                        help="also hold the idle connections with the cap above their number")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--burst-connections", type=int, default=1000)
    parser.add_argument("--big-mb", type=float, default=3.0)
    parser.add_argument("--parts", default="idle,steady,burst,stall")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    new = (args.root / "webhook" / "lifecycle.py").exists()
    if "idle" in parts:
        from asyncio import sslproto

        sslproto.SSLProtocol.max_size = 16 * 1024   # the client's own 5,000 connections: 16 KiB each
    print(f"gpugate from {args.root} ({'with' if new else 'without'} webhook/lifecycle.py); "
          f"{args.nodes} nodes, {args.pods} pods; client and server share {os.cpu_count()} cores")

    with tempfile.TemporaryDirectory(prefix="gpugate-overload-") as tmp:
        directory = Path(tmp)
        ca, cert, key = write_certs(directory)
        context = ssl.create_default_context(cafile=str(ca))
        cluster = directory / "cluster.json"
        cluster.write_text(json.dumps(synthetic_cluster(args.nodes, args.pods)))
        job = submitted(pytorch_job(64))
        payloads = review_payloads(job, max(args.burst, 4000))
        gc.collect()
        gc.freeze()   # the client's own full collections (0.4 s with these payloads) must not be measured

        def serve(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
            port = free_port()
            process = start_server(args.root, cert, key, cluster, port, new, *extra)
            wait_ready(f"https://127.0.0.1:{port}", context, process, 300)
            return process, port

        if "idle" in parts:
            runs: list[tuple[str, tuple[str, ...]]] = [("default cap" if new else "no cap", ())]
            if new and args.all_accepted:
                runs.append(("cap above", ("--max-connections", str(args.connections + 100))))
            for label, extra in runs:
                process, port = serve(*extra)
                try:
                    got = asyncio.run(idle_run(process, port, context, args.connections))
                finally:
                    stop(process, timeout=20)
                per = (got["after"] - got["before"]) / max(1, got["kept"]) * 1024
                print(f"idle TLS connections ({label}): {args.connections} opened, {got['kept']:.0f} kept, "
                      f"{got['refused']:.0f} reset; server RSS {got['before']:.0f} MiB -> "
                      f"{got['after']:.0f} MiB ({per:.0f} KiB per kept connection)")

        process, port = serve()
        base = f"https://127.0.0.1:{port}"
        try:
            if "steady" in parts:
                latencies, outcomes = asyncio.run(steady(f"{base}/validate", context, payloads, args.rate,
                                                         args.seconds))
                print(f"steady {args.rate:.0f} reviews/s for {args.seconds:g} s: p50 "
                      f"{percentile(latencies, 0.5) * 1e3:.2f} ms, p99 "
                      f"{percentile(latencies, 0.99) * 1e3:.2f} ms, max {max(latencies) * 1e3:.1f} ms; "
                      f"answers {outcomes}")
            if "burst" in parts:
                latencies, outcomes, wall = asyncio.run(burst(f"{base}/validate", context, payloads,
                                                              args.burst, args.burst_connections))
                print(f"burst of {args.burst} reviews at once, aiohttp client over {args.burst_connections} "
                      f"connections: p50 {percentile(latencies, 0.5) * 1e3:.0f} ms, p99 "
                      f"{percentile(latencies, 0.99) * 1e3:.0f} ms, max {max(latencies) * 1e3:.0f} ms, all "
                      f"answered in {wall:.2f} s; answers {outcomes}")
        finally:
            stop(process, timeout=20)
        # the burst on as many connections as reviews (the cap raised above them for this run)
        process, port = serve("--max-connections", str(args.burst + 100)) if new else serve()
        try:
            if "burst" in parts:
                latencies, outcomes, wall = asyncio.run(burst_raw(port, context, payloads, args.burst))
                print(f"burst of {args.burst} reviews at once, one per connection (raw client): p50 "
                      f"{percentile(latencies, 0.5) * 1e3:.0f} ms, p99 "
                      f"{percentile(latencies, 0.99) * 1e3:.0f} ms, max {max(latencies) * 1e3:.0f} ms, "
                      f"all answered in {wall:.2f} s; answers {outcomes}")
            if "stall" in parts:
                base = f"https://127.0.0.1:{port}"
                body = big_review(args.big_mb)
                for endpoint in ("mutate", "validate"):
                    got = asyncio.run(stall(base, context, body, endpoint))
                    print(f"loop stall, one {len(body) / 1e6:.1f} MB review on /{endpoint}: answered in "
                          f"{got['answer_s']:.2f} s {got['outcome']}; /healthz worst latency meanwhile "
                          f"{got['probe_max_ms']:.0f} ms over {got['probes']} probes (quiet: "
                          f"{got['probe_quiet_ms']:.1f} ms)")
        finally:
            stop(process, timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
