"""``gpugate lint`` and ``gpugate rules``."""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TextIO

from yaml.nodes import MappingNode, ScalarNode

from lint.documents import MAX_FILE_BYTES, Document, DocumentError, build_check, construct, iter_documents
from lint.policyfile import find_policy_file, load_policy
from lint.report import DocumentResult, FileResult, Located, Report
from policies import references
from policies.config import Policy, PolicyError
from policies.engine import evaluate, input_finding
from policies.findings import Finding, ObjectRef, Severity
from policies.kinds import kind_spec
from policies.workload import object_ref

__all__ = ["Located", "Report", "Input", "InputError", "iter_inputs", "iter_files", "read_input",
           "read_file", "lint_text", "lint_document", "lint_main", "rules_main"]

EXTENSIONS = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"
FAIL_ON = ("error", "warning", "info", "never")
_STR_TAG = "tag:yaml.org,2002:str"
HELM_HINT = "Helm template, render it first: helm template ... | gpugate lint -"
_log = logging.getLogger("gpugate.lint")


@dataclass(frozen=True)
class Input:
    """One input of a run: a file to read (``-``: stdin), or a path found while walking
    that cannot be linted (``error`` says why: an unreadable directory, a symlink loop)."""

    name: str
    error: str | None = None


def iter_inputs(paths: Sequence[str]) -> Iterator[Input]:
    """Every input of a run, in a stable order; ``-`` is stdin. Directories are walked
    (hidden directories skipped; symlinked directories followed, loops reported); a file
    named explicitly is linted whatever its suffix, and a path that does not exist is an
    input that cannot be read (reported as such, never dropped)."""
    for raw in paths:
        if raw == STDIN:
            yield Input(raw)
        elif os.path.isdir(raw):
            yield from _walk(raw)
        else:
            yield Input(raw)


def iter_files(paths: Sequence[str]) -> Iterator[str]:
    """The names of :func:`iter_inputs` that can be read (directory errors left out)."""
    for item in iter_inputs(paths):
        if item.error is None:
            yield item.name


def _walk(top: str) -> Iterator[Input]:
    """The manifests below ``top``, files of a directory first (by name), then its
    sub-directories (by name), as ``os.walk`` orders them; iterative, so any depth.
    Unlike ``os.walk`` without ``onerror``, nothing is skipped silently: a directory that
    cannot be listed, or a symlink that leads back into a directory containing it, is an
    :class:`Input` with its error. A directory reached twice through symlinks is walked once."""
    try:
        st = os.stat(top)
    except OSError as exc:
        yield Input(top, describe_os_error(top, exc))
        return
    seen = {(st.st_dev, st.st_ino)}
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [(top, frozenset(seen))]
    while stack:
        directory, ancestors = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            yield Input(directory, f"cannot read directory: {describe_os_error(directory, exc)}")
            continue
        subdirectories: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False           # a symlink loop: reported when read, if a manifest
            if is_dir:
                if not entry.name.startswith("."):
                    subdirectories.append(entry.path)
            elif entry.name.endswith(EXTENSIONS):
                yield Input(entry.path)
        pushed = []
        for path in subdirectories:
            try:
                sub = os.stat(path)
            except OSError as exc:
                yield Input(path, f"cannot read directory: {describe_os_error(path, exc)}")
                continue
            ident = (sub.st_dev, sub.st_ino)
            if ident in ancestors:
                yield Input(path, "symbolic link loop: it leads back to "
                                  f"{os.path.realpath(path)}, a directory that contains it")
                continue
            if ident in seen:
                continue  # reached before through another symlink: linted under that name
            seen.add(ident)
            pushed.append((path, ancestors | {ident}))
        stack.extend(reversed(pushed))


