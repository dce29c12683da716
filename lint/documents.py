"""Text to documents, keeping where every value came from.

PyYAML's C parser composes the node tree (with line marks) at C speed; we build the
Python values from it ourselves, cheaply, and keep the tree so that a finding's JSON
Pointer can be turned into a line and column only when a finding needs it.
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from policies.findings import split_pointer

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVED: dict[str, str] = {}
_RESOLVED_MAX = 200_000
# The shortcuts below are the stock resolver's answers when no path resolvers are
# registered (PyYAML registers none for the safe loader; nor do we).
assert not getattr(_BaseLoader, "yaml_path_resolvers", None)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """PyYAML's C loader with a memoised implicit-tag resolver.

    Composing calls the pure-Python ``resolve`` once per node, and it tries regular
    expressions on every plain scalar; manifests repeat their scalars (keys, ``true``,
    ``"1"``, image names) so the answer for a given text is looked up instead. The result
    is the same tag the stock resolver gives: this is the stock resolver, remembered.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if not implicit[0]:          # quoted or block scalar: always a string
                return _STR
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(_RESOLVED) >= _RESOLVED_MAX:
                    _RESOLVED.clear()
                _RESOLVED[value] = tag
            return tag
        return _SEQ if kind is SequenceNode else _MAP

    # Path resolvers are not used: nothing to track while descending the tree.
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_COLLECTIONS = frozenset({"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"})
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


# Bounds for hostile input (each is a GG001 finding, never a crash): PyYAML's C composer
# recurses per nesting level and overflows the C stack on deep input, so depth is
# checked first; aliases are shared, but anything that walks a document would pay the
# expanded size, so that is bounded too. MAX_DEPTH is gpugate's own limit, reported in the
# same words whatever PyYAML's version (since 6.0.3 its libyaml stops at 1,000 levels itself,
# see _depth_limit_error).
MAX_DEPTH = 128   # as the webhook's MAX_JSON_DEPTH: real manifests nest ~20 levels
MAX_EXPANDED_NODES = 1_000_000
MAX_FILE_BYTES = 32 * 1024 * 1024
_COMPOSER_SAFE_BYTES = 16 * 1024   # the C composer survived 20,000 levels when measured


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

    def header(self) -> tuple[str, str] | None:
        """(apiVersion, kind) read off the node tree without building values, or None
        when the document is not a Kubernetes object."""
        node = self.node
        if not isinstance(node, MappingNode):
            return None
        found: dict[str, str] = {}
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value in ("apiVersion", "kind"):
                if not (isinstance(value, ScalarNode) and value.tag == _STR):
                    return None
                found[key.value] = value.value
        if len(found) != 2:
            return None
        return found["apiVersion"], found["kind"]


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


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


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
    """Values from a node tree. Shared (aliased) nodes give shared values, so an alias
    bomb costs memory linear in the text, as in PyYAML itself; its expanded size is
    bounded all the same, because rules and schemas walk values as trees."""
    memo: dict[int, Any] = {}
    aliased = False

    def build(node: Node, depth: int) -> Any:
        nonlocal aliased
        key = id(node)
        if key in memo:
            aliased = True
            return memo[key]
        if isinstance(node, ScalarNode):
            if node.tag == _STR:
                value: Any = node.value
            else:
                convert = _SCALARS.get(node.tag)
                if convert is None:
                    raise DocumentError(f"unsupported YAML tag {node.tag!r}", node.start_mark.line + 1,
                                        node.start_mark.column + 1)
                try:
                    value = convert(node)
                except (ValueError, KeyError, TypeError, IndexError):  # `!!int apiVersion`, `!!bool x`
                    raise DocumentError(f"{node.value!r} is not a valid {node.tag.rpartition(':')[2]}",
                                        *_mark(node)) from None
            memo[key] = value
            return value
        if depth > MAX_DEPTH:  # collections, as _walk_depth counts them
            raise _too_deep(*_mark(node))
        if node.tag not in _COLLECTIONS:
            raise DocumentError(f"unsupported YAML tag {node.tag!r}", *_mark(node))
        if isinstance(node, SequenceNode):
            items: list[Any] = []
            memo[key] = items
            for child in node.value:  # a loop, not a generator: one frame per level
                items.append(build(child, depth + 1))
            return items
        if isinstance(node, MappingNode):
            mapping: dict[Any, Any] = {}
            memo[key] = mapping
            merges = []
            for k_node, v_node in node.value:
                if k_node.tag == _MERGE:
                    merges.append(v_node)
                    continue
                k = build(k_node, depth + 1)
                if isinstance(k, (list, dict)):
                    raise DocumentError("a mapping key must be a scalar", *_mark(k_node))
                if k in mapping:  # kubectl refuses these: "mapping key already defined"
                    raise DocumentError(f"duplicate key {k!r} in a mapping", *_mark(k_node))
                mapping[k] = build(v_node, depth + 1)
            for v_node in merges:  # explicit keys win over merged ones (YAML merge key spec)
                _merge_into(mapping, build(v_node, depth + 1), v_node)
            return mapping
        raise DocumentError(f"unexpected YAML node {type(node).__name__}")

    value = build(root, 1)
    if aliased and _expanded_size(root) > MAX_EXPANDED_NODES:
        raise DocumentError(f"document expands to more than {MAX_EXPANDED_NODES:,} nodes through aliases "
                            "(an alias bomb?)", *_mark(root))
    return value


