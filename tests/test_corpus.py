"""The whole corpus of real manifests (``../shared/corpus``) through the linter: no
traceback, no internal error, a result for every file, GG001 for the files that do not
parse. Skipped cleanly when the corpus is absent."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files

from lint.cli import lint_main


def parse_failures(corpus: Path) -> list[str]:
    """The files CENSUS.txt lists under "parse failures" (relative paths)."""
    census = (corpus / "CENSUS.txt").read_text(encoding="utf-8").splitlines()
    start = census.index("## parse failures") + 1
    names = []
    for line in census[start:]:
        if not line.strip() or line.startswith("#"):
            break
        names.append(line.split(" | ", 1)[0].strip())
    return names


@pytest.fixture(scope="module")
def corpus_run(corpus_dir: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = lint_main([str(corpus_dir), "--format", "json", "--no-progress"])
    data = json.loads(out.getvalue())
    data["exit_code"] = code
    return data


def test_every_file_gets_a_result(corpus_run: dict[str, Any], corpus_dir: Path) -> None:
    assert corpus_run["exit_code"] in (0, 1)
    summary = corpus_run["summary"]
    assert summary["files"] == len(corpus_files()) > 800
    assert summary["documents"] > summary["files"]
    assert summary["errors"] + summary["warnings"] + summary["infos"] == len(corpus_run["findings"])


def test_no_internal_errors(corpus_run: dict[str, Any]) -> None:
    internal = [f"{f['rule']} {f['file']}: {f['message']}" for f in corpus_run["findings"]
                if "internal error" in f["message"].lower()]
    assert internal == []


def test_findings_are_well_formed(corpus_run: dict[str, Any]) -> None:
    for f in corpus_run["findings"]:
        assert f["line"] >= 1 and f["column"] >= 1 and f["document"] >= 0
        assert f["severity"] in ("error", "warning", "info")
        assert f["message"].strip()


def test_unparseable_files_are_gg001_with_their_line(corpus_run: dict[str, Any], corpus_dir: Path) -> None:
    expected = parse_failures(corpus_dir)
    assert len(expected) == 11
    gg001 = {str(Path(f["file"]).relative_to(corpus_dir)): f for f in corpus_run["findings"]
             if f["rule"] == "GG001"}
    for name in expected:
        assert name in gg001, f"{name}: no GG001"
        assert gg001[name]["line"] > 1, gg001[name]
    # Beyond what PyYAML refuses, only duplicate keys (kubectl refuses them: a manifest
    # that lost a `---` between two objects) are reported.
    others = {name: f["message"] for name, f in gg001.items() if name not in expected}
    assert all("duplicate key" in message for message in others.values()), others


def test_rules_fire_on_the_corpus(corpus_run: dict[str, Any]) -> None:
    """Real manifests do exercise the rules (a linter that finds nothing is suspicious)."""
    counts = Counter(f["rule"] for f in corpus_run["findings"])
    assert counts["GG001"] >= 11
    assert len(counts) >= 5, counts


# -- issue 17: no false findings of the known classes ----------------------------------------

def _documents(corpus_dir: Path, finding: dict[str, Any]) -> Any:
    import yaml

    text = (corpus_dir / finding["file"]).read_text("utf-8") if not Path(finding["file"]).is_absolute() \
        else Path(finding["file"]).read_text("utf-8")
    return list(yaml.safe_load_all(text))[finding["document"]]


def _workload_and_pod_set(doc: Any, path: str) -> tuple[Any, Any]:
    from policies.workload import build_workload

    workload = build_workload(doc)
    assert workload is not None
    pod_set = next(p for p in workload.pod_sets if path.startswith(p.spec_path))
    return workload, pod_set


def test_no_false_findings_of_the_classes_of_issue_17(corpus_run: dict[str, Any], corpus_dir: Path) -> None:
    from policies.config import Policy
    from policies.gpu import gpus_per_pod
    from policies.quantity import is_positive
    from policies.usage import annotation_pins_model, spec_pins_model

    policy = Policy()
    wrong = []
    for f in corpus_run["findings"]:
        rule, message = f["rule"], f["message"]
        if rule == "GG002" and ("null" in message or "None" in message):
            wrong.append(f)  # a null label, annotation or quantity is valid
        elif rule == "GG504" and not message.split(":", 1)[-1].strip():
            wrong.append(f)
        elif rule in ("GG104", "GG101"):
            workload, pod_set = _workload_and_pod_set(_documents(corpus_dir, f), f["path"])
            pinned = spec_pins_model(pod_set, policy) or annotation_pins_model(pod_set, policy)
            if rule == "GG104" and pinned:
                wrong.append(f)
            gpu = is_positive(gpus_per_pod(pod_set, policy))
            if rule == "GG101" and not gpu and any(is_positive(gpus_per_pod(p, policy))
                                                    for p in workload.pod_sets):
                wrong.append(f)  # a CPU-only member (a launcher, a Ray head) of a GPU workload
    assert wrong == []


GKE_SNAPSHOT = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": f"gke-{pool}-{i}", "labels": {
         "cloud.google.com/gke-nodepool": f"{pool}-pool",
         "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
         "maip.mxsf.io/node.usage": pool}},
     "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
     "status": {"allocatable": {"cpu": "10000", "memory": "100Ti", "ephemeral-storage": "100Ti",
                                "nvidia.com/gpu": "64", "pods": "10000"},
                "conditions": [{"type": "Ready", "status": "True"}]}}
    for pool in ("training", "inference", "hybrid") for i in range(64)] + [
    # CPU nodes of each pool, without the GPU taint: CPU-only pods fit there. (No usage
    # taints: workloads without a usage, GG103, would be blocked by them, rightly.)
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": f"cpu-{pool}", "labels": {"cloud.google.com/gke-nodepool": "cpu",
                                                   "maip.mxsf.io/node.usage": pool}},
     "spec": {},
     "status": {"allocatable": {"cpu": "10000", "memory": "100Ti", "ephemeral-storage": "100Ti",
                                "pods": "10000"},
                "conditions": [{"type": "Ready", "status": "True"}]}}
    for pool in ("training", "inference", "hybrid")]}


@pytest.mark.parametrize("setting", ["auto", False])
def test_gke_tainted_gpu_nodes_are_no_false_gg403_with_the_plugin(corpus_dir: Path, tmp_path: Path,
                                                                  setting: Any) -> None:
    import yaml

    cluster = tmp_path / "gke.yaml"
    cluster.write_text(yaml.safe_dump(GKE_SNAPSHOT))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"platform": {"extendedResourceToleration": setting}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        lint_main([str(corpus_dir), "--format", "json", "--no-progress", "--cluster", str(cluster),
                   "--config", str(policy)])
    blocked = [f for f in json.loads(out.getvalue())["findings"]
               if f["rule"] == "GG403" and "nvidia.com/gpu=present" in f["message"]]
    if setting == "auto":
        assert blocked == []
    else:  # the test has teeth: without the plugin, GKE's GPU taint blocks GPU workloads
        assert len(blocked) > 10
