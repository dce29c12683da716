"""What one linter run found: findings with their place in the input, per file and per
document, plus the counts of the summary. Built by :mod:`lint.cli`, read by
:mod:`lint.formats`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.findings import Finding, ObjectRef, Severity


@dataclass
class Located:
    """A finding plus where it is in the input."""

    finding: Finding
    file: str
    line: int
    column: int
    document: int

    def as_dict(self) -> dict[str, Any]:
        """The finding as the JSON format prints it (SPEC section 7: exactly these keys)."""
        d = self.finding.as_dict()
        return {
            "rule": d["rule"], "slug": d["slug"], "severity": d["severity"], "message": d["message"],
            "file": self.file, "line": self.line, "column": self.column, "document": self.document,
            "object": d["object"], "path": d["path"], "fixable": d["fixable"],
        }


@dataclass
class DocumentResult:
    """One document of a file; ``object`` is None for a non-object or an unparsable one."""

    index: int
    line: int
    object: ObjectRef | None = None
    skipped: bool = False
    findings: list[Located] = field(default_factory=list)

    @property
    def title(self) -> str:
        what = str(self.object) if self.object else ("not a Kubernetes object" if self.skipped else "")
        return f"document {self.index} (line {self.line})" + (f": {what}" if what else "")


@dataclass
class FileResult:
    name: str
    documents: list[DocumentResult] = field(default_factory=list)

    @property
    def findings(self) -> list[Located]:
        return [f for d in self.documents for f in d.findings]


@dataclass
class Report:
    findings: list[Located] = field(default_factory=list)
    files: int = 0
    documents: int = 0
    skipped: int = 0
    results: list[FileResult] = field(default_factory=list)
    # Not in the summary (its keys are a contract): what makes the exit code 2 although the
    # report is complete. Each one is also a finding on its file.
    io_errors: int = 0          # unreadable inputs, directories that cannot be walked, failed writes
    internal_errors: int = 0    # a bug of gpugate's met on one file or document (the run went on)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.finding.severity == severity)

    def summary(self) -> dict[str, int]:
        return {"files": self.files, "documents": self.documents, "skipped": self.skipped,
                "errors": self.count(Severity.ERROR), "warnings": self.count(Severity.WARNING),
                "infos": self.count(Severity.INFO)}

    def worst(self) -> Severity | None:
        return max((f.finding.severity for f in self.findings), default=None)
