"""Pod spec facts shared by content (``PodSet.facts``): within an object and across objects.

Sharing is only an optimisation: every test here compares against an evaluation with the
shared facts cleared, or checks that what must not be shared is not.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.gpu import gpus_per_pod, raw_gpu_resources, spec_gpu_resources
from policies.specfacts import MAX_SPEC_FACTS, SPEC_FACTS
from policies.workload import build_workload


def _job(master_spec: dict[str, Any], worker_spec: dict[str, Any], name: str = "train") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "labels": {"maip.mxsf.io/usage": "training"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": master_spec}},
                "Worker": {"replicas": 3, "template": {"spec": worker_spec}}}}}


def _spec(gpus: Any = "8", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"schedulerName": "volcano",
            "containers": [{"name": "pytorch", "image": "pytorch",
                            "resources": {"requests": {"nvidia.com/gpu": gpus},
                                          "limits": {"nvidia.com/gpu": gpus}, **(extra or {})}}],
            "tolerations": [{"key": "maip.mxsf.io/node.usage", "operator": "Equal", "value": 1,
                             "effect": "NoSchedule"}]}


def _outcome(doc: Any, policy: Policy) -> list[tuple[str, str, str]]:
    result = evaluate(copy.deepcopy(doc), policy)
    return [(f.rule, f.message, f.path) for f in result.findings] + [("patch", json.dumps(result.patch), "")]


def _fresh_outcome(doc: Any, policy: Policy) -> list[tuple[str, str, str]]:
    SPEC_FACTS.clear()
    return _outcome(doc, policy)


def _round_trip(doc: Any) -> Any:
    """The document as a review body would bring it: parsed from JSON text."""
    return json.loads(json.dumps(doc))


def test_equal_specs_share_facts_within_and_across_objects() -> None:
    first = build_workload(_round_trip(_job(_spec(), _spec())))
    second = build_workload(_round_trip(_job(_spec(), _spec(), name="other")))
    assert first is not None and second is not None
    master, worker = first.pod_sets
    assert master.facts is worker.facts
    assert second.pod_sets[0].facts is master.facts


@pytest.mark.parametrize("other", [1.0, True])
def test_specs_equal_but_for_types_do_not_share(other: Any) -> None:
    """``==`` takes 1, 1.0 and True for one another; rules do not: a toleration of value
    1.0 or True does not tolerate the taint ``...=1`` its nodeSelector pins, one of 1 does."""
    def pinned(value: Any) -> dict[str, Any]:
        spec = _spec()
        spec["nodeSelector"] = {"nvidia.com/gpu.product": "1"}
        spec["tolerations"] = [{"key": "nvidia.com/gpu.product", "operator": "Equal", "value": value,
                                "effect": "NoSchedule"}]
        return spec

    assert pinned(1) == pinned(other)
    doc = _job(pinned(1), pinned(other))
    workload = build_workload(_round_trip(doc))
    assert workload is not None
    assert workload.pod_sets[0].facts is not workload.pod_sets[1].facts
    result = evaluate(_round_trip(doc), Policy())
    assert [f.path for f in result.findings if f.rule == "GG102"] == [
        "/spec/pytorchReplicaSpecs/Worker/template/spec"]


def test_key_order_is_part_of_the_content() -> None:
    """Resources listed in another order are reported in that order: no sharing."""
    one = _spec(extra={"requests": {"nvidia.com/gpu": "1.5", "cpu": "x"}})
    two = _spec(extra={"requests": {"cpu": "x", "nvidia.com/gpu": "1.5"}})
    assert one == two
    workload = build_workload(_round_trip(_job(one, two)))
    assert workload is not None
    assert workload.pod_sets[0].facts is not workload.pod_sets[1].facts
    policy = Policy()
    doc = _job(one, two)
    assert _outcome(doc, policy) == _fresh_outcome(doc, policy)


def test_paths_are_each_pod_sets_own() -> None:
    """Shared facts carry paths from the pod spec; findings name each pod set's own path."""
    doc = _job(_spec("1.5"), _spec("1.5"))
    result = evaluate(_round_trip(doc), Policy())
    paths = sorted(f.path for f in result.findings if f.rule == "GG503")
    assert paths == [f"/spec/pytorchReplicaSpecs/{name}/template/spec/containers/0/resources/{part}/"
                     "nvidia.com~1gpu" for name in ("Master", "Worker") for part in ("limits", "requests")]
    workload = build_workload(_round_trip(doc))
    assert workload is not None
    for pod_set in workload.pod_sets:
        assert [e.path for e in raw_gpu_resources(pod_set, Policy())] == [
            pod_set.spec_path + e.path for e in spec_gpu_resources(pod_set, Policy())]


def test_request_errors_carry_each_pod_sets_path() -> None:
    doc = _job(_spec("lots"), _spec("lots"))
    workload = build_workload(_round_trip(doc))
    assert workload is not None
    assert workload.pod_sets[0].facts is workload.pod_sets[1].facts
    assert [[path for path, _ in p.request_errors] for p in workload.pod_sets] == [
        [f"/spec/pytorchReplicaSpecs/{name}/template/spec/containers/0/resources/{part}/nvidia.com~1gpu"
         for part in ("limits", "requests")] for name in ("Master", "Worker")]


