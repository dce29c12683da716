"""``gpugate lint --fix``: write the webhook's mutations back into the manifests.

There is one mutation code path: :func:`policies.engine.evaluate` computes the JSON Patch
(the same one the webhook returns) and this module writes exactly that patch into the text.

- Documents without a patch are copied byte for byte (their boundaries come from PyYAML's
  event marks), and a file with nothing to fix is not rewritten at all.
- A patch that only adds keys to block mappings and items to block sequences (the usual
  case) is **spliced in**: each addition is rendered by ruamel.yaml in the file's detected
  indentation style and inserted after the last line of the collection it extends, so
  every untouched byte, comment and quote stays where it was.
- Otherwise (a flow collection or a ``null`` to replace) the patch is applied to the
  document's ruamel.yaml round-trip tree, which keeps comments, key order and quoting but
  normalises spacing.

Every changed document is parsed again and compared with the patched data, and its
comments are counted: if neither way reproduces the patch faithfully, the document is left
alone and the reason is reported, never a traceback.
"""

from __future__ import annotations

import difflib
import errno
import io
import os
import re
import stat
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from lint.documents import Document, DocumentError, iter_documents
from policies.config import Policy
from policies.engine import evaluate
from policies.findings import join_pointer, split_pointer
from policies.patch import PatchError, PatchOp, apply_patch
from policies.workload import MISSING, resolve

__all__ = ["FixResult", "FixWriteError", "fix_text", "fix_text_result", "fix_input", "plan_fix",
           "write_fixed", "unified_diff", "guess_indent", "comments"]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOM = "\ufeff"
# A document-start line with nothing but a comment after the marker; kept verbatim.
_START_LINE = re.compile(r"\A((?:[ \t]*(?:#[^\n]*|%[^\n]*)?\n)*---[ \t]*(?:#[^\n]*)?\n)")
# Every repetition consumes a newline, so neither pattern can backtrack badly.
_END_MARKER = re.compile(r"\n(\.\.\.[ \t]*(?:#[^\n]*)?(?:\n[ \t]*(?:#[^\n]*)?)*\n?)\Z")


@dataclass
class FixResult:
    text: str
    changed: list[int] = field(default_factory=list)      # indices of changed documents
    rewritten: list[int] = field(default_factory=list)    # ... of those, re-serialised whole
    problems: list[str] = field(default_factory=list)     # documents left alone, and why

    @property
    def modified(self) -> bool:
        return bool(self.changed)


def guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) for ruamel.yaml's ``indent()``, from the file's block
    mappings and sequences (the most common step wins; defaults 2, 2, 0)."""
    mapping: Counter[int] = Counter()
    offsets: Counter[int] = Counter()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for parent, child in zip(lines, lines[1:], strict=False):
        stripped = parent.rstrip()
        if not stripped.endswith(":"):
            continue
        key_col = len(parent) - len(parent.lstrip())
        while parent[key_col:key_col + 2] == "- ":  # "- key:" : the key sits after the dash
            key_col += 2
            key_col += len(parent[key_col:]) - len(parent[key_col:].lstrip(" "))
        child_col = len(child) - len(child.lstrip())
        step = child_col - key_col
        if child.lstrip().startswith("- ") or child.strip() == "-":
            if step >= 0:
                offsets[step] += 1
        elif step > 0:
            mapping[step] += 1
    m = mapping.most_common(1)[0][0] if mapping else 2
    offset = offsets.most_common(1)[0][0] if offsets else 0
    return m, offset + 2, offset  # the item's content sits after "- "


def comments(text: str) -> Counter[str]:
    """The comments of ``text`` (stripped), counted. A ``#`` starts a comment at the start of
    a line or after a blank, outside quotes; block scalar lines may be counted too, which is
    harmless here (ruamel.yaml keeps block scalars verbatim)."""
    found: Counter[str] = Counter()
    for line in text.splitlines():
        if "#" not in line:
            continue
        quote = ""
        for i, char in enumerate(line):
            if quote:
                if char == quote:
                    quote = ""
            elif char in "'\"" and (i == 0 or line[i - 1] in " \t[{,:-"):
                quote = char
            elif char == "#" and (i == 0 or line[i - 1] in " \t"):
                found[line[i:].strip()] += 1
                break
    return found


def _document_slices(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of each document of the stream, covering all text."""
    starts = [e.start_mark.index if e.start_mark else 0 for e in yaml.parse(text, Loader=_Loader)
              if isinstance(e, yaml.DocumentStartEvent)]
    if not starts:
        return [(0, len(text))]
    starts[0] = 0
    return list(zip(starts, [*starts[1:], len(text)], strict=True))


