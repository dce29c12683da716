"""``gpugate lint`` end to end: inputs, formats, exit codes, suppression, progress, rules."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import jsonschema
import pytest

from lint.cli import lint_main, lint_text, rules_main
from lint.formats import FORMATS, FormatOptions, rule_anchor
from lint.progress import Progress
from lint.report import Report
from policies.config import Policy
from policies.registry import all_rules

GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: ok, namespace: ml}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: {cpu: 500m, memory: 1Gi}
"""

# GG504 at line 10 (the memory value), column 30.
BAD_QUANTITY = """\
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: ml}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests:
        cpu: 500m
        memory: 2 GB
"""

VALUES_FILE = "replicaCount: 2\nimage: {repository: nginx}\n"

BROKEN = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: broken
data: {a: [unclosed
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = lint_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, _ = run([*argv, "--format", "json"], capsys)
    return code, json.loads(out)


def rules_of(data: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in data["findings"]]


# -- inputs --------------------------------------------------------------------------------

def test_clean_file_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([write(tmp_path, "ok.yaml", GOOD_POD)], capsys)
    assert code == 0, out
    assert out.strip() == "1 files, 1 documents (0 skipped): 0 errors, 0 warnings, 0 infos"
    assert err == ""


def test_finding_has_file_line_column_and_document(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "two.yaml", GOOD_POD + "---\n" + BAD_QUANTITY)
    code, data = run_json([path], capsys)
    assert code == 1
    [finding] = [f for f in data["findings"] if f["rule"] == "GG504"]
    # The second document starts on line 11: its memory value is on line 11 + 10.
    assert (finding["file"], finding["line"], finding["column"], finding["document"]) == (path, 21, 17, 1)
    assert finding["path"] == "/spec/containers/0/resources/requests/memory"
    assert "2 GB" in finding["message"] and finding["object"]["name"] == "bad"  # the object: its own field


def test_directories_are_walked_for_yaml_and_json(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a/one.yaml", BAD_QUANTITY)
    write(tmp_path, "a/b/two.yml", BAD_QUANTITY)
    write(tmp_path, "a/b/three.json", json.dumps({"apiVersion": "v1", "kind": "Pod",
                                                  "metadata": {"name": "j"},
                                                  "spec": {"containers": [{"name": "c", "resources": {
                                                      "limits": {"cpu": "lots"}}}]}}))
    write(tmp_path, "a/notes.txt", BAD_QUANTITY)
    write(tmp_path, "a/.hidden/four.yaml", BAD_QUANTITY)
    code, data = run_json([str(tmp_path / "a")], capsys)
    assert code == 1
    files = sorted({Path(f["file"]).name for f in data["findings"] if f["rule"] == "GG504"})
    assert files == ["one.yaml", "three.json", "two.yml"]
    assert data["summary"]["files"] == 3


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BAD_QUANTITY.encode())))
    code, data = run_json(["-"], capsys)
    assert code == 1
    assert {f["file"] for f in data["findings"]} == {"<stdin>"}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BAD_QUANTITY.encode())))
    code, data = run_json(["-", "--stdin-filename", "chart/job.yaml"], capsys)
    assert {f["file"] for f in data["findings"]} == {"chart/job.yaml"}


def test_parse_error_is_gg001_and_the_run_goes_on(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    broken = write(tmp_path, "a.yaml", GOOD_POD + "---\n" + BROKEN)
    bad = write(tmp_path, "b.yaml", BAD_QUANTITY)
    code, data = run_json([broken, bad], capsys)
    assert code == 1
    [gg001] = [f for f in data["findings"] if f["rule"] == "GG001"]
    assert gg001["file"] == broken and gg001["line"] == 16 and gg001["document"] == 1
    assert gg001["message"].startswith("not valid YAML")
    assert "<byte string>" not in gg001["message"]
    assert any(f["rule"] == "GG504" and f["file"] == bad for f in data["findings"])
    assert data["summary"]["files"] == 2


def test_non_objects_are_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json([write(tmp_path, "values.yaml", VALUES_FILE + "---\n" + GOOD_POD)], capsys)
    assert code == 0
    assert data["summary"] == {"files": 1, "documents": 2, "skipped": 1, "errors": 0, "warnings": 0,
                               "infos": 0}


def test_unmodelled_kind_passes_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {cpu: '2 GB'}\n"
    code, data = run_json([write(tmp_path, "cm.yaml", text)], capsys)
    assert code == 0 and data["findings"] == []
    assert data["summary"]["documents"] == 1 and data["summary"]["skipped"] == 0


def test_wrong_shape_is_gg002_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: two\n"
            "  template: {spec: {containers: [{name: main}]}}\n")
    code, data = run_json([write(tmp_path, "d.yaml", text)], capsys)
    assert code == 1
    [f] = data["findings"]
    assert (f["rule"], f["line"]) == ("GG002", 5)


