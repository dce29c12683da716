"""Bad input of any shape gets an answer, never a crash: hypothesis feeds random objects
of every supported kind, mutated rule examples and random text through the engine and
the linter. No exception may escape and no finding may be an "internal error" (the
engine's guard around a rule that raised)."""

from __future__ import annotations

import copy
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lint.cli import lint_text
from lint.report import Report
from policies.config import Policy
from policies.engine import evaluate
from policies.kinds import KINDS
from policies.registry import all_rules

POLICY = Policy()
FUZZ = settings(max_examples=int(os.environ.get("GPUGATE_FUZZ_EXAMPLES", "400")), deadline=None,
                derandomize="GPUGATE_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

API_VERSIONS = [f"{k.group}/v1" if k.group else "v1" for k in KINDS]
KIND_PAIRS = [(f"{k.group}/v1" if k.group else "v1", k.kind) for k in KINDS]

# Keys the workload model and the rules look for, so that random documents reach them.
KEYS = [
    "metadata", "name", "namespace", "labels", "annotations", "spec", "template", "containers",
    "initContainers", "resources", "requests", "limits", "cpu", "memory", "nvidia.com/gpu",
    "metax-tech.com/gpu", "replicas", "parallelism", "tasks", "minAvailable", "minMember", "queue",
    "schedulerName", "nodeSelector", "affinity", "nodeAffinity", "tolerations", "key", "operator",
    "value", "effect", "overhead", "restartPolicy", "runPolicy", "schedulingPolicy",
    "pytorchReplicaSpecs", "Master", "Worker", "headGroupSpec", "workerGroupSpecs", "rayClusterSpec",
    "numOfHosts", "minReplicas", "enableInTreeAutoscaling", "replicaSpecs", "jobTemplate", "plugins",
    "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "matchExpressions",
    "values", "metax-tech.com/gpu-group-size", "metax-tech.com/atomic-gpu-group-size",
    "scheduling.volcano.sh/queue-name", "volcano.sh/queue-name", "ray.io/scheduler-name",
    "kueue.x-k8s.io/queue-name", "maip.mxsf.io/usage", "gpugate.io/ignore", "groupName",
]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "0", "1", "8", "-1", "1.5", "500m", "2Gi", "1e3", "2 GB", "Infinity", "0x10",
                     "volcano", "default-scheduler", "training", "inference", "Exists", "In", "NoSchedule",
                     "GG504", "A100", "Master", "a" * 300, "q/../x", "\x00", "ü"]),
    st.text(max_size=12),
)
KEY = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(KEY, children, max_size=5)),
    max_leaves=40,
)


@st.composite
def random_objects(draw: st.DrawFn) -> dict[str, Any]:
    api_version, kind = draw(st.sampled_from(KIND_PAIRS))
    doc: dict[str, Any] = draw(st.dictionaries(KEY, VALUES, max_size=6))
    doc["apiVersion"], doc["kind"] = api_version, kind
    return doc


def _example_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for rule in all_rules().values():
        for example in rule.examples:
            if example.role not in ("pass", "fail"):
                continue
            try:
                docs.extend(d for d in yaml.safe_load_all(example.text) if isinstance(d, dict))
            except yaml.YAMLError:
                continue  # GG001's failing example
    return docs


EXAMPLES = _example_documents()
EXAMPLE_TEXTS = [e.text for r in all_rules().values() for e in r.examples if e.role in ("pass", "fail")]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_examples(draw: st.DrawFn) -> dict[str, Any]:
    """A real example with a few subtrees replaced by random values or removed."""
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p and p[0] not in ("apiVersion", "kind")]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for token in path[:-1]:
            parent = parent[token]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(VALUES)
    return doc


def assert_answered(doc: Any) -> None:
    result = evaluate(doc, POLICY)
    internal = [f"{f.rule}: {f.message}" for f in result.findings if "internal error" in f.message]
    assert not internal, internal
    if result.mutated is not None:  # the mutation's output is itself valid input
        again = evaluate(result.mutated, POLICY)
        assert not [f for f in again.findings if "internal error" in f.message]


@FUZZ
@given(random_objects())
def test_random_objects_of_every_kind(doc: dict[str, Any]) -> None:
    assert_answered(doc)


@FUZZ
@given(mutated_examples())
def test_mutated_examples(doc: dict[str, Any]) -> None:
    assert_answered(doc)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(VALUES)
def test_any_value_is_skipped_or_answered(value: Any) -> None:
    assert_answered(value)


def assert_linted(text: str | bytes) -> None:
    report = Report()
    lint_text(text, "fuzz.yaml", POLICY, report)
    assert report.files == 1
    for loc in report.findings:
        assert "internal error" not in loc.finding.message, loc.finding.message
        assert loc.line >= 1 and loc.column >= 1


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_random_text(text: str | bytes) -> None:
    assert_linted(text)


@st.composite
def edited_example_texts(draw: st.DrawFn) -> str:
    """An example manifest with characters inserted, deleted or replaced."""
    text = draw(st.sampled_from(EXAMPLE_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(["", ":", "-", " ", "\n", "[", "{", "'", '"', "&a ", "*a", "!!int ",
                                       "<<: ", "---\n", "\t", "#", "2 GB", "\x00"]))
        cut = draw(st.integers(0, 3))
        text = text[:at] + insert + text[at + cut:]
    return text


@FUZZ
@given(edited_example_texts())
def test_edited_example_texts(text: str) -> None:
    assert_linted(text)
