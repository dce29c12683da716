"""The soak benchmark, small, in the default suite: ``bench/soak.py`` runs 500 reviews at
concurrency 64 against a real ``gpugate serve`` watching a changing API server double.
Zero errors, every uid echoed, every verdict as expected, and the watch kept up.
The long run is opt-in: ``pytest -m slow tests/test_soak_smoke.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOAK = ROOT / "bench" / "soak.py"


def run_soak(tmp_path: Path, *args: str, timeout: float) -> dict[str, Any]:
    out = tmp_path / "soak.json"
    process = subprocess.run([sys.executable, str(SOAK), *args, "--json", str(out)], cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout)
    assert out.exists(), process.stdout + process.stderr
    figures: dict[str, Any] = json.loads(out.read_text())
    assert process.returncode == 0, process.stdout + process.stderr[-3000:]
    return figures


def test_soak_smoke(tmp_path: Path) -> None:
    figures = run_soak(tmp_path, "--reviews", "500", "--nodes", "1000", "--pods", "5000", "--warmup", "200",
                       timeout=120)
    assert figures["reviews"] == 500
    assert figures["errors"] == 0, figures["error_kinds"]
    assert figures["internal_errors"] == 0
    assert figures["events_applied"] > 0           # the topology changed under the load ...
    # ... and the watch kept it fresh: quiet kinds are confirmed at each re-watch (every
    # read timeout, 15 s), well inside the default staleAfterSeconds (30 s)
    assert figures["topology_age_max_seconds"] < 30
    assert figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"]
    assert figures["rss_mib"]["end"] < 512         # the Deployment's memory limit


@pytest.mark.slow
def test_soak_long(tmp_path: Path) -> None:
    figures = run_soak(tmp_path, "--reviews", "20000", timeout=1800)
    assert figures["errors"] == 0, figures["error_kinds"]
    assert figures["internal_errors"] == 0
    assert figures["rss_growth_percent"] < 10
    assert figures["topology_age_max_seconds"] < 30
