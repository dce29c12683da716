"""Linter speed: documents/second over the corpus against PyYAML's C parser alone, and
the wall time of a single-file ``gpugate lint`` process.

    .venv/bin/python bench/lint_bench.py [--repeat N] [--runs N]

Everything is measured in the same run, so the ratios hold on any machine. Goals: the
full pipeline within 1.5x of ``yaml.compose_all`` with ``CSafeLoader``; a single-file
``gpugate lint`` process within 3x a bare ``python -c pass``.

Each measurement is a small function, so that more can be added (e.g. the cost of
custom checks: ``lint_pipeline(texts, policy_with_checks)`` against ``lint_pipeline(texts)``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lint.cli import iter_files, lint_text  # noqa: E402
from lint.formats import FORMATS, FormatOptions  # noqa: E402
from lint.report import Report  # noqa: E402
from policies.config import Policy  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
GPUGATE = ROOT / ".venv" / "bin" / "gpugate"
Texts = list[tuple[str, bytes]]


def load_texts(directory: Path) -> Texts:
    """(name, bytes) of every manifest under ``directory``, read once, before timing."""
    return [(name, Path(name).read_bytes()) for name in iter_files([str(directory)])]


def best_of(repeat: int, run: Callable[[], object]) -> float:
    """Fastest of ``repeat`` runs, in seconds (the least disturbed by the machine)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def parse_only(texts: Texts) -> int:
    """The baseline: PyYAML's C parser composing every document, nothing else."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    documents = 0
    for _, text in texts:
        try:
            documents += sum(1 for node in yaml.compose_all(text, Loader=loader) if node is not None)
        except yaml.YAMLError:
            pass
    return documents


def lint_pipeline(texts: Texts, policy: Policy | None = None, output_format: str = "json") -> int:
    """What ``gpugate lint --format json`` does after reading the files: parse, build
    values, evaluate every rule, locate findings, format the report."""
    policy = policy or Policy()
    report = Report()
    for name, text in texts:
        lint_text(text, name, policy, report)
    FORMATS[output_format](report, FormatOptions())
    return report.documents


def measure_corpus(texts: Texts, repeat: int, policy: Policy | None = None) -> dict[str, float]:
    """Best of ``repeat`` for the parser and for the linter, run alternately so that both
    see the same machine (other processes come and go)."""
    documents = lint_pipeline(texts, policy)  # warm-up: imports and rule registry
    parse_seconds = lint_seconds = float("inf")
    for _ in range(repeat):
        parse_seconds = min(parse_seconds, best_of(1, lambda: parse_only(texts)))
        lint_seconds = min(lint_seconds, best_of(1, lambda: lint_pipeline(texts, policy)))
    return {"files": len(texts), "documents": documents, "parse_seconds": parse_seconds,
            "lint_seconds": lint_seconds, "ratio": lint_seconds / parse_seconds}


def typical_workload_file(texts: Texts) -> str:
    """The median-sized file holding a workload gpugate models, so that the single-file
    run loads and runs the rules (a ConfigMap alone would not)."""
    from lint.documents import Document, iter_documents
    from policies.kinds import kind_spec

    def is_workload(text: bytes) -> bool:
        for doc in iter_documents(text, build=False):
            header = doc.header() if isinstance(doc, Document) else None
            if header is not None and kind_spec(*header) is not None:
                return True
        return False

    workloads = sorted((t for t in texts if is_workload(t[1])), key=lambda t: len(t[1])) or texts
    return workloads[len(workloads) // 2][0]


def compile_bytecode() -> None:
    """Byte-compile gpugate's packages, as an install does (pip for a wheel, the Dockerfile's
    ``compileall``): an editable checkout under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise
    compile every module in every process, which no installed gpugate does."""
    import compileall

    for package in ("gpugate", "policies", "lint", "webhook"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def single_file_process(path: str, runs: int) -> list[float]:
    """Wall time of whole ``gpugate lint FILE`` processes (start to exit), in seconds."""
    compile_bytecode()
    command = [str(GPUGATE) if GPUGATE.exists() else "gpugate", "lint", "--fail-on", "never", path]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def python_startup(runs: int) -> float:
    """Median wall time of a bare ``python -c pass``: the floor under any CLI in Python."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# What any gpugate lint must import besides itself: PyYAML and the standard library modules
