"""The FitQuestion a workload asks, and the ways building it is kept cheap, each held to
the plain computation it stands for:

- the eligibility signature is ``marshal`` format 2 instead of sorted JSON: equal
  signatures must still mean equal placement inputs, type for type (``1``, ``1.0``,
  ``True`` and ``"1"`` select different nodes: values are compared as text), and equal
  inputs still give equal signatures from one parse to the next (the memo relies on it);
- pod sets with equal requests share one conversion to scheduler units, which is integer
  arithmetic now (:func:`policies.quantity.scheduler_units`);
- the two scheduler facts and the label keys are read once per question.
"""

from __future__ import annotations

import datetime
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files
from hypothesis import given, settings
from hypothesis import strategies as st

from lint.documents import Document, iter_documents
from policies import feasibility
from policies.config import Policy
from policies.feasibility import specs as pod_specs
from policies.quantity import scheduler_units
from policies.workload import ShapeError, Workload, build_workload, is_kubernetes_object

ROOT = Path(__file__).resolve().parent.parent
USAGE = "maip.mxsf.io/node.usage"


def tagged(value: Any) -> Any:
    """``value`` with every scalar spelled with its exact type: equal tagged forms mean
    equal values of equal types (what a sound signature must imply)."""
    if isinstance(value, dict):
        return ("dict", type(value).__name__, frozenset((tagged(k), tagged(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", type(value).__name__, tuple(tagged(v) for v in value))
    return (type(value).__name__, repr(value))


def old_signature(spec: dict[str, Any]) -> str:
    """The signature as it was (sorted JSON): the reference the new one is held to."""
    parts = [spec.get("tolerations"), spec.get("nodeSelector"), pod_specs._required_affinity(spec),
             spec.get("nodeName")]
    try:
        return json.dumps(parts, sort_keys=True, default=str)
    except TypeError:
        return json.dumps(pod_specs._tagged_keys(parts), sort_keys=True, default=str)


def parts(spec: dict[str, Any]) -> Any:
    return tagged([spec.get("tolerations"), spec.get("nodeSelector"), pod_specs._required_affinity(spec),
                   spec.get("nodeName")])


def affinity(values: list[Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": values}]}]}}}}


# -- the signature ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["selector", "toleration", "affinity", "key"])
def test_values_equal_in_python_but_not_as_text_get_different_signatures(where: str) -> None:
    specs: list[dict[str, Any]] = []
    values: list[Any] = [1, 1.0, True, "1", "True", "1.0"]
    for value in values:
        if where == "selector":
            specs.append({"nodeSelector": {"k": value}})
        elif where == "toleration":
            specs.append({"tolerations": [{"key": USAGE, "operator": "Equal", "value": value}]})
        elif where == "affinity":
            specs.append(affinity([value]))
        else:
            specs.append({"nodeSelector": {value: "x"}})
    signatures = [pod_specs._signature(s) for s in specs]
    assert len(set(signatures)) == len(specs), signatures


def test_the_types_matter_to_eligibility() -> None:
    """Why ``==`` could not stand in for the signature: ``[1] == [True] == [1.0]``, yet
    they select different nodes (values are compared as text)."""
    from policies.topology import Topology

    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n-{text}", "labels": {"k": text}},
              "status": {"allocatable": {"cpu": "1", "pods": "10"}}} for text in ("1", "True", "1.0")]
    topo = Topology.from_objects(nodes, Policy())
    masks = [feasibility.eligible_mask(topo, affinity([v])).mask.tolist() for v in (1, True, 1.0)]
    assert affinity([1]) == affinity([True]) == affinity([1.0])
    assert masks == [[True, False, False], [False, True, False], [False, False, True]]


def test_mixed_keys_and_values_marshal_cannot_write_fall_back_to_json() -> None:
    class Text(str):
        pass

    odd: list[dict[str, Any]] = [{"nodeSelector": {1: "a", "b": Text("c")}},
                                 {"nodeSelector": {"d": datetime.date(2024, 1, 2)}},
                                 {"nodeSelector": {Text("k"): "v"}}]
    for spec in odd:
        signature = pod_specs._signature(spec)
        assert signature == old_signature(spec) and signature.startswith("[")
    plain = {"nodeSelector": {"k": "v"}}
    assert pod_specs._signature(plain).startswith("m")
    # The same text in another type is another signature (a miss, never a wrong hit).
    assert pod_specs._signature(plain) != pod_specs._signature(odd[2])


SCALARS = st.sampled_from([None, True, False, 0, 1, 1.0, 0.0, -0.0, "1", "0", "", "True", "a", 2**70])
KEYS = st.sampled_from(["a", "b", "1", 1, True, 1.0, None])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) |
                      st.dictionaries(KEYS, inner, max_size=3), max_leaves=8)
SPECS = st.fixed_dictionaries({}, optional={
    "tolerations": VALUES, "nodeSelector": VALUES, "nodeName": VALUES,
    "affinity": st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries(
        {"requiredDuringSchedulingIgnoredDuringExecution": VALUES})}) | VALUES})


TWINS: list[list[Any]] = [[1, 1.0, True, "1", "True", "1.0"], [0, 0.0, -0.0, False, "0", "False", None, ""],
                          ["a", "b"], [2**70, float(2**70)]]