def _merge_into(mapping: dict[Any, Any], value: Any, node: Node) -> None:
    sources = value if isinstance(value, list) else [value]
    for source in sources:
        if not isinstance(source, dict):
            raise DocumentError("a merge key (<<) must refer to a mapping", node.start_mark.line + 1,
                                node.start_mark.column + 1)
        for k, v in source.items():
            mapping.setdefault(k, v)


def _yaml_error(exc: yaml.YAMLError, text: str | bytes) -> DocumentError:
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


_LEADING_STR = re.compile(r"^[ \t?:-]*", re.MULTILINE)
_TAG_OR_ALIAS = re.compile(r"[!*]")
_ANCHOR_AT_END = re.compile(r"&\S+$")
_NODE_START = ":-?[{,"  # indicators a node (and so its tag or alias) may follow


def _property_lines(text: str) -> list[int]:
    """0-based lines, ascending, where a tag (`!x`) or an alias (`*x`) may start: at the
    start of a line or after an indicator (`key: `, `- `, `? `, `[`, `{`, `,`), possibly
    after an anchor (`&a `). `!` and `*` inside strings (CEL `a && !b`, RBAC `["*"]`)
    mostly follow other characters and are passed over; a false match only costs time."""
    lines: list[int] = []
    line = position = 0
    for match in _TAG_OR_ALIAS.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        before = text[start:match.start()].rstrip(" \t")
        if before and before[-1] not in _NODE_START:
            anchor = _ANCHOR_AT_END.search(before)
            if anchor is None:
                continue
            before = before[:anchor.start()].rstrip(" \t")
            if before and before[-1] not in _NODE_START:
                continue
        line += text.count("\n", position, start)
        position = start
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def build_check(text: str | bytes) -> Callable[[Node], bool]:
    """For the documents of ``text``: whether one must have its values built to be
    validated (unsupported tags, alias bombs and nesting over MAX_DEPTH are only seen
    while building). A caller that builds only the documents it judges
    (``iter_documents(text, build=False)``) builds the others too when this says so.

    Plain YAML, without tags (``!``), aliases (``*``) or deep nesting, needs no building:
    that is the common case, and then the check costs a few scans of the text at C speed.
    """
    if isinstance(text, bytes):
        special = b"!" in text or b"*" in text
        brackets = text.count(b"[") + text.count(b"{")
    else:
        special = "!" in text or "*" in text
        brackets = text.count("[") + text.count("{")
    # The nesting estimate: flow depth plus block depth, a block level taking at least one
    # column of indentation. It only decides which unjudged documents to build (building
    # measures depth exactly); the C composer's safety is _nesting_error's business.
    longest = max(map(len, text.splitlines()), default=0)
    deep = brackets + longest + 1 > MAX_DEPTH
    if not special and not deep:
        return lambda node: False
    decoded = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    marked = _property_lines(decoded) if special else []

    def check(node: Node) -> bool:
        first, last = node.start_mark.line, node.end_mark.line + 1
        at = bisect.bisect_left(marked, first)
        if at < len(marked) and marked[at] < last:
            return True
        if not deep:
            return False
        start, end = node.start_mark.index, node.end_mark.index  # marks index characters
        indent = max(map(len, _LEADING_STR.findall(decoded, start, end)), default=0)
        return _flow_depth(decoded, start, end) + indent + 1 > MAX_DEPTH

    return check


_FLOW = re.compile(r"[\[\]{}]")


def _flow_depth(text: str, start: int, end: int) -> int:
    """The deepest run of unclosed `[`/`{` in ``text[start:end]`` (brackets in strings count too)."""
    depth = deepest = 0
    for match in _FLOW.finditer(text, start, end):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def _depth_bound(text: str | bytes) -> int:
    """A cheap upper bound of the nesting depth, so that most long files skip the event
    walk (it costs a third of parsing). Every flow collection opens with ``[`` or ``{``;
    along a chain of block collections the start column grows at least every second
    level and stays under the longest line; flow collections hold no block ones."""
    if isinstance(text, bytes):
        brackets = text.count(b"[") + text.count(b"{")
    else:
        brackets = text.count("[") + text.count("{")
    longest = max(map(len, text.splitlines()), default=0)
    return brackets + 2 * (longest + 1)


