"""Cluster snapshots from text: the objects of a snapshot file to a :class:`ClusterSnapshot`.

A snapshot is what ``gpugate snapshot`` writes (a ``List``; ``kubectl get`` of the same kinds
prints one too where all their CRDs are installed), or any multi-document YAML/JSON stream of
such objects and Lists. The linter (``--cluster FILE``) and the webhook (static topology) read
the files; everything here takes their text and does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import PurePath
from typing import Any

from policies.config import Policy
from policies.topology import ClusterSnapshot, Topology
from policies.yamlvalues import DocumentError, values

__all__ = ["SnapshotError", "snapshot_objects", "snapshot_from_text", "member_names", "member_snapshots"]


class SnapshotError(Exception):
    """A snapshot that cannot be parsed or holds no objects (the front ends exit with 2)."""


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


def snapshot_objects(text: str | bytes, source: str = "cluster") -> list[dict[str, Any]]:
    """The Kubernetes objects of a snapshot's text (JSON or YAML), Lists flattened;
    ``SnapshotError`` (naming ``source``, line and column) when it does not parse."""
    stripped = text.lstrip()[:1]
    if stripped in ("{", b"{"):
        try:
            return list(_objects(json.loads(text)))  # kubectl -o json: much faster than YAML
        except ValueError:
            pass  # maybe JSON-looking YAML; let the YAML parser say what is wrong
    objects: list[dict[str, Any]] = []
    try:
        for value in values(text):
            objects.extend(_objects(value))
    except DocumentError as exc:
        raise SnapshotError(f"{source}:{exc.line}:{exc.column}: cluster snapshot: {exc.message}") from None
    return objects


def snapshot_from_text(text: str | bytes, policy: Policy, name: str = "cluster",
                       source: str | None = None) -> ClusterSnapshot:
    """One member cluster from a snapshot's text (a static file: never stale).
    ``source`` names the text in error messages (default: ``name``)."""
    objects = snapshot_objects(text, source or name)
    if not objects:
        raise SnapshotError(f"{source or name}: no Kubernetes objects in the cluster snapshot")
    return ClusterSnapshot(name, Topology.from_objects(objects, policy))


def member_names(paths: Sequence[str]) -> list[str]:
    """Each file's member name: its stem, or the path where stems clash."""
    stems = [PurePath(p).stem for p in paths]
    return [stem if stems.count(stem) == 1 else path for path, stem in zip(paths, stems, strict=True)]


def member_snapshots(paths: Sequence[str], policy: Policy,
                     read: Callable[[str], bytes]) -> list[ClusterSnapshot]:
    """One member cluster per snapshot file, named after the file (see :func:`member_names`).
    ``read`` is the front end's: it gives a file's bytes (policies read no file).
    ``SnapshotError`` when one cannot be read or parsed."""
    members = []
    for path, name in zip(paths, member_names(paths), strict=True):
        try:
            text = read(path)
        except OSError as exc:
            raise SnapshotError(f"cannot read cluster snapshot {path}: {exc.strerror or exc}") from None
        members.append(snapshot_from_text(text, policy, name, source=path))
    return members
