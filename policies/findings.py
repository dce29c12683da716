"""What a rule reports: :class:`Problem` (inside a rule) and :class:`Finding` (outside).

The JSON Pointer helpers live in :mod:`policies.pointers` (importable from here too);
:func:`policies.spec_problems.pod_set_problems` judges pod specs by content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from policies.pointers import (  # noqa: F401 - re-exported: rules import them from here
    escape_pointer,
    field_name,
    join_pointer,
    pointer_tokens,
    split_pointer,
    unescape_pointer,
)


class Severity(IntEnum):
    """Ordered so that ``severity >= fail_on`` reads naturally."""

    INFO = 1
    WARNING = 2
    ERROR = 3

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (expected error, warning or info)") from None

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Problem:
    """Yielded by a rule's ``check``: the rule's identity is added by the engine.

    ``path`` is a JSON Pointer into the submitted document (RFC 6901).
    ``severity`` overrides the rule's default for this one problem (GG204, GG402
    use it); a severity set in the policy file still wins.
    """

    message: str
    path: str = ""
    severity: Severity | None = None
    fixable: bool = False


class SpecProblem(NamedTuple):
    """A problem found in the content of a pod spec alone (and the policy), so that pod
    specs of equal content share it (``PodSet.facts``): the message is
    ``pod set <name>`` + ``detail``, the path ``PodSet.spec_path`` + ``path``."""

    detail: str
    path: str                   # JSON Pointer from the pod spec


# -- messages --------------------------------------------------------------------------------
#
# A message names no object (the finding's ``object``, the linter's file and line, the
# webhook's deny message do) and leads with the failing number and the key fact. A
# warning reaches kubectl as ``<rule> <slug>: <message>``, at most 256 characters (the
# API server cuts longer ones) and gpugate never cuts one itself: a value the user
# chose (a queue, pod set, container or scheduler name, a label or annotation value) is
# quoted bounded, and a list of them is shortened to its first few.

QUOTED_CHARS = 40
SHORT_QUOTED_CHARS = 16     # for a message that quotes several names (a scheduler and a pod set, ...)
LISTED_ITEMS = 3


def quoted(value: object, limit: int = QUOTED_CHARS) -> str:
    """``value`` for a message: as is when short, else its first ``limit`` characters
    followed by ``…(N chars)``, so that a 253-character name costs a message 52."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"


def quoted_repr(value: object, limit: int = QUOTED_CHARS) -> str:
    """``repr(value)`` bounded as :func:`quoted` bounds a string (quotes kept)."""
    if isinstance(value, str):
        return repr(quoted(value, limit))
    return quoted(repr(value), limit)


def listed(items: Iterable[str], limit: int = LISTED_ITEMS, sep: str = ", ") -> str:
    """The first ``limit`` items joined, then ``(and N more)`` for the rest."""
    items = list(items)
    shown = sep.join(items[:limit])
    return shown if len(items) <= limit else f"{shown} (and {len(items) - limit} more)"


# A run of characters that is part of one name: not a space, quote or separator.
_NAME_CHARACTER = r"[^\s'\"`,;:=()\[\]{}<>]"
_LONG_WORD = re.compile(f"{_NAME_CHARACTER}{{{QUOTED_CHARS + 13},}}")


def bounded_words(text: str, limit: int = QUOTED_CHARS) -> str:
    """``text`` with each name in it longer than ``limit`` + 12 characters quoted as
    :func:`quoted` does: for messages composed from names by code that does not bound them
    (the feasibility check's queue, node and pod set names; usage conflicts)."""
    if len(text) <= limit + 12:
        return text
    pattern = _LONG_WORD if limit == QUOTED_CHARS else re.compile(f"{_NAME_CHARACTER}{{{limit + 13},}}")
    return pattern.sub(lambda m: quoted(m.group(0), limit), text)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str | None
    name: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace,
                "name": self.name}

    def __str__(self) -> str:
        name = self.name or "<unnamed>"
        return f"{self.kind} {self.namespace}/{name}" if self.namespace else f"{self.kind} {name}"


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    slug: str
    severity: Severity
    message: str
    path: str = ""
    fixable: bool = False
    object: ObjectRef | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "slug": self.slug,
            "severity": str(self.severity),
            "message": self.message,
            "path": self.path,
            "fixable": self.fixable,
            "object": self.object.as_dict() if self.object else None,
        }
