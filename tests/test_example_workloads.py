"""The bundled seed workloads: ``valid-*.yaml`` have no error, ``invalid-*.yaml`` fail on
the rules named in their leading ``# expect: GG202[, GG204]`` comment, and on no other
error rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lint.cli import Report, lint_text
from policies.config import Policy
from policies.findings import Severity

WORKLOADS = Path(__file__).resolve().parent.parent / "examples" / "workloads"
_EXPECT = re.compile(r"^#\s*expect:\s*(?P<rules>GG\d{3}(?:\s*,\s*GG\d{3})*)\s*$", re.MULTILINE)


def _files(prefix: str) -> list[Path]:
    return sorted(WORKLOADS.glob(f"{prefix}-*.yaml"))


def _lint(path: Path) -> Report:
    report = Report()
    lint_text(path.read_bytes(), path.name, Policy(), report)
    return report


def test_there_are_examples_of_both_kinds() -> None:
    assert len(_files("valid")) >= 5
    assert len(_files("invalid")) >= 10


@pytest.mark.parametrize("path", _files("valid"), ids=lambda p: p.name)
def test_valid_workload_has_no_error(path: Path) -> None:
    report = _lint(path)
    assert report.documents >= 1 and report.skipped == 0
    errors = [f"{f.finding.rule}: {f.finding.message}" for f in report.findings
              if f.finding.severity == Severity.ERROR]
    assert not errors


@pytest.mark.parametrize("path", _files("invalid"), ids=lambda p: p.name)
def test_invalid_workload_fails_on_its_expected_rules(path: Path) -> None:
    match = _EXPECT.search(path.read_text(encoding="utf-8").split("apiVersion", 1)[0])
    assert match, f"{path.name} has no leading '# expect: GGnnn' comment"
    expected = {r.strip() for r in match.group("rules").split(",")}
    report = _lint(path)
    found = {f.finding.rule for f in report.findings}
    assert expected <= found, f"{path.name}: expected {sorted(expected)}, found {sorted(found)}"
    unexpected_errors = {f.finding.rule for f in report.findings
                         if f.finding.severity == Severity.ERROR} - expected
    assert not unexpected_errors, f"{path.name}: unexpected errors {sorted(unexpected_errors)}"
