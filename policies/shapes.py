"""Reading objects whose fields may have any type: :func:`resolve` by JSON Pointer, and the
``expect_*`` readers that raise :class:`ShapeError` (reported as GG002) on a wrong type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.pointers import pointer_tokens

__all__ = ["ShapeError", "MISSING", "resolve", "type_name", "expect_mapping", "expect_list", "expect_count"]


class ShapeError(ValueError):
    """A field whose type or shape the model cannot use; ``path`` is a JSON Pointer."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def resolve(doc: Any, pointer: str) -> Any:
    """The value at a JSON Pointer, or :data:`MISSING` (never raises)."""
    node = doc
    for token in pointer_tokens(pointer):
        if type(node) is dict:  # the usual case: one lookup, no ABC check
            node = node.get(token, MISSING)
            if node is MISSING:
                return MISSING
        elif isinstance(node, Mapping):
            if token not in node:
                return MISSING
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return MISSING
    return node


def type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def expect_mapping(value: Any, path: str, what: str) -> dict[str, Any]:
    if value is MISSING or value is None:
        return {}
    if not isinstance(value, dict):
        raise ShapeError(f"{what} must be a mapping, not {type_name(value)}", path)
    return value


def expect_list(value: Any, path: str, what: str) -> list[Any]:
    if value is MISSING or value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{what} must be a list, not {type_name(value)}", path)
    return value


def expect_count(value: Any, path: str, what: str, default: int | None) -> int | None:
    """A non-negative integer field such as ``replicas``."""
    if value is MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError(f"{what} must be an integer, not {type_name(value)} {value!r}", path)
    if value < 0:
        raise ShapeError(f"{what} must not be negative (got {value})", path)
    return value
