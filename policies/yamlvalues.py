"""YAML text to values, as Kubernetes reads them, bounded for hostile input.

Values are built by :class:`ValueConstructor`, PyYAML's ``SafeConstructor`` restricted to
what Kubernetes reads (JSON values: timestamps and binaries stay strings, no other tags) and
bounded (nesting depth, expanded alias size, file size). The linter builds its manifests
with it (keeping node positions for line and column), and cluster snapshots are read with
it (:mod:`policies.snapshots`). No I/O: callers pass text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from policies import memo

__all__ = ["DocumentError", "ValueConstructor", "construct", "values", "Loader", "yaml_error", "too_deep",
           "MAX_DEPTH", "MAX_EXPANDED_NODES", "MAX_FILE_BYTES"]

# Bounds for hostile input. MAX_DEPTH is gpugate's own limit (as the webhook's MAX_JSON_DEPTH:
# real manifests nest ~20 levels); aliases are shared, but anything that walks a document would
# pay the expanded size, so that is bounded too.
MAX_DEPTH = 128
MAX_EXPANDED_NODES = 1_000_000
MAX_FILE_BYTES = 32 * 1024 * 1024

STR_TAG = "tag:yaml.org,2002:str"
SEQ_TAG = "tag:yaml.org,2002:seq"
MAP_TAG = "tag:yaml.org,2002:map"
MERGE_TAG = "tag:yaml.org,2002:merge"


class DocumentError(Exception):
    """A document that cannot be turned into values; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def too_deep(line: int, column: int) -> DocumentError:
    return DocumentError(f"document nests deeper than {MAX_DEPTH} levels", line, column)


def _unsupported(node: Node) -> DocumentError:
    return DocumentError(f"unsupported YAML tag {node.tag!r}", *_mark(node))


def _scalar(convert: Any) -> Any:
    """A registry entry for a scalar tag: ``convert``, with its errors as DocumentErrors."""

    def construct_scalar_value(self: ValueConstructor, node: Node) -> Any:
        if not isinstance(node, ScalarNode):
            raise _unsupported(node)
        try:
            return convert(self, node)
        except (ValueError, KeyError, TypeError, IndexError):  # `!!int apiVersion`, `!!bool x`
            raise DocumentError(f"{node.value!r} is not a valid {node.tag.rpartition(':')[2]}",
                                *_mark(node)) from None

    return construct_scalar_value


