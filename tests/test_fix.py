"""``gpugate lint --fix``: the engine's JSON Patch written back with ruamel.yaml."""

from __future__ import annotations

import difflib
import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_usage_mutation import POD_KINDS, _labels, _pod_spec, manifest

from lint.documents import Document, DocumentError, iter_documents
from lint.fix import comments, fix_input, fix_text, fix_text_result, guess_indent
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.kinds import KindSpec
from policies.patch import apply_patch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "usage"
POLICY = Policy()
# Every modelled kind in scope, with a usage for each: exercises the round trip on far more files.
ALL_KINDS = ["Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet", "CronJob", "PyTorchJob", "TFJob",
             "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "RayCluster", "RayJob", "RayService",
             "ElasticJob"]
EVERYTHING = policy_from_data({"usage": {"scope": "all", "defaults": dict.fromkeys(ALL_KINDS, "training")}})

SOURCE = """\
# Training job (comment at the top)
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: "demo"            # quoted, with a comment
  labels: {maip.mxsf.io/usage: training}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          # the user's own toleration
          tolerations:
          - key: nvidia.com/gpu
            operator: Exists
          containers:
          - name: main
            image: 'pytorch:2'
            resources:
              limits: {nvidia.com/gpu: 8}
---
# untouched document: must stay byte for byte
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data:
  key:   "spaced   value"
"""


def _data(text: str) -> list[Any]:
    docs = list(iter_documents(text))
    assert not [d for d in docs if isinstance(d, DocumentError)], docs
    return [d.data for d in docs if isinstance(d, Document)]


def _patched(text: str, policy: Policy) -> list[Any]:
    """What the webhook would produce: the engine's patch applied to each document."""
    out = []
    for data in _data(text):
        patch = evaluate(data, policy).patch
        out.append(apply_patch(data, patch) if patch else data)
    return out


def _comments(text: str) -> list[str]:
    return [m.group(0).strip() for m in re.finditer(r"(?<![^\s])#[^\n]*", text)]


def test_fix_keeps_comments_quotes_order_and_untouched_documents() -> None:
    fixed = fix_text(SOURCE, POLICY)
    assert fixed != SOURCE
    assert _data(fixed) == _patched(SOURCE, POLICY)
    for comment in _comments(SOURCE):
        assert comment in fixed
    assert 'name: "demo"            # quoted, with a comment' in fixed
    assert "image: 'pytorch:2'" in fixed
    assert "labels: {maip.mxsf.io/usage: training}" in fixed
    first, second = fixed.split("\n---\n")
    assert second == SOURCE.split("\n---\n")[1]
    keys = [line.split(":")[0] for line in first.splitlines() if re.match(r"^[a-z]", line)]
    assert keys == ["apiVersion", "kind", "metadata", "spec"]
    # the user's toleration stays first; ours are appended after it
    assert fixed.index("operator: Exists") < fixed.index("value: training")
    assert fix_text(fixed, POLICY) == fixed


def test_fix_output_equals_the_patch_applied_to_the_original_for_the_seed_examples() -> None:
    for name in ("training-job", "inference-service"):
        source = (EXAMPLES / f"{name}.yaml").read_text()
        fixed = fix_text(source, POLICY)
        assert _data(fixed) == _patched(source, POLICY)
        expected = (EXAMPLES / f"{name}.expected.yaml").read_text()
        assert _data(fixed) == list(yaml.safe_load_all(expected))
        assert fix_text(fixed, POLICY) == fixed


def test_indentation_is_detected_and_reused() -> None:
    four = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n    name: p   # four spaces\n"
        "    labels:\n        maip.mxsf.io/usage: training\n"
        "spec:\n    containers:\n    -   name: main\n        image: x\n")
    assert guess_indent(four) == (4, 2, 0)
    fixed = fix_text(four, POLICY)
    assert "\n    affinity:\n        nodeAffinity:\n            requiredDuringScheduling" in fixed
    assert _data(fixed) == _patched(four, POLICY)
    indented_lists = "a:\n  b:\n    - x: 1\n      y: 2\n  c:\n    - 3\n"
    assert guess_indent(indented_lists) == (2, 4, 2)


def test_document_markers_and_bom_survive() -> None:
    text = "\ufeff%YAML 1.1\n--- # the job\n" + SOURCE.split("---")[0].split("\n", 1)[1] + "...\n# end\n"
    result = fix_text_result(text, POLICY)
    assert result.changed == [0] and not result.problems
    assert result.text.startswith("\ufeff%YAML 1.1\n--- # the job\napiVersion:")
    assert result.text.endswith("...\n# end\n")


