"""Text to documents, keeping where every value came from.

PyYAML's C parser composes the node tree (with line marks) at C speed; PyYAML's
``SafeConstructor`` (:class:`policies.yamlvalues.ValueConstructor`, restricted to JSON's tags
and bounded for hostile input) builds the Python values from it, and the tree is kept so that
a finding's JSON Pointer can be turned into a line and column only when a finding needs it.
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
from policies.yamlvalues import (
    MAX_DEPTH,
    MAX_EXPANDED_NODES,
    MAX_FILE_BYTES,
    STR_TAG,
    DocumentError,
    construct,
    too_deep,
    yaml_error,
)
from policies.yamlvalues import Loader as _Loader

__all__ = ["MAX_DEPTH", "MAX_EXPANDED_NODES", "MAX_FILE_BYTES", "Document", "DocumentError", "build_check",
           "construct", "iter_documents"]

# PyYAML's C composer recurses per nesting level and overflows the C stack on deep input, so
# depth is checked first (each excess is a GG001 finding, never a crash); MAX_DEPTH is reported
# in the same words whatever PyYAML's version (since 6.0.3 its libyaml stops at 1,000 levels
# itself, see _depth_limit_error).
_COMPOSER_SAFE_BYTES = 16 * 1024   # the C composer survived 20,000 levels when measured


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
                if not (isinstance(value, ScalarNode) and value.tag == STR_TAG):
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


def _indent_over(columns: int, binary: bool) -> re.Pattern[Any]:
    """A line after the first whose indentation (spaces, tabs and the `- `, `? `, `: `
    indicators, as :data:`_LEADING_STR` measures it) is wider than ``columns``. Anchored on
    the newline, not on ``^``: Python's engine then skips to each newline at C speed. (The
    ``re`` module keeps the compiled patterns: a cache of ours measured no faster.)"""
    pattern = rf"\n[ \t?:-]{{{columns + 1}}}"
    return re.compile(pattern.encode() if binary else pattern)


def _indented_over(text: str | bytes, columns: int) -> bool:
    """Whether a line of ``text`` is indented wider than ``columns`` (see :func:`_indent_over`;
    the first line: its first ``columns + 1`` characters are all indentation)."""
    if isinstance(text, bytes):
        first_wide = len(text) > columns and not text[: columns + 1].lstrip(b" \t?:-")
    else:
        first_wide = len(text) > columns and not text[: columns + 1].lstrip(" \t?:-")
    return first_wide or _indent_over(columns, isinstance(text, bytes)).search(text) is not None


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
    # column of indentation; per document below, for the whole text here (no document nests
    # deeper than the whole text's estimate). It only decides which unjudged documents to
    # build (building measures depth exactly); the C composer's safety is _nesting_error's.
    room = MAX_DEPTH - brackets - 1     # the indentation the estimate leaves
    deep = room < 0 or _indented_over(text, room)
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
                    return too_deep(1, 1)
                if mark.index >= after:
                    return too_deep(mark.line + 1, mark.column + 1)
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
    fallback = too_deep(mark.line + 1, mark.column + 1)
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
            return yaml_error(earlier, prefix)
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
            yield yaml_error(exc, text)
    except RecursionError:
        yield DocumentError("document is nested too deeply")
    except UnicodeDecodeError as exc:
        yield DocumentError(f"not UTF-8 text ({exc.reason} at byte {exc.start})")
