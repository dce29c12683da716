"""What the webhook says: warnings that fit the API server's limits whole, and denials that
name the object once (README, "Lifecycle", the "Messages" bullet).

- Every rule message, for every rule's documented failing example, the examples/ and the
  corpus, also with hostile names (253-character object, queue, pod set, container and
  scheduler names and label values substituted in), and with every rule turned into a
  warning by the policy: its kubectl warning is at most 256 characters, with the rule ID
  and the failing number (or the key fact) within the first 120, and it names no object.
- :func:`warning_lines` keeps each warning whole, the total within 4096 characters, and says
  how many it left out; :func:`deny_message` names the object once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES, corpus_files

from lint.cli import Report, lint_text
from policies.config import Policy, policy_from_data
from policies.findings import Finding, ObjectRef, Severity, bounded_words, listed, quoted, quoted_repr
from policies.registry import Rule, all_rules
from policies.snapshots import snapshot_from_text
from webhook import admission
from webhook.admission import (
    MAX_DENY_MESSAGE_CHARS,
    MAX_WARNING_CHARS,
    MAX_WARNINGS_TOTAL_CHARS,
    WARNING_HEAD_CHARS,
    admit,
    deny_message,
    warning_lines,
    warning_text,
)

RULES = all_rules()

# A number a rule checks, standing alone (not a digit inside a name such as gpu-0 or ml-2).
NUMBER = re.compile(r"(?<![\w.\-/])\d+(\.\d+)?[A-Za-z]*(?![\w\-/])")
# The rules whose warnings must lead with a number, when their message has one.
NUMBER_RULES = {"GG104", "GG202", "GG203", "GG205", "GG401", "GG402", "GG404", "GG503", "GG502"}
# The key fact of rules whose messages carry no number.
KEY_FACTS = {
    "GG301": re.compile(r"(label|annotation) \S*queue-name"),
    "GG303": re.compile(r"ray\.io/scheduler-name"),
    "GG305": re.compile(r"names no queue"),
    "GG103": re.compile(r"usage cannot be determined"),
    "GG106": re.compile(r"tolerat"),
}
# Messages composed by the feasibility check, whose text is built outside the rules: its
# first number may sit behind a queue name of up to 52 characters (a bounded 253-character
# one) and a long resource name.
FEASIBILITY_HEAD_SLACK = {"GG402": 16}

HOSTILE_LENGTH = 253
# Composed by policies.feasibility from names it does not bound by itself (bounded_words
# quotes each long one): with a 253-character pod set name its explanation runs longer.
HOSTILE_LENGTH_EXCEPTIONS = {"GG403"}
# GG001 (the YAML parser's words; the webhook never sees YAML) and GG002 (composed by
# policies.engine from the model's ShapeError) are not rule messages.
INPUT_RULES = {"GG001", "GG002"}


# -- the documents judged ------------------------------------------------------------------------


def _all_warnings(extra: dict[str, Any] | None = None) -> Policy:
    """A policy (the example's own, when it has one) that makes every rule a warning, as a
    policy file may, and every feasibility verdict too."""
    data: dict[str, Any] = dict(extra or {})
    data["rules"] = {**(data.get("rules") or {}), **{rule_id: "warning" for rule_id in RULES}}
    data["feasibility"] = {**(data.get("feasibility") or {}), "mode": "warn"}
    return policy_from_data(data, "all rules as warnings")


def _rule_cases() -> Iterator[tuple[str, str, dict[str, Any] | None, str | None]]:
    """(name, failing example, its policy data, its cluster text) of every rule."""
    for rule_id, rule in RULES.items():
        policy = [e.text for e in rule.examples if e.role == "policy"]
        cluster = [e.text for e in rule.examples if e.role == "cluster"]
        for i, example in enumerate(e.text for e in rule.examples if e.role == "fail"):
            yield (f"{rule_id}-fail-{i}", example, yaml.safe_load(policy[0]) if policy else None,
                   cluster[0] if cluster else None)


def _example_cases() -> Iterator[tuple[str, str, dict[str, Any] | None, str | None]]:
    cluster = (EXAMPLES / "cluster" / "cluster.yaml").read_text()
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if path.parent.name == "cluster" or path.name == "policy.yaml":
            continue
        own = path.parent / "policy.yaml"
        policy = yaml.safe_load(own.read_text()) if own.is_file() and path != own else None
        if policy is not None and policy.get("kind") != "Policy":
            policy = None
        yield (str(path.relative_to(EXAMPLES)), path.read_text(), policy,
               cluster if path.parent.name == "feasibility" else None)


# Where user-chosen names sit: substituted by long ones, in the workload and the cluster alike.
_NAMED = re.compile(r"^\s*-?\s*(name|namespace|queue|groupName|schedulerName|"
                    r"volcano\.sh/queue-name|scheduling\.volcano\.sh/queue-name|kueue\.x-k8s\.io/queue-name|"
                    r"ray\.io/scheduler-name|maip\.mxsf\.io/usage|nvidia\.com/gpu\.product|app)"
                    r":\s*['\"]?([a-z][a-z0-9.\-]{2,62})['\"]?\s*$", re.MULTILINE)
_ROLE = re.compile(r"^\s+(Master|Worker|Launcher|Chief|PS|Evaluator)\s*:\s*$", re.MULTILINE)


def _hostile(text: str, cluster: str | None) -> tuple[str, str | None]:
    """``text`` (and ``cluster``) with every user-chosen name made 253 characters long."""
    names = {m.group(2) for m in _NAMED.finditer(text)} | {m.group(1) for m in _ROLE.finditer(text)}
    names -= {"main", "v1", "default-scheduler"}  # keep a few: kinds and defaults still resolve
    for name in sorted(names, key=len, reverse=True):
        long = (name + "-" + "x" * HOSTILE_LENGTH)[:HOSTILE_LENGTH]
        pattern = re.compile(rf"(?<![\w.\-/]){re.escape(name)}(?![\w.\-/])")
        text = pattern.sub(long, text)
        if cluster is not None:
            cluster = pattern.sub(long, cluster)
    return text, cluster


def _findings(name: str, text: str, policy_data: dict[str, Any] | None,
              cluster: str | None) -> list[Finding]:
    policy = _all_warnings(policy_data)
    clusters = None
    if cluster is not None:
        clusters = [snapshot_from_text(cluster, policy)]
    report = Report()
    lint_text(text, name, policy, report, clusters)
    return [loc.finding for loc in report.findings]


def _check_warnings(name: str, findings: list[Finding], hostile: bool = False) -> list[str]:
    """What is wrong with the kubectl warnings of ``findings`` (every one a warning)."""
    wrong = []
    for f in findings:
        if f.fixable or f.rule not in RULES or f.rule in INPUT_RULES:
            continue  # /validate drops fixable findings (/mutate sends no warnings); custom checks
        assert f.severity == Severity.WARNING, f
        text = warning_text(f)
        head = text[:WARNING_HEAD_CHARS]
        if len(text) > MAX_WARNING_CHARS and not (hostile and f.rule in HOSTILE_LENGTH_EXCEPTIONS):
            wrong.append(f"{name}: {len(text)} characters: {text}")
        if not head.startswith(f"{f.rule} {f.slug}: "):
            wrong.append(f"{name}: does not start with the rule: {text}")
        if f.object is not None and (str(f.object) in f.message
                                     or (len(f.object.name or "") > 100 and f.object.name in f.message)):
            wrong.append(f"{name}: names the object {str(f.object)!r}: {text}")
        if f.rule in NUMBER_RULES and NUMBER.search(f.message):
            slack = FEASIBILITY_HEAD_SLACK.get(f.rule, 0)
            if not NUMBER.search(text[:WARNING_HEAD_CHARS + slack]):
                wrong.append(f"{name}: no number in the first {WARNING_HEAD_CHARS}: {text}")
        fact = KEY_FACTS.get(f.rule)
        if fact is not None and not fact.search(head):
            wrong.append(f"{name}: key fact {fact.pattern!r} not in the first {WARNING_HEAD_CHARS}: {text}")
    return wrong


CASES = list(_rule_cases())


@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_examples_make_warnings_that_fit(case: tuple[str, str, dict[str, Any] | None, str | None],
                                              hostile: bool) -> None:
    name, text, policy, cluster = case
    if hostile:
        text, cluster = _hostile(text, cluster)
    findings = _findings(name, text, policy, cluster)
    rule_id = name.split("-")[0]
    if not hostile:
        assert any(f.rule == rule_id for f in findings), (name, findings)
    assert _check_warnings(name, findings, hostile) == []


def test_the_hostile_substitution_reaches_the_messages() -> None:
    """The hostile examples do quote long names: bounded, never whole."""
    seen = []
    for name, text, policy, cluster in CASES:
        text, cluster = _hostile(text, cluster)
        seen += [f.message for f in _findings(name, text, policy, cluster) if "chars)" in f.message]
    assert len(seen) >= 10, seen
    assert all("x" * 60 not in m for m in seen)


@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
def test_examples_make_warnings_that_fit(hostile: bool) -> None:
    wrong: list[str] = []
    count = 0
    for name, text, policy, cluster in _example_cases():
        if hostile:
            text, cluster = _hostile(text, cluster)
        findings = _findings(name, text, policy, cluster)
        count += len(findings)
        wrong += _check_warnings(name, findings, hostile)
    assert count > 20
    assert wrong == []


@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
def test_corpus_makes_warnings_that_fit(hostile: bool) -> None:
    files = corpus_files()
    if not files:
        pytest.skip("../shared/corpus is not present")
    wrong: list[str] = []
    for path in files:
        text = path.read_text(errors="replace")
        if hostile:
            text, _ = _hostile(text, None)
        wrong += _check_warnings(str(path), _findings(str(path), text, None, None), hostile)
    assert wrong == [], "\n".join(wrong[:20])


# -- bounded quoting ---------------------------------------------------------------------------


def test_quoted_bounds_long_values_and_keeps_short_ones() -> None:
    assert quoted("team-a") == "team-a"
    long = "q" * 253
    assert quoted(long) == "q" * 40 + "…(253 chars)"
    assert quoted_repr(long) == repr("q" * 40 + "…(253 chars)")
    assert quoted_repr(7) == "7"
    assert listed(["a", "b", "c", "d", "e"]) == "a, b, c (and 2 more)"
    assert listed(["a", "b"], sep=" + ") == "a + b"
    text = f"waits for room in queue `{long}`: cpu 3 asked"
    assert bounded_words(text) == f"waits for room in queue `{quoted(long)}`: cpu 3 asked"
    assert bounded_words(bounded_words(text)) == bounded_words(text)
    node = "ip-10-123-123-123.us-west-2.compute.internal"  # real node names stay whole
    assert bounded_words(f"closest: {node} with cpu 4") == f"closest: {node} with cpu 4"


# -- warning_lines --------------------------------------------------------------------------------


def _warning(i: int, length: int = 200) -> Finding:
    """A GG404 warning of ``length`` characters in all, its number ``i`` first."""
    message = (f"{i} " + "w" * length)[:length - len("GG404 gang-waits: ")]
    return Finding("GG404", "gang-waits", Severity.WARNING, message)


def test_warning_text_is_whole() -> None:
    f = Finding("GG104", "gpu-product-declared", Severity.WARNING, "pod set main requests 1 nvidia.com/gpu")
    assert warning_text(f) == "GG104 gpu-product-declared: pod set main requests 1 nvidia.com/gpu"
    long = Finding("GG404", "gang-waits", Severity.WARNING, "word " * 100)
    assert warning_text(long) == "GG404 gang-waits: " + "word " * 100  # never cut


def test_warning_lines_keep_everything_that_fits() -> None:
    findings = [_warning(i) for i in range(5)]
    findings.append(Finding("GG403", "gang-never-fits", Severity.ERROR, "an error is no warning"))
    findings.append(Finding("GG406", "feasibility-unknown", Severity.INFO, "nor is an info"))
    assert warning_lines(findings) == [warning_text(f) for f in findings[:5]]
    assert warning_lines([]) == []


def test_warning_lines_stay_within_4096_and_say_how_many_are_left_out() -> None:
    findings = [_warning(i, 250) for i in range(40)]
    lines = warning_lines(findings)
    assert sum(len(line) for line in lines) <= MAX_WARNINGS_TOTAL_CHARS
    assert all(len(line) <= MAX_WARNING_CHARS for line in lines)
    kept = lines[:-1]
    assert kept == [warning_text(f) for f in findings[:len(kept)]]  # whole, in order
    assert len(kept) == 16  # 16 x 250 + the notice fits 4096; a 17th would not
    assert lines[-1] == f"gpugate: {40 - len(kept)} more warnings not shown; run gpugate lint for all"


def test_warning_lines_exactly_at_the_limit_need_no_notice() -> None:
    findings = [_warning(i, 256) for i in range(16)]  # 16 x 256 = 4096
    lines = warning_lines(findings)
    assert len(lines) == 16 and sum(map(len, lines)) == MAX_WARNINGS_TOTAL_CHARS
    one_more = warning_lines([*findings, _warning(16, 30)])
    assert one_more[-1] == "gpugate: 2 more warnings not shown; run gpugate lint for all"
    assert sum(map(len, one_more)) <= MAX_WARNINGS_TOTAL_CHARS


def test_an_overlong_message_is_never_cut() -> None:
    """No rule makes one (the tests above); if one did, the warning still fits, uncut."""
    slug = "gpu-group-annotation-placement"
    without_slug = Finding("GG205", slug, Severity.WARNING, "m" * 240)
    assert warning_lines([without_slug]) == ["GG205: " + "m" * 240]
    huge = Finding("GG205", slug, Severity.WARNING, "m" * 5000)
    assert warning_lines([huge]) == [f"GG205 {slug}: message too long (5000 characters); run gpugate lint"]


# -- deny_message ------------------------------------------------------------------------------------


def _request(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"uid": "u-1", "operation": "CREATE", "object": obj, "namespace": meta.get("namespace", "default"),
            "name": meta["name"], "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
            "resource": {"group": "", "version": "v1", "resource": obj["kind"].lower() + "s"}}


def _denied_job(name: str) -> dict[str, Any]:
    """A PyTorchJob with two errors: G=12 on 8-GPU pods (GG202 twice) and a GPU request with
    no limit (GG501)."""
    template = {"metadata": {"annotations": {"metax-tech.com/gpu-group-size": "12"}},
                "spec": {"schedulerName": "volcano",
                         "containers": [{"name": "pytorch", "image": "pytorch",
                                         "resources": {"requests": {"metax-tech.com/gpu": 8}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 3, "template": template}}}}


@pytest.mark.parametrize("name", ["train", "t" * 253])
def test_a_denial_names_the_object_once(name: str) -> None:
    outcome = admit(_request(_denied_job(name)), admission.VALIDATE, Policy())
    assert outcome.verdict == "denied"
    message = outcome.response["status"]["message"]
    assert message.startswith(f"gpugate denied PyTorchJob ml/{name}: GG")
    assert message.count(name) == 1, message
    assert "GG202 gpu-group-size-divisible: " in message and "GG501 gpu-limit-required: " in message
    assert len(message) <= MAX_DENY_MESSAGE_CHARS


def test_deny_message_keeps_findings_whole() -> None:
    subject = str(ObjectRef("batch/v1", "Job", "a", "b"))
    many = [Finding(f"GG{200 + i}", "slug", Severity.ERROR, "m" * 300) for i in range(30)]
    message = deny_message(many, subject)
    assert len(message) <= MAX_DENY_MESSAGE_CHARS
    assert message.startswith("gpugate denied Job a/b: GG200 slug: ") and message.count("Job a/b") == 1
    parts, _, more = message.removeprefix("gpugate denied Job a/b: ").rpartition(" (and ")
    assert all(p.endswith("m" * 300) for p in parts.split("; "))  # no part cut mid-way
    assert more == f"{30 - len(parts.split('; '))} more)"
    huge = [Finding("GG403", "gang-never-fits", Severity.ERROR, "x" * 5000),
            Finding("GG402", "gang-exceeds-queue", Severity.ERROR, "short")]
    message = deny_message(huge, subject)
    assert message.startswith("gpugate denied Job a/b: GG403 gang-never-fits: xxx")
    assert message.endswith("… (and 1 more)") and len(message) <= MAX_DENY_MESSAGE_CHARS
    few = [Finding("GG403", "gang-never-fits", Severity.ERROR, "pod set a fits no node"),
           Finding("GG402", "gang-exceeds-queue", Severity.ERROR, "cpu 5 asked")]
    assert deny_message(few, subject) == ("gpugate denied Job a/b: GG403 gang-never-fits: pod set a fits no "
                                          "node; GG402 gang-exceeds-queue: cpu 5 asked")


def test_rule_modules_name_no_object() -> None:
    """No rule message starts with the object (``f"{workload}: ..."``) any more."""
    root = Path(__file__).resolve().parent.parent / "policies"
    for path in [*sorted((root / "rules").glob("gg*.py")), root / "findings.py"]:
        assert '{workload}' not in path.read_text(), path


def _rule(rule_id: str) -> Rule:
    return RULES[rule_id]


def test_every_rule_with_examples_is_covered() -> None:
    covered = {c[0].split("-")[0] for c in CASES}
    assert covered == {r for r in RULES if any(e.role == "fail" for e in _rule(r).examples)}
