"""Text to documents, keeping where every value came from.

PyYAML's C parser composes the node tree (with line marks) at C speed; we build the
Python values from it ourselves, cheaply, and keep the tree so that a finding's JSON
Pointer can be turned into a line and column only when a finding needs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from policies.findings import split_pointer

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_SAFE = yaml.constructor.SafeConstructor()
_SCALARS = {
    "tag:yaml.org,2002:null": lambda n: None,
    "tag:yaml.org,2002:bool": _SAFE.construct_yaml_bool,
    "tag:yaml.org,2002:int": _SAFE.construct_yaml_int,
    "tag:yaml.org,2002:float": _SAFE.construct_yaml_float,
    # Kubernetes reads YAML as JSON: timestamps and binaries stay the strings they are.
    "tag:yaml.org,2002:timestamp": lambda n: n.value,
    "tag:yaml.org,2002:binary": lambda n: n.value,
}


class DocumentError(Exception):
    """A document that cannot be turned into values; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass
class Document:
    """One YAML document of a file: its values and its node tree for line lookups."""

    index: int
    data: Any
    node: Node | None

    def position(self, pointer: str) -> tuple[int, int]:
        """(line, column), 1-based, of the value at ``pointer`` or of its nearest ancestor."""
        node = self.node
        if node is None:
            return 1, 1
        for token in split_pointer(pointer):
            child = _child(node, token)
            if child is None:
                break
            node = child
        return node.start_mark.line + 1, node.start_mark.column + 1


def _child(node: Node, token: str) -> Node | None:
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == token:
                return value
        return None
    if isinstance(node, SequenceNode) and token.isdigit():
        index = int(token)
        return node.value[index] if index < len(node.value) else None
    return None


def _construct(root: Node) -> Any:
    """Values from a node tree. Shared (aliased) nodes give shared values, so an alias
    bomb costs memory linear in the text, as in PyYAML itself."""
    memo: dict[int, Any] = {}

    def build(node: Node) -> Any:
        key = id(node)
        if key in memo:
            return memo[key]
        if isinstance(node, ScalarNode):
            if node.tag == _STR:
                value: Any = node.value
            else:
                convert = _SCALARS.get(node.tag)
                if convert is None:
                    raise DocumentError(f"unsupported YAML tag {node.tag!r}", node.start_mark.line + 1,
                                        node.start_mark.column + 1)
                value = convert(node)
            memo[key] = value
            return value
        if isinstance(node, SequenceNode):
            items: list[Any] = []
            memo[key] = items
            items.extend(build(child) for child in node.value)
            return items
        if isinstance(node, MappingNode):
            mapping: dict[Any, Any] = {}
            memo[key] = mapping
            for k_node, v_node in node.value:
                if k_node.tag == _MERGE:
                    _merge_into(mapping, build(v_node), v_node)
                    continue
                k = build(k_node)
                if isinstance(k, (list, dict)):
                    raise DocumentError("a mapping key must be a scalar", k_node.start_mark.line + 1,
                                        k_node.start_mark.column + 1)
                mapping[k] = build(v_node)
            return mapping
        raise DocumentError(f"unexpected YAML node {type(node).__name__}")

    return build(root)


def _merge_into(mapping: dict[Any, Any], value: Any, node: Node) -> None:
    sources = value if isinstance(value, list) else [value]
    for source in sources:
        if not isinstance(source, dict):
            raise DocumentError("a merge key (<<) must refer to a mapping", node.start_mark.line + 1,
                                node.start_mark.column + 1)
        for k, v in source.items():
            mapping.setdefault(k, v)


def _yaml_error(exc: yaml.YAMLError) -> DocumentError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    text = " ".join(str(exc).split())
    if mark is None:
        return DocumentError(text)
    return DocumentError(text, mark.line + 1, mark.column + 1)


def iter_documents(text: str | bytes) -> Iterator[Document | DocumentError]:
    """Each document of a YAML stream, or a :class:`DocumentError` where parsing stops.

    After a syntax error the rest of the stream cannot be trusted, so iteration ends.
    """
    index = 0
    try:
        for node in yaml.compose_all(text, Loader=_Loader):
            if node is None:
                continue
            try:
                yield Document(index, _construct(node), node)
            except DocumentError as exc:
                yield exc
            except RecursionError:
                yield DocumentError("document is nested too deeply", node.start_mark.line + 1, 1)
            index += 1
    except yaml.YAMLError as exc:
        yield _yaml_error(exc)
    except RecursionError:
        yield DocumentError("document is nested too deeply")
    except UnicodeDecodeError as exc:
        yield DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.start})")
