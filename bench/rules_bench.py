"""Rule evaluation speed (``policies.engine.evaluate``, no cluster topology), against
``json.loads`` of the same documents measured in the same run.

(a) the webhook bench's job: a 64-pod PyTorchJob (8 GPUs per pod, GPU groups of 64, a
    Volcano queue) as /validate sees it, after the mutating webhook: p50 and p99 of one
    evaluation, each round on a freshly parsed copy (as a review would be);
(b) the same job as /validate reviews it in process, ``parse_review`` + ``admit`` (no
    topology), each review a different job (own name and uid), as a sweep submits them;
(c) every modelled document of ``../shared/corpus``: the total evaluation time of one
    pass (best of ``--repeat``).

Ratios are evaluation time / ``json.loads`` time of the same JSON text, so they hold on
any machine.

    .venv/bin/python bench/rules_bench.py [--rounds 3000] [--repeat 5] [--policy FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from webhook_bench import percentile, pytorch_job, review_payloads, submitted  # noqa: E402

from lint.cli import iter_files  # noqa: E402
from lint.documents import Document, iter_documents  # noqa: E402
from lint.policyfile import load_policy  # noqa: E402
from policies.config import Policy  # noqa: E402
from policies.engine import evaluate  # noqa: E402
from policies.workload import build_workload, is_kubernetes_object  # noqa: E402
from webhook.admission import admit, parse_review  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def per_call(rounds: int, payload: str, policy: Policy) -> dict[str, list[float]]:
    """Seconds per call of json.loads, build_workload and evaluate, interleaved round by
    round so that the machine's drift affects all three alike."""
    times: dict[str, list[float]] = {"json.loads": [], "build_workload": [], "evaluate": []}
    clock = time.perf_counter
    for _ in range(rounds):
        start = clock()
        doc = json.loads(payload)
        times["json.loads"].append(clock() - start)
        start = clock()
        build_workload(doc)
        times["build_workload"].append(clock() - start)
        doc = json.loads(payload)
        start = clock()
        evaluate(doc, policy)
        times["evaluate"].append(clock() - start)
    return times


def per_review(bodies: list[bytes], policy: Policy) -> dict[str, list[float]]:
    """Seconds per review of json.loads and of parse_review + admit (/validate), interleaved."""
    times: dict[str, list[float]] = {"json.loads": [], "parse_review+admit": []}
    clock = time.perf_counter
    for body in bodies:
        start = clock()
        json.loads(body)
        times["json.loads"].append(clock() - start)
        start = clock()
        admit(parse_review(body, "application/json"), "validate", policy, None)
        times["parse_review+admit"].append(clock() - start)
    return times


def corpus_texts() -> list[str]:
    """JSON text of every corpus document of a kind gpugate models (the others cost nothing)."""
    texts: list[str] = []
    if not CORPUS.is_dir():
        return texts
    for path in iter_files([str(CORPUS)]):
        for item in iter_documents(Path(path).read_bytes()):
            if isinstance(item, Document) and is_kubernetes_object(item.data):
                texts.append(json.dumps(item.data, default=str))
    return texts


def best_pass(repeat: int, texts: list[str], policy: Policy) -> tuple[float, float]:
    """(best json.loads time, best evaluate time) of one pass over ``texts``, in seconds."""
    best_load = best_eval = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        docs = [json.loads(t) for t in texts]
        best_load = min(best_load, time.perf_counter() - start)
        start = time.perf_counter()
        for doc in docs:
            evaluate(doc, policy)
        best_eval = min(best_eval, time.perf_counter() - start)
    return best_load, best_eval


def print_against_json_loads(times: dict[str, list[float]], width: int) -> None:
    """p50 and p99 of each step, and its p50 against the ``json.loads`` baseline's."""
    base = statistics.median(times["json.loads"])
    for name, values in times.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        print(f"  {name:{width}s} p50 {p50 * 1e6:7.1f} us  p99 {p99 * 1e6:7.1f} us  "
              f"p50 ratio to json.loads {p50 / base:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3000, help="evaluations of the bench job")
    parser.add_argument("--repeat", type=int, default=5, help="passes over the corpus (best is kept)")
    parser.add_argument("--policy", help="policy file (default: built-in defaults)")
    args = parser.parse_args()
    policy = load_policy(args.policy) if args.policy else Policy()

    payload = json.dumps(submitted(pytorch_job(64)))
    per_call(200, payload, policy)  # warm-up: imports, caches
    gc.collect()
    print(f"bench job (PyTorchJob, 64 pods, {len(payload):,} bytes of JSON), {args.rounds} rounds:")
    print_against_json_loads(per_call(args.rounds, payload, policy), 15)

    bodies = review_payloads(submitted(pytorch_job(64)), args.rounds)
    per_review(bodies[:200], policy)  # warm-up
    gc.collect()
    print(f"bench job reviewed for /validate in process, {args.rounds} different jobs:")
    print_against_json_loads(per_review(bodies, policy), 18)

    texts = corpus_texts()
    if not texts:
        print("corpus: ../shared/corpus not present, skipped")
        return
    load, run = best_pass(args.repeat, texts, policy)
    size = sum(map(len, texts))
    print(f"corpus ({len(texts)} Kubernetes objects, {size / 2**20:.1f} MiB of JSON), best of {args.repeat}:")
    print(f"  json.loads      {load * 1e3:7.1f} ms")
    print(f"  evaluate        {run * 1e3:7.1f} ms  ({run / len(texts) * 1e6:.1f} us per object)  "
          f"ratio to json.loads {run / load:6.2f}x")


if __name__ == "__main__":
    main()
