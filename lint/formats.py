"""Output formats of ``gpugate lint``: one function per format, in :data:`FORMATS`.

Every formatter takes the :class:`~lint.report.Report` and the :class:`FormatOptions`
and returns the whole output as one string (no trailing newline).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lint.report import Located, Report
from policies.findings import Severity

# Where the rule reference is published; SARIF helpUri and the docs link to its anchors.
# GPUGATE_DOCS_URL points them at a fork or an internal mirror.
DOCS_URL = os.environ.get("GPUGATE_DOCS_URL",
                          "https://github.com/gpugate/gpugate/blob/main/docs/rules.md")
INFORMATION_URI = "https://github.com/gpugate/gpugate"


def _version() -> str:
    """The installed gpugate's version (from its metadata: ``lint`` does not import the
    ``gpugate`` package above it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpugate")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class RuleInfo:
    """What a format needs to know about a rule (built-in or custom check)."""

    id: str
    slug: str
    severity: Severity
    summary: str


@dataclass
class FormatOptions:
    colour: bool = False
    # Findings at or above this severity fail (junit failures); None: nothing fails.
    fail_on: Severity | None = Severity.ERROR
    # Custom checks of the policy, so that SARIF can describe their rule ids too.
    custom_rules: list[RuleInfo] = field(default_factory=list)


Formatter = Callable[[Report, FormatOptions], str]


def rule_anchor(rule_id: str, slug: str) -> str:
    """The GitHub heading anchor of a rule in docs/rules.md (heading ``GG202 gpu-...``)."""
    return re.sub(r"[^a-z0-9 _-]", "", f"{rule_id} {slug}".lower()).replace(" ", "-")


def rule_help_uri(rule_id: str, slug: str) -> str:
    return f"{DOCS_URL}#{rule_anchor(rule_id, slug)}"


def summary_line(report: Report) -> str:
    s = report.summary()
    return (f"{s['files']} files, {s['documents']} documents ({s['skipped']} skipped): "
            f"{s['errors']} errors, {s['warnings']} warnings, {s['infos']} infos")


# -- text ----------------------------------------------------------------------------------

_COLOURS = {Severity.ERROR: "\033[31m", Severity.WARNING: "\033[33m", Severity.INFO: "\033[36m"}
_RESET = "\033[0m"


def format_text(report: Report, options: FormatOptions) -> str:
    """``file:line:col severity id slug message``, one finding a line, then a summary."""
    lines = []
    for loc in report.findings:
        f = loc.finding
        severity = str(f.severity)
        if options.colour:
            severity = f"{_COLOURS[f.severity]}{severity}{_RESET}"
        lines.append(f"{loc.file}:{loc.line}:{loc.column} {severity} {f.rule} {f.slug} {f.message}")
    summary = summary_line(report)
    lines.append(f"\033[1m{summary}{_RESET}" if options.colour else summary)
    return "\n".join(lines)


# -- json ----------------------------------------------------------------------------------

def format_json(report: Report, options: FormatOptions) -> str:
    return json.dumps({"findings": [f.as_dict() for f in report.findings], "summary": report.summary()},
                      indent=2, ensure_ascii=False)


# -- sarif ---------------------------------------------------------------------------------

SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def builtin_rules() -> list[RuleInfo]:
    from policies.registry import all_rules

    return [RuleInfo(r.id, r.slug, r.severity, r.summary) for r in all_rules().values()]


def artifact_uri(name: str) -> str:
    """A file name as a SARIF artifact URI: relative to the working directory when the file
    is under it (GitHub matches results to repository paths), with forward slashes."""
    if name == "<stdin>":
        return "stdin"
    path = Path(name)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_uri()
    return quote(path.as_posix().removeprefix("./"), safe="/")


def _sarif_rule(info: RuleInfo, builtin: bool) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": info.id,
        "name": info.slug,
        "shortDescription": {"text": info.summary or info.slug},
        "defaultConfiguration": {"level": SARIF_LEVEL[info.severity]},
        "properties": {"tags": ["kubernetes", "gpugate" if builtin else "custom"]},
    }
    if builtin:  # custom checks live in the user's policy file, not in docs/rules.md
        uri = rule_help_uri(info.id, info.slug)
        rule["helpUri"] = uri
        rule["help"] = {"text": f"{info.summary} See {uri}",
                        "markdown": f"{info.summary}\n\n[{info.id} {info.slug}]({uri})"}
    return rule


