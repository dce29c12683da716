"""Shortcuts of the per-review feasibility work, each held to what it stands for.

- :func:`fit_question` hands out one question object per distinct input (with the
  policy): it must equal, field for field, what building it afresh gives, share nothing
  with the documents it was asked from, and stay bounded;
- :class:`FitQuestion` compares and hashes through one flat tuple: equal exactly when
  its fields are;
- a capacity that is one number on every eligible node (a uniform one) is summed,
  checked for zeros, turned into offers and supernode slots without reading it: each
  must equal the computation on the array;
- the free resources now are copied only when a placement writes to them: the shared
  array never changes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
from feasibility_helpers import USAGE, Obj, question_of, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_feasibility_cold import POLICIES, clusters, drawn_check, jobs, outcome, reference_offers

from policies.config import Policy
from policies.feasibility import FitQuestion, capacity, fit_question, packing, questions, specs
from policies.feasibility import supernodes as gpu_groups
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

GPU = "nvidia.com/gpu"


def bench_job(cpu: str = "32", tolerations: list[Obj] | None = None) -> Obj:
    spec: Obj = {"schedulerName": "volcano",
                 "tolerations": tolerations if tolerations is not None else [
                     {"key": USAGE, "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
                 "nodeSelector": {"nvidia.com/gpu.product": "H100"},
                 "containers": [{"name": "m", "image": "x", "resources": {
                     "requests": {"cpu": cpu, GPU: "8"}, "limits": {"cpu": cpu, GPU: "8"}}}]}
    template = {"metadata": {"annotations": {"metax-tech.com/gpu-group-size": "16"}}, "spec": spec}
    tasks = [{"name": "master", "replicas": 1, "template": template},
             {"name": "worker", "replicas": 3, "template": json.loads(json.dumps(template))}]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "x"},
            "spec": {"schedulerName": "volcano", "minAvailable": 4, "queue": "q1", "tasks": tasks}}


def fields_of(question: FitQuestion) -> tuple[Any, ...]:
    """The question's fields as a dataclass compares them (the demands by their compared
    fields), the reference for its flat-tuple equality."""
    def compared(obj: Any) -> tuple[Any, ...]:
        return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare)

    out = []
    for f in dataclasses.fields(question):
        if f.compare and not f.name.startswith("_"):
            value = getattr(question, f.name)
            out.append(tuple(compared(d) for d in value) if f.name == "demands" else value)
    return tuple(out)


def test_one_question_object_per_input_and_policy() -> None:
    policy = Policy()
    first, second = question_of(bench_job(), policy), question_of(bench_job(), policy)
    assert first is second
    other_policy = question_of(bench_job(), Policy())
    assert other_policy is not first and other_policy == first and hash(other_policy) == hash(first)
    assert question_of(bench_job(cpu="31"), policy) != first


def test_a_kept_question_shares_nothing_with_the_document() -> None:
    policy = Policy()
    doc = bench_job(tolerations=[{"key": "k-shared", "operator": "Exists"}])
    question = question_of(doc, policy)
    placement = question.demands[0].placement
    assert specs._signature(placement) == question.demands[0].signature
    # The document is edited after it was asked about: the kept question does not change.
    for task in doc["spec"]["tasks"]:
        task["template"]["spec"]["tolerations"][0]["key"] = "edited"
        task["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = "edited"
    assert placement["tolerations"] == [{"key": "k-shared", "operator": "Exists"}]
    assert placement["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert specs._signature(placement) == question.demands[0].signature
    again = question_of(bench_job(tolerations=[{"key": "k-shared", "operator": "Exists"}]), policy)
    assert again is question
    edited = question_of(doc, policy)
    assert edited != question and edited.demands[0].placement["tolerations"][0]["key"] == "edited"


def test_kept_questions_are_bounded() -> None:
    policy = Policy()
    for cpu in range(questions.QUESTIONS_KEPT + 10):
        question_of(bench_job(cpu=f"{cpu + 1}m"), policy)
        assert len(questions._QUESTIONS) <= questions.QUESTIONS_KEPT


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_question_equality_is_field_equality(data: st.DataObject) -> None:
    pol = data.draw(st.sampled_from(POLICIES))
    docs = [data.draw(jobs()) for _ in range(2)]
    if data.draw(st.booleans()):
        docs[1] = json.loads(json.dumps(docs[0]))
    found = []
    for doc in docs:
        workload = build_workload(run(doc, None, pol).mutated or doc)
        assert workload is not None
        found.append(fit_question(workload, pol))
    one, two = found
    if one is None or two is None:
        return
    # Built afresh (not the kept object): equal to the kept one, field for field.
    rebuilt = FitQuestion(*(getattr(one, f.name) for f in dataclasses.fields(one) if f.init))
    assert rebuilt == one and hash(rebuilt) == hash(one) and fields_of(rebuilt) == fields_of(one)
    assert (one == two) == (fields_of(one) == fields_of(two))
    if one == two:
        assert hash(one) == hash(two)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_uniform_capacity_shortcuts_equal_the_array_computations(data: st.DataObject) -> None:
    drawn = drawn_check(data)
    if drawn is None:
        return
    topo, question, sets, free_now, known = drawn
    alloc = topo.alloc[: topo.slots]
    for _ in range(3):     # whole matrices, blocks built, blocks kept
        known.clear()
        empty = [capacity._empty_capacity_of(topo, s) for s in sets]
        now = [capacity._now_capacity_of(topo, known, s, free_now) for s in sets]
        for found, matrix in ((empty, alloc), (now, free_now)):
            for s, (cap, uniform) in zip(sets, found, strict=True):
                assert cap.tolist() == s.capacity(matrix).tolist()
                if uniform is not None:
                    assert cap.tolist() == np.where(s.elig.mask, uniform, 0).tolist()
                assert capacity._capacity_sum(cap, uniform, s.elig.count) == int(cap.sum())
                full = capacity._full(uniform)
                assert full is None or full == (int(np.count_nonzero(cap)) == s.elig.count)
            active = [(s, cap) for s, (cap, _) in zip(sets, found, strict=True)]
            full_flags = [capacity._full(uniform) for _, uniform in found]
            assert dict(packing._offers(topo, active, matrix, matrix is alloc, full_flags)) == \
                reference_offers(active, matrix)
        plan = gpu_groups._group_plan(question, sets)
        supernodes = topo.supernodes(question.supernode_labels)
        if plan is not None and supernodes:
            caps_empty = [cap for cap, _ in empty]
            expected = gpu_groups._supernode_slots(topo, sets, plan, caps_empty, supernodes,
                                                    question.supernode_labels, alloc)
            got = gpu_groups._empty_supernode_slots(topo, sets, plan, caps_empty, supernodes,
                                                     question.supernode_labels, alloc,
                                                     empty[plan.gpu_sets[0]][1])
            assert got.tolist() == expected.tolist()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_shared_free_resources_never_change(data: st.DataObject) -> None:
    objects = data.draw(clusters())
    pol = data.draw(st.sampled_from(POLICIES))
    snapshot = ClusterSnapshot("c", Topology.from_objects(objects))
    topo = snapshot.topology
    expected = (topo.alloc[: topo.slots] - topo.used[: topo.slots]).tolist()
    for doc in data.draw(st.lists(jobs(), min_size=1, max_size=4)):
        outcome(doc, snapshot, pol)
        free_now, _ = capacity._now(topo)
        assert not free_now.flags.writeable and free_now.tolist() == expected
