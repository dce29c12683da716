"""Typed options of the policy file, declared where they are used.

A rule module lists the options it reads in ``OPTIONS`` (kube-linter's typed parameters)::

    NODE_KEY = Option("usage.nodeKey", {"type": "string", "minLength": 1}, "maip.mxsf.io/node.usage",
                      "Node label and taint key naming a node's pool.")
    OPTIONS = (NODE_KEY, "usage.workloadKey")

An :class:`Option` is declared once, by its owner: the rule that reads it, or the domain
module several rules share (``policies.gpu`` owns ``gpu.resources``); a rule that reads
an option declared elsewhere names it by path (a string) or imports the declaration. The
frame of the file (``apiVersion``, ``kind``, ``rules``, ``exclude``) is declared in
:mod:`policies.config`, which generates the policy's JSON Schema and its defaults from
all declarations with :class:`OptionTable`. A dotted path's leading parts are *sections*
(``usage``, ``gpu.modelPins``): mappings that take only their declared keys.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Option", "OptionTable", "PolicyError", "type_text"]


class PolicyError(ValueError):
    """The policy file is unreadable or invalid; the message names file and key path."""


class _HasData(Protocol):
    """A loaded policy (policies.config.Policy), as far as an option reads it."""

    @property
    def data(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, eq=False)
class Option:
    """One key of the policy file: its dotted ``path``, the JSON Schema of its value, its
    default and a line of documentation (markdown). Compared by identity: a declaration.
    ``owner`` is the module that declares it (filled in from the caller)."""

    path: str
    schema: dict[str, Any]
    default: Any
    doc: str = ""
    owner: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.owner:  # the module whose top level made this declaration
            object.__setattr__(self, "owner", sys._getframe(2).f_globals.get("__name__", ""))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.path.split("."))

    @property
    def type(self) -> str:
        return type_text(self.schema)

    def value(self, policy: _HasData) -> Any:
        """This option's value in a loaded policy (defaults filled in)."""
        found: Any = policy.data
        for key in self.keys:
            found = found[key]
        return found


def type_text(schema: Mapping[str, Any]) -> str:
    """A short human description of a JSON Schema (for the rules reference)."""
    if "const" in schema:
        return f"`{schema['const']}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{_yaml_scalar(v)}`" for v in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(type_text(s) for s in schema["oneOf"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        text = f"list of {type_text(items)}" if isinstance(items, Mapping) and items else "list"
        return text + (f" (at least {schema['minItems']})" if "minItems" in schema else "")
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping) and values:
            return f"map of string to {type_text(values)}"
        return "mapping"
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    if schema.get("minLength"):
        bounds.append("not empty")
    text = kind if isinstance(kind, str) else " or ".join(kind) if isinstance(kind, list) else "any"
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _yaml_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


class OptionTable:
    """Every declared option, and what is generated from them: the JSON Schema of the file
    (sections take only their declared keys) and the defaults. ``order`` gives the order of
    keys: top-level keys and dotted paths (others follow, as declared)."""

    def __init__(self, options: Iterable[Option], order: Iterable[str] = (),
                 top: Mapping[str, Any] | None = None) -> None:
        distinct: dict[int, Option] = {}
        for option in options:
            distinct.setdefault(id(option), option)
        rank = {key: i for i, key in enumerate(order)}
        self.options: tuple[Option, ...] = tuple(sorted(
            distinct.values(), key=lambda o: (rank.get(o.keys[0], len(rank)), rank.get(o.path, len(rank)))))
        by_path: dict[str, Option] = {}
        for option in self.options:
            if option.path in by_path:
                raise ValueError(f"policy option {option.path!r} is declared twice")
            by_path[option.path] = option
        self.by_path = by_path
        self.sections: frozenset[tuple[str, ...]] = frozenset(
            o.keys[:i] for o in self.options for i in range(1, len(o.keys)))
        for section in self.sections:
            if ".".join(section) in by_path:
                raise ValueError(f"policy option {'.'.join(section)!r} is both an option and a section")
        self.schema = self._schema(top or {})
        self._defaults = self._build_defaults()

    def _schema(self, top: Mapping[str, Any]) -> dict[str, Any]:
        root: dict[str, Any] = {**top, "type": "object", "additionalProperties": False, "properties": {}}
        for option in self.options:
            node = root
            for key in option.keys[:-1]:
                node = node["properties"].setdefault(
                    key, {"type": "object", "additionalProperties": False, "properties": {}})
            node["properties"][option.keys[-1]] = copy.deepcopy(option.schema)
        return root

    def _build_defaults(self) -> dict[str, Any]:
        root: dict[str, Any] = {}
        for option in self.options:
            node = root
            for key in option.keys[:-1]:
                node = node.setdefault(key, {})
            node[option.keys[-1]] = copy.deepcopy(option.default)
        return root

    def defaults(self) -> dict[str, Any]:
        """A fresh copy of the defaults (callers may keep it)."""
        return copy.deepcopy(self._defaults)

    def merge(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overridden by ``data`` (valid against :attr:`schema`): sections are
        merged key by key, a mapping-valued option takes the defaults' entries it does not
        set (``gpu.resources: {amd.com/gpu: ...}`` adds a resource), anything else replaces."""
        return self._merge(self.defaults(), data, ())

    def _merge(self, base: dict[str, Any], override: Mapping[str, Any],
               at: tuple[str, ...]) -> dict[str, Any]:
        for key, value in override.items():
            here = (*at, key)
            current = base.get(key)
            if isinstance(value, Mapping) and isinstance(current, dict):
                if here in self.sections:
                    base[key] = self._merge(current, value, here)
                else:
                    base[key] = {**current, **copy.deepcopy(dict(value))}
            else:
                base[key] = copy.deepcopy(value)
        return base

    def leaf_paths(self, data: Mapping[str, Any], at: tuple[str, ...] = ()) -> list[str]:
        """The dotted paths of ``data``'s values that are not sections (for checks)."""
        found: list[str] = []
        for key, value in data.items():
            here = (*at, key)
            if here in self.sections and isinstance(value, Mapping):
                found.extend(self.leaf_paths(value, here))
            else:
                found.append(".".join(here))
        return found
