"""``gpugate lint --cluster FILE``: cluster snapshots from files, and ``--explain``.

A snapshot file is what ``gpugate snapshot`` writes (a ``List``; ``kubectl get`` of the same
kinds prints one too where all their CRDs are installed), or any multi-document YAML/JSON
stream of such objects and Lists.
Each file is one member cluster of a fleet, named after the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lint.documents import DocumentError, iter_documents
from policies.config import Policy
from policies.feasibility import Feasibility, Verdict
from policies.topology import ClusterSnapshot, Topology
from policies.workload import Workload

__all__ = ["ClusterFileError", "Fleet", "load_clusters", "clusters_from_text", "explain"]


class ClusterFileError(Exception):
    """A snapshot file that cannot be read or parsed (the linter exits with 2)."""


@dataclass
class Explained:
    workload: str
    result: Feasibility


class Fleet(list[ClusterSnapshot]):
    """The member clusters given to the linter. The feasibility check reports each result
    to :meth:`record` (when the sequence has one), which ``--explain`` prints."""

    def __init__(self, members: Sequence[ClusterSnapshot] = ()) -> None:
        super().__init__(members)
        self.explained: list[Explained] = []

    def record(self, workload: Workload, result: Feasibility) -> None:
        self.explained.append(Explained(str(workload), result))


def _objects(value: Any) -> Iterator[dict[str, Any]]:
    """Objects of a document: a ``List`` (or ``NodeList``, ...) is flattened."""
    if not isinstance(value, dict):
        return
    items = value.get("items")
    kind = value.get("kind")
    if isinstance(items, list) and isinstance(kind, str) and kind.endswith("List"):
        for item in items:
            yield from _objects(item)
    elif isinstance(kind, str) and isinstance(value.get("apiVersion"), str):
        yield value


def _parse(text: str | bytes, name: str) -> list[dict[str, Any]]:
    stripped = text.lstrip()[:1]
    if stripped in ("{", b"{"):
        try:
            return list(_objects(json.loads(text)))  # kubectl -o json: much faster than YAML
        except ValueError:
            pass  # maybe JSON-looking YAML; let the YAML parser say what is wrong
    objects: list[dict[str, Any]] = []
    for item in iter_documents(text):
        if isinstance(item, DocumentError):
            raise ClusterFileError(f"{name}:{item.line}:{item.column}: cluster snapshot: {item.message}")
        objects.extend(_objects(item.data))
    return objects


def clusters_from_text(text: str | bytes, policy: Policy, name: str = "cluster",
                       source: str | None = None) -> list[ClusterSnapshot]:
    """One member cluster from a snapshot's text (a static file: never stale).
    ``source`` names the text in error messages (default: ``name``)."""
    objects = _parse(text, source or name)
    if not objects:
        raise ClusterFileError(f"{source or name}: no Kubernetes objects in the cluster snapshot")
    return Fleet([ClusterSnapshot(name, Topology.from_objects(objects, policy))])


def load_clusters(paths: list[str], policy: Policy) -> list[ClusterSnapshot]:
    """One member per file, named after the file (its stem, or the path when stems clash)."""
    stems = [Path(p).stem for p in paths]
    fleet = Fleet()
    for path, stem in zip(paths, stems, strict=True):
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            raise ClusterFileError(f"cannot read cluster snapshot {path}: {exc.strerror or exc}") from None
        name = stem if stems.count(stem) == 1 else path
        fleet.extend(clusters_from_text(text, policy, name, source=path))
    return fleet


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
