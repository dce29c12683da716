"""What a rule reports: :class:`Problem` (inside a rule) and :class:`Finding` (outside)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


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


def escape_pointer(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_pointer(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def join_pointer(base: str, *tokens: str | int) -> str:
    return base + "".join("/" + escape_pointer(str(t)) for t in tokens)


def split_pointer(pointer: str) -> list[str]:
    if not pointer:
        return []
    return [unescape_pointer(t) for t in pointer.split("/")[1:]]


def field_name(pointer: str) -> str:
    """A JSON Pointer as the field path people write: ``spec.tasks[0].template``,
    ``metadata.labels[volcano.sh/queue-name]`` (keys with ``.`` or ``/`` in brackets)."""
    out = ""
    for token in split_pointer(pointer):
        if token.isdigit() or "." in token or "/" in token:
            out += f"[{token}]"
        else:
            out += ("." if out else "") + token
    return out or "(root)"
