"""The engine's rule loop: a check or a mutate may return any iterable (a generator, a
list, an empty tuple), and a rule that raises, whether on the call or half-way through
its problems, becomes a warning finding after what it reported before failing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from policies.config import Policy
from policies.engine import evaluate
from policies.findings import Problem, Severity
from policies.registry import all_rules

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
}


def _replace(monkeypatch: pytest.MonkeyPatch, rule_id: str, **changes: Any) -> None:
    rules = all_rules()
    # every test evaluates under a fresh Policy(), whose memo of the rules to run is empty
    monkeypatch.setitem(rules, rule_id, dataclasses.replace(rules[rule_id], **changes))


def _generator(workload: Any, ctx: Any) -> Iterator[Problem]:
    yield Problem("from a generator", "/spec")


@pytest.mark.parametrize("check", [
    _generator,
    lambda workload, ctx: [Problem("from a list", "/spec")],
    lambda workload, ctx: (Problem("from a tuple", "/spec"),),
])
def test_a_check_may_return_any_iterable(monkeypatch: pytest.MonkeyPatch,
                                         check: Callable[..., Any]) -> None:
    _replace(monkeypatch, "GG303", check=check)
    found = [f for f in evaluate(dict(JOB), Policy()).findings if f.rule == "GG303"]
    assert [(f.path, f.severity) for f in found] == [("/spec", Severity.WARNING)]
    assert found[0].message.startswith("from a ")


def test_a_check_that_raises_on_the_call_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(workload: Any, ctx: Any) -> list[Problem]:
        raise KeyError("simulated")

    _replace(monkeypatch, "GG504", check=broken)
    found = [f for f in evaluate(dict(JOB), Policy()).findings if f.rule == "GG504"]
    assert [f.severity for f in found] == [Severity.WARNING]
    assert "internal error in rule GG504 (KeyError" in found[0].message


def test_a_mutate_that_fails_half_way_keeps_what_it_proposed(monkeypatch: pytest.MonkeyPatch) -> None:
    op = {"op": "add", "path": "/metadata/labels", "value": {"team": "ml"}}

    def half_way(workload: Any, ctx: Any) -> Iterator[tuple[Problem, list[dict[str, Any]]]]:
        yield Problem("adds a label", "/metadata", fixable=True), [op]
        raise RuntimeError("simulated")

    _replace(monkeypatch, "GG101", mutate=half_way)
    result = evaluate(dict(JOB), Policy())
    assert result.patch == [op]
    assert result.mutated is not None and result.mutated["metadata"]["labels"] == {"team": "ml"}
    messages = [f.message for f in result.findings if f.rule == "GG101"]
    assert messages[0] == "adds a label" and "internal error in rule GG101 (RuntimeError" in messages[1]
    assert "labels" not in JOB["metadata"]  # the submitted object is untouched
