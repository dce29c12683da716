"""The audit benchmark (``bench/audit_bench.py``), small, in the default suite: its generator makes
what it says (every gang it makes pending is pending, nothing else is, and each gets the verdict
it was made for) and the benchmark runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from policies.audit import GangVerdict
from policies.config import Policy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import audit_bench  # noqa: E402

SMALL = {"nodes": 200, "pods": 2000, "gangs": 48}
# the cluster made, the verdict on each pending subject, the subjects judged in order
Audited = tuple[audit_bench.Generated, dict[str, GangVerdict], list[str]]


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Audited:
    made = audit_bench.generate(**SMALL)
    path = tmp_path_factory.mktemp("audit-bench") / "cluster.json"
    path.write_text(json.dumps(made.as_list()))
    result, stages, _traced, judged = audit_bench.run_audit(str(path), Policy(), scan=True, trace=False)
    assert [s.name for s in stages] == ["load", "audit"]
    return made, audit_bench.gang_verdicts(result), [ref for ref, _ in judged]


def test_the_cluster_is_as_asked() -> None:
    made = audit_bench.generate(**SMALL)
    assert made.running_pods == SMALL["pods"]
    assert len(made.intended) == SMALL["gangs"]
    kinds = Counter(o["kind"] for o in made.items)
    assert kinds["Node"] == SMALL["nodes"]
    assert kinds["Pod"] > SMALL["pods"]      # and the pods of the pending gangs
    for kind in ("Job", "PyTorchJob", "PodGroup", "Workload", "ClusterQueue", "LocalQueue", "Queue",
                 "ReplicaSet", "Deployment", "DaemonSet"):
        assert kinds[kind] > 0, kind
    meant = Counter((family, intent) for family, intent, _ in made.intended.values())
    assert set(meant) == {(f, i) for f in audit_bench.FAMILIES for i in audit_bench.INTENTS}
    assert made.free["h100"] > 0 and made.free["a100"] > 0
    # seeded: the same text each time
    assert json.dumps(audit_bench.generate(**SMALL).as_list()) == json.dumps(made.as_list())


def test_every_generated_gang_and_nothing_else_is_pending(audited: Audited) -> None:
    made, verdicts, judged = audited
    assert set(verdicts) == set(made.intended)
    assert len(judged) > len(verdicts) + 1, "the background scan judged the running subjects too"


def test_each_gang_gets_the_verdict_it_was_made_for(audited: Audited) -> None:
    made, verdicts, _ = audited
    wrong = {ref: (intent, why, verdicts[ref].verdict, verdicts[ref].reason)
             for ref, (_family, intent, why) in made.intended.items()
             if verdicts[ref].verdict != intent}
    assert not wrong
    never = [v for ref, v in verdicts.items() if made.intended[ref][1] == "never"]
    assert never and all(v.rule and v.reason for v in never)


def test_kueue_flavor_nodes_busy_waits(audited: Audited) -> None:
    made, verdicts, _ = audited
    busy = [ref for ref, (_f, _i, why) in made.intended.items() if why == audit_bench.FLAVOR_NODES_BUSY]
    assert busy
    assert {verdicts[ref].verdict for ref in busy} == {"waits"}


def test_the_benchmark_runs(tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.json"
    process = subprocess.run([sys.executable, str(ROOT / "bench" / "audit_bench.py"), "--nodes", "200",
                              "--pods", "2000", "--gangs", "12", "--tracemalloc", "--keep", str(snapshot)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stdout + process.stderr[-3000:]
    assert "x json.loads" in process.stdout and "tracemalloc audit: peak" in process.stdout
    assert "verdicts: never 4, unknown 0," in process.stdout, process.stdout
    assert json.loads(snapshot.read_text())["kind"] == "List"