def test_nothing_to_fix_returns_the_same_text() -> None:
    clean = fix_text(SOURCE, POLICY)
    result = fix_text_result(clean, POLICY)
    assert result.text is clean and not result.modified
    cpu = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: b}]}\n"
    assert fix_text(cpu, POLICY) is cpu


def test_unparsable_or_odd_input_is_left_alone_with_a_reason() -> None:
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    for text in ("a: [1, 2\n", "\t- : :\n  x", "apiVersion: v1\nkind: Pod\nspec: !!python/object x\n", deep,
                 SOURCE + "---\nkey: [unclosed\n"):
        result = fix_text_result(text, POLICY)
        assert result.text == text and not result.modified
        assert result.problems and result.problems[0].startswith("not valid YAML, left alone (line ")


def test_a_document_ruamel_cannot_round_trip_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import lint.fix as fix

    def broken(*_: Any) -> Any:
        raise RuntimeError("cannot represent this")

    monkeypatch.setattr(fix, "_ruamel", broken)
    result = fix_text_result(SOURCE, POLICY)
    assert result.text == SOURCE and not result.modified
    assert result.problems and "document 0: left alone" in result.problems[0]
    assert "cannot represent this" in result.problems[0]


def test_splice_keeps_every_untouched_byte() -> None:
    odd = SOURCE.split("---")[0].replace(
        "kind: PyTorchJob\n",
        'kind: PyTorchJob\nextra: [ "a",   # first\n  "b" ]   # second\nodd:   "spaced"\n')
    odd = odd.replace("          - key: nvidia.com/gpu\n            operator: Exists\n",
                      "          -   key: nvidia.com/gpu\n              operator: Exists\n")
    result = fix_text_result(odd, POLICY)
    assert result.changed == [0] and result.rewritten == [] and not result.problems
    assert _data(result.text) == _patched(odd, POLICY)
    added = result.text.splitlines()
    for line in odd.splitlines():   # the original is a subsequence of the result
        added = added[added.index(line) + 1:]
    # the appended tolerations line up with the user's own, in the user's style
    assert ("          -   key: nvidia.com/gpu\n              operator: Exists\n"
            "          - key: maip") in result.text


def test_a_null_to_replace_falls_back_to_the_round_trip_rewrite() -> None:
    text = SOURCE.split("---")[0].replace("      template:\n        spec:\n",
                                          "      template:\n        metadata: null\n        spec:\n")
    text = text.replace("        spec:\n          # the user's own toleration\n          tolerations:\n"
                        "          - key: nvidia.com/gpu\n            operator: Exists\n",
                        "        spec:\n          # the user's own toleration\n          tolerations: ~\n")
    result = fix_text_result(text, POLICY)
    assert result.rewritten == [0] and not result.problems
    assert _data(result.text) == _patched(text, POLICY)
    assert "# the user's own toleration" in result.text


def test_a_document_whose_comments_would_be_lost_is_left_alone() -> None:
    text = SOURCE.split("---")[0].replace(
        "kind: PyTorchJob\n", 'kind: PyTorchJob\nextra: [\n  "a",   # first\n  "b"    # second\n]\n')
    text = text.replace(
        "          tolerations:\n          - key: nvidia.com/gpu\n            operator: Exists\n",
        "          tolerations: []\n")   # flow: cannot splice, must rewrite
    result = fix_text_result(text, POLICY)
    assert result.text == text and not result.modified
    assert "would lose 1 comment(s) such as '# first'" in result.problems[0]
    assert comments(text)["# first"] == 1 and comments("a: 'x # not a comment'  # real\n") == {"# real": 1}