def twin(value: Any, data: st.DataObject) -> Any:
    """``value`` with some scalars and keys swapped for look-alikes: equal in Python
    (``1 == 1.0 == True``) or equal as text, but not the same input."""
    if isinstance(value, dict):
        return {twin(k, data): twin(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [twin(v, data) for v in value]
    family = next((f for f in TWINS if any(type(x) is type(value) and x == value for x in f)), None)
    return data.draw(st.sampled_from(family)) if family else value


@settings(max_examples=400, deadline=None)
@given(SPECS, st.data())
def test_equal_signatures_mean_equal_inputs_of_equal_types(a: dict[str, Any], data: st.DataObject) -> None:
    b = twin(a, data)
    sig_a, sig_b = pod_specs._signature(a), pod_specs._signature(b)
    if sig_a == sig_b:
        assert parts(a) == parts(b)
    if parts(a) == parts(b) and list(_keys(a)) == list(_keys(b)):
        assert sig_a == sig_b   # same values, same key order: the same signature


@settings(max_examples=200, deadline=None)
@given(SPECS)
def test_signature_is_a_function_of_the_value(spec: dict[str, Any]) -> None:
    """A copy (other objects, other reference counts) signs the same: the memo and the
    eligibility cache hit across reviews of one template."""
    copy = json.loads(json.dumps(spec)) if all(isinstance(k, str) for k in _keys(spec)) else None
    assert pod_specs._signature(spec) == pod_specs._signature(dict(spec))
    if copy is not None and tagged(copy) == tagged(spec):
        assert pod_specs._signature(copy) == pod_specs._signature(spec)


def _keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


# -- scheduler units ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.fractions(max_denominator=10**6), st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
def test_scheduler_units_round_up_exactly(amount: Fraction, resource: str) -> None:
    scale = 1000 if resource == "cpu" else 1
    assert scheduler_units(resource, amount) == math.ceil(amount * scale)
    whole = Fraction(int(amount))
    assert scheduler_units(resource, whole) == math.ceil(whole * scale)


# -- the question -----------------------------------------------------------------------------


def bench_job() -> dict[str, Any]:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import webhook_bench

    return webhook_bench.submitted(webhook_bench.pytorch_job(64))


def reference_units(workload: Workload) -> list[tuple[tuple[str, int], ...]]:
    sets = [p for p in workload.gang_pod_sets if p.gang_count > 0 or p.replicas > 0]
    found = []
    for p in sets:
        units = {r: max(0, math.ceil(q * (1000 if r == "cpu" else 1))) for r, q in p.requests.items()}
        units["pods"] = units.get("pods", 0) + 1
        found.append(tuple(units.items()))
    return found


def test_one_template_one_question_from_one_parse_to_the_next() -> None:
    policy = Policy()
    raw = json.dumps(bench_job())
    first, second = (build_workload(json.loads(raw)) for _ in range(2))
    assert first is not None and second is not None
    q1, q2 = feasibility.fit_question(first, policy), feasibility.fit_question(second, policy)
    assert q1 is not None and q1 == q2 and hash(q1) == hash(q2)
    master, worker = q1.demands
    assert (master.name, worker.name) == ("Master", "Worker")
    assert master.signature == worker.signature and master.units == worker.units
    assert [d.units for d in q1.demands] == reference_units(first)
    assert q1.label_keys == (USAGE, "nvidia.com/gpu.product")
    assert q1.gpu_resources == frozenset({"nvidia.com/gpu"})
    assert q1.queue is not None and q1.queue.name == "research"
    assert (master.hard, master.want, worker.hard, worker.want) == (1, 1, 63, 63)


def test_another_cpu_request_is_another_question() -> None:
    policy = Policy()
    job = bench_job()
    other = json.loads(json.dumps(job))
    other["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "requests"]["cpu"] = "31500m"
    first, second = build_workload(job), build_workload(other)
    assert first is not None and second is not None
    q1, q2 = feasibility.fit_question(first, policy), feasibility.fit_question(second, policy)
    assert q1 is not None and q2 is not None and q1 != q2
    assert q1.demands[0] == q2.demands[0]
    assert dict(q2.demands[1].units)["cpu"] == 31500 and dict(q1.demands[1].units)["cpu"] == 32000


def corpus_workloads() -> list[Workload]:
    found = []
    for path in corpus_files():
        for doc in iter_documents(path.read_bytes()):
            if not isinstance(doc, Document) or not is_kubernetes_object(doc.data):
                continue
            try:
                workload = build_workload(doc.data)
            except ShapeError:
                continue
            if workload is not None:
                found.append(workload)
    return found


def test_corpus_questions_match_the_reference(corpus_dir: Path) -> None:
    """Over the real manifests: units as the Fraction arithmetic gives them, and pod sets
    share a signature only where the sorted-JSON signature said their inputs are equal."""
    policy = Policy()
    by_new: dict[str, Any] = {}
    checked = 0
    for workload in corpus_workloads():
        question = feasibility.fit_question(workload, policy)
        demands = feasibility.demands_for(workload)
        if demands is None:
            assert question is None
            continue
        assert [d.units for d in demands] == reference_units(workload)
        sets = [p for p in workload.gang_pod_sets if p.gang_count > 0 or p.replicas > 0]
        for demand, pod_set in zip(demands, sets, strict=True):
            reference = (old_signature(pod_set.spec), parts(pod_set.spec))
            assert by_new.setdefault(demand.signature, reference) == reference
            assert pod_specs._label_keys(demand.placement) == pod_specs._label_keys(pod_set.spec)
            checked += 1
        if question is not None:
            keys = sorted({k for d in demands for k in pod_specs._label_keys(d.placement)})
            assert list(question.label_keys) == keys
    assert checked > 100
