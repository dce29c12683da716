"""Relist of a large fleet: how long the event loop stalls while the live topology lists it again.

The API server double (``tests/fake_apiserver.py``, in a process of its own so that it does
not share this process's GIL) serves a synthetic GPU cluster (default 20,000 nodes and 100,000
running pods, paginated lists of 500). In this process a :class:`webhook.watch.LiveTopology`
lists and watches it on an asyncio loop, as ``gpugate serve`` does, while a loop-lag probe
(a task that sleeps 2 ms at a time and records how late it wakes up) measures every stall of
the loop: anything that runs on it without yielding (applying pages of objects, pruning,
parsing on the watch threads that hold the GIL) delays the probe, as it would delay reviews.

Once the first full sync is done, the double compacts (every watch gets ERROR 410 Gone), so
every kind lists again; the benchmark reports, for the first sync and for the relist:

- the time it took (until every page and the prune are in the topology),
- the longest loop stall and the 99th and 99.9th percentiles of the probe's lateness,
- the topology's age at its highest (``gpugate_topology_age_seconds``),
- the fewest nodes the topology held at any probe tick during the relist (a relist must never
  show fewer nodes than exist: that would be a false "never fits").

Figures only; nothing is asserted (the goal of issue 16 is a longest stall under 50 ms).

    .venv/bin/python bench/relist_bench.py
    .venv/bin/python bench/relist_bench.py --nodes 2000 --pods 10000     # quick
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from webhook_bench import free_port, stop, synthetic_cluster  # noqa: E402 - bench/ is not a package

PROBE_INTERVAL = 0.002


class LagProbe:
    """How late a 2 ms sleep wakes up on the loop: the loop's stalls."""

    def __init__(self, live: Any) -> None:
        self.live = live
        self.lags: list[float] = []
        self.max_age = 0.0
        self.min_nodes: int | None = None
        self._task: asyncio.Task[None] | None = None

    def reset(self) -> None:
        self.lags = []
        self.max_age = 0.0
        self.min_nodes = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(PROBE_INTERVAL)
            self.lags.append(max(0.0, loop.time() - started - PROBE_INTERVAL))
            snapshot = self.live.snapshot
            self.live.refresh_updated_at()
            if snapshot.updated_at not in (None, float("-inf")):
                self.max_age = max(self.max_age, time.monotonic() - snapshot.updated_at)
            nodes = len(snapshot.topology.node_index)
            self.min_nodes = nodes if self.min_nodes is None else min(self.min_nodes, nodes)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def figures(self) -> str:
        lags = sorted(self.lags) or [0.0]

        def pct(q: float) -> float:
            return lags[min(len(lags) - 1, int(q * len(lags)))] * 1e3

        return (f"longest loop stall {lags[-1] * 1e3:.1f} ms (p99 {pct(0.99):.1f} ms, "
                f"p99.9 {pct(0.999):.1f} ms, {len(self.lags)} probe ticks); "
                f"topology age at most {self.max_age:.1f} s")


async def settled(live: Any) -> None:
    """Until everything the watch threads have handed over so far is in the topology."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    live._sink(lambda: done.done() or done.set_result(None))  # behind every earlier update, in order
    await done


async def run(api_url: str, nodes: int, pods: int, page_size: int) -> None:
    from kubernetes import client as k8s

    from policies.config import Policy
    from webhook.kube import WatchOptions
    from webhook.watch import LiveTopology, watch_api_client

    configuration = k8s.Configuration()
    configuration.host = api_url
    live = LiveTopology(watch_api_client(configuration), Policy(), name="bench",
                        options=WatchOptions(page_size=page_size))
    probe = LagProbe(live)
    probe.start()
    started = time.perf_counter()
    await live.start()

    def counts() -> tuple[int, int]:
        c = live.snapshot.topology.counts()
        return c.get("Node", 0), c.get("Pod", 0)

    while not (all(w.state.applied for w in live.watchers) and counts() == (nodes, pods)):
        await asyncio.sleep(0.5)   # counts() walks the topology: not too often
    await settled(live)
    synced = time.perf_counter() - started
    print(f"first sync: {nodes:,} nodes, {pods:,} pods in {synced:.1f} s; {probe.figures()}", flush=True)

    await asyncio.sleep(1.0)
    probe.reset()
    watched = [w for w in live.watchers if w.resource.kind in ("Node", "Pod")]
    gone_before = {id(w): w.state.restarts.get("gone", 0) for w in watched}
    started = time.perf_counter()
    await asyncio.get_running_loop().run_in_executor(None, lambda: urllib.request.urlopen(
        urllib.request.Request(api_url + "/_fake/expire", method="POST"), timeout=10).read())

    def relisted() -> bool:
        return all(w.state.restarts.get("gone", 0) > gone_before[id(w)]
                   and w.state.resource_version is not None for w in watched)

    while not relisted():
        await asyncio.sleep(0.01)
    await settled(live)
    took = time.perf_counter() - started
    print(f"relist after 410 Gone: {took:.1f} s; {probe.figures()}; fewest nodes during the relist "
          f"{probe.min_nodes:,} of {nodes:,}; counts after {counts()}", flush=True)
    await probe.stop()
    await live.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Path(tmp) / "cluster.json"
        document = synthetic_cluster(args.nodes, args.pods)
        cluster.write_text(json.dumps(document))
        del document
        gc.collect()   # the document's garbage: not the topology's to collect during the measurement
        port = free_port()
        api = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_apiserver.py"), str(cluster),
                                str(port)], cwd=ROOT, stdout=subprocess.PIPE)
        try:
            assert api.stdout is not None
            if not api.stdout.readline().startswith(b"ready"):
                raise SystemExit("the API server double did not start")
            asyncio.run(run(f"http://127.0.0.1:{port}", args.nodes, args.pods, args.page_size))
        finally:
            stop(api)


if __name__ == "__main__":
    main()
