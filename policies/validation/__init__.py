"""What each kind's own admission webhook, CRD schema or controller validation refuses.

One module per project (``volcano``, ``kuberay``, ``kubeflow``, ``jobset``, ``lws``, ...), each
a set of validators: functions from the raw object to the :class:`Refusal` s its project's
own validation would give. A kind names its validator in the kinds table
(``KindSpec.validate = "volcano.job"``: function ``job`` of ``policies/validation/volcano.py``);
rule GG601 (kind-invalid) reports what it yields. Validators see the object as submitted
(after mutation), never the cluster, and never raise: a field of the wrong type is GG002's
business or simply not a refusal.

Every validator is backed by the upstream project's own test tables, ported as data in
``tests/parity/`` (one row per upstream case, with its reference).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Refusal", "Validator", "validator"]


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
