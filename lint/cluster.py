"""``gpugate lint --cluster FILE``: cluster snapshots read from files, and ``--explain``.

Each file is one member cluster of a fleet, named after the file; its text is parsed by
:mod:`policies.snapshots` (what a snapshot file may hold is described there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.config import Policy
from policies.feasibility import Verdict
from policies.rules._feasibility import Feasibility, Recorder
from policies.snapshots import member_snapshots
from policies.topology import ClusterSnapshot
from policies.workload import Workload

__all__ = ["Fleet", "load_clusters", "explain"]


@dataclass
class Explained:
    workload: str
    result: Feasibility


class Fleet(Recorder):
    """The member clusters given to the linter. The feasibility check reports each result
    to :meth:`record` (when the sequence has one), which ``--explain`` prints."""

    def __init__(self, members: Sequence[ClusterSnapshot] = ()) -> None:
        super().__init__(members)
        self.explained: list[Explained] = []

    def record(self, workload: Workload, result: Feasibility) -> None:
        self.explained.append(Explained(str(workload), result))


def load_clusters(paths: list[str], policy: Policy) -> list[ClusterSnapshot]:
    """One member per file, named after the file (its stem, or the path when stems clash)."""
    return Fleet(member_snapshots(paths, policy, read=lambda path: Path(path).read_bytes()))


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def explain(report: Any, clusters: Sequence[ClusterSnapshot], policy: Policy) -> str:
    """The placement table of every gang checked in this run (``--explain``)."""
    explained = getattr(clusters, "explained", None)
    if explained is None:
        return "explain: no feasibility results were recorded"
    if not explained:
        mode = policy.feasibility.get("mode")
        why = " (feasibility.mode is off)" if mode == "off" else ""
        return f"explain: no gang was checked{why}"
    lines: list[str] = []
    for entry in explained:
        result = entry.result
        lines.append(f"{entry.workload}: {result.verdict.value}")
        for outcome in result.outcomes:
            head = f" cluster {outcome.cluster}: {outcome.verdict.value}"
            if outcome.verdict != Verdict.FITS and outcome.message:
                head += f" ({outcome.rule}: {outcome.message})"
            lines.append(head)
            if outcome.rows:
                table = [["pod set", "pods", "eligible nodes", "fits now", "fits empty"]]
                table += [[r.pod_set, str(r.count), str(r.eligible), str(r.fits_now), str(r.fits_empty)]
                          for r in outcome.rows]
                lines.extend(_table(table))
            if outcome.witness:
                for pod_set, nodes in outcome.witness.items():
                    shown = ", ".join(f"{n} x{c}" for n, c in list(nodes.items())[:6])
                    more = f", ... ({len(nodes)} nodes)" if len(nodes) > 6 else ""
                    lines.append(f"  placement {pod_set}: {shown}{more}")
            lines.extend(f"  note: {note}" for note in outcome.notes)
    return "\n".join(lines)
