"""``gpugate lint --cluster FILE [--explain]``: snapshot files, fleets, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lint.cli import lint_main
from lint.cluster import load_clusters
from policies.config import Policy
from policies.snapshots import SnapshotError, snapshot_from_text

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "examples" / "cluster" / "cluster.yaml"
GANGS = ROOT / "examples" / "feasibility"


def lint(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = lint_main(["--no-progress", *argv]) if _has_no_progress() else lint_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _has_no_progress() -> bool:
    from lint.cli import build_parser

    return any("--no-progress" in a.option_strings for a in build_parser()._actions)


def rules_in(out: str, name: str) -> set[str]:
    return {line.split()[2] for line in out.splitlines() if line.startswith(str(GANGS / name))}


def test_example_cluster_loads() -> None:
    [member] = load_clusters([str(CLUSTER)], Policy())
    assert member.name == "cluster" and member.updated_at is None
    counts = member.topology.counts()
    assert counts["Node"] == 14 and counts["Queue"] == 6 and counts["PodGroup"] == 3 and counts["Pod"] >= 15
    assert len(member.topology.supernodes()) == 2


def test_example_gangs_fit_wait_and_are_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lint(capsys, "--cluster", str(CLUSTER), str(GANGS))
    assert code == 1
    assert not rules_in(out, "fits.yaml") & {"GG306", "GG402", "GG403", "GG404", "GG405", "GG406"}
    assert "GG404" in rules_in(out, "waits.yaml")
    assert "GG405" in rules_in(out, "rejected.yaml")
    code, _, _ = lint(capsys, "--cluster", str(CLUSTER), str(GANGS / "fits.yaml"), str(GANGS / "waits.yaml"))
    assert code == 0  # a gang that waits is a warning, not a failure


def test_explain_prints_a_placement_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lint(capsys, "--cluster", str(CLUSTER), "--explain", str(GANGS / "fits.yaml"))
    assert code == 0
    assert "PyTorchJob llm/llama-13b-sft: fits" in out
    assert "pod set" in out and "eligible nodes" in out and "fits now" in out and "fits empty" in out
    assert "placement Master: gpu-a" in out


def test_fleet_members_are_named_after_their_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "tiny"},
                "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
            }
        ],
    }
    (tmp_path / "edge.json").write_text(json.dumps(small))  # kubectl -o json works too
    code, out, _ = lint(
        capsys,
        "--cluster",
        str(tmp_path / "edge.json"),
        "--cluster",
        str(CLUSTER),
        "--explain",
        str(GANGS / "rejected.yaml"),
    )
    assert code == 1
    assert "cluster edge:" in out and "cluster cluster:" in out


def test_bad_snapshot_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("items: [\n")
    code, _, err = lint(capsys, "--cluster", str(bad), str(GANGS / "fits.yaml"))
    assert code == 2 and "bad.yaml:2:1: cluster snapshot" in err and "YAML" in err
    code, _, err = lint(capsys, "--cluster", str(tmp_path / "missing.yaml"), str(GANGS / "fits.yaml"))
    assert code == 2 and "cannot read cluster snapshot" in err
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    code, _, err = lint(capsys, "--cluster", str(empty), str(GANGS / "fits.yaml"))
    assert code == 2 and "no Kubernetes objects" in err


def test_snapshot_from_text_multi_document() -> None:
    text = yaml.safe_dump_all(
        [
            {
                "apiVersion": "v1",
                "kind": "NodeList",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": "a"},
                        "status": {"allocatable": {"cpu": "1"}},
                    }
                ],
            },
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}},
            {"not": "an object"},
        ]
    )
    member = snapshot_from_text(text, Policy(), name="m")
    assert (
        member.name == "m"
        and member.topology.counts()["Node"] == 1
        and member.topology.counts()["Queue"] == 1
    )
    with pytest.raises(SnapshotError):
        snapshot_from_text("a: [", Policy())