def _ruamel(indent: tuple[int, int, int]) -> Any:
    from ruamel.yaml import YAML

    handler = YAML(typ="rt")
    handler.preserve_quotes = True
    handler.width = 1 << 16  # never re-wrap long lines the user wrote
    handler.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    return handler


def _split_markers(chunk: str) -> tuple[str, str, str]:
    """(head, body, tail): the ``---`` line (with comments and directives before it) and a
    trailing ``...`` line are kept verbatim; ruamel.yaml would move their comments."""
    head = ""
    match = _START_LINE.match(chunk)
    if match:
        head, chunk = match.group(1), chunk[match.end():]
    tail = ""
    end = _END_MARKER.search(chunk)
    if end:
        tail, chunk = end.group(1), chunk[:end.start() + 1]
    return head, chunk, tail


def _only_document(text: str) -> Document | None:
    docs = list(iter_documents(text))
    if len(docs) != 1 or isinstance(docs[0], DocumentError):
        return None
    return docs[0]


class _CannotSplice(Exception):
    """The splice strategy does not apply here; the whole-document rewrite is tried instead."""


def _verify(original: str, rewritten: str, expected: Any) -> None:
    check = _only_document(rewritten)
    if check is None or check.data != expected:
        raise ValueError("ruamel.yaml could not round-trip it faithfully")
    before, after = comments(original), comments(rewritten)
    lost = [c for c, n in before.items() if after[c] < n]
    if lost:
        raise ValueError(f"rewriting it would lose {len(lost)} comment(s) such as {lost[0]!r} "
                         "(ruamel.yaml drops comments inside multi-line flow collections)")


def _node_at(node: Node, tokens: list[str]) -> Node | None:
    for token in tokens:
        if isinstance(node, MappingNode):
            found = [v for k, v in node.value if isinstance(k, ScalarNode) and k.value == token]
            if len(found) != 1:
                return None
            node = found[0]
        elif isinstance(node, SequenceNode) and token.isdigit() and int(token) < len(node.value):
            node = node.value[int(token)]
        else:
            return None
    return node