# -- exit codes ----------------------------------------------------------------------------

WARNING_ONLY = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources:
          limits: {nvidia.com/gpu: 1}
"""


@pytest.mark.parametrize(("fail_on", "expected"), [("error", 0), ("warning", 1), ("info", 1), ("never", 0)])
def test_fail_on_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_on: str,
                           expected: int) -> None:
    path = write(tmp_path, "job.yaml", WARNING_ONLY)
    code, data = run_json([path, "--fail-on", fail_on], capsys)
    assert data["summary"]["warnings"] > 0 and data["summary"]["errors"] == 0, data
    assert code == expected


def test_errors_fail_unless_never(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad.yaml", BAD_QUANTITY)
    assert run([path], capsys)[0] == 1
    assert run([path, "--fail-on", "never"], capsys)[0] == 0


def test_missing_file_is_exit_2_and_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every input is in the report (issue 17), a missing one as an error on it.
    code, out, err = run([str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "nope.yaml" in err
    assert "nope.yaml:1:1 error GG001" in out and "No such file" in out and "1 files" in out


def test_unreadable_file_is_exit_2_after_the_report(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "d/ok.yaml", GOOD_POD)
    (tmp_path / "d" / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    code, out, err = run([str(tmp_path / "d")], capsys)
    assert code == 2
    assert "cannot read" in err and "dangling.yaml" in err and "broken symbolic link" in err
    assert "2 files, 1 documents" in out  # the dangling link counts, as an error on it


@pytest.mark.parametrize("policy_text", ["usage: {scope: everything}\n", "usage: [unclosed\n",
                                         "bogus: 1\n"])
def test_bad_policy_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy_text: str) -> None:
    policy = write(tmp_path, "policy.yaml", policy_text)
    code, out, err = run([write(tmp_path, "ok.yaml", GOOD_POD), "--config", policy], capsys)
    assert code == 2 and "policy.yaml" in err and out == ""


def test_missing_policy_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([write(tmp_path, "ok.yaml", GOOD_POD), "--config", str(tmp_path / "no.yaml")], capsys)
    assert code == 2 and "no.yaml" in err


def test_usage_error_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        lint_main([write(tmp_path, "ok.yaml", GOOD_POD), "--format", "xml"])
    assert exc.value.code == 2


def test_policy_severity_override_changes_the_exit_code(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", "rules: {quantity-invalid: warning}\n")
    path = write(tmp_path, "bad.yaml", BAD_QUANTITY)
    code, data = run_json([path, "--config", policy], capsys)
    assert code == 0 and [f["severity"] for f in data["findings"] if f["rule"] == "GG504"] == ["warning"]


# -- suppression ---------------------------------------------------------------------------

def _with_ignore(value: str) -> str:
    return BAD_QUANTITY.replace("metadata: {name: bad, namespace: ml}",
                                f"metadata:\n  name: bad\n  namespace: ml\n"
                                f"  annotations: {{gpugate.io/ignore: \"{value}\"}}")


@pytest.mark.parametrize("value", ["GG504", "quantity-invalid", "GG104, GG504", "GG305;quantity-invalid"])
def test_inline_suppression(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, data = run_json([write(tmp_path, "s.yaml", _with_ignore(value))], capsys)
    assert "GG504" not in rules_of(data)
    assert code == 0


def test_suppression_is_per_rule_and_per_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _with_ignore("GG305") + "---\n" + _with_ignore("GG504").replace("name: bad", "name: other")
    code, data = run_json([write(tmp_path, "s.yaml", text)], capsys)
    gg504 = [f for f in data["findings"] if f["rule"] == "GG504"]
    assert [f["object"]["name"] for f in gg504] == ["bad"]
    assert code == 1


# -- formats -------------------------------------------------------------------------------

TEXT_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+) (?P<sev>error|warning|info) "
                       r"(?P<id>[A-Z][A-Z0-9_-]*) (?P<slug>[a-z0-9-]+) (?P<msg>.+)$")


def test_text_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad.yaml", BAD_QUANTITY)
    code, out, _ = run([path], capsys)
    lines = out.rstrip("\n").splitlines()
    match = TEXT_LINE.match(next(line for line in lines if " GG504 " in line))
    assert match and match["file"] == path and (match["line"], match["col"]) == ("11", "17")
    assert match["sev"] == "error" and match["slug"] == "quantity-invalid"
    assert re.fullmatch(r"1 files, 1 documents \(0 skipped\): 1 errors, \d+ warnings, 0 infos", lines[-1])
    assert "\033[" not in out  # captured stdout is not a terminal


def test_text_colour_only_when_asked_or_on_a_tty(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "bad.yaml", BAD_QUANTITY)
    assert "\033[31merror\033[0m" in run([path, "--color", "always"], capsys)[1]
    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    lint_main([path])
    assert "\033[31merror" in tty.getvalue()
    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setenv("NO_COLOR", "1")
    lint_main([path])
    assert "\033[" not in tty.getvalue()


def test_json_format_is_exactly_the_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json([write(tmp_path, "bad.yaml", BAD_QUANTITY)], capsys)
    assert set(data) == {"findings", "summary"}
    assert set(data["summary"]) == {"files", "documents", "skipped", "errors", "warnings", "infos"}
    for finding in data["findings"]:
        assert list(finding) == ["rule", "slug", "severity", "message", "file", "line", "column", "document",
                                 "object", "path", "fixable"]
        assert set(finding["object"]) == {"apiVersion", "kind", "namespace", "name"}
        assert isinstance(finding["fixable"], bool) and isinstance(finding["line"], int)
    gg504 = next(f for f in data["findings"] if f["rule"] == "GG504")
    assert gg504["object"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "bad"}


# The parts of the SARIF 2.1.0 schema GitHub code scanning relies on (its upload is
# refused without them), as a JSON Schema.
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs", "$schema"],
    "properties": {
        "version": {"const": "2.1.0"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["tool", "results"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name", "rules"],
                    "properties": {"rules": {"type": "array", "items": {
                        "type": "object", "required": ["id", "shortDescription"],
                        "properties": {
                            "id": {"type": "string"},
                            "helpUri": {"type": "string", "pattern": "^https://"},
                            "shortDescription": {"type": "object", "required": ["text"]},
                            "defaultConfiguration": {"type": "object", "properties": {
                                "level": {"enum": ["none", "note", "warning", "error"]}}},
                        }}}}}}},
                "results": {"type": "array", "items": {
                    "type": "object", "required": ["ruleId", "level", "message", "locations"],
                    "properties": {
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "message": {"type": "object", "required": ["text"]},
                        "ruleIndex": {"type": "integer", "minimum": 0},
                        "locations": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "required": ["physicalLocation"],
                            "properties": {"physicalLocation": {
                                "type": "object", "required": ["artifactLocation", "region"],
                                "properties": {
                                    "artifactLocation": {"type": "object", "required": ["uri"],
                                                         "properties": {"uri": {"type": "string",
                                                                                "pattern": r"^[^\\ ]+$"}}},
                                    "region": {"type": "object", "required": ["startLine", "startColumn"],
                                               "properties": {"startLine": {"type": "integer", "minimum": 1},
                                                              "startColumn": {"type": "integer",
                                                                              "minimum": 1}}}}}}}},
                    }}},
            }}},
    },
}


def test_sarif_format(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "jobs/bad pod.yaml", BAD_QUANTITY)
    code, out, _ = run(["jobs", "--format", "sarif"], capsys)
    assert code == 1
    sarif = json.loads(out)
    jsonschema.validate(sarif, SARIF_SUBSET)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == list(all_rules())
    for rule in driver["rules"]:
        assert rule["helpUri"].endswith("docs/rules.md#" + rule_anchor(rule["id"], rule["name"]))
        assert rule["help"]["markdown"].endswith(f"({rule['helpUri']})")
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "GG504")
    assert driver["rules"][result["ruleIndex"]]["id"] == "GG504"
    assert result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "jobs/bad%20pod.yaml"
    assert location["region"] == {"startLine": 11, "startColumn": 17}


def test_github_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad.yaml", BAD_QUANTITY)
    _, out, _ = run([path, "--format", "github"], capsys)
    line = next(x for x in out.splitlines() if "GG504" in x)
    prefix = f"::error file={path},line=11,col=17,title=GG504 quantity-invalid::"
    assert line.startswith(prefix), line
    assert "2 GB" in line[len(prefix):]


def test_github_format_escapes(tmp_path: Path) -> None:
    report = Report()
    lint_text(BAD_QUANTITY.replace("name: bad,", "name: 'a,b:c',"), "dir,x/f:1.yaml", Policy(), report)
    out = FORMATS["github"](report, FormatOptions())
    line = next(x for x in out.splitlines() if "GG504" in x)
    assert line.startswith("::error file=dir%2Cx/f%3A1.yaml,line=11,")
    assert "\n" not in line


def test_junit_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, "bad.yaml", GOOD_POD + "---\n" + BAD_QUANTITY + "---\n" + VALUES_FILE)
    good = write(tmp_path, "good.yaml", GOOD_POD)
    broken = write(tmp_path, "broken.yaml", BROKEN)
    code, out, _ = run([bad, good, broken, "--format", "junit"], capsys)
    assert code == 1
    root = ElementTree.fromstring(out)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert list(suites) == [bad, good, broken]
    cases = suites[bad].findall("testcase")
    assert len(cases) == 3 and suites[bad].get("tests") == "3" and suites[bad].get("failures") == "1"
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("type") == "GG504 quantity-invalid"
    assert cases[2].find("skipped") is not None
    assert suites[good].get("failures") == "0"
    assert suites[broken].find("testcase/failure").get("type") == "GG001 invalid-yaml"  # type: ignore[union-attr]
    assert root.get("failures") == "2"


def test_junit_findings_below_fail_on_are_not_failures(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "job.yaml", WARNING_ONLY)
    _, out, _ = run([path, "--format", "junit"], capsys)
    case = ElementTree.fromstring(out).find("testsuite/testcase")
    assert case is not None and case.find("failure") is None
    assert "warning" in (case.findtext("system-out") or "")
    _, out, _ = run([path, "--format", "junit", "--fail-on", "warning"], capsys)
    assert ElementTree.fromstring(out).find("testsuite/testcase/failure") is not None


def test_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.sarif"
    code, out, _ = run([write(tmp_path, "bad.yaml", BAD_QUANTITY), "-f", "sarif", "-o", str(target)], capsys)
    assert code == 1 and out == ""
    assert json.loads(target.read_text())["version"] == "2.1.0"


def test_every_format_handles_an_empty_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    for name in FORMATS:
        code, out, _ = run([str(tmp_path / "empty"), "--format", name], capsys)
        assert code == 0 and out.strip(), name


# -- --fix hook ----------------------------------------------------------------------------

def test_fix_on_stdin_prints_yaml_on_stdout_and_the_report_on_stderr(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lint.fix")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(WARNING_ONLY.encode())))
    code, out, err = run(["-", "--fix"], capsys)
    fixed = out
    assert "maip.mxsf.io/node.usage" in fixed  # the usage affinity was written
    assert "files, 1 documents" in err and "files" not in fixed
    # What was linted is the fixed text: the fixable usage finding is gone.
    assert "GG101" not in err


def test_fix_rewrites_files_and_lints_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lint.fix")
    path = write(tmp_path, "job.yaml", "# keep me\n" + WARNING_ONLY)
    _, before = run_json([path], capsys)
    assert "GG101" in rules_of(before)
    code, out, _ = run([path, "--fix", "--format", "json"], capsys)
    after = json.loads(out)
    assert "GG101" not in rules_of(after)
    text = Path(path).read_text()
    assert text.startswith("# keep me\n") and "maip.mxsf.io/node.usage" in text


# -- progress ------------------------------------------------------------------------------

class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_tty_for_many_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    many = tmp_path / "many"
    for i in range(60):
        write(many, f"f{i:02}.yaml", GOOD_POD)
    few = tmp_path / "few"
    for i in range(5):
        write(few, f"f{i}.yaml", GOOD_POD)

    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    assert lint_main([str(many)]) == 0
    assert "\r" in tty.getvalue() and "60/60 files" in tty.getvalue()
    assert tty.getvalue().endswith("\r\033[K")  # erased before the report

    for argv, stream in (([str(few)], _FakeTTY()), ([str(many), "--no-progress"], _FakeTTY()),
                         ([str(many)], io.StringIO())):
        monkeypatch.setattr(sys, "stderr", stream)
        assert lint_main(argv) == 0
        assert stream.getvalue() == "", argv
    capsys.readouterr()


def test_progress_render_fits_the_width() -> None:
    bar = Progress(200, io.StringIO(), enabled=True)
    bar.done = 50
    line = bar.render("some/very/long/path/" * 10 + "file.yaml", 60)
    assert len(line) < 60 and "50/200 files" in line and line.endswith("file.yaml")
    assert line.startswith("[" + "#" * 5 + "-" * 15 + "]")


# -- rules ---------------------------------------------------------------------------------

def test_rules_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert rules_main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    rules = all_rules()
    assert [line.split()[0] for line in lines] == list(rules)
    for line, rule in zip(lines, rules.values(), strict=True):
        assert line.split()[1:3] == [rule.slug, str(rule.severity)]
        assert "\n" not in rule.summary and rule.summary and line.endswith(rule.summary)


CUSTOM_POLICY = """\
custom:
- id: ACME001
  slug: memory-limit
  severity: warning
  target: Container
  message: "container {container} of {object} must set a memory limit"
  schema:
    type: object
    required: [resources]
    properties:
      resources: {type: object, required: [limits], properties: {limits: {required: [memory]}}}
