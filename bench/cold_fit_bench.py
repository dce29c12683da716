"""The feasibility check's cold path: a job of a shape the topology has never been asked about.

The webhook bench's review (a 64-pod PyTorchJob, 8 GPUs per pod, GPU groups of 64,
Volcano queue ``research``, as /validate sees it) against its synthetic static topology
(default 10,000 nodes, 100,000 pods), in process (``parse_review`` + ``admit()``, no
HTTP/TLS). Every "distinct" review asks for a CPU request per pod no review asked
before, so neither the outcome memo nor the per-shape derived data can answer it.

Measured in rounds that interleave the variants, so that load from anything else on the
machine falls on all of them alike:

- ``rules only``: the review without topology (the baseline the ratios divide by);
- ``one shape``: the same shape again and again (the memo answers);
- ``distinct shapes``: a new shape every review (everything computed cold);
- ``check cold`` / ``check warm``: :func:`check_cluster` alone, memo off, for a new
  shape, and for a shape asked before (its shape-derived data warm).

    .venv/bin/python bench/cold_fit_bench.py [--nodes 10000] [--pods 100000] [--rounds 400]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import webhook_bench  # noqa: E402

from policies.config import Policy  # noqa: E402
from policies.feasibility import FitQuestion, check_cluster, fit_question  # noqa: E402
from policies.topology import ClusterSnapshot, Topology  # noqa: E402
from policies.workload import build_workload  # noqa: E402
from webhook.admission import admit, parse_review  # noqa: E402


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def question_of(raw: bytes, policy: Policy) -> FitQuestion:
    workload = build_workload(json.loads(raw)["request"]["object"])
    assert workload is not None
    question = fit_question(workload, policy)
    assert question is not None
    return question


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    rounds = args.rounds

    policy = Policy()
    started = time.perf_counter()
    topo = Topology.from_objects(webhook_bench.synthetic_cluster(args.nodes, args.pods)["items"], policy)
    clusters = [ClusterSnapshot("bench", topo)]
    print(f"synthetic topology: {args.nodes} nodes, {args.pods} pods, built in "
          f"{time.perf_counter() - started:.1f} s")
    job = webhook_bench.submitted(webhook_bench.pytorch_job(64))
    warm_up = 20
    # Distinct CPU requests for every review and check (32000m downwards): no shape twice.
    shapes = webhook_bench.review_payloads(job, warm_up + 3 * rounds, distinct_shapes=True)
    distinct = shapes[: warm_up + rounds]
    cold_questions = [question_of(raw, policy) for raw in shapes[warm_up + rounds: warm_up + 2 * rounds]]
    warm_questions = [question_of(raw, policy) for raw in shapes[warm_up + 2 * rounds:]]
    same = webhook_bench.review_payloads(job, warm_up + rounds)
    snapshot = clusters[0]

    def review(raw: bytes, topology: list[ClusterSnapshot] | None) -> None:
        admit(parse_review(raw, "application/json"), "validate", policy, topology)

    def check(question: FitQuestion) -> None:
        check_cluster(question, snapshot, policy, memo=False)

    for i in range(warm_up):
        review(same[i], None)
        review(same[i], clusters)
        review(distinct[i], clusters)
    for question in warm_questions:         # asked once before: their derived data is kept
        check(question)
    gc.collect()
    gc.freeze()

    names = ("rules only", "one shape", "distinct shapes", "check cold", "check warm")
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        raw_same, raw_new = same[warm_up + i], distinct[warm_up + i]
        times["rules only"].append(timed(partial(review, raw_same, None)))
        times["one shape"].append(timed(partial(review, raw_same, clusters)))
        times["distinct shapes"].append(timed(partial(review, raw_new, clusters)))
        times["check cold"].append(timed(partial(check, cold_questions[i])))
        times["check warm"].append(timed(partial(check, warm_questions[i])))

    base = statistics.median(times["rules only"])
    print(f"{rounds} rounds, in process (parse_review + admit(), no HTTP/TLS), medians of interleaved runs:")
    print(f"  {'':<18} {'p50 ms':>8} {'p99 ms':>8} {'x rules only':>13}")
    for name, values in times.items():
        p50 = statistics.median(values)
        p99 = webhook_bench.percentile(values, 0.99)
        print(f"  {name:<18} {p50 * 1e3:>8.3f} {p99 * 1e3:>8.3f} {p50 / base:>12.2f}x")
    distinct_p50 = statistics.median(times["distinct shapes"])
    same_p50 = statistics.median(times["one shape"])
    print(f"  a distinct-shape review costs {distinct_p50 / same_p50:.2f}x a repeated-shape one; the cold "
          f"check is {statistics.median(times['check cold']) / statistics.median(times['check warm']):.2f}x "
          f"the warm one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