def _end_of_last_line(node: Node, text: str) -> int:
    """Offset just after the last line of ``node``'s text (block collections end where the
    next token starts, possibly after comments, so follow their last entry instead)."""
    while isinstance(node, (MappingNode, SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, MappingNode) else last
    end = node.end_mark.index
    if end > 0 and text[end - 1] == "\n":
        return end
    newline = text.find("\n", end)
    return len(text) if newline < 0 else newline + 1


def _render(value: Any, column: int, indent: tuple[int, int, int]) -> str:
    """``value`` as block YAML in the file's style, every line shifted to ``column``."""
    out = io.StringIO()
    _ruamel(indent).dump(value, out)
    lines = out.getvalue().rstrip("\n").split("\n")
    strip = min(len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip())
    return "".join(" " * column + ln[strip:] + "\n" if ln.strip() else "\n" for ln in lines)


def _splice(chunk: str, root: Node, original: Any, ops: list[PatchOp], expected: Any,
            indent: tuple[int, int, int]) -> str:
    """Insert the text of what ``ops`` add after the last line of each block collection they
    add to, leaving every other byte of ``chunk`` as it is."""
    additions: dict[tuple[str, ...], list[str]] = {}   # container -> new keys ([] for lists)
    for op in ops:
        tokens = split_pointer(op["path"])
        if op["op"] != "add" or not tokens:
            raise _CannotSplice(op["op"])
        parent = tuple(tokens[:-1])
        container = resolve(original, join_pointer("", *parent))
        if container is MISSING:
            continue  # inside something an earlier op added: rendered with it
        if isinstance(container, list) and tokens[-1] == "-":
            additions.setdefault(parent, [])
        elif isinstance(container, dict) and tokens[-1] not in container:
            additions.setdefault(parent, []).append(tokens[-1])
        else:
            raise _CannotSplice(op["path"])  # replaces a value (``affinity: null``): rewrite
    inserts: list[tuple[int, int, str]] = []
    for parent, keys in additions.items():
        node = _node_at(root, list(parent))
        if not isinstance(node, (MappingNode, SequenceNode)) or node.flow_style or not node.value:
            raise _CannotSplice(join_pointer("", *parent))
        final = resolve(expected, join_pointer("", *parent))
        at = _end_of_last_line(node, chunk)
        if isinstance(node, MappingNode):
            column = node.value[0][0].start_mark.column
            text = _render({k: final[k] for k in keys}, column, indent)
        else:
            first = node.value[0].start_mark
            line = chunk[first.index - first.column:first.index]
            column = line.rstrip(" ").rfind("-")
            if column < 0 or line[column + 1:].strip(" -"):
                raise _CannotSplice(join_pointer("", *parent))
            text = _render(final[len(node.value):], column, indent)
        inserts.append((at, -len(parent), text))  # deeper first where two meet
    pieces, done = [], 0
    for at, _, text in sorted(inserts):
        pieces.append(chunk[done:at])
        if at > 0 and chunk[at - 1] != "\n":
            pieces.append("\n")
        pieces.append(text)
        done = at
    pieces.append(chunk[done:])
    return "".join(pieces)


def _rewrite(chunk: str, ops: list[PatchOp], expected: Any, indent: tuple[int, int, int]) -> str:
    """The document ``chunk`` with ``ops`` applied by ruamel.yaml to its round-trip tree; raises
    ValueError when the result would not read back as ``expected``."""
    head, body, tail = _split_markers(chunk)
    handler = _ruamel(indent)
    tree = handler.load(body)
    apply_patch(tree, ops, in_place=True)
    out = io.StringIO()
    handler.dump(tree, out)
    new_body = out.getvalue()
    if body and not body.endswith("\n"):
        new_body = new_body.rstrip("\n")
    rewritten = head + new_body + tail
    _verify(chunk, rewritten, expected)
    return rewritten


def _fixed_document(chunk: str, doc: Document, ops: list[PatchOp], expected: Any,
                    indent: tuple[int, int, int]) -> tuple[str, bool]:
    """(new text, rewritten whole). Splice in the additions where possible (every untouched
    byte stays); otherwise rewrite the whole document with ruamel.yaml (comments and key
    order kept, spacing normalised)."""
    if doc.node is not None:
        try:
            spliced = _splice(chunk, doc.node, doc.data, ops, expected, indent)
            _verify(chunk, spliced, expected)
            return spliced, False
        except (_CannotSplice, ValueError, KeyError, IndexError, TypeError):
            pass
    return _rewrite(chunk, ops, expected, indent), True


def fix_text_result(text: str, policy: Policy) -> FixResult:
    """Apply the mutations of every document of ``text``; see :class:`FixResult`."""
    bom = text.startswith(_BOM)
    body = text[1:] if bom else text
    # CRLF files are fixed as LF text and written back with CRLF: every line break of
    # the file is CRLF, so the conversion is exact both ways (YAML reads both alike).
    newlines = body.count("\n")
    crlf = newlines > 0 and body.count("\r\n") == newlines
    if crlf:
        body = body.replace("\r\n", "\n")
    # The linter's own reader first: it bounds nesting depth, and a file it cannot read
    # (GG001) is not one to rewrite.
    for item in iter_documents(body):
        if isinstance(item, DocumentError):
            return FixResult(text, problems=[f"not valid YAML, left alone (line {item.line}, column "
                                             f"{item.column}: {item.message})"])
    try:
        slices = _document_slices(body)
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        return FixResult(text, problems=[f"not valid YAML, left alone ({reason})"])
    indent: tuple[int, int, int] | None = None
    pieces: list[str] = []
    result = FixResult(text)
    for index, (start, end) in enumerate(slices):
        chunk = body[start:end]
        pieces.append(chunk)
        doc = _only_document(chunk)
        if doc is None:
            continue
        evaluation = evaluate(doc.data, policy)
        if not evaluation.patch:
            continue
        if indent is None:
            indent = guess_indent(body)
        try:
            expected = apply_patch(doc.data, evaluation.patch)
            pieces[-1], whole = _fixed_document(chunk, doc, evaluation.patch, expected, indent)
        except (ValueError, PatchError, KeyError, IndexError, TypeError, RecursionError) as exc:
            result.problems.append(f"document {index}: left alone: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - ruamel.yaml raises many types; never a traceback
            result.problems.append(f"document {index}: left alone: ruamel.yaml cannot round-trip it "
                                   f"({type(exc).__name__}: {exc})")
            continue
        result.changed.append(index)
        if whole:
            result.rewritten.append(index)
    if result.changed:
        joined = "".join(pieces)
        result.text = (_BOM if bom else "") + (joined.replace("\n", "\r\n") if crlf else joined)
    return result


def fix_text(text: str, policy: Policy) -> str:
    """``text`` with the usage mutations written in (unchanged when nothing applies)."""
    return fix_text_result(text, policy).text


class FixWriteError(Exception):
    """A fix that was not written; the file is left exactly as it was."""


def refusal(path: str, status: os.stat_result | None = None) -> str | None:
    """Why ``--fix`` will not write the file ``path`` (through symlinks: its target), or None.

    Never written: a read-only file, a file with several hard links (a new file would
    break them), anything but a regular file."""
    try:
        st = status if status is not None else os.stat(path)
    except OSError as exc:
        return f"cannot write it: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file: left alone"
    if st.st_nlink > 1:
        return (f"it has {st.st_nlink} hard links; writing it would break them, so it is left alone "
                "(fix a copy, or run on the file with one link)")
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        return f"read-only file (mode {stat.S_IMODE(st.st_mode):04o}): left alone"
    return None


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns)


def _unchanged(target: str, original: bytes, status: os.stat_result) -> None:
    """Raise FixWriteError when ``target`` is no longer what was read (edited meanwhile)."""
    try:
        now = os.stat(target)
        with open(target, "rb") as fh:
            content = fh.read(len(original) + 1)
    except OSError as exc:
        raise FixWriteError(f"cannot write it: {exc.strerror or exc}") from None
    if not _same_file(now, status) or content != original:
        raise FixWriteError("it changed since it was read; left alone (run --fix again)")


def write_fixed(path: str, original: bytes, fixed: bytes, status: os.stat_result) -> None:
    """Replace the file ``path`` (its target, when a symlink) with ``fixed``, atomically.

    ``original`` and ``status`` are what was read: a file changed since is refused. The
    new content goes to a temporary file in the target's directory, gets the target's
    mode and owner, is flushed to disk, and is renamed over the target (then the
    directory is synced): any crash leaves the old file or the new one, never a mix.
    Raises :class:`FixWriteError` (the file is then untouched)."""
    target = os.path.realpath(path)
    why = refusal(target, status)
    if why is not None:
        raise FixWriteError(why)
    _unchanged(target, original, status)
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".gpugate-tmp",
                                   dir=directory)
    except OSError as exc:
        raise FixWriteError(f"cannot write it: cannot create a temporary file in {directory}: "
                            f"{exc.strerror or exc}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(fixed)
                fh.flush()
                os.fchmod(fh.fileno(), stat.S_IMODE(status.st_mode))
                _keep_owner(fh.fileno(), status)
                os.fsync(fh.fileno())
            _unchanged(target, original, status)  # the last look before the rename
            os.replace(tmp, target)
        except OSError as exc:
            raise FixWriteError(f"cannot write it: {exc.strerror or exc}") from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_directory(directory)


def _keep_owner(fd: int, status: os.stat_result) -> None:
    current = os.fstat(fd)
    if (current.st_uid, current.st_gid) == (status.st_uid, status.st_gid):
        return
    try:
        os.fchown(fd, status.st_uid, status.st_gid)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise
        raise FixWriteError(f"cannot keep its owner ({status.st_uid}:{status.st_gid}) in a new file: "
                            "left alone") from None


def _sync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unified_diff(original: str, fixed: str, name: str) -> str:
    """A unified diff of ``original`` to ``fixed`` that shows exactly what is written: line
    endings stay in the lines, and a last line without one is marked as ``diff`` does."""
    out: list[str] = []
    for line in difflib.unified_diff(original.splitlines(keepends=True), fixed.splitlines(keepends=True),
                                     fromfile=name, tofile=name):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def plan_fix(text: bytes, name: str, policy: Policy, *, diff: bool = False, stdin: bool = False,
             status: os.stat_result | None = None, stderr: TextIO | None = None,
             stdout: TextIO | None = None) -> tuple[bytes, int]:
    """(fixed content, documents changed) of one input, writing nothing. With ``diff`` the
    unified diff of what would be written is printed (and, on stderr, why the file would
    be left alone, if it would)."""
    err = stderr or sys.stderr
    try:
        original = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        print(f"gpugate: --fix: {name}: not UTF-8 text, left alone ({exc.reason} at byte {exc.start})",
              file=err)
        return text, 0
    result = fix_text_result(original, policy)
    for problem in result.problems:
        print(f"gpugate: --fix: {name}: {problem}", file=err)
    if not result.modified:
        return text, 0
    fixed = result.text.encode("utf-8")
    if diff:
        why = None if stdin or status is None else refusal(os.path.realpath(name), None)
        if why is not None:
            print(f"gpugate: --fix: {name}: would not be written: {why}", file=err)
        else:
            out = stdout or sys.stdout
            out.write(unified_diff(original, result.text, name))
            out.flush()
    return fixed, len(result.changed)


def fix_input(text: bytes, name: str, policy: Policy, diff: bool,
              stdout: TextIO | None = None, stderr: TextIO | None = None) -> bytes:
    """``--fix`` for one input: returns the fixed content (the original when nothing changes).

    A file is written only when its content changes (see :func:`write_fixed`); with
    ``diff`` a unified diff is printed and nothing is written. ``-`` (stdin) with
    ``--fix`` prints the fixed YAML."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    display = "<stdin>" if name == "-" else name
    status = None
    if name != "-" and not diff:
        try:
            status = os.stat(name)
        except OSError as exc:
            print(f"gpugate: --fix: cannot write {display}: {exc.strerror or exc}", file=err)
            return text
    fixed, changed = plan_fix(text, display, policy, diff=diff, stdin=name == "-", status=status,
                              stderr=err, stdout=out)
    if name == "-":
        if not diff:
            out.write(fixed.decode("utf-8", "replace"))
            out.flush()
        return fixed
    if changed and not diff and status is not None:
        try:
            write_fixed(name, text, fixed, status)
            plural = "s" if changed != 1 else ""
            print(f"gpugate: --fix: wrote {display} ({changed} document{plural} changed)", file=err)
        except FixWriteError as exc:
            print(f"gpugate: --fix: {display}: {exc}", file=err)
            return text
    return fixed