class InputError(Exception):
    """An input that cannot be linted. ``io``: an I/O error (exit code 2); otherwise a
    finding like any other (a file over the size limit)."""

    def __init__(self, message: str, io: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.io = io


def describe_os_error(path: str, exc: OSError) -> str:
    """An ``OSError`` about ``path`` in plain words (broken symlinks and loops named)."""
    if exc.errno == errno.ENOENT and os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"broken symbolic link (it points to {target}, which does not exist)"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop (too many levels of symbolic links)"
    if exc.errno == errno.ENXIO:
        return "not a regular file (a socket or a device without a reader): only regular files are read"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def _too_big(size: int, what: str, limit: int) -> InputError:
    return InputError(f"{what} is {size / 2**20:.1f} MiB, over the {limit // 2**20} MiB limit for one "
                      "manifest file", io=False)


def read_file(name: str, limit: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """(content, status) of the regular file ``name``, read with a bound.

    Opened with ``O_NONBLOCK`` (a FIFO without a writer never blocks the open) and checked
    with ``fstat`` before a byte is read: anything but a regular file (a FIFO, a device,
    a socket) is refused, and so is a file over ``limit``, without reading it. The read
    itself stops past ``limit`` (a file growing meanwhile). Raises :class:`InputError`."""
    try:
        fd = os.open(name, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(f"cannot read: {describe_os_error(name, exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise InputError(f"cannot read: {kind}, not a regular file: only regular files are read")
        if st.st_size > limit:
            raise _too_big(st.st_size, "file", limit)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise _too_big(total, "file", limit)
        return b"".join(chunks), st
    except OSError as exc:
        raise InputError(f"cannot read: {describe_os_error(name, exc)}") from None
    finally:
        os.close(fd)


def read_stdin(limit: int = MAX_FILE_BYTES) -> bytes:
    """Standard input, at most ``limit`` bytes (more is an :class:`InputError`)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InputError("cannot read: standard input is closed")
    try:
        data = stream.read(limit + 1)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read: {exc}") from None
    if data is None:  # a non-blocking stream with nothing yet
        raise InputError("cannot read: standard input is not ready (non-blocking, empty)")
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if len(data) > limit:
        raise InputError(f"standard input is over the {limit // 2**20} MiB limit for one manifest stream",
                         io=False)
    return data


def read_input(name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of one input (``-``: stdin); raises :class:`InputError`."""
    return read_stdin(limit) if name == STDIN else read_file(name, limit)[0]


# A Go template action alone on a top-level line (`{{- if .Values.x }}`, `{{ $x := ... }}`):
# a Helm chart's template, which is not YAML until rendered. Any action on a line is a hint
# only for files that do not parse (a ConfigMap may carry templates in a block scalar).
_HELM_TOP = re.compile(rb"^\{\{", re.MULTILINE)
_HELM_ANY = re.compile(rb"\{\{-?\s*[^\n]*?\}\}")


def _helm_line(text: str | bytes, anywhere: bool = False) -> int:
    """1-based line of the first Go template action (at the start of a line, or with
    ``anywhere`` anywhere), 0 when there is none."""
    if "{{" not in text if isinstance(text, str) else b"{{" not in text:
        return 0
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    match = (_HELM_ANY if anywhere else _HELM_TOP).search(data)
    return data.count(b"\n", 0, match.start()) + 1 if match else 0


# Allocations between young collections while a file is linted (Python's default: 700).
_FILE_GC_THRESHOLD = 100_000


def lint_text(text: str | bytes, name: str, policy: Policy, report: Report,
              clusters: Sequence[Any] | None = None, named: references.References | None = None) -> None:
    """Lint one file's content into ``report``. Never raises for the content: whatever goes
    wrong on this file (a bug of gpugate's included) is a finding on it, counted in
    ``report.internal_errors``, and the file counts as one file of the report."""
    mark = (len(report.findings), report.files, report.documents, report.skipped, len(report.results))
    # The cyclic collector runs rarely within a file: a file's YAML node trees and values hold
    # no cycles, refcounting frees them, and frequent young collections would only scan them
    # (a fifth of a corpus run). Rarely, not never: a hostile file's per-document garbage with
    # cycles (exceptions and their tracebacks) is still collected as it goes.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], _FILE_GC_THRESHOLD), *thresholds[1:])
    try:
        _lint_text(text, name, policy, report, clusters, named)
    except Exception as exc:  # noqa: BLE001 - one file's failure must not lose the report
        _log.debug("internal error on %s", name, exc_info=True)
        del report.findings[mark[0]:]
        del report.results[mark[4]:]
        report.files, report.documents, report.skipped = mark[1], mark[2], mark[3]
        report.internal_errors += 1
        helm = _helm_line(text, anywhere=True)
        reason = f"{type(exc).__name__}: {exc}"
        message = (f"{HELM_HINT} (reading it failed: {reason})" if helm else
                   f"internal error while checking this file ({reason}); the run went on without it, "
                   "please report it")
        add_file_finding(report, name, message, helm or 1)
    finally:
        gc.set_threshold(*thresholds)


def add_file_finding(report: Report, name: str, message: str, line: int = 1, column: int = 1,
                     rule: str = "GG001") -> Located:
    """A file-level error finding (I/O, internal error, write failure): always an error,
    whatever the policy says of the rule, so that no report hides it."""
    base = input_finding(rule, message)
    finding = Finding(base.rule, base.slug, Severity.ERROR, message, "", False, None)
    located = Located(finding, name, line, column, 0)
    result = next((r for r in report.results if r.name == name), None)
    if result is None:
        report.files += 1
        result = FileResult(name)
        report.results.append(result)
    result.documents.append(DocumentResult(0, line, findings=[located]))
    report.findings.append(located)
    return located


def _lint_text(text: str | bytes, name: str, policy: Policy, report: Report,
               clusters: Sequence[Any] | None, named: references.References | None = None) -> None:
    report.files += 1
    file_result = FileResult(name)
    report.results.append(file_result)
    helm = _helm_line(text)
    if helm:  # not YAML until rendered: one clear finding, not a cascade of parse errors
        file_result.documents.append(_parse_error(DocumentError(HELM_HINT, helm), name, 0, policy, report))
        return
    # Values are built only for the kinds gpugate models (see lint_document): on mixed
    # manifests most documents are ConfigMaps, RBAC and CRDs, and building is most of the cost.
    must_build = build_check(text)
    if named is not None:  # the objects of every file of the run (this one's included)
        with references.scope(named):
            _lint_items(iter_documents(text, build=False), text, name, policy, report, clusters, file_result,
                        must_build)
        return
    if not references.may_hold_referable(text):
        # the usual file: a stream, each document's nodes freed once it is judged
        _lint_items(iter_documents(text, build=False), text, name, policy, report, clusters, file_result,
                    must_build)
        return
    items = list(iter_documents(text, build=False))
    # Objects of the file that others name (a Pod's Workload, a TrainJob's runtime): each
    # object is judged with them at hand, whatever the document order.
    with references.scope(_references(items)):
        _lint_items(items, text, name, policy, report, clusters, file_result, must_build)


def _references(items: list[Document | DocumentError]) -> references.References | None:
    """The file's objects that other objects may name, built (and kept built for their own
    judgement); None when it has none."""
    named = _referable_values(items)
    return references.References.of(named) if named else None


def _run_references(names: Sequence[str]) -> references.References | None:
    """The objects that other objects may name in every file of a run (a TrainJob in one
    file, its runtime in another); None when there are none. Files that cannot hold one (no
    such kind's name in the text) are not parsed here; unreadable ones are reported when
    they are linted."""
    named: list[Any] = []
    for name in names:
        try:
            text, _ = read_file(name)
        except InputError:
            continue
        if references.may_hold_referable(text):
            try:
                named += _referable_values(list(iter_documents(text, build=False)))
            except DocumentError:
                continue
    return references.References.of(named) if named else None


def _referable_values(items: list[Document | DocumentError]) -> list[Any]:
    named: list[Any] = []
    for item in items:
        if isinstance(item, DocumentError) or item.node is None or not isinstance(item.node, MappingNode):
            continue
        header = item.header()
        if header is None:
            continue
        api_version, kind = header
        if (api_version.rpartition("/")[0] if "/" in api_version else "", kind) not in references.REFERABLE:
            continue
        if item.data is None:
            try:
                item.data = construct(item.node)
            except (DocumentError, RecursionError):
                continue  # its own judgement reports it
        named.append(item.data)
    return named


def _lint_items(items: Iterable[Document | DocumentError], text: str | bytes, name: str, policy: Policy,
                report: Report, clusters: Sequence[Any] | None, file_result: FileResult,
                must_build: Any) -> None:
    index = 0
    for item in items:
        if isinstance(item, DocumentError):
            if _helm_line(text, anywhere=True):
                item = DocumentError(f"{HELM_HINT} ({item.message})", item.line, item.column)
            file_result.documents.append(_parse_error(item, name, index, policy, report))
            index += 1
            continue
        mark = (len(report.findings), report.documents, report.skipped)
        try:
            build = item.node is not None and must_build(item.node)
            result = lint_document(item, name, policy, report, clusters, build=build)
            if result.object is None and any(f.finding.rule == "GG001" for f in result.findings) \
                    and _helm_line(text, anywhere=True):
                for located in result.findings:
                    if located.finding.rule == "GG001":
                        located.finding = replace(located.finding,
                                                  message=f"{HELM_HINT} ({located.finding.message})")
            file_result.documents.append(result)
        except Exception as exc:  # noqa: BLE001 - one document's failure is a finding on it
            _log.debug("internal error on %s document %d", name, item.index, exc_info=True)
            del report.findings[mark[0]:]
            report.documents, report.skipped = mark[1], mark[2]
            report.internal_errors += 1
            line = item.node.start_mark.line + 1 if item.node is not None else 1
            located = add_document_finding(report, name, item.index, line,
                                           f"internal error while checking this document "
                                           f"({type(exc).__name__}: {exc}); please report it")
            file_result.documents.append(DocumentResult(item.index, line, findings=[located]))
        index = item.index + 1


def add_document_finding(report: Report, name: str, index: int, line: int, message: str) -> Located:
    base = input_finding("GG002", message)
    located = Located(Finding(base.rule, base.slug, Severity.ERROR, message, "", False, None),
                      name, line, 1, index)
    report.findings.append(located)
    return located


def _parse_error(error: DocumentError, name: str, index: int, policy: Policy,
                 report: Report) -> DocumentResult:
    # The document that failed to parse still counts, so that JUnit shows it.
    finding = input_finding("GG001", error.message, policy=policy)
    located = Located(finding, name, error.line, error.column, index)
    report.findings.append(located)
    return DocumentResult(index, error.line, findings=[located])


def _header_ref(doc: Document, api_version: str, kind: str) -> ObjectRef:
    """The object's identity, read off the node tree without building the document."""
    meta: dict[str, str] = {}
    if isinstance(doc.node, MappingNode):
        for key, value in doc.node.value:
            if key.value == "metadata" and isinstance(value, MappingNode):
                meta = {k.value: v.value for k, v in value.value
                        if isinstance(k, ScalarNode) and isinstance(v, ScalarNode)
                        and k.value in ("name", "generateName", "namespace") and v.tag == _STR_TAG}
    return object_ref({"apiVersion": api_version, "kind": kind, "metadata": meta})


def _unique_keys(node: MappingNode) -> bool:
    """Whether the top-level keys are distinct scalars (a non-scalar key, as a Helm
    template's ``{{ ... }}`` line makes, is for building to report)."""
    keys = set()
    for k, _ in node.value:
        if not isinstance(k, ScalarNode) or k.value in keys:
            return False
        keys.add(k.value)
    return True


def lint_document(doc: Document, name: str, policy: Policy, report: Report,
                  clusters: Sequence[Any] | None = None, *, build: bool = False) -> DocumentResult:
    """Judge one document. ``doc.data`` may be unbuilt (None with a node tree): it is then
    built here, only when the document is an object of a kind gpugate models, or always
    with ``build`` (to validate what only building sees: tags, aliases, depth)."""
    report.documents += 1
    start = doc.node.start_mark.line + 1 if doc.node is not None else 1
    # A duplicate top-level key (two `kind:`) makes the header ambiguous: build, which reports it.
    if doc.data is None and not build and isinstance(doc.node, MappingNode) and _unique_keys(doc.node):
        header = doc.header()
        if header is None:  # not a Kubernetes object: a values file, a CI workflow, ...
            report.skipped += 1
            return DocumentResult(doc.index, start, skipped=True)
        if kind_spec(*header) is None:  # evaluate() passes unmodelled kinds through untouched
            return DocumentResult(doc.index, start, _header_ref(doc, *header))
    if doc.data is None and doc.node is not None:
        try:
            doc.data = construct(doc.node)
        except DocumentError as exc:
            report.documents -= 1  # unparsable: a GG001, not a document (as for syntax errors)
            return _parse_error(exc, name, doc.index, policy, report)
        except RecursionError:
            report.documents -= 1
            return _parse_error(DocumentError("document is nested too deeply", start), name, doc.index,
                                policy, report)
    result = evaluate(doc.data, policy, clusters)
    doc_result = DocumentResult(doc.index, start, result.object, skipped=result.skipped)
    if result.skipped:
        report.skipped += 1
        return doc_result
    for finding in result.findings:
        line, column = doc.position(finding.path)
        doc_result.findings.append(Located(finding, name, line, column, doc.index))
    doc_result.findings.sort(key=lambda f: (f.line, f.column, f.finding.rule))  # reading order
    report.findings.extend(doc_result.findings)
    return doc_result


def _policy(args: argparse.Namespace) -> Policy:
    path = args.config or find_policy_file()
    return load_policy(path) if path else Policy()


def _custom_rule_infos(policy: Policy) -> list[Any]:
    from lint.formats import RuleInfo

    return [RuleInfo(str(c.id), str(c.slug), c.severity,
                     " ".join(str(getattr(c, "description", "") or c.message).split()))
            for c in policy.custom_checks]


def _use_colour(choice: str, stream: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def build_parser() -> argparse.ArgumentParser:
    from lint.formats import FORMATS

    parser = argparse.ArgumentParser(
        prog="gpugate lint", description="Lint Kubernetes manifests.",
        epilog="Exit codes: 0 clean or below --fail-on, 1 findings at or above it, "
               "2 usage or I/O error.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, directories, or - for stdin")
    parser.add_argument("--config", help="policy file (default: .gpugate.yaml found upward)")
    parser.add_argument("-f", "--format", choices=list(FORMATS), default="text",
                        help="report format (default: text)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE, not stdout")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="error",
                        help="lowest severity that makes the exit code 1 (default: error)")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="colour the text format (auto: on a terminal, unless NO_COLOR is set)")
    parser.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    parser.add_argument("--stdin-filename", metavar="NAME", default=STDIN_NAME,
                        help="file name to report for - (stdin)")
    parser.add_argument("--cluster", action="append", default=[], metavar="FILE",
                        help="cluster snapshot (kubectl get ... -o yaml); repeat for a fleet")
    parser.add_argument("--explain", action="store_true", help="print the placement table of each gang")
    parser.add_argument("--fix", action="store_true", help="write the usage mutations into the files")
    parser.add_argument("--diff", action="store_true",
                        help="with --fix: print a unified diff, write nothing (implies --fix)")
    parser.add_argument("--debug", action="store_true", help="log tracebacks of internal errors")
    return parser


def _configure_logging(debug: bool) -> None:
    # A failing rule is already an "internal error" finding; its traceback is for --debug only.
    logger = logging.getLogger("gpugate")
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="gpugate: %(name)s: %(message)s")
    elif not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _error(message: str) -> None:
    print(f"gpugate: {message}", file=sys.stderr)


def lint_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    args.fix = args.fix or args.diff
    _configure_logging(args.debug)
    try:
        policy = _policy(args)
    except PolicyError as exc:
        _error(str(exc))
        return 2
    clusters = None
    if args.cluster:
        from lint.cluster import load_clusters
        from policies.snapshots import SnapshotError

        try:
            clusters = load_clusters(args.cluster, policy)
        except SnapshotError as exc:
            _error(str(exc))
            return 2
    report = Report()
    # --fix on stdin and --diff print YAML or a diff on stdout: the report must not mix in.
    to_stderr = args.fix and (args.diff or STDIN in args.paths)
    try:
        pending = _lint_inputs(args, policy, clusters, report)
    except Exception as exc:  # noqa: BLE001 - a bug outside any one file: the report still goes out
        _log.debug("internal error", exc_info=True)
        _error(f"internal error: {type(exc).__name__}: {exc} (nothing was written; please report it)")
        report.internal_errors += 1
        _write_report(report, args, policy, clusters, sys.stderr if to_stderr else sys.stdout)
        return 2
    if pending:
        _write_fixes(pending, report, policy, clusters)
    code = _write_report(report, args, policy, clusters, sys.stderr if to_stderr else sys.stdout)
    if report.io_errors or report.internal_errors or code == 2:
        return 2
    if args.fail_on == "never":
        return 0
    worst = report.worst()
    return 1 if worst is not None and worst >= Severity.parse(args.fail_on) else 0


@dataclass
class _Pending:
    """A fix to write once the whole run is through (a run that cannot finish writes nothing)."""

    name: str
    original: bytes
    fixed: bytes
    status: os.stat_result
    changed: int
    counts: tuple[int, int]  # (documents, skipped) the fixed text added to the report


def _lint_inputs(args: argparse.Namespace, policy: Policy, clusters: Sequence[Any] | None,
                 report: Report) -> list[_Pending]:
    """Read and lint every input into ``report``; with --fix, the writes to make (--diff
    and stdin print as they go: they write no file)."""
    from lint.progress import Progress

    inputs = list(dict.fromkeys(iter_inputs(args.paths)))  # a file named twice is linted once
    files = [item.name for item in inputs if item.error is None and item.name != STDIN]
    # Several files: an object may name one in another file (stdin is read once: alone, it
    # resolves within itself)
    named = _run_references(files) if len(files) > 1 and len(files) == len(inputs) else None
    pending: list[_Pending] = []
    stdout_fixed: list[bytes] = []
    with Progress(len(inputs), enabled=False if args.no_progress else None) as progress:
        for item in inputs:
            name = item.name
            display = args.stdin_filename if name == STDIN else name
            progress.advance(display)
            if item.error is not None:
                _io_error(report, display, item.error)
                continue
            status: os.stat_result | None = None
            try:
                if name == STDIN:
                    text = read_stdin()
                else:
                    text, status = read_file(name)
            except InputError as exc:
                if exc.io:
                    _io_error(report, display, exc.message)
                else:
                    add_file_finding(report, display, exc.message)
                continue
            original = text
            changed = 0
            if args.fix:
                from lint import fix

                try:
                    text, changed = fix.plan_fix(text, display, policy, diff=args.diff, stdin=name == STDIN,
                                                 status=status)
                except Exception as exc:  # noqa: BLE001 - the file is linted as it is, and left alone
                    _log.debug("internal error fixing %s", display, exc_info=True)
                    report.internal_errors += 1
                    add_file_finding(report, display, f"--fix: internal error ({type(exc).__name__}: {exc}); "
                                                      "left alone, please report it")
                    text, changed = original, 0
                if name == STDIN and not args.diff:
                    stdout_fixed.append(text)
            before = (report.documents, report.skipped, report.internal_errors)
            lint_text(text, display, policy, report, clusters, named)
            if changed and name != STDIN and not args.diff:
                if report.internal_errors != before[2]:
                    add_file_finding(report, display, "--fix: not written, checking it failed (see above)")
                    report.io_errors += 1
                elif status is not None:
                    pending.append(_Pending(name, original, text, status, changed,
                                            (report.documents - before[0], report.skipped - before[1])))
    for data in stdout_fixed:  # stdin with --fix: the fixed YAML, once the run is through
        sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(
            data.decode("utf-8", "replace"))
        sys.stdout.flush()
    return pending


def _io_error(report: Report, display: str, message: str) -> None:
    _error(f"{display}: {message}")
    report.io_errors += 1
    add_file_finding(report, display, message)


def _write_fixes(pending: list[_Pending], report: Report, policy: Policy,
                 clusters: Sequence[Any] | None) -> None:
    """Write the fixes, each atomically. A file that cannot be written is an error on it,
    and its findings are those of the file as it stays (the original)."""
    from lint import fix

    written: set[str] = set()
    for item in pending:
        real = os.path.realpath(item.name)
        try:
            if real in written:  # two names of one file (a symlink and its target): written once
                continue
            fix.write_fixed(item.name, item.original, item.fixed, item.status)
            written.add(real)
            _error(f"--fix: wrote {item.name} ({item.changed} document{'s' if item.changed != 1 else ''} "
                   "changed)")
        except fix.FixWriteError as exc:
            _error(f"--fix: {item.name}: {exc}")
            _relint_original(item, report, policy, clusters)
            report.io_errors += 1
            add_file_finding(report, item.name, f"--fix: {exc}")


def _relint_original(item: _Pending, report: Report, policy: Policy, clusters: Sequence[Any] | None) -> None:
    """Replace a file's results (of its fixed text) with those of the text it keeps."""
    for index, result in enumerate(report.results):
        if result.name == item.name:
            gone = {id(f) for f in result.findings}
            report.findings = [f for f in report.findings if id(f) not in gone]
            report.documents -= item.counts[0]
            report.skipped -= item.counts[1]
            report.files -= 1
            del report.results[index]
            break
    lint_text(item.original, item.name, policy, report, clusters)


def _write_report(report: Report, args: argparse.Namespace, policy: Policy,
                  clusters: Sequence[Any] | None, stream: TextIO) -> int:
    from lint.formats import FORMATS, FormatOptions

    out: TextIO = stream
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            _error(f"cannot write {args.output}: {exc.strerror or exc}")
            return 2
    try:
        options = FormatOptions(
            colour=args.format == "text" and _use_colour(args.color, out),
            fail_on=None if args.fail_on == "never" else Severity.parse(args.fail_on),
            custom_rules=_custom_rule_infos(policy),
        )
        print(FORMATS[args.format](report, options), file=out)
        if args.explain and clusters is not None:
            from lint.cluster import explain

            # Machine-readable reports must stay parseable: the table goes to stderr then.
            print(explain(report, clusters, policy), file=out if args.format == "text" else sys.stderr)
    finally:
        if out is not stream:
            out.close()
    return 0


def rules_main(argv: Sequence[str]) -> int:
    """``gpugate rules [--markdown] [--config FILE]``."""
    from lint import rulesdoc
    from lint.formats import builtin_rules
    from policies.registry import all_rules

    parser = argparse.ArgumentParser(prog="gpugate rules", description="List the rules.")
    parser.add_argument("--markdown", action="store_true",
                        help="print the rule reference in markdown (docs/rules.md)")
    parser.add_argument("--config", help="policy file whose custom checks are listed too")
    args = parser.parse_args(argv)
    custom = []
    if args.config:
        try:
            custom = _custom_rule_infos(load_policy(args.config))
        except PolicyError as exc:
            _error(str(exc))
            return 2
    if args.markdown:
        sys.stdout.write(rulesdoc.markdown(list(all_rules().values()), custom))
    else:
        print(rulesdoc.table(builtin_rules(), custom))
    return 0
