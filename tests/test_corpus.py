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