def test_fix_input_writes_only_when_the_content_changes(tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    target.write_text(SOURCE)
    os.utime(target, ns=(1, 1))
    out, err = io.StringIO(), io.StringIO()
    fixed = fix_input(SOURCE.encode(), str(target), POLICY, diff=False, stdout=out, stderr=err)
    assert target.read_bytes() == fixed != SOURCE.encode()
    assert out.getvalue() == "" and err.getvalue() == f"gpugate: --fix: wrote {target} (1 document changed)\n"
    os.utime(target, ns=(1, 1))
    err = io.StringIO()
    again = fix_input(fixed, str(target), POLICY, diff=False, stdout=out, stderr=err)
    assert err.getvalue() == "" and again == fixed
    assert target.stat().st_mtime_ns == 1, "unchanged content is not rewritten"


def test_fix_input_diff_prints_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    target.write_text(SOURCE)
    out = io.StringIO()
    fixed = fix_input(SOURCE.encode(), str(target), POLICY, diff=True, stdout=out, stderr=io.StringIO())
    assert target.read_text() == SOURCE
    diff = out.getvalue()
    assert diff.startswith(f"--- {target}\n+++ {target}\n@@ ")
    assert "\n+          - key: maip.mxsf.io/node.usage\n" in diff
    assert fixed.decode() == fix_text(SOURCE, POLICY)


def test_fix_input_stdin_prints_the_fixed_yaml() -> None:
    out = io.StringIO()
    fixed = fix_input(SOURCE.encode(), "-", POLICY, diff=False, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == fixed.decode() == fix_text(SOURCE, POLICY)


def test_fix_input_bad_bytes_are_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "bad.yaml"
    raw = b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff}\n"
    target.write_bytes(raw)
    err = io.StringIO()
    assert fix_input(raw, str(target), POLICY, diff=False, stdout=io.StringIO(), stderr=err) == raw
    assert target.read_bytes() == raw and "not UTF-8" in err.getvalue()
    err = io.StringIO()
    broken = b"a: [1, 2\n"
    assert fix_input(broken, str(target), POLICY, diff=False, stdout=io.StringIO(), stderr=err) == broken
    assert "not valid YAML" in err.getvalue()


def test_lint_fix_command_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lint.cli import lint_main

    target = tmp_path / "job.yaml"
    target.write_text(SOURCE)
    lint_main(["--fix", "--fail-on", "never", str(target)])
    assert target.read_text() == fix_text(SOURCE, POLICY)
    capsys.readouterr()


def _corpus_texts(corpus_dir: Path) -> list[tuple[Path, str]]:
    from conftest import corpus_files

    out = []
    for path in corpus_files():
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue
        if not any(isinstance(d, DocumentError) for d in iter_documents(text)):
            out.append((path, text))
    return out


@pytest.mark.parametrize("policy", [POLICY, EVERYTHING], ids=["scope-gpu", "scope-all"])
def test_fix_over_the_corpus(corpus_dir: Path, policy: Policy) -> None:
    texts = _corpus_texts(corpus_dir)
    assert len(texts) > 500
    changed = left_alone = rewritten = 0
    for path, text in texts:
        result = fix_text_result(text, policy)
        for problem in result.problems:  # the one known ruamel.yaml limitation, and nothing else
            assert "would lose" in problem and "flow collections" in problem, (path, problem)
            left_alone += 1
        if not result.modified:
            assert result.text == text
            continue
        changed += 1
        assert _data(result.text) == _patched(text, policy), path     # --fix == the webhook's patch
        if not result.rewritten:   # spliced: every original line is still there, in order
            edits = difflib.SequenceMatcher(None, text.splitlines(), result.text.splitlines(),
                                            autojunk=False).get_opcodes()
            assert {tag for tag, *_ in edits} <= {"equal", "insert"}, path
        rewritten += bool(result.rewritten)
        for comment in _comments(text):
            assert comment in result.text, (path, comment)
        assert fix_text_result(result.text, policy).text == result.text, path   # a second --fix: no-op
    assert changed >= (20 if policy is POLICY else 300)
    assert left_alone <= len(texts) // 100 and rewritten <= len(texts) // 100


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(POD_KINDS), spec=_pod_spec, labels=_labels,
       indent=st.sampled_from([2, 4]), flow=st.sampled_from([None, False, True]))
def test_fix_writes_what_the_patch_says_for_random_pod_specs(kind: KindSpec, spec: dict[str, Any],
                                                             labels: dict[str, str], indent: int,
                                                             flow: bool | None) -> None:
    doc = manifest(kind, spec, usage=None)
    doc["metadata"]["labels"] = labels
    text = "# head comment\n" + yaml.safe_dump(doc, indent=indent, default_flow_style=flow, sort_keys=False)
    fixed = fix_text(text, POLICY)
    assert _data(fixed) == _patched(text, POLICY)
    assert "# head comment" in fixed
    assert fix_text(fixed, POLICY) == fixed
