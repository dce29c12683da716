"""Cost of usage injection and of ``gpugate lint --fix`` over the corpus, as ratios against
baselines measured in the same run.

    .venv/bin/python bench/fix_bench.py [--repeat N]

- ``evaluate`` with GG101/GG102 on, against the same with both rules off: what the
  mutation adds to every review / lint (the webhook's path).
- ``fix_text`` over every file, against PyYAML's C parser composing the same files, and
  against linting them: what ``--fix`` costs on top. Run with the default policy
  (``scope: gpu``) and with ``scope: all`` (many more documents to rewrite).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lint.documents import Document, iter_documents  # noqa: E402
from lint.fix import fix_text_result  # noqa: E402
from policies.config import Policy, policy_from_data  # noqa: E402
from policies.engine import evaluate  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
KINDS = ["Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet", "CronJob", "PyTorchJob", "TFJob", "MPIJob",
         "XGBoostJob", "PaddleJob", "JAXJob", "RayCluster", "RayJob", "RayService", "ElasticJob"]


def best_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def evaluate_all(docs: list[Any], policy: Policy) -> None:
    for doc in docs:
        evaluate(doc, policy)


def fix_all(texts: list[str], policy: Policy) -> None:
    for text in texts:
        fix_text_result(text, policy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"corpus not found at {CORPUS}", file=sys.stderr)
        return 2
    texts = []
    for path in sorted(p for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml", ".json")):
        try:
            texts.append(path.read_text("utf-8"))
        except UnicodeDecodeError:
            continue
    docs = [d.data for t in texts for d in iter_documents(t) if isinstance(d, Document)]
    everything = policy_from_data({"usage": {"scope": "all", "defaults": dict.fromkeys(KINDS, "training")}})
    without = {"rules": {"GG101": "off", "GG102": "off"}}
    policies = {"scope: gpu": (Policy(), policy_from_data(without)),
                "scope: all": (everything, policy_from_data({**without, "usage": everything.data["usage"]}))}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def parse() -> None:
        for text in texts:
            try:
                for _ in yaml.compose_all(text, Loader=loader):
                    pass
            except yaml.YAMLError:
                pass

    parse_s = best_of(args.repeat, parse)
    print(f"{len(texts)} files, {len(docs)} documents; baseline C parse {parse_s * 1000:.0f} ms")
    for label, (policy, no_mutation) in policies.items():
        patched = sum(1 for d in docs if evaluate(d, policy).patch)
        with_s = best_of(args.repeat, partial(evaluate_all, docs, policy))
        without_s = best_of(args.repeat, partial(evaluate_all, docs, no_mutation))
        fix_s = best_of(args.repeat, partial(fix_all, texts, policy))
        per_doc = (with_s - without_s) / max(1, len(docs)) * 1e6
        print(f"[{label}] {patched} documents patched")
        print(f"  evaluate with mutation / without:  {with_s / without_s:5.2f}x "
              f"({with_s * 1000:.0f} vs {without_s * 1000:.0f} ms, +{per_doc:.0f} us/document)")
        print(f"  fix_text / C parse:                {fix_s / parse_s:5.2f}x ({fix_s * 1000:.0f} ms)")
        print(f"  fix_text / evaluate:               {fix_s / with_s:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
