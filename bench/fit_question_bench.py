"""What building the feasibility question costs a review, against the rules in the same run.

Every /validate review of a GPU job builds a :class:`policies.feasibility.FitQuestion`
(the key of the topology's memo), hit or miss. Each round parses the job afresh (as a
review does), builds its workload, asks for what the rules before GG306 have worked out
by then (pod requests, GPU group sizes), and times

- ``question``: :func:`fit_question` on that just-built workload;
- ``demands``: :func:`demands_for` alone (on another just-built workload);
- ``rules``: the whole :func:`policies.engine.evaluate` of the job without a topology,
  the baseline: ``question / rules`` is the share of a review's rule work it adds.

Jobs: ``webhook``, the webhook bench's 64-pod PyTorchJob as /validate sees it (2 pod sets
of one template); ``fit``, fit_bench's 512-pod gang of two pod sets.

    .venv/bin/python bench/fit_question_bench.py [--rounds 3000]
"""

from __future__ import annotations

import argparse
import json
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
from policies.engine import evaluate  # noqa: E402
from policies.feasibility import demands_for, fit_question  # noqa: E402
from policies.groups import group_sizes  # noqa: E402
from policies.workload import Workload, build_workload  # noqa: E402


def just_built(raw: str, policy: Policy) -> Workload:
    """The workload of a fresh parse, with what the earlier rules leave memoised."""
    workload = build_workload(json.loads(raw))
    assert workload is not None
    for pod_set in workload.gang_pod_sets:
        _ = pod_set.requests
    group_sizes(workload, policy)
    return workload


def median_us(step: Callable[[], Any], rounds: int) -> float:
    """Median microseconds of ``step()``, which prepares untimed and returns the timed call."""
    times = []
    for _ in range(rounds):
        timed = step()
        started = time.perf_counter()
        timed()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def measure(label: str, doc: dict[str, Any], rounds: int) -> str:
    policy = Policy()
    raw = json.dumps(doc)
    assert fit_question(just_built(raw, policy), policy) is not None

    def question() -> Callable[[], Any]:
        workload = just_built(raw, policy)
        return lambda: fit_question(workload, policy)

    def demands() -> Callable[[], Any]:
        workload = just_built(raw, policy)
        return lambda: demands_for(workload)

    def rules() -> Callable[[], Any]:
        obj = json.loads(raw)
        return lambda: evaluate(obj, policy)

    for step in (question, demands, rules):   # warm-up
        median_us(step, 50)
    asked, demanded, evaluated = (median_us(step, rounds) for step in (question, demands, rules))
    return (f"{label:<8} {asked:>12.1f} {demanded:>11.1f} {evaluated:>9.1f} "
            f"{asked / evaluated:>15.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000)
    args = parser.parse_args()
    print(f"{'job':<8} {'question us':>12} {'demands us':>11} {'rules us':>9} {'question/rules':>15}")
    jobs = (("webhook", webhook_bench.submitted(webhook_bench.pytorch_job(64))), ("fit", fit_bench.gang()))
    for label, doc in jobs:
        print(measure(label, doc, args.rounds), flush=True)


if __name__ == "__main__":
    main()
