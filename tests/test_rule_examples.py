"""Every rule's documented examples run as tests, through the linter's own pipeline.

For each rule in the registry (including rules added later): each ```yaml pass example
must produce no finding of that rule, each ```yaml fail example at least one. A
```yaml policy block is the policy for that rule's examples, a ```yaml cluster block the
cluster snapshot.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lint.cli import Report, lint_text
from policies.config import Policy, policy_from_data
from policies.registry import Rule, all_rules
from policies.snapshots import snapshot_from_text

RULES = all_rules()


def _examples(rule: Rule, role: str) -> list[str]:
    return [e.text for e in rule.examples if e.role == role]


def _setup(rule: Rule) -> tuple[Policy, list[Any] | None]:
    policies = _examples(rule, "policy")
    policy = policy_from_data(yaml.safe_load(policies[0]), f"{rule.id} example") if policies else Policy()
    clusters = _examples(rule, "cluster")
    if not clusters:
        return policy, None
    return policy, [snapshot_from_text(clusters[0], policy)]


def _findings_of(rule: Rule, text: str) -> tuple[list[str], Report]:
    policy, clusters = _setup(rule)
    report = Report()
    lint_text(text, f"{rule.id}-example.yaml", policy, report, clusters)
    return [f"{loc.finding.rule} {loc.finding.severity}: {loc.finding.message}"
            for loc in report.findings if loc.finding.rule == rule.id], report


@pytest.mark.parametrize("rule_id", list(RULES))
def test_rule_documents_pass_and_fail_examples(rule_id: str) -> None:
    rule = RULES[rule_id]
    assert _examples(rule, "pass"), f"{rule_id} has no ```yaml pass example in its docstring"
    assert _examples(rule, "fail"), f"{rule_id} has no ```yaml fail example in its docstring"
    assert rule.summary, f"{rule_id} has no summary line"


@pytest.mark.parametrize("rule_id", list(RULES))
def test_pass_examples_produce_no_finding(rule_id: str) -> None:
    rule = RULES[rule_id]
    for i, text in enumerate(_examples(rule, "pass")):
        found, report = _findings_of(rule, text)
        assert not found, f"{rule_id} pass example {i} produced: {found}"
        assert report.documents >= 1 or rule.stage == "input", f"{rule_id} pass example {i} is empty"


@pytest.mark.parametrize("rule_id", list(RULES))
def test_fail_examples_produce_a_finding(rule_id: str) -> None:
    rule = RULES[rule_id]
    for i, text in enumerate(_examples(rule, "fail")):
        found, report = _findings_of(rule, text)
        others = [f"{loc.finding.rule}: {loc.finding.message}" for loc in report.findings]
        assert found, f"{rule_id} fail example {i} produced no {rule_id} finding (got {others})"
