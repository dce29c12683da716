"""Hostile input to the linter's reader: each case is a clear GG001 finding with a line,
bounded in time and memory, and the run goes on with the next file."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from lint.cli import Report, lint_text
from lint.documents import (
    MAX_DEPTH,
    MAX_EXPANDED_NODES,
    MAX_FILE_BYTES,
    Document,
    DocumentError,
    iter_documents,
)
from policies.config import Policy

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec:\n  containers: [{name: c, image: busybox}]\n"


def _bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


CASES: dict[str, str | bytes] = {
    "alias bomb": _bomb(),
    "deep flow nesting": "[" * 200_000 + "]" * 200_000,
    "deep block nesting": "".join("  " * i + "k:\n" for i in range(3000)) + "  " * 3000 + "v\n",
    "python object tag": "a: !!python/object/apply:os.system ['echo pwned']\n",
    "python scalar tag": "a: !!python/name:os.system\n",
    "custom tag": "a: !Ref foo\n",
    "NUL byte": "a: b\x00c\n",
    "binary": bytes(range(256)) * 64,
    "invalid UTF-8": b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff\xfe}\n",
    "duplicate key": "apiVersion: v1\nkind: Pod\nkind: Service\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_document_is_a_finding_and_the_run_goes_on(name: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = Report()
    policy = Policy()
    lint_text(CASES[name], "hostile.yaml", policy, report)
    lint_text(POD, "next.yaml", policy, report)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    hostile = [f for f in report.findings if f.file == "hostile.yaml"]
    assert [f.finding.rule for f in hostile] == ["GG001"], hostile
    assert hostile[0].line >= 1 and hostile[0].column >= 1
    assert report.files == 2
    assert not [f for f in report.findings if f.file == "next.yaml"]
    assert grown_mib < 200, f"reading {name} grew the process by {grown_mib:.0f} MiB"


def test_limits_are_named_in_the_messages() -> None:
    (bomb,) = list(iter_documents(_bomb()))
    assert isinstance(bomb, DocumentError) and f"{MAX_EXPANDED_NODES:,}" in bomb.message
    # gpugate's own limit, where the 129th level opens, not PyYAML's (libyaml stops at 1,000
    # levels since PyYAML 6.0.3, and its scanner reads ahead of the events gpugate counts).
    (deep,) = list(iter_documents("[" * 100_000))
    assert isinstance(deep, DocumentError)
    assert deep.message == f"document nests deeper than {MAX_DEPTH} levels"
    assert (deep.line, deep.column) == (1, MAX_DEPTH + 1)
    (dupe,) = list(iter_documents("a: 1\nb: 2\na: 3\n"))
    assert isinstance(dupe, DocumentError) and (dupe.line, dupe.column) == (3, 1)


def test_depth_bound_holds_for_short_texts_too() -> None:
    # Short texts skip the event-walk pre-check; the builder enforces the same bound.
    text = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    (result,) = list(iter_documents(text))
    assert isinstance(result, DocumentError) and "deeper than" in result.message
    ok = "[" * (MAX_DEPTH - 5) + "]" * (MAX_DEPTH - 5)
    (fine,) = list(iter_documents(ok))
    assert isinstance(fine, Document)


def _block(levels: int) -> str:
    return "".join("  " * i + "k:\n" for i in range(levels)) + "  " * levels + "v\n"


# Valid YAML nesting past gpugate's limit, each with where the first level past it opens: short
# texts (composed, then measured while building) and long ones (walked event by event first).
DEEP: dict[str, tuple[str | bytes, tuple[int, int]]] = {
    "long flow": ("[" * 100_000 + "]" * 100_000, (1, MAX_DEPTH + 1)),
    "short flow": ("[" * 1500 + "]" * 1500, (1, MAX_DEPTH + 1)),
    "short flow mappings": ("{a: " * 1500 + "b" + "}" * 1500, (1, 4 * MAX_DEPTH + 1)),
    "between PyYAML's limit and ours": ("[" * 500 + "]" * 500, (1, MAX_DEPTH + 1)),
    "block": (_block(3000), (MAX_DEPTH + 1, 2 * MAX_DEPTH + 1)),
    "second document": ("a: 1\n---\nb: " + "[" * 1500 + "]" * 1500 + "\n", (3, MAX_DEPTH + 3)),
    "bytes after a byte order mark": (b"\xef\xbb\xbf" + "é: ".encode() + b"[" * 1500 + b"]" * 1500,
                                      (1, MAX_DEPTH + 3)),
}


@pytest.fixture(params=["PyYAML as installed", "PyYAML without its own depth limit"])
def pyyaml_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """PyYAML 6.0.3+ (libyaml's MAX_NESTING_LEVEL) stops at 1,000 levels on its own; older
    versions do not. gpugate's finding must be the same either way."""
    if request.param == "PyYAML as installed":
        yield
        return
    cyaml = pytest.importorskip("yaml._yaml")
    if not hasattr(cyaml, "_set_max_nest_level"):
        pytest.skip("this PyYAML has no depth limit of its own: the first case covers it")
    before = cyaml._get_max_nest_level()
    cyaml._set_max_nest_level(1_000_000)
    try:
        yield
    finally:
        cyaml._set_max_nest_level(before)


@pytest.mark.parametrize("name", sorted(DEEP))
def test_depth_limit_is_gpugates_whatever_pyyaml_does(name: str, pyyaml_limit: None) -> None:
    text, where = DEEP[name]
    results = list(iter_documents(text))
    deep = results[-1]
    assert isinstance(deep, DocumentError), results
    assert deep.message == f"document nests deeper than {MAX_DEPTH} levels"
    assert (deep.line, deep.column) == where
    assert all(isinstance(r, Document) for r in results[:-1])


def test_syntax_error_before_the_deep_part_is_reported_as_such() -> None:
    """libyaml's scanner may reach its depth limit ahead of an earlier syntax error: the
    syntax error is the document's first problem, and is what gets reported."""
    (result,) = list(iter_documents("a: b: c\nd: " + "[" * 1500))
    assert isinstance(result, DocumentError)
    assert "mapping values are not allowed" in result.message and (result.line, result.column) == (1, 5)


def test_huge_file_is_refused_by_size_before_parsing() -> None:
    text = b"a: b\n" * (MAX_FILE_BYTES // 5 + 10)
    (result,) = list(iter_documents(text))
    assert isinstance(result, DocumentError) and "MiB" in result.message


def test_aliases_within_bounds_are_fine_and_shared() -> None:
    text = "base: &b {cpu: 1}\nuse: [*b, *b, *b]\n"
    (doc,) = list(iter_documents(text))
    assert isinstance(doc, Document)
    assert doc.data["use"] == [{"cpu": 1}] * 3


def test_merge_keys_and_timestamps_read_as_kubernetes_does() -> None:
    text = "base: &b {a: 1, b: 2}\nobj:\n  <<: *b\n  b: 3\nwhen: 2024-01-01\n"
    (doc,) = list(iter_documents(text))
    assert isinstance(doc, Document)
    assert doc.data["obj"] == {"a": 1, "b": 3}
    assert doc.data["when"] == "2024-01-01"


def test_header_without_building_values() -> None:
    (doc,) = list(iter_documents(POD, build=False))
    assert isinstance(doc, Document) and doc.data is None
    assert doc.header() == ("v1", "Pod")
    (values,) = list(iter_documents("- a\n- b\n", build=False))
    assert isinstance(values, Document) and values.header() is None


def test_memoised_resolver_gives_the_stock_tags() -> None:
    """The linter's loader remembers implicit tags; it must resolve exactly as PyYAML does."""
    import yaml
    from yaml.nodes import MappingNode, Node, SequenceNode

    from lint.documents import _Loader

    def tags(node: Node, out: list[str]) -> list[str]:
        out.append(node.tag)
        if isinstance(node, MappingNode):
            for k, v in node.value:
                tags(k, out)
                tags(v, out)
        elif isinstance(node, SequenceNode):
            for child in node.value:
                tags(child, out)
        return out

    text = ("a: [1, 1.5, .inf, 0x1F, 0o17, 1_000, yes, No, ~, null, '', \"1\", '1', 2024-01-01, "
            "1:20, -.5e3, +12, =, <<, true]\nb: |\n  1\nc: >\n  yes\nd: !!str 1\ne: {}\n")
    for _ in range(2):  # the second pass answers from the memo
        ours = [tags(n, []) for n in yaml.compose_all(text, Loader=_Loader)]
        stock = [tags(n, []) for n in yaml.compose_all(text, Loader=yaml.SafeLoader)]
        assert ours == stock


# -- issue 17: fuzzing the whole front end ----------------------------------------------------
#
# Arbitrary YAML-like text (fragments of manifests, Helm actions, tags, anchors, flow and
# block syntax, odd bytes) and hostile structures dumped as YAML, fed to the in-process
# linter over a temporary directory: every run must give a complete report (every file
# counted, parseable JSON) and a documented exit code (0, 1, or 2 with a reason), never a
# traceback. FUZZ_EXAMPLES runs of up to 4 files each, so a few hundred documents a run.

import json as _json  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lint.cli import lint_main  # noqa: E402

FUZZ_EXAMPLES = 300
FUZZ_STATS = {"runs": 0, "files": 0, "documents": 0}

_TOKENS = ["apiVersion: v1", "apiVersion: batch/v1", "apiVersion: kubeflow.org/v1",
           "apiVersion: batch.volcano.sh/v1alpha1", "kind: Pod", "kind: Job", "kind: PyTorchJob",
           "kind: Deployment", "metadata:", "  name: x", "  labels:", "  annotations:", "    a: null",
           "    b: 1", "spec:", "  replicas: two", "  replicas: -1", "  template:", "    spec:",
           "      containers:", "      - name: m", "        resources:", "          limits:",
           "            nvidia.com/gpu: 1", "            nvidia.com/gpu: null", "            cpu: 2 GB",
           "      tolerations: [{operator: Exists}]", "  tasks: {}", "  pytorchReplicaSpecs:", "    Master:",
           "---", "...", "{{- if .Values.x }}", "{{ end }}", "{{ $x := 1 }}: y", "? [a, b]", ": c",
           "&a [*a]", "*a", "!!python/object:os.system x", "!!binary AAAA", "<<: *b", "- [", "- {", "]", "}",
           "\t", "'", '"', "#", "%YAML 1.2", "key: |", "  block", "? {a: 1}", ": 1", "- - - - -",
           "\ufeff", "\x00", "\x85", "\u2028", "\r", "[" * 40, "{" * 40]

_lines = st.lists(st.one_of(st.sampled_from(_TOKENS), st.text(max_size=20)), max_size=30)
_yamlish = _lines.map("\n".join)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
_hostile = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner,
                                                 max_size=4)), max_leaves=25)


def _manifest(value: Any) -> str:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "f"}, "spec": value}
    return yaml.safe_dump(doc)


_file = st.one_of(_yamlish, _hostile.map(_manifest), st.binary(max_size=200))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files=st.lists(_file, min_size=1, max_size=4), fix=st.booleans())
def test_fuzzed_inputs_always_get_a_complete_report(files: list[Any], fix: bool) -> None:
    import contextlib
    import io

    with tempfile.TemporaryDirectory() as tmp:
        for i, content in enumerate(files):
            path = f"{tmp}/f{i}.yaml"
            with open(path, "wb") as fh:
                fh.write(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        out, err = io.StringIO(), io.StringIO()
        args = [tmp, "--format", "json", "--no-progress"] + (["--fix"] if fix else [])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = lint_main(args)
    data = _json.loads(out.getvalue())
    assert code in (0, 1), (code, err.getvalue(), data)  # 2 would be an I/O or internal error here
    assert data["summary"]["files"] == len(files)
    assert "internal error" not in out.getvalue() + err.getvalue()
    assert all(f["message"] for f in data["findings"])
    FUZZ_STATS["runs"] += 1
    FUZZ_STATS["files"] += len(files)
    FUZZ_STATS["documents"] += data["summary"]["documents"]
