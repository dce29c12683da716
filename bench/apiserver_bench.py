"""Latency gpugate adds to a create, measured through the real kube-apiserver.

Starts its own control plane (``shared/kube/cluster``, helpers in ``tests/e2e/kube.py``), four fake
8-GPU training nodes and ``gpugate serve`` against it (live topology, default policy), then sends
server-side dry-run creates (``dryRun=All``: admission and validation run, nothing is stored) of a
representative GPU workload, one after another over one keep-alive client, with no webhook registered
and with both of gpugate's webhooks registered (the project's ``deploy/base/webhooks.yaml``).
The two phases alternate in rounds so that drift (CPU frequency, caches, the API server's own
warm-up) falls on both alike. Prints p50 and p99 of each and the difference; asserts nothing.
Issue 15's target: at most +2 ms p50 and +5 ms p99.

    .venv/bin/python bench/apiserver_bench.py [--requests 2000] [--rounds 8] [--kind job|pytorchjob]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.kube import (  # noqa: E402 - after the path is set
    GPU,
    PRODUCT,
    PRODUCT_KEY,
    TEST_KEY,
    Api,
    Cluster,
    Gpugate,
    register,
    unavailable,
    unregister,
    wait_until,
    webhook_configurations,
)

NAMESPACE = "bench"
GROUP = "bench"


def _pod_spec(gpus: int) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "64Gi", GPU: str(gpus)}
    return {"restartPolicy": "Never", "nodeSelector": {TEST_KEY: GROUP, PRODUCT_KEY: PRODUCT},
            "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime",
                            "command": ["torchrun", "train.py"],
                            "resources": {"requests": resources, "limits": dict(resources)}}]}


def workload(kind: str, i: int) -> dict[str, Any]:
    """A training job of 4 pods x 8 GPUs (a batch Job, or a PyTorchJob gang of 1 + 3)."""
    name = f"train-{i}"
    if kind == "pytorchjob":
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"team": "llm"}},
                "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 4}},
                         "pytorchReplicaSpecs": {
                             "Master": {"replicas": 1, "restartPolicy": "Never",
                                        "template": {"spec": _pod_spec(8)}},
                             "Worker": {"replicas": 3, "restartPolicy": "Never",
                                        "template": {"spec": _pod_spec(8)}}}}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"team": "llm"}},
            "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"app": "train"}}, "spec": _pod_spec(8)}}}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def mutated(answer: Any, kind: str) -> bool:
    body = answer.body if isinstance(answer.body, dict) else {}
    spec = body.get("spec") or {}
    template = (spec.get("template") if kind == "job"
                else ((spec.get("pytorchReplicaSpecs") or {}).get("Master") or {}).get("template")) or {}
    return bool((template.get("spec") or {}).get("affinity"))


def _gpugate_patch(kind: str) -> str:
    """The base64 JSON Patch gpugate's /mutate answers for the benchmark's workload (its paths
    and values do not depend on the job's name)."""
    import base64
    import json

    from policies.config import Policy
    from policies.engine import evaluate

    obj = workload(kind, 0)
    obj["metadata"]["namespace"] = NAMESPACE
    return base64.b64encode(json.dumps(evaluate(obj, Policy(), checks=False).patch).encode()).decode()


class EmptyWebhook:
    """An aiohttp TLS server answering every review ``allowed: true`` (no patch): what registering
    any two webhooks costs the API server, the baseline gpugate's own share is read against.
    With ``patch`` (base64 JSON Patch), ``/mutate`` answers it for every object: what applying
    gpugate's patch costs the API server, without gpugate's own work."""

    def __init__(self, cert: Path, key: Path, patch: str | None = None) -> None:
        import ssl

        from tests.e2e.kube import free_port

        self.port = free_port()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(str(cert), str(key))
        self.loop: Any = None
        self.runner: Any = None
        self.calls = 0
        self.patch = patch
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        import asyncio
        import json

        from aiohttp import web

        async def review(request: web.Request) -> web.Response:
            self.calls += 1
            body = json.loads(await request.read())
            response: dict[str, Any] = {"uid": body["request"]["uid"], "allowed": True}
            if self.patch is not None and request.path == "/mutate":
                response.update(patchType="JSONPatch", patch=self.patch)
            return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                      "response": response})

        app = web.Application()
        app.router.add_post("/mutate", review)
        app.router.add_post("/validate", review)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.context)
        self.loop.run_until_complete(site.start())
        started.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.loop is not None:
            import asyncio

            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="timed creates per phase (default 2000)")
    parser.add_argument("--rounds", type=int, default=8, help="alternations of the two phases (default 8)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed creates after each switch")
    parser.add_argument("--kind", choices=["job", "pytorchjob"], default="job")
    args = parser.parse_args()
    why = unavailable()
    if why:
        print(f"apiserver_bench: real control plane unavailable: {why}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="gpugate-apiserver-bench-") as tmp:
        cluster = Cluster(Path(tmp) / "kube")
        gate: Gpugate | None = None
        empty: EmptyWebhook | None = None
        canned: EmptyWebhook | None = None
        t0 = time.monotonic()
        cluster.up()
        try:
            cluster.crds("volcano", *(["training-operator"] if args.kind == "pytorchjob" else []))
            for i in range(4):
                cluster.gpu_node(f"gpu-{i}", GROUP)
            api_client = cluster.client()
            api = Api(api_client)
            assert api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}).ok
            gate = Gpugate(Path(tmp) / "gpugate", cluster.kubeconfig)
            gate.wait_ready()
            configurations = webhook_configurations(gate.ca_bundle, f"{gate.url}/mutate",
                                                    f"{gate.url}/validate")
            empty = EmptyWebhook(gate.cert, gate.key)
            empty_configurations = webhook_configurations(gate.ca_bundle, f"{empty.url}/mutate",
                                                          f"{empty.url}/validate")
            canned = EmptyWebhook(gate.cert, gate.key, patch=_gpugate_patch(args.kind))
            canned_configurations = webhook_configurations(gate.ca_bundle, f"{canned.url}/mutate",
                                                           f"{canned.url}/validate")
            print(f"set-up {time.monotonic() - t0:.1f} s; {args.kind}, {args.requests} dry-run creates "
                  f"per phase in {args.rounds} rounds, sequential, one keep-alive client", flush=True)

            counter = [0]

            def create() -> tuple[float, Any]:
                counter[0] += 1
                obj = workload(args.kind, counter[0])
                started = time.perf_counter()
                answer = api.create(obj, dry_run=True)
                elapsed = time.perf_counter() - started
                if answer.status != 201:
                    raise SystemExit(f"create answered {answer}")
                return elapsed, answer

            def switch(phase: str) -> None:
                if phase == "with":
                    register(api_client, copy.deepcopy(configurations))
                elif phase == "empty":
                    register(api_client, copy.deepcopy(empty_configurations))
                elif phase == "canned":
                    register(api_client, copy.deepcopy(canned_configurations))
                else:
                    unregister(api_client)
                # gpugate's patch shows when it is in force; the empty handlers' reviews when they are
                handler = {"empty": empty, "canned": canned}.get(phase)
                if handler is not None:
                    seen = handler.calls
                    ok = wait_until(lambda: (create(), handler.calls > seen)[1], 20, 0.05)
                else:
                    on = phase == "with"
                    ok = wait_until(lambda: mutated(create()[1], args.kind) == on, 20, 0.05)
                if not ok:
                    raise SystemExit(f"webhooks of phase {phase} not in force")

            served: dict[str, list[float]] = {"mutate": [0.0, 0.0], "validate": [0.0, 0.0]}
            samples: dict[str, list[float]] = {"without": [], "empty": [], "canned": [], "with": []}
            per_round = max(1, args.requests // args.rounds)
            phases = ("without", "empty", "canned", "with")
            for r in range(args.rounds):
                # rotate which phase goes first, so none always follows the same switch
                order = phases[r % len(phases):] + phases[:r % len(phases)]
                for phase in order:
                    switch(phase)
                    for _ in range(args.warmup):
                        create()
                    before = gate.counters()
                    for _ in range(per_round):
                        samples[phase].append(create()[0])
                    after = gate.counters()
                    for endpoint, (total, count) in served.items():
                        name = "gpugate_review_duration_seconds"
                        served[endpoint] = [
                            total + after.sum(f"{name}_sum", endpoint=endpoint)
                            - before.sum(f"{name}_sum", endpoint=endpoint),
                            count + after.sum(f"{name}_count", endpoint=endpoint)
                            - before.sum(f"{name}_count", endpoint=endpoint)]
                    reviews = (after - before).reviews(endpoint="validate")
                    want = per_round if phase == "with" else 0
                    if reviews != want:
                        raise SystemExit(f"round {r} {phase}: gpugate validated {reviews:g} creates, "
                                         f"not {want}")
        finally:
            if gate is not None:
                gate.stop()
            for handler in (empty, canned):
                if handler is not None:
                    handler.stop()
            cluster.down()

    def ms(values: list[float], q: float) -> float:
        return percentile(values, q) * 1000

    print(f"{'webhooks':<26}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    for phase, label in (("without", "none registered"), ("empty", "empty handler (both)"),
                         ("canned", "empty + gpugate's patch"), ("with", "gpugate mutate+validate")):
        values = samples[phase]
        print(f"{label:<26}{len(values):>6}{ms(values, 50):>9.2f}{ms(values, 99):>9.2f}"
              f"{statistics.fmean(values) * 1000:>9.2f}")
    added50 = ms(samples["with"], 50) - ms(samples["without"], 50)
    added99 = ms(samples["with"], 99) - ms(samples["without"], 99)
    print(f"added by gpugate: p50 {added50:+.2f} ms (target <= +2), p99 {added99:+.2f} ms (target <= +5)")
    calls50 = ms(samples["empty"], 50) - ms(samples["without"], 50)
    patch50 = ms(samples["canned"], 50) - ms(samples["empty"], 50)
    own50 = ms(samples["with"], 50) - ms(samples["canned"], 50)
    own99 = ms(samples["with"], 99) - ms(samples["canned"], 99)
    print(f"where it goes (p50): the API server calling two webhooks {calls50:+.2f} ms, applying "
          f"gpugate's patch {patch50:+.2f} ms, gpugate's own work {own50:+.2f} ms (p99 {own99:+.2f} ms)")
    print("gpugate's handler time per review (its own histogram, mean): " + ", ".join(
        f"{endpoint} {total / count * 1000:.3f} ms" for endpoint, (total, count) in served.items() if count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