# its model is written with. Their cost is the floor under the single-file ratio.
FLOOR_IMPORTS = "import yaml, dataclasses, logging, argparse, fractions, json, enum, typing, pathlib"


def import_floor(runs: int) -> float:
    """Median wall time of a ``python -c`` importing only :data:`FLOOR_IMPORTS`."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", FLOOR_IMPORTS], check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# Run in a fresh interpreter: how many dataclasses the single-file lint creates while importing
# gpugate and its rules, and the seconds Python takes to create them (the decorator compiles
# every generated method on its own; timed by wrapping the stdlib's private worker).
DATACLASS_COST = """
import dataclasses, time
made = [0, 0.0]
process = dataclasses._process_class
def timed(*args):
    started = time.perf_counter()
    try:
        return process(*args)
    finally:
        made[0] += 1
        made[1] += time.perf_counter() - started
dataclasses._process_class = timed
import lint.cli
from policies.registry import all_rules
all_rules()
print(made[0], made[1])
"""


def dataclass_cost(runs: int) -> tuple[int, float]:
    """(dataclasses created, median seconds creating them) of importing what ``gpugate lint``
    imports: a part of gpugate's own share that only fewer classes (or a newer Python) lowers."""
    counts, times = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", DATACLASS_COST], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout.split()
        counts.append(int(out[0]))
        times.append(float(out[1]))
    return max(counts), statistics.median(times)