class ValueConstructor(SafeConstructor):
    """PyYAML's safe constructor with a registry of JSON's tags only, built depth first (as
    ``deep=True``), with gpugate's limits: nesting deeper than MAX_DEPTH, duplicate keys (kubectl
    refuses them) and non-scalar keys are DocumentErrors, and :meth:`aliased` tells whether an
    alias was met (the caller bounds the expanded size). Merge keys (``<<``) are applied without
    changing the node tree, whose positions the linter keeps. One instance per document."""

    yaml_constructors: ClassVar[dict[Any, Any]] = {}     # a registry of its own: JSON's tags only
    yaml_multi_constructors: ClassVar[dict[Any, Any]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.deep_construct = True
        self.depth = 0
        self.aliased = False

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if node in self.constructed_objects:
            self.aliased = True
        return super().construct_object(node, deep)

    def construct_undefined(self, node: Node) -> Any:
        raise _unsupported(node)

    def construct_json_seq(self, node: Node) -> Iterator[list[Any]]:
        if not isinstance(node, SequenceNode):
            raise _unsupported(node)
        depth = self.depth + 1
        if depth > MAX_DEPTH:
            raise too_deep(*_mark(node))
        items: list[Any] = []
        yield items
        outer, self.depth = self.depth, depth
        for child in node.value:
            items.append(child.value if child.tag == STR_TAG and type(child) is ScalarNode
                         else self.construct_object(child))
        self.depth = outer

    def construct_json_map(self, node: Node) -> Iterator[dict[Any, Any]]:
        if not isinstance(node, MappingNode):
            raise _unsupported(node)
        depth = self.depth + 1
        if depth > MAX_DEPTH:
            raise too_deep(*_mark(node))
        mapping: dict[Any, Any] = {}
        yield mapping
        outer, self.depth = self.depth, depth
        merges = []
        for k_node, v_node in node.value:
            if k_node.tag == MERGE_TAG:
                merges.append(v_node)
                continue
            k = k_node.value if k_node.tag == STR_TAG and type(k_node) is ScalarNode \
                else self.construct_object(k_node)
            if isinstance(k, (list, dict)):
                raise DocumentError("a mapping key must be a scalar", *_mark(k_node))
            if k in mapping:
                raise DocumentError(f"duplicate key {k!r} in a mapping", *_mark(k_node))
            mapping[k] = (v_node.value if v_node.tag == STR_TAG and type(v_node) is ScalarNode
                          else self.construct_object(v_node))
        for v_node in merges:  # explicit keys win over merged ones (YAML merge key spec)
            value = self.construct_object(v_node)
            for source in value if isinstance(value, list) else [value]:
                if not isinstance(source, dict):
                    raise DocumentError("a merge key (<<) must refer to a mapping", *_mark(v_node))
                for k, v in source.items():
                    mapping.setdefault(k, v)
        self.depth = outer


for _tag, _convert in [
    ("tag:yaml.org,2002:null", SafeConstructor.construct_yaml_null),
    ("tag:yaml.org,2002:bool", SafeConstructor.construct_yaml_bool),
    ("tag:yaml.org,2002:int", SafeConstructor.construct_yaml_int),
    ("tag:yaml.org,2002:float", SafeConstructor.construct_yaml_float),
    ("tag:yaml.org,2002:str", SafeConstructor.construct_yaml_str),
    # Kubernetes reads YAML as JSON: timestamps and binaries stay the strings they are.
    ("tag:yaml.org,2002:timestamp", SafeConstructor.construct_scalar),
    ("tag:yaml.org,2002:binary", SafeConstructor.construct_scalar),
]:
    ValueConstructor.yaml_constructors[_tag] = _scalar(_convert)
ValueConstructor.yaml_constructors[SEQ_TAG] = ValueConstructor.construct_json_seq
ValueConstructor.yaml_constructors[MAP_TAG] = ValueConstructor.construct_json_map
ValueConstructor.yaml_constructors[None] = ValueConstructor.construct_undefined


def _expanded_size(root: Node) -> int:
    """Nodes the document would have with every alias expanded (memoised: linear time)."""
    sizes: dict[int, int] = {}

    def size(node: Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(c) for c in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        sizes[id(node)] = total = min(total, MAX_EXPANDED_NODES + 1)
        return total

    return size(root)


def construct(root: Node) -> Any:
    """Values from a node tree (:class:`ValueConstructor`). Shared (aliased) nodes give shared
    values, so an alias bomb costs memory linear in the text, as in PyYAML itself; its expanded
    size is bounded all the same, because rules and schemas walk values as trees."""
    constructor = ValueConstructor()
    try:
        value = constructor.construct_document(root)
    except ConstructorError as exc:  # e.g. a collection that contains itself
        mark = exc.problem_mark or exc.context_mark
        where = (mark.line + 1, mark.column + 1) if mark is not None else _mark(root)
        raise DocumentError(f"not valid YAML: {exc.problem or exc.context}", *where) from None
    if constructor.aliased and _expanded_size(root) > MAX_EXPANDED_NODES:
        raise DocumentError(f"document expands to more than {MAX_EXPANDED_NODES:,} nodes through aliases "
                            "(an alias bomb?)", *_mark(root))
    return value


def yaml_error(exc: yaml.YAMLError, text: str | bytes) -> DocumentError:
    """The parser's complaint without its ``in "<byte string>"`` noise, at its line."""
    if isinstance(exc, yaml.reader.ReaderError):
        # Reader errors carry a character position, not a line.
        head = text[: exc.position]
        prefix = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
        char = exc.character if isinstance(exc.character, int) else ord(exc.character or "\0")
        return DocumentError(f"not valid YAML: unacceptable character #x{char:04x}: {exc.reason}",
                             prefix.count("\n") + 1, len(prefix) - (prefix.rfind("\n") + 1) + 1)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        message = f"not valid YAML: {exc.problem}"
        if exc.context and exc.context_mark is not None:
            message += (f" ({exc.context} that starts at line {exc.context_mark.line + 1}, "
                        f"column {exc.context_mark.column + 1})")
        elif exc.context:
            message += f" ({exc.context})"
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            return DocumentError(message, mark.line + 1, mark.column + 1)
        return DocumentError(message)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    message = "not valid YAML: " + " ".join(str(exc).split())
    if mark is None:
        return DocumentError(message)
    return DocumentError(message, mark.line + 1, mark.column + 1)


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVED = memo.ContentMemo("policies.yamlvalues.resolved tags", 200_000)
# The shortcuts below are the stock resolver's answers when no path resolvers are
# registered (PyYAML registers none for the safe loader; nor do we).
assert not getattr(_BaseLoader, "yaml_path_resolvers", None)


class Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """PyYAML's C loader (composing only: values are built by :func:`construct`) with a
    memoised implicit-tag resolver.

    Composing calls the pure-Python ``resolve`` once per node, and it tries regular
    expressions on every plain scalar; manifests repeat their scalars (keys, ``true``,
    ``"1"``, image names) so the answer for a given text is looked up instead. The result
    is the same tag the stock resolver gives: this is the stock resolver, remembered.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if not implicit[0]:          # quoted or block scalar: always a string
                return STR_TAG
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = _RESOLVED.put(value, super().resolve(kind, value, implicit))
            return tag  # type: ignore[no-any-return]
        return SEQ_TAG if kind is SequenceNode else MAP_TAG

    # Path resolvers are not used: nothing to track while descending the tree.
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


def values(text: str | bytes) -> Iterator[Any]:
    """The values of each YAML document of ``text``; DocumentError where reading stops."""
    if len(text) > MAX_FILE_BYTES:
        raise DocumentError(f"file is {len(text) / 2**20:.1f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB "
                            "limit for one manifest file")
    try:
        for node in yaml.compose_all(text, Loader=Loader):
            if node is not None:
                yield construct(node)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, text) from None
    except RecursionError:
        raise DocumentError("document is nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