def test_facts_keep_no_part_of_the_document() -> None:
    """A document changed after it was evaluated changes nothing for the next one."""
    bad = {"nvidia.com/gpu": ["8"]}  # not a quantity: kept in the facts as written
    spec = _spec(extra={"limits": dict(bad)})
    policy = Policy()
    original = _job(spec, spec)
    expected = _fresh_outcome(original, policy)
    first = _round_trip(original)
    evaluate(first, policy)
    for name in ("Master", "Worker"):
        pod_spec = first["spec"]["pytorchReplicaSpecs"][name]["template"]["spec"]
        pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].append("9")
        pod_spec["tolerations"][0]["value"] = "changed"
        pod_spec["containers"][0]["name"] = "changed"
    assert _outcome(original, policy) == expected


def test_policy_dependent_facts_belong_to_their_policy() -> None:
    """One spec, two policies with different GPU resources: each answers for itself, in
    either order, as a fresh evaluation would."""
    doc = _job(_spec(), _spec())
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"amd.com/gpu": "2"}, "limits": {"amd.com/gpu": "2"}}
    nvidia = Policy()
    amd = policy_from_data({"gpu": {"resources": {"amd.com/gpu": "amd.com/gpu.product"}}}, "amd")
    expected = {id(p): _fresh_outcome(doc, p) for p in (nvidia, amd)}
    for policy in (nvidia, amd, nvidia, amd):
        assert _outcome(doc, policy) == expected[id(policy)]
    workload = build_workload(_round_trip(doc))
    assert workload is not None
    assert [gpus_per_pod(p, amd) for p in workload.pod_sets] == [2, 8]  # resources add to the defaults
    assert [gpus_per_pod(p, nvidia) for p in workload.pod_sets] == [0, 8]


def test_a_workload_label_pinning_a_product_is_not_shared_across_objects() -> None:
    """Pinned products depend on the workload's labels as well as the spec."""
    plain = _job(_spec(), _spec())
    labelled = copy.deepcopy(plain)
    labelled["metadata"]["labels"]["nvidia.com/gpu.product"] = "H100"
    policy = Policy()
    expected = [_fresh_outcome(plain, policy), _fresh_outcome(labelled, policy)]
    assert expected[0] != expected[1]
    assert [_outcome(plain, policy), _outcome(labelled, policy), _outcome(plain, policy)] == [
        expected[0], expected[1], expected[0]]


def test_the_cache_is_bounded() -> None:
    SPEC_FACTS.clear()
    for i in range(MAX_SPEC_FACTS + 20):
        build_workload(_round_trip(_job(_spec(str(i + 1)), _spec(str(i + 1)))))
    assert len(SPEC_FACTS) == MAX_SPEC_FACTS


def test_specs_marshal_cannot_take_are_not_shared() -> None:
    """YAML dates (and anything marshal refuses) are fine: each pod set has its own facts."""
    import datetime

    spec = _spec()
    spec["containers"][0]["env"] = [{"name": "SINCE", "value": datetime.date(2024, 1, 1)}]
    workload = build_workload(_job(spec, copy.deepcopy(spec)))
    assert workload is not None
    assert workload.pod_sets[0].facts is not workload.pod_sets[1].facts
    assert [gpus_per_pod(p, Policy()) for p in workload.pod_sets] == [8, 8]



def _cpu_spec(cpu: str) -> dict[str, Any]:
    spec = _spec()
    for part in ("requests", "limits"):
        spec["containers"][0]["resources"][part]["cpu"] = cpu
    return spec


def test_specs_equal_but_for_cpu_share_blind_facts_only() -> None:
    """A sweep of CPU requests over one template: the full facts (which read the amounts)
    are each spec's own; the blind facts (pins, usage, eligibility) are shared."""
    a, b = (build_workload(_round_trip(_job(_cpu_spec(cpu), _cpu_spec(cpu), name=f"j{cpu}")))
            for cpu in ("31900m", "32"))
    assert a is not None and b is not None
    assert a.pod_sets[0].facts is not b.pod_sets[0].facts
    assert a.pod_sets[0].blind_facts is b.pod_sets[0].blind_facts
    other = build_workload(_round_trip(_job(_spec("4"), _spec("4"))))  # another GPU count
    assert other is not None and other.pod_sets[0].blind_facts is not a.pod_sets[0].blind_facts


def test_gpu_facts_leave_the_blind_store_when_a_gpu_resource_is_named_cpu() -> None:
    """GG501-GG503 read the amounts of the policy's GPU resources: blind only while none of
    them is ``cpu`` or ``memory``; the verdicts follow the amounts either way."""
    from policies.gpu import gpu_facts_blind

    plain = Policy()
    odd = policy_from_data({"gpu": {"resources": {"cpu": "example.com/cpu.product"}}})
    assert gpu_facts_blind(plain) and not gpu_facts_blind(odd)
    whole, fractional = (_job(_cpu_spec(cpu), _cpu_spec(cpu), name=f"j{cpu}") for cpu in ("2", "1500m"))
    for doc in (whole, fractional, whole):   # a fractional "GPU" between two whole ones
        found = [f.rule for f in evaluate(_round_trip(doc), odd).findings if f.rule == "GG503"]
        assert bool(found) == (doc is fractional), (doc["metadata"]["name"], found)