def slowest_imports(path: str, top: int = 8) -> list[tuple[int, str]]:
    """The top-level imports a single-file lint pays for (``python -X importtime``), in µs."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpugate", "lint", "--fail-on",
                             "never", path], capture_output=True, text=True, check=False, cwd=ROOT)
    rows = []
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if not name.startswith("  "):  # top level only: cumulative times do not double count
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)[:top]


def rules_off_policy() -> Policy:
    """Every built-in rule switched off: what is left is the front end (reading, locating,
    formatting) and the workload model, so the cost of the rules shows on its own."""
    from policies.config import policy_from_data
    from policies.registry import all_rules

    return policy_from_data({"rules": {rule_id: "off" for rule_id in all_rules()}}, "<all rules off>")


def report_corpus(texts: Texts, repeat: int) -> None:
    m = measure_corpus(texts, repeat)
    print(f"corpus: {m['files']} files, {m['documents']} documents (best of {repeat})")
    print(f"  yaml.compose_all (CSafeLoader) : {m['parse_seconds'] * 1000:8.1f} ms  "
          f"{m['documents'] / m['parse_seconds']:10,.0f} docs/s")
    print(f"  gpugate lint --format json     : {m['lint_seconds'] * 1000:8.1f} ms  "
          f"{m['documents'] / m['lint_seconds']:10,.0f} docs/s")
    print(f"  ratio lint / parse             : {m['ratio']:8.2f}x   (goal <= 1.5x)")
    bare = measure_corpus(texts, repeat, rules_off_policy())
    print(f"  same, every rule off           : {bare['lint_seconds'] * 1000:8.1f} ms  "
          f"ratio {bare['ratio']:.2f}x (front end + workload model; "
          f"parse {bare['parse_seconds'] * 1000:.1f} ms)")


def report_single_file(path: str, runs: int) -> None:
    times = single_file_process(path, runs)
    floor = python_startup(runs)
    median = statistics.median(times)
    print(f"single file: gpugate lint {Path(path).name}, median of {runs} processes")
    print(f"  wall time                      : {median * 1000:8.1f} ms   "
          f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})")
    print(f"  python -c pass                 : {floor * 1000:8.1f} ms   "
          f"(ratio {median / floor:.2f}x; goal <= 3x)")
    imports = import_floor(runs)
    print(f"  python importing PyYAML and the stdlib modules gpugate uses: {imports * 1000:.1f} ms "
          f"({imports / floor:.2f}x python -c pass; gpugate's own share: {(median - imports) * 1000:.1f} ms)")
    classes, creating = dataclass_cost(runs)
    print(f"    of gpugate's own share, creating its {classes} dataclasses: {creating * 1000:.1f} ms "
          f"(goal 3x: {3 * floor * 1000:.0f} ms in all, "
          f"{(3 * floor - imports) * 1000:.0f} ms over that floor)")
    print("  slowest top-level imports (-X importtime, cumulative):")
    for micros, name in slowest_imports(path):
        print(f"    {micros / 1000:7.1f} ms  {name}")


CUSTOM_CHECKS = ROOT / "bench" / "custom_checks.yaml"


def python_only(policy: Policy) -> Policy:
    """``policy`` with its custom checks on jsonschema alone (no jsonschema-rs): the baseline
    that justifies the fast path in ``policies/custom.py``."""
    import copy
    import dataclasses

    from policies.custom import CompiledSchema

    slow = copy.copy(policy)
    slow.custom_checks = []
    for check in policy.custom_checks:
        compiled = CompiledSchema(check.schema)
        compiled.fast = None
        slow.custom_checks.append(dataclasses.replace(check, validator=compiled))
    return slow


def measure_custom_checks(texts: Texts, repeat: int, policy_file: Path = CUSTOM_CHECKS) -> dict[str, float]:
    """The cost of custom checks: the lint pipeline without them, with them, and with them on
    jsonschema alone. Runs are interleaved, so a machine that gets busier slows all three alike."""
    import functools

    from lint.policyfile import load_policy

    plain = Policy()
    checked = load_policy(policy_file)
    slow = python_only(checked)
    ids = {c.id for c in checked.custom_checks}
    report = Report()
    for name, text in texts:
        lint_text(text, name, checked, report)
    findings = sum(1 for f in report.findings if f.finding.rule in ids)
    variants = (plain, checked, slow)
    for policy in variants:  # warm-up: imports, compiled schemas
        lint_pipeline(texts, policy)
    times: list[list[float]] = [[] for _ in variants]
    for _ in range(repeat):
        for policy, runs in zip(variants, times, strict=True):
            runs.append(best_of(1, functools.partial(lint_pipeline, texts, policy)))
    base, fast, python = (min(runs) for runs in times)
    return {"checks": len(checked.custom_checks), "findings": findings, "base_seconds": base,
            "custom_seconds": fast, "python_seconds": python, "ratio": fast / base,
            "python_ratio": python / base}


def report_custom_checks(texts: Texts, repeat: int) -> None:
    m = measure_custom_checks(texts, repeat)
    print(f"custom checks: {m['checks']} ({CUSTOM_CHECKS.relative_to(ROOT)}), {m['findings']} findings "
          f"(best of {repeat}, interleaved)")
    print(f"  lint without custom checks     : {m['base_seconds'] * 1000:8.1f} ms")
    print(f"  lint with the custom checks    : {m['custom_seconds'] * 1000:8.1f} ms   "
          f"ratio {m['ratio']:.2f}x (goal < 1.3x)")
    print(f"  ... on jsonschema alone        : {m['python_seconds'] * 1000:8.1f} ms   "
          f"ratio {m['python_ratio']:.2f}x (without jsonschema-rs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS if CORPUS.is_dir() else ROOT / "examples")
    parser.add_argument("--repeat", type=int, default=5, help="corpus runs (the best is kept)")
    parser.add_argument("--runs", type=int, default=9, help="single-file processes (the median is kept)")
    args = parser.parse_args(argv)
    texts = load_texts(args.corpus)
    if not texts:
        print(f"no manifests under {args.corpus}", file=sys.stderr)
        return 2
    report_corpus(texts, args.repeat)
    report_single_file(typical_workload_file(texts), args.runs)
    report_custom_checks(texts, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
