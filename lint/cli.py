"""``gpugate lint`` and ``gpugate rules``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from yaml.nodes import MappingNode, ScalarNode

from lint.documents import Document, DocumentError, build_check, construct, iter_documents
from lint.report import DocumentResult, FileResult, Located, Report
from policies.config import Policy, PolicyError, find_policy_file, load_policy
from policies.engine import evaluate, input_finding
from policies.findings import ObjectRef, Severity
from policies.kinds import kind_spec
from policies.workload import object_ref

__all__ = ["Located", "Report", "iter_files", "lint_text", "lint_document", "lint_main", "rules_main"]

EXTENSIONS = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"
FAIL_ON = ("error", "warning", "info", "never")
_STR_TAG = "tag:yaml.org,2002:str"


def iter_files(paths: Sequence[str]) -> Iterator[str]:
    """Files to lint, in a stable order; ``-`` is stdin. Directories are walked
    (hidden directories skipped); a file named explicitly is linted whatever its suffix."""
    for raw in paths:
        if raw == STDIN:
            yield raw
            continue
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(EXTENSIONS):
                        yield os.path.join(root, name)
        else:
            yield raw


def lint_text(text: str | bytes, name: str, policy: Policy, report: Report,
              clusters: Sequence[Any] | None = None) -> None:
    """Lint one file's content into ``report``."""
    report.files += 1
    file_result = FileResult(name)
    report.results.append(file_result)
    index = 0
    # Values are built only for the kinds gpugate models (see lint_document): on mixed
    # manifests most documents are ConfigMaps, RBAC and CRDs, and building is most of the cost.
    must_build = build_check(text)
    for item in iter_documents(text, build=False):
        if isinstance(item, DocumentError):
            file_result.documents.append(_parse_error(item, name, index, policy, report))
            index += 1
            continue
        build = item.node is not None and must_build(item.node)
        file_result.documents.append(lint_document(item, name, policy, report, clusters, build=build))
        index = item.index + 1


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
    keys = [k.value for k, _ in node.value]
    return len(keys) == len(set(keys))


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


def read_input(name: str) -> bytes:
    if name == STDIN:
        return sys.stdin.buffer.read()
    with open(name, "rb") as fh:
        return fh.read()


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
    missing = [p for p in args.paths if p != STDIN and not os.path.exists(p)]
    if missing:
        _error("no such file or directory: " + ", ".join(missing))
        return 2
    try:
        policy = _policy(args)
    except PolicyError as exc:
        _error(str(exc))
        return 2
    clusters = None
    if args.cluster:
        from lint.cluster import ClusterFileError, load_clusters

        try:
            clusters = load_clusters(args.cluster, policy)
        except ClusterFileError as exc:
            _error(str(exc))
            return 2

    files = list(dict.fromkeys(iter_files(args.paths)))  # a file named twice is linted once
    report = Report()
    io_errors = 0
    from lint.progress import Progress

    with Progress(len(files), enabled=False if args.no_progress else None) as progress:
        for name in files:
            display = args.stdin_filename if name == STDIN else name
            progress.advance(display)
            try:
                text = read_input(name)
            except OSError as exc:
                _error(f"cannot read {display}: {exc.strerror or exc}")
                io_errors += 1
                continue
            if args.fix:
                from lint.fix import fix_input

                text = fix_input(text, name, policy, diff=args.diff)
            lint_text(text, display, policy, report, clusters)

    # --fix on stdin and --diff print YAML or a diff on stdout: the report must not mix in.
    to_stderr = args.fix and (args.diff or STDIN in files)
    code = _write_report(report, args, policy, clusters, sys.stderr if to_stderr else sys.stdout)
    if io_errors or code == 2:
        return 2
    if args.fail_on == "never":
        return 0
    worst = report.worst()
    return 1 if worst is not None and worst >= Severity.parse(args.fail_on) else 0


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
