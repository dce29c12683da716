"""What a repeated template skips on the way to its feasibility answer, held to the long way.

- ``_SpecFit`` (units per pod, eligibility signature) lives in the pod spec's shared
  facts: jobs of one template reuse it, and it equals what the spec gives worked out anew;
- ``fit_question`` finds the question by what the workload holds (its specs by their
  facts): what the shape holds changes the question;
- the outcome memo answers by the topology's stamp while nothing has changed: every kind
  of change moves the stamp (memoised verdicts equal fresh ones: tests/test_memo_switch.py);
- the feasibility rules load :mod:`policies.feasibility` only when a topology is given.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from feasibility_helpers import Obj, gpu_node, pod, podgroup, queue
from test_feasibility_cold import POLICIES
from test_feasibility_shortcuts import bench_job, fields_of

from policies import specfacts
from policies.config import Policy
from policies.feasibility import FitQuestion, fit_question, questions, specs
from policies.topology import Topology
from policies.workload import build_workload

ROOT = Path(__file__).resolve().parent.parent


def _clear_caches() -> None:
    specfacts.SPEC_FACTS.clear()
    questions._QUESTIONS.clear()
    questions._QUESTIONS_BY_SHAPE.clear()
    questions._PLACEMENTS.clear()


def _asked(doc: Obj, policy: Policy) -> FitQuestion | None:
    found = build_workload(copy.deepcopy(doc))
    assert found is not None
    return fit_question(found, policy)


def _asked_fresh(doc: Obj, policy: Policy) -> FitQuestion | None:
    _clear_caches()
    return _asked(doc, policy)


def test_a_repeated_template_reuses_its_spec_fit_and_question() -> None:
    policy = Policy()
    # as review bodies bring them: parsed from JSON text (see policies.specfacts.spec_facts)
    first, second = (build_workload(json.loads(json.dumps(bench_job()))) for _ in range(2))
    assert first is not None and second is not None
    q1, q2 = fit_question(first, policy), fit_question(second, policy)
    assert q1 is not None and q1 is q2
    fit = first.pod_sets[0].facts[questions._FIT_FACTS]
    assert all(p.facts[questions._FIT_FACTS] is fit for p in first.pod_sets + second.pod_sets)
    # what the facts hold is what the spec gives, worked out anew
    spec = first.pod_sets[0].spec
    assert fit.signature == specs._signature(spec)
    assert dict(fit.units) == {"cpu": 32000, "nvidia.com/gpu": 8, "pods": 1}
    assert q1.demands[0].signature is q1.demands[1].signature


def test_equal_content_by_other_facts_asks_the_equal_question() -> None:
    """``cpu: 32`` and ``cpu: "32"`` are other specs (other facts), the same question."""
    policy = Policy()
    as_text, as_number = bench_job(cpu="32"), bench_job()
    for task in as_number["spec"]["tasks"]:
        for section in ("requests", "limits"):
            task["template"]["spec"]["containers"][0]["resources"][section]["cpu"] = 32
    q1, q2 = _asked(as_text, policy), _asked(as_number, policy)
    assert q1 is not None and q1 == q2 and fields_of(q1) == fields_of(q2)


def test_what_the_shape_holds_changes_the_question() -> None:
    """Each input the shape key names, changed alone, gives the question built anew."""
    policy = Policy()
    base = bench_job()

    def changed(edit: Any) -> Obj:
        doc = copy.deepcopy(base)
        edit(doc)
        return doc

    variants = [
        changed(lambda d: d["spec"].update(minAvailable=2)),             # gang minimum: flexible
        changed(lambda d: d["spec"].update(queue="q2")),                  # queue
        changed(lambda d: d["metadata"].update(namespace="other")),       # namespace
        changed(lambda d: d["spec"]["tasks"][1].update(replicas=5)),      # replicas
        changed(lambda d: d["spec"]["tasks"][1].update(name="w2")),       # name (and path)
        changed(lambda d: d["spec"]["tasks"][0]["template"]["metadata"]["annotations"].update(
            {"metax-tech.com/gpu-group-size": "8"})),                     # group size
        changed(lambda d: d["spec"]["tasks"][1]["template"]["spec"].update(
            nodeSelector={"zone": "a"})),                                 # placement
        changed(lambda d: d["spec"]["tasks"][1].update(minAvailable=0)),  # per-task minimum
    ]
    for other_policy in (policy, POLICIES[1]):
        for doc in [base, *variants]:
            warm = _asked(doc, other_policy)
            fresh = _asked_fresh(doc, other_policy)
            assert warm is not None and fresh is not None
            assert warm == fresh and fields_of(warm) == fields_of(fresh)
        warm_all = [_asked(doc, other_policy) for doc in [base, *variants]]
        assert len({fields_of(q) for q in warm_all if q is not None}) == len(variants) + 1


def test_every_kind_of_change_moves_the_stamp() -> None:
    topo = Topology.from_objects([gpu_node("n0", labels={"zone": "a"}), gpu_node("n1"), queue("q1")])
    changes: list[tuple[str, Obj]] = [
        ("MODIFIED", gpu_node("n0", labels={"zone": "b"})),                    # a label
        ("MODIFIED", {**gpu_node("n1"), "spec": {"taints": []}}),               # taints
        ("MODIFIED", {**gpu_node("n1"), "spec": {"unschedulable": True}}),      # a cordon
        ("MODIFIED", gpu_node("n1", gpus=4)),                                   # allocatable
        ("ADDED", gpu_node("n2")),                                              # the node set
        ("ADDED", pod("p", "n0", {"cpu": "1"})),                                # what is used
        ("ADDED", queue("q2")),                                                 # queues
        ("ADDED", podgroup("pg", "q1", {"cpu": "1"})),                          # pod groups
        ("ADDED", {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                   "metadata": {"name": "t", "namespace": "kube-system"},
                   "spec": {"root": {"name": "root", "max": {"cpu": 10}}}}),     # quota
        ("ADDED", {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                   "metadata": {"name": "h"},
                   "spec": {"tier": 1, "members": [{"type": "Node", "selector": {
                       "exactMatch": {"name": "n0"}}}]}}),                         # hypernodes
    ]
    for event, obj in changes:
        before = (topo.state_stamp(), topo.state_versions(["zone"]))
        topo.apply(event, obj)
        after = (topo.state_stamp(), topo.state_versions(["zone"]))
        assert after[1] != before[1], obj
        assert after[0] > before[0], obj
    stamp = topo.state_stamp()
    topo.apply("MODIFIED", gpu_node("n0", labels={"zone": "b"}))  # nothing new: a heartbeat
    assert topo.state_stamp() == stamp


def test_the_rules_load_feasibility_only_with_a_topology() -> None:
    script = (
        "import sys\n"
        "from policies.config import Policy\n"
        "from policies.engine import evaluate\n"
        f"doc = {bench_job()!r}\n"
        "evaluate(doc, Policy())\n"
        "assert 'policies.feasibility' not in sys.modules\n"
        "result = evaluate(doc, Policy(), [])\n"
        "assert 'policies.feasibility' in sys.modules\n"
        "assert [f.rule for f in result.findings if f.rule == 'GG406'] == ['GG406']\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


def test_specs_not_shared_still_share_their_question() -> None:
    """A spec too big to share facts gets a fit of its own per object: the shape misses,
    and the question is found by its content."""
    policy = Policy()
    doc = bench_job()
    for task in doc["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["env"] = [
            {"name": f"V{i}", "value": "x" * 100} for i in range(200)]   # > 16 KiB of spec
    first, second = (build_workload(json.loads(json.dumps(doc))) for _ in range(2))
    assert first is not None and second is not None
    assert first.pod_sets[0].facts is not second.pod_sets[0].facts
    q1, q2 = fit_question(first, policy), fit_question(second, policy)
    assert q1 is not None and q1 is q2
    fresh = _asked_fresh(doc, policy)
    assert fresh is not None and fields_of(fresh) == fields_of(q1)
