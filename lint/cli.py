"""``gpugate lint`` and ``gpugate rules``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lint.documents import Document, DocumentError, iter_documents
from policies.config import Policy, PolicyError, find_policy_file, load_policy
from policies.engine import evaluate, input_finding
from policies.findings import Finding, Severity

EXTENSIONS = (".yaml", ".yml", ".json")


@dataclass
class Located:
    """A finding plus where it is in the input."""

    finding: Finding
    file: str
    line: int
    column: int
    document: int

    def as_dict(self) -> dict[str, Any]:
        d = self.finding.as_dict()
        return {
            "rule": d["rule"], "slug": d["slug"], "severity": d["severity"], "message": d["message"],
            "file": self.file, "line": self.line, "column": self.column, "document": self.document,
            "object": d["object"], "path": d["path"], "fixable": d["fixable"],
        }


@dataclass
class Report:
    findings: list[Located] = field(default_factory=list)
    files: int = 0
    documents: int = 0
    skipped: int = 0

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.finding.severity == severity)

    def summary(self) -> dict[str, int]:
        return {"files": self.files, "documents": self.documents, "skipped": self.skipped,
                "errors": self.count(Severity.ERROR), "warnings": self.count(Severity.WARNING),
                "infos": self.count(Severity.INFO)}


def iter_files(paths: Sequence[str]) -> Iterator[str]:
    """Files to lint, in a stable order; ``-`` is stdin. Directories are walked."""
    for raw in paths:
        if raw == "-":
            yield raw
            continue
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(EXTENSIONS):
                        yield os.path.join(root, name)
        else:
            yield raw


def lint_text(text: str | bytes, name: str, policy: Policy, report: Report,
              clusters: Sequence[Any] | None = None) -> None:
    """Lint one file's content into ``report``."""
    report.files += 1
    for item in iter_documents(text):
        if isinstance(item, DocumentError):
            f = input_finding("GG001", f"{name}: {item.message}", policy=policy)
            report.findings.append(Located(f, name, item.line, item.column, report.documents))
            continue
        lint_document(item, name, policy, report, clusters)


def lint_document(doc: Document, name: str, policy: Policy, report: Report,
                  clusters: Sequence[Any] | None = None) -> None:
    report.documents += 1
    result = evaluate(doc.data, policy, clusters)
    if result.skipped:
        report.skipped += 1
        return
    for finding in result.findings:
        line, column = doc.position(finding.path)
        report.findings.append(Located(finding, name, line, column, doc.index))


def read_input(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    with open(name, "rb") as fh:
        return fh.read()


def _policy(args: argparse.Namespace) -> Policy:
    path = args.config or find_policy_file()
    return load_policy(path) if path else Policy()


def format_text(report: Report, colour: bool) -> str:
    colours = {Severity.ERROR: "\033[31m", Severity.WARNING: "\033[33m", Severity.INFO: "\033[36m"}
    lines = []
    for loc in report.findings:
        f = loc.finding
        sev = str(f.severity)
        if colour:
            sev = f"{colours[f.severity]}{sev}\033[0m"
        lines.append(f"{loc.file}:{loc.line}:{loc.column}: {sev} {f.rule} {f.slug} {f.message}")
    s = report.summary()
    lines.append(f"{s['files']} files, {s['documents']} documents ({s['skipped']} skipped): "
                 f"{s['errors']} errors, {s['warnings']} warnings, {s['infos']} infos")
    return "\n".join(lines)


def format_json(report: Report) -> str:
    return json.dumps({"findings": [f.as_dict() for f in report.findings], "summary": report.summary()},
                      indent=2)


FORMATS = {"text": None, "json": None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpugate lint", description="Lint Kubernetes manifests.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, directories, or - for stdin")
    parser.add_argument("--config", help="policy file (default: .gpugate.yaml found upward)")
    parser.add_argument("--format", choices=sorted(FORMATS), default="text")
    parser.add_argument("--fail-on", choices=["error", "warning", "info", "never"], default="error")
    parser.add_argument("--cluster", action="append", default=[], metavar="FILE",
                        help="cluster snapshot (kubectl get ... -o yaml); repeat for a fleet")
    parser.add_argument("--explain", action="store_true", help="print the placement table of each gang")
    parser.add_argument("--fix", action="store_true", help="write the usage mutations into the files")
    parser.add_argument("--diff", action="store_true", help="with --fix: print a unified diff, write nothing")
    return parser


def lint_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        policy = _policy(args)
    except PolicyError as exc:
        print(f"gpugate: {exc}", file=sys.stderr)
        return 2
    clusters = None
    if args.cluster:
        from lint.cluster import ClusterFileError, load_clusters

        try:
            clusters = load_clusters(args.cluster, policy)
        except ClusterFileError as exc:
            print(f"gpugate: {exc}", file=sys.stderr)
            return 2
    report = Report()
    for name in iter_files(args.paths):
        try:
            text = read_input(name)
        except OSError as exc:
            print(f"gpugate: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        display = name if name != "-" else "<stdin>"
        if args.fix:
            from lint.fix import fix_input

            fix_input(text, name, policy, diff=args.diff)
        lint_text(text, display, policy, report, clusters)
    if args.format == "json":
        print(format_json(report))
    else:
        print(format_text(report, colour=sys.stdout.isatty()))
    if args.explain and clusters is not None:
        from lint.cluster import explain

        print(explain(report, clusters, policy))
    if args.fail_on == "never":
        return 0
    threshold = Severity.parse(args.fail_on)
    return 1 if any(f.finding.severity >= threshold for f in report.findings) else 0


def rules_main(argv: Sequence[str]) -> int:
    from policies.registry import all_rules

    for rule in all_rules().values():
        print(f"{rule.id}  {rule.slug:<32} {str(rule.severity):<8} {rule.summary}")
    return 0
