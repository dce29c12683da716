"""``make demo``: gpugate on the bundled examples, step by step.

Each step is a function in :data:`STEPS` that prints what it runs and what came out,
and returns True when the step behaved as expected. Findings are expected (there are
invalid examples on purpose); only an unexpected exit code or a crash fails the demo.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = Path("examples")
CLUSTER = EXAMPLES / "cluster" / "cluster.yaml"
FEASIBILITY = EXAMPLES / "feasibility"


def banner(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)), flush=True)


def gpugate(*args: str, expect: Collection[int] = (0, 1)) -> bool:
    """Run ``gpugate ARGS`` as a user would (from the project root), show its output,
    and say whether its exit code is one of ``expect``."""
    print(f"$ gpugate {' '.join(args)}", flush=True)
    result = subprocess.run([sys.executable, "-m", "gpugate", *args], cwd=ROOT, check=False)
    ok = result.returncode in expect
    print(f"(exit code {result.returncode}{'' if ok else f', expected one of {sorted(expect)}'})",
          flush=True)
    return ok


def step_lint_examples() -> bool:
    """The linter over every example manifest, in the text format: valid examples pass,
    each invalid one shows the rule it breaks (exit code 1: there are errors)."""
    banner("1. lint the examples")
    return gpugate("lint", str(EXAMPLES), "--format", "text", "--no-progress", expect=(1,))


def step_feasibility() -> bool:
    """Gangs checked against a cluster snapshot: fits, waits, never fits."""
    banner("2. feasibility against a cluster snapshot")
    if not CLUSTER.exists() or not FEASIBILITY.is_dir():
        print("(no example cluster snapshot; skipped)")
        return True
    return gpugate("lint", str(FEASIBILITY), "--cluster", str(CLUSTER), "--no-progress")


def step_rules() -> bool:
    """The rule catalogue (the reference is docs/rules.md)."""
    banner("3. the rules")
    return gpugate("rules", expect=(0,))


def step_webhook() -> bool:
    """The admission webhook on loopback with a throwaway certificate and the example
    cluster: a gang that is rejected, one that waits, one that is mutated."""
    banner("4. the admission webhook")
    sys.path.insert(0, str(ROOT / "examples"))
    import webhook_demo

    return webhook_demo.run()


STEPS: list[Callable[[], bool]] = [step_lint_examples, step_feasibility, step_rules, step_webhook]


def main() -> int:
    failed = [step.__name__ for step in STEPS if not step()]
    banner("done")
    if failed:
        print("steps that did not behave as expected: " + ", ".join(failed))
        return 1
    print(f"all {len(STEPS)} steps behaved as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
