"""What the feasibility check adds to one admission review, in process (no HTTP, no TLS).

Reviews a 64-pod PyTorchJob (8 GPUs per pod, GPU groups of 64, Volcano queue), each
review a different job (own name and uid), as ``bench/webhook_bench.py`` sends them, with
``parse_review`` + ``admit("validate")``:

- rules only (no topology): the baseline, measured in the same run;
- with a static topology, jobs of one shape (the memo answers; what is left is building
  the question and the plumbing around it);
- with the topology, every job of another shape (a CPU request of its own per job).

Prints p50 per review and the ratio to the baseline, and the feasibility part (with
topology minus without) for the repeated shape. Best of ``--runs`` runs, interleaved.

    .venv/bin/python bench/fit_review_bench.py [--nodes 10000] [--pods 100000] [--reviews 3000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import percentile, pytorch_job, review_payloads, submitted, synthetic_cluster  # noqa: E402

from lint.cluster import load_clusters  # noqa: E402
from policies.config import Policy  # noqa: E402
from webhook.admission import admit, parse_review  # noqa: E402


def p50_seconds(payloads: list[bytes], policy: Policy, clusters: Any, reviews: int) -> float:
    for raw in payloads[:50]:   # warm: the first asks build eligibility and the memo entry
        admit(parse_review(raw, "application/json"), "validate", policy, clusters)
    timings = []
    for i in range(reviews):
        raw = payloads[i % len(payloads)]
        started = time.perf_counter()
        admit(parse_review(raw, "application/json"), "validate", policy, clusters)
        timings.append(time.perf_counter() - started)
    return percentile(timings, 0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--pods", type=int, default=100000)
    parser.add_argument("--reviews", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    policy = Policy()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cluster.json"
        path.write_text(json.dumps(synthetic_cluster(args.nodes, args.pods)))
        clusters = list(load_clusters([str(path)], policy))
    job = submitted(pytorch_job(64))
    same = review_payloads(job, args.reviews)
    distinct = review_payloads(job, args.reviews, distinct_shapes=True)
    cases = (("rules only, no topology", same, None), ("with topology, one shape", same, clusters),
             ("with topology, distinct shapes", distinct, clusters))
    best: dict[str, float] = {}
    for _ in range(args.runs):
        for label, payloads, topology in cases:
            found = p50_seconds(payloads, policy, topology, args.reviews)
            best[label] = min(best.get(label, found), found)
    baseline = best[cases[0][0]]
    print(f"{args.nodes} nodes, {args.pods} pods; p50 per review "
          f"(best of {args.runs} runs of {args.reviews}):")
    for label, _, _ in cases:
        print(f"  {label:<32} {best[label] * 1e6:8.1f} us  {best[label] / baseline:5.2f}x baseline")
    part = best[cases[1][0]] - baseline
    print(f"  feasibility part, one shape      {part * 1e6:8.1f} us  ({part / baseline:.0%} of the baseline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
