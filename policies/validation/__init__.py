"""What each kind's own admission webhook, CRD schema or controller validation refuses.

One module per project (``volcano``, ``kuberay``, ``kubeflow``, ``jobset``, ``lws``, ...; a
large one keeps its parts beside it, as ``kuberay_clusters``), each a set of validators:
functions from the raw object to the :class:`Refusal` s its project's own validation would give.
A kind names its validator in the kinds table (``KindSpec.validate = "volcano.job"``: function
``job`` of ``policies/validation/volcano.py``); rule GG601 (kind-invalid) reports what it
yields. Validators see the object as submitted (after mutation), never the cluster, and never
raise: a field of the wrong type is GG002's business or simply not a refusal.

Every validator is backed by the upstream project's own test tables, ported as data in
``tests/parity/`` (one row per upstream case, with its reference).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Refusal", "Validator", "validator", "go_duration_seconds"]


@dataclass(frozen=True)
class Refusal:
    """One thing the kind's own validation refuses: ``message`` in our words (leading with
    the field and the number, naming no object), ``path`` a JSON Pointer into the object."""

    message: str
    path: str = ""


Validator = Callable[[dict[str, Any]], Iterator[Refusal]]


def validator(name: str) -> Validator:
    """The validator a kinds-table row names (``"module.function"`` under this package);
    the import system keeps the module, so asking again costs a dict lookup."""
    module, _, function = name.rpartition(".")
    found: Validator = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return found


# Go's time.ParseDuration (what a Go webhook decoding a metav1.Duration accepts).
_GO_DURATION = re.compile(r"[-+]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+)")
_GO_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                      "h": 3600.0}


def go_duration_seconds(text: str) -> float | None:
    """``text`` as Go's ``time.ParseDuration`` reads it, in seconds; None when Go refuses it
    (no unit, an unknown unit such as ``d``, no digits). Overflow is not judged: a duration
    that long is let through."""
    if not _GO_DURATION.fullmatch(text):
        return None
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    total = 0.0
    for number, unit in _GO_DURATION_PART.findall(body):
        total += float(number) * _GO_DURATION_UNITS[unit]
    return sign * total
