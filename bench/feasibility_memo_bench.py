"""What the feasibility memo saves: one cluster check answered from the memo (a hit)
against the same check computed (a miss, and the check with the memo off), in one run.

Jobs, each on synthetic static topologies of 1,000 and 10,000 nodes (10 pods per node):

- ``webhook``: the webhook bench's review, a 64-pod PyTorchJob (8 GPUs per pod, GPU
  groups of 64, Volcano queue ``research``) as /validate sees it (usage injected), on
  its cluster of 8-GPU nodes in cliques of 8 (bench/webhook_bench.py);
- ``fit``: fit_bench's 512-pod gang of two pod sets on its cluster (bench/fit_bench.py).

For each it prints the median cost of

- ``off``: ``check_cluster(..., memo=False)``, the check as it was before the memo (the
  topology's derived caches, eligibility masks and capacities, warm as between reviews);
- ``miss``: the memo on, its entry dropped before each check (lookup + check + copy kept);
- ``hit``: the memo on and warm (lookup + a copy of the outcome for the caller);
- ``question``: building the :class:`FitQuestion` from the workload, which every review
  pays, hit or miss; ``review hit`` / ``review off``: the whole per-review feasibility
  step (:func:`feasibility` with a fresh context: question, check, combining),

and the ratios to ``off`` measured in the same run.

    .venv/bin/python bench/feasibility_memo_bench.py [--sizes 1000,10000] [--repeat 300]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fit_bench  # noqa: E402
import webhook_bench  # noqa: E402

from policies.config import Policy  # noqa: E402
from policies.engine import Context  # noqa: E402
from policies.feasibility import OutcomeMemo, Verdict, check_cluster, fit_question  # noqa: E402
from policies.rules._feasibility import feasibility  # noqa: E402
from policies.topology import ClusterSnapshot, Topology  # noqa: E402
from policies.workload import Workload, build_workload  # noqa: E402

Obj = dict[str, Any]


def median_seconds(fn: Callable[[], Any], repeat: int, before: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeat`` calls; ``before`` runs untimed before each."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def setups(n: int) -> list[tuple[str, Topology, Workload]]:
    policy = Policy()
    cluster = webhook_bench.synthetic_cluster(n, 10 * n)["items"]
    job = build_workload(webhook_bench.submitted(webhook_bench.pytorch_job(64)))
    fit_topology, _, _ = fit_bench.build(n)
    gang = build_workload(fit_bench.gang())
    assert job is not None and gang is not None
    return [("webhook", Topology.from_objects(cluster, policy), job), ("fit", fit_topology, gang)]


def measure(label: str, topo: Topology, workload: Workload, repeat: int) -> str:
    policy = Policy()
    snapshot = ClusterSnapshot("bench", topo)
    question = fit_question(workload, policy)
    assert question is not None
    memo = OutcomeMemo.of(topo)
    fresh = check_cluster(question, snapshot, policy, memo=False)   # warms the derived caches
    assert fresh.verdict in (Verdict.FITS, Verdict.WAITS), fresh.message
    hit = check_cluster(question, snapshot, policy)
    hit = check_cluster(question, snapshot, policy)
    assert (hit.verdict, hit.message, hit.witness) == (fresh.verdict, fresh.message, fresh.witness)
    gc.collect()

    off = median_seconds(lambda: check_cluster(question, snapshot, policy, memo=False), repeat)
    miss = median_seconds(lambda: check_cluster(question, snapshot, policy), repeat, memo.entries.clear)
    hits = median_seconds(lambda: check_cluster(question, snapshot, policy), repeat)
    asking = median_seconds(lambda: fit_question(workload, policy), repeat)

    def review() -> Any:
        return feasibility(workload, Context(policy=policy, clusters=[snapshot]))

    review_hit = median_seconds(review, repeat)
    review_off = median_seconds(review, repeat, memo.entries.clear)
    return (f"{label:<8} {topo.n_nodes:>7} {len(question.demands):>5} {off * 1e3:>8.3f} {miss * 1e3:>8.3f} "
            f"{hits * 1e3:>8.3f} {asking * 1e3:>9.3f} {review_off * 1e3:>11.3f} {review_hit * 1e3:>11.3f} "
            f"{miss / off:>10.2f}x {off / hits:>9.1f}x {review_off / review_hit:>12.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    print(f"{'job':<8} {'nodes':>7} {'sets':>5} {'off ms':>8} {'miss ms':>8} {'hit ms':>8} {'question':>9} "
          f"{'review off':>11} {'review hit':>11} {'miss/off':>11} {'off/hit':>10} {'review gain':>13}")
    for n in (int(s) for s in args.sizes.split(",")):
        for label, topo, workload in setups(n):
            print(measure(label, topo, workload, args.repeat), flush=True)


if __name__ == "__main__":
    main()