"""


def test_rules_lists_custom_checks_of_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", CUSTOM_POLICY)
    assert rules_main(["--config", policy]) == 0
    last = capsys.readouterr().out.splitlines()[-1].split()
    assert last[:4] == ["ACME001", "memory-limit", "warning", "(custom)"]
    assert rules_main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_custom_checks_reach_sarif_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", CUSTOM_POLICY)
    _, out, _ = run([write(tmp_path, "ok.yaml", GOOD_POD), "--config", policy, "-f", "sarif"], capsys)
    sarif = json.loads(out)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert rules[-1]["id"] == "ACME001" and "helpUri" not in rules[-1]
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "ACME001")
    assert rules[result["ruleIndex"]]["id"] == "ACME001" and result["level"] == "warning"


def test_diff_prints_a_diff_writes_nothing_and_reports_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lint.fix")
    path = write(tmp_path, "job.yaml", WARNING_ONLY)
    code, out, err = run([path, "--diff"], capsys)
    assert Path(path).read_text() == WARNING_ONLY
    assert out.startswith("---") and "+" in out and "maip.mxsf.io/node.usage" in out
    assert "1 files, 1 documents" in err and "files, " not in out


def test_explain_keeps_json_parseable(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lint.cluster")
    root = Path(__file__).resolve().parent.parent / "examples"
    cluster, gangs = root / "cluster" / "cluster.yaml", root / "feasibility"
    if not cluster.is_file() or not gangs.is_dir():
        pytest.skip("no example cluster")
    code, out, err = run([str(gangs), "--cluster", str(cluster), "--explain", "-f", "json"], capsys)
    data = json.loads(out)
    assert code == 1 and any(f["rule"] == "GG405" for f in data["findings"])
    assert "pod set" in err


# -- what the reader builds ----------------------------------------------------------------

def test_build_check_picks_only_documents_with_tags_aliases_or_depth() -> None:
    from lint.documents import Document, build_check, iter_documents

    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cel}\n"
            "data:\n  rule: |\n    object.x && !has(object.y)\n  verbs: ['*']\n"
            "---\nvalues: !!python/name:os.system\n"
            "---\nbase: &b {a: 1}\ncopy: *b\n"
            "---\n" + "".join("  " * i + "k:\n" for i in range(300)) + "  " * 300 + "v\n")
    docs = [d for d in iter_documents(text, build=False) if isinstance(d, Document)]
    check = build_check(text)
    assert [check(d.node) for d in docs if d.node is not None] == [False, True, True, True]
    plain = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    [pod] = [d for d in iter_documents(plain, build=False) if isinstance(d, Document) and d.node is not None]
    assert pod.node is not None and not build_check(plain)(pod.node)


def test_build_check_reads_indentation_not_line_length() -> None:
    """A long line (a command, a description) is not depth: only indentation counts, on the
    first line as on the others, with the brackets of the whole text."""
    from lint.documents import MAX_DEPTH, Document, build_check, iter_documents

    def checked(text: str | bytes) -> list[bool]:
        check = build_check(text)
        return [check(d.node) for d in iter_documents(text, build=False)
                if isinstance(d, Document) and d.node is not None]

    long_line = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  cmd: " + "x" * 5000 + "\n"
    assert checked(long_line) == checked(long_line.encode()) == [False]
    nested = "".join("  " * i + "k:\n" for i in range(MAX_DEPTH)) + "  " * MAX_DEPTH + "v\n"
    assert checked(nested) == checked(nested.encode()) == [True]
    first_line = "- " * MAX_DEPTH + "v\n"
    assert checked(first_line) == checked(first_line.encode()) == [True]
    shallow_with_brackets = "a: " + "[" * 40 + "]" * 40 + "\n" + "".join("  " * i + "k:\n" for i in range(40))
    assert checked(shallow_with_brackets) == [False]


def test_unjudged_documents_are_still_validated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\ndata: {rule: 'x && !y'}\n"
            "---\nvalues: !!python/object/apply:os.system ['true']\n")
    code, data = run_json([write(tmp_path, "mixed.yaml", text)], capsys)
    [f] = data["findings"]
    assert (f["rule"], f["line"], f["document"]) == ("GG001", 6, 1)
    assert data["summary"]["documents"] == 1  # what does not parse is a GG001, not a document