def format_sarif(report: Report, options: FormatOptions) -> str:
    """SARIF 2.1.0 as GitHub code scanning reads it (upload-sarif)."""
    results = []
    for loc in report.findings:
        f = loc.finding
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "level": SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": artifact_uri(loc.file)},
                    "region": {"startLine": max(loc.line, 1), "startColumn": max(loc.column, 1)},
                },
            }],
        }
        if f.object is not None:
            result["locations"][0]["logicalLocations"] = [
                {"name": f.object.name or "", "fullyQualifiedName": str(f.object), "kind": "object"}]
        if f.path:
            result["properties"] = {"jsonPointer": f.path, "document": loc.document,
                                    "fixable": f.fixable}
        results.append(result)
    return sarif_log(results, options.custom_rules)


def sarif_log(results: list[dict[str, Any]], custom_rules: Iterable[RuleInfo] = ()) -> str:
    """A SARIF 2.1.0 log of one gpugate run: its ``results`` (each given the index of its
    rule), with the descriptors of every rule (built-in, then ``custom_rules``)."""
    rules = builtin_rules()
    known = {r.id for r in rules}
    rules += [c for c in custom_rules if c.id not in known]
    builtin_count = len(known)
    index = {r.id: i for i, r in enumerate(rules)}
    for result in results:
        if result.get("ruleId") in index:
            result["ruleIndex"] = index[result["ruleId"]]
    version = _version()
    sarif = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gpugate", "version": version, "semanticVersion": version,
                                "informationUri": INFORMATION_URI,
                                "rules": [_sarif_rule(r, i < builtin_count)
                                          for i, r in enumerate(rules)]}},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }
    return json.dumps(sarif, indent=2, ensure_ascii=False)


# -- github workflow commands --------------------------------------------------------------

_GITHUB_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(report: Report, options: FormatOptions) -> str:
    """``::error file=F,line=L,col=C,title=GG202 slug::message`` workflow commands."""
    lines = []
    for loc in report.findings:
        f = loc.finding
        props = (f"file={_escape_property(loc.file)},line={loc.line},col={loc.column},"
                 f"title={_escape_property(f'{f.rule} {f.slug}')}")
        lines.append(f"::{_GITHUB_COMMAND[f.severity]} {props}::{_escape_data(f.message)}")
    lines.append(summary_line(report))
    return "\n".join(lines)


# -- junit ---------------------------------------------------------------------------------

def _failures(findings: Iterable[Located], fail_on: Severity | None) -> tuple[list[Located], list[Located]]:
    failing: list[Located] = []
    passing: list[Located] = []
    for loc in findings:
        (failing if fail_on is not None and loc.finding.severity >= fail_on else passing).append(loc)
    return failing, passing


def _finding_line(loc: Located) -> str:
    f = loc.finding
    return f"{loc.file}:{loc.line}:{loc.column} {f.severity} {f.rule} {f.slug} {f.message}"


def format_junit(report: Report, options: FormatOptions) -> str:
    """One testsuite per file, one testcase per document; findings at or above ``--fail-on``
    are failures, the others are printed in the testcase's system-out."""
    from xml.etree import ElementTree as ET

    root = ET.Element("testsuites", name="gpugate")
    total_tests = total_failures = 0
    for file in report.results:
        suite = ET.SubElement(root, "testsuite", name=file.name)
        tests = failures = skipped = 0
        for doc in file.documents:
            case = ET.SubElement(suite, "testcase", classname=file.name, name=doc.title,
                                 file=file.name, line=str(doc.line))
            tests += 1
            failing, below = _failures(doc.findings, options.fail_on)
            for loc in failing:
                f = loc.finding
                failure = ET.SubElement(case, "failure", type=f"{f.rule} {f.slug}",
                                        message=f"{f.severity}: {f.message}")
                failure.text = _finding_line(loc)
            if failing:
                failures += 1
            if below:
                ET.SubElement(case, "system-out").text = "\n".join(map(_finding_line, below))
            if doc.skipped and not doc.findings:
                ET.SubElement(case, "skipped", message="not a Kubernetes object")
                skipped += 1
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", str(skipped))
        total_tests += tests
        total_failures += failures
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


FORMATS: dict[str, Formatter] = {
    "text": format_text,
    "json": format_json,
    "sarif": format_sarif,
    "github": format_github,
    "junit": format_junit,
}
