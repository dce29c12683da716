"""A bug in a rule must never block a job: the engine turns a rule that raises into a
warning finding (whatever the rule's or the policy's severity), the linter reports it and
the webhook admits the object with a kubectl warning."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from webhook_helpers import ServedWebhook, post_review, review_for

from lint.cluster import load_clusters
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.findings import Problem, Severity
from policies.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "workloads" / "valid-pytorchjob-gpu-group.yaml"
CLUSTER = ROOT / "examples" / "cluster" / "cluster.yaml"


def _explode(workload: Any, ctx: Any) -> Iterator[Problem]:
    raise RuntimeError("simulated rule bug")
    yield  # pragma: no cover - makes this a generator, like every check


@pytest.fixture
def broken_gg202(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = all_rules()
    monkeypatch.setitem(rules, "GG202", dataclasses.replace(rules["GG202"], check=_explode))


def _job() -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(JOB.read_text()) if d)


@pytest.mark.usefixtures("broken_gg202")
def test_a_rule_that_raises_is_a_warning_even_when_the_policy_says_error() -> None:
    policy = policy_from_data({"rules": {"GG202": "error"}})
    result = evaluate(_job(), policy)
    internal = [f for f in result.findings if "internal error" in f.message]
    assert [(f.rule, f.severity) for f in internal] == [("GG202", Severity.WARNING)]
    assert "simulated rule bug" in internal[0].message


@pytest.mark.usefixtures("broken_gg202")
def test_the_webhook_admits_with_a_warning_when_a_rule_raises() -> None:
    with ServedWebhook(policy=policy_from_data({"rules": {"GG202": "error"}}), clusters=None) as hook:
        status, answer = post_review(hook, "validate", review_for(_job()))
    assert status == 200
    assert answer["response"]["allowed"] is True, answer
    assert any(w.startswith("GG202") and "internal error" in w for w in answer["response"]["warnings"])


def test_non_string_mapping_keys_do_not_break_feasibility() -> None:
    """YAML allows ``nodeSelector: {1: a}``; kubectl would quote the key. The check must
    judge it (no node has the labels) rather than fail."""
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {1: "a", "b": "c"}
    policy = Policy()
    result = evaluate(job, policy, list(load_clusters([str(CLUSTER)], policy)))
    assert not [f.message for f in result.findings if "internal error" in f.message]
    assert "GG403" in {f.rule for f in result.findings}
