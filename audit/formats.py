"""Output formats of ``gpugate audit``: a table for people (worst first), JSON, SARIF."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

from audit.sources import Source
from lint.formats import SARIF_LEVEL, sarif_log
from policies.audit import VERDICTS, Audit, Entry
from policies.audit.judge import FEASIBILITY_RULES

__all__ = ["FORMATS", "FAIL_ON", "format_table", "format_json", "format_sarif", "age"]

_VERDICT_LEVEL = {"never": "error", "waits": "warning", "unknown": "note"}


def age(since: str, now: datetime.datetime | None = None) -> str:
    """How long ago an RFC 3339 time was, shortly (``3d4h``, ``2h5m``, ``40s``); "" when unknown."""
    try:
        then = datetime.datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except (TypeError, ValueError):
        return ""
    seconds = int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds())
    if seconds < 0:
        return "0s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _headline(audit: Audit, source: Source) -> str:
    counts = audit.counts()
    pending = sum(counts.values())
    parts = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
    when = f", listed {source.read_at}" if source.read_at else ""
    scanned = len(audit.entries)
    return (f"gpugate audit of {source.snapshot.name} ({source.origin}{when}): {pending} pending"
            f"{': ' + parts if parts else ''}; {scanned} object{'s' * (scanned != 1)} judged "
            f"in {audit.seconds:.1f}s")


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
            for row in rows]


def _detail(entry: Entry) -> list[str]:
    """The lines under a pending object: the pod sets, what holds it, what the cluster says."""
    assert entry.gang is not None
    lines = [f"    {entry.gang.reason}"]
    for row in entry.gang.rows:
        lines.append(f"    pod set {row['podSet']}: {row['pods']} pod{'s' * (row['pods'] != 1)}, "
                     f"{row['eligibleNodes']} eligible node{'s' * (row['eligibleNodes'] != 1)}, "
                     f"{row['fitsNow']} fit the free resources now, {row['fitsEmpty']} fit the empty nodes")
        if row.get("mostFree"):
            most = ", ".join(f"{r} {v}" for r, v in row["mostFree"].items())
            lines.append(f"      largest free amount on an eligible node, per resource: {most}")
    lines.extend(f"    note: {note}" for note in entry.gang.notes)
    lines.append(f"    held by: {'; '.join(entry.subject.held_by)}")
    lines.extend(f"    {words}" for words in entry.subject.system_says[:3])
    others = sorted({f.rule for f in entry.findings if f.rule not in FEASIBILITY_RULES})
    if others:
        lines.append(f"    also: {', '.join(others)} (see the findings below)")
    return lines


def format_table(audit: Audit, source: Source) -> str:
    out = [_headline(audit, source)]
    out.extend(f"note: no {kind} read: {why}" for kind, why in source.absent.items())
    if source.api_client is None and not source.has_workloads:   # a snapshot written without them
        out.append("note: the snapshot holds no workloads (Jobs, JobSets, ...): pending pods are judged one "
                   "by one; write it with 'gpugate snapshot --workloads'")
    pending = audit.pending
    if pending:
        out.append("")
        header = ["VERDICT", "OBJECT", "QUEUE", "PENDING", "AGE", "RULE", ""]
        rows = [header]
        details: list[list[str]] = []
        for entry in pending:
            assert entry.gang is not None
            s = entry.subject
            rows.append([entry.gang.verdict, str(s.ref), ",".join(entry.queues) or "-",
                         f"{s.unscheduled}/{s.unscheduled + s.bound} pods" if s.unscheduled else "-",
                         age(s.since) or "-", entry.gang.rule or "-", ""])
            details.append(_detail(entry))
        table = _columns(rows)
        out.append(table[0])
        for line, detail in zip(table[1:], details, strict=True):
            out.append(line)
            out.extend(detail)
    scanned = audit.scanned
    if scanned:
        found = [(e, f) for e in scanned for f in e.findings if f.rule not in FEASIBILITY_RULES]
        out += ["", f"Findings on existing objects (lint rules): {len(found)} on {len(scanned)} object"
                    f"{'s' * (len(scanned) != 1)}"]
        for entry, finding in found:
            out.append(f"  {entry.subject.ref}  {finding.severity}  {finding.rule} {finding.slug}: "
                       f"{finding.message}")
    if not pending and not scanned:
        out += ["", "nothing pending, nothing found"]
    return "\n".join(out)


def format_json(audit: Audit, source: Source) -> str:
    data: dict[str, Any] = {"source": source.origin, "listedAt": source.read_at or None,
                            "absent": source.absent, **audit.as_dict()}
    return json.dumps(data, indent=2, ensure_ascii=False)


def _location(entry: Entry) -> list[dict[str, Any]]:
    ref = entry.subject.ref
    where = {"name": ref.name or "", "fullyQualifiedName": str(ref), "kind": "object"}
    return [{"logicalLocations": [where]}]


def format_sarif(audit: Audit, source: Source) -> str:
    """SARIF 2.1.0: a result per pending object that never runs, waits or is unknown (its
    feasibility rule), and per finding of the other rules; objects as logical locations."""
    results: list[dict[str, Any]] = []
    for entry in audit.pending:
        gang = entry.gang
        assert gang is not None
        if gang.verdict not in _VERDICT_LEVEL:
            continue
        results.append({"ruleId": gang.rule or "GG406", "level": _VERDICT_LEVEL[gang.verdict],
                        "message": {"text": gang.reason}, "locations": _location(entry),
                        "properties": {"verdict": gang.verdict, "cause": gang.cause,
                                       "heldBy": entry.subject.held_by}})
    for entry in audit.scanned:
        for f in entry.findings:
            if f.rule in FEASIBILITY_RULES:
                continue
            result = {"ruleId": f.rule, "level": SARIF_LEVEL[f.severity], "message": {"text": f.message},
                      "locations": _location(entry)}
            if f.path:
                result["properties"] = {"jsonPointer": f.path}
            results.append(result)
    return sarif_log(results)


FORMATS: dict[str, Callable[[Audit, Source], str]] = {
    "table": format_table, "json": format_json, "sarif": format_sarif,
}

# Verdicts at or above each --fail-on level (worst first).
FAIL_ON = {"never": VERDICTS[:1], "unknown": VERDICTS[:2], "waits": VERDICTS[:3], "none": ()}