def _too_deep(line: int, column: int) -> DocumentError:
    return DocumentError(f"document nests deeper than {MAX_DEPTH} levels", line, column)


def _walk_depth(text: str | bytes, after: int = 0) -> DocumentError | None:
    """The first collection nested deeper than MAX_DEPTH that starts at or after character
    ``after``, as a DocumentError, found event by event: libyaml's parser is iterative, so
    this walk is safe where composing is not. None when there is none; PyYAML's errors are
    raised."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                if mark is None:
                    return _too_deep(1, 1)
                if mark.index >= after:
                    return _too_deep(mark.line + 1, mark.column + 1)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return None


def _is_pyyaml_depth_limit(exc: yaml.YAMLError) -> bool:
    """PyYAML's own nesting limit (libyaml's, 1,000 levels, bundled since PyYAML 6.0.3)."""
    return (isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None
            and "maximum nesting depth" in (exc.problem or ""))


def _as_str(text: str | bytes) -> str | None:
    """``text`` as libyaml counts it (characters, without a byte order mark), or None."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-16" if text.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
                              else "utf-8")
        except UnicodeDecodeError:
            return None
    return text.removeprefix("\ufeff")


def _depth_limit_error(text: str | bytes, exc: yaml.MarkedYAMLError, after: int = 0) -> DocumentError:
    """gpugate's own limit, in gpugate's words, where PyYAML's limit came first.

    libyaml's scanner reads up to 1,024 characters ahead of the parser, so a dense run of
    brackets reaches libyaml's limit before the events of the levels past MAX_DEPTH come
    out: whatever PyYAML's version, the finding names MAX_DEPTH and the line and column
    where the document passed it. The text before libyaml stopped nests less deep than
    its limit, and walking it finds that place (at or after ``after``, the end of the
    last document read). Only this error path pays for the walk.
    """
    mark = exc.problem_mark
    assert mark is not None
    fallback = _too_deep(mark.line + 1, mark.column + 1)
    decoded = _as_str(text)
    if decoded is None:
        return fallback
    prefix = decoded[:mark.index]
    try:
        return _walk_depth(prefix, after) or fallback
    except yaml.YAMLError as earlier:
        # A syntax error before the deep part is the document's first problem (what PyYAML
        # reports without a depth limit), unless it is only the end of the cut-off text.
        where = getattr(earlier, "problem_mark", None)
        if where is not None and where.index < len(prefix):
            return _yaml_error(earlier, prefix)
        return fallback


def _nesting_error(text: str | bytes) -> DocumentError | None:
    """A DocumentError if the stream nests deeper than MAX_DEPTH.

    The composer only overflows far deeper than a short text can nest (every level
    takes a character), so short texts skip this; :func:`construct` enforces the same
    bound on them, and :func:`iter_documents` turns PyYAML's own depth limit into
    gpugate's. Longer ones are walked event by event (:func:`_walk_depth`).
    """
    if len(text) <= _COMPOSER_SAFE_BYTES or _depth_bound(text) <= _COMPOSER_SAFE_BYTES:
        return None
    try:
        return _walk_depth(text)
    except yaml.YAMLError as exc:
        if _is_pyyaml_depth_limit(exc):
            assert isinstance(exc, yaml.MarkedYAMLError)
            return _depth_limit_error(text, exc)
        return None  # the composer reports syntax errors with better context


def iter_documents(text: str | bytes, build: bool = True) -> Iterator[Document | DocumentError]:
    """Each document of a YAML stream, or a :class:`DocumentError` where parsing stops.

    After a syntax error the rest of the stream cannot be trusted, so iteration ends.
    With ``build=False`` values are not built (``data`` is None): the caller looks at
    :meth:`Document.header` first and calls :func:`construct` only for documents it
    will judge, which is most of the linter's speed on mixed manifests.
    """
    if len(text) > MAX_FILE_BYTES:
        yield DocumentError(f"file is {len(text) / 2**20:.1f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB "
                            "limit for one manifest file")
        return
    too_deep = _nesting_error(text)
    if too_deep is not None:
        yield too_deep
        return
    index = 0
    last: Node | None = None
    try:
        for node in yaml.compose_all(text, Loader=_Loader):
            if node is None:
                continue
            last = node
            try:
                yield Document(index, construct(node) if build else None, node)
            except DocumentError as exc:
                yield exc
            except RecursionError:
                yield DocumentError("document is nested too deeply", node.start_mark.line + 1, 1)
            index += 1
    except yaml.YAMLError as exc:
        if _is_pyyaml_depth_limit(exc):
            assert isinstance(exc, yaml.MarkedYAMLError)
            yield _depth_limit_error(text, exc, last.end_mark.index if last is not None else 0)
        else:
            yield _yaml_error(exc, text)
    except RecursionError:
        yield DocumentError("document is nested too deeply")
    except UnicodeDecodeError as exc:
        yield DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.start})")
