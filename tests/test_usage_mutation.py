"""Usage injection (GG101/GG102) as JSON Patch, the merging rules of SPEC section 4, and the
usage checks GG103-GG106."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.findings import join_pointer, split_pointer
from policies.kinds import KINDS, KindSpec
from policies.tolerations import tolerates
from policies.usage import usage_config
from policies.workload import build_workload, resolve

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "usage"
POLICY = Policy()
CFG = usage_config(POLICY)
USAGE = CFG.node_key
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"
GPU_CONTAINER = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}


def tol(key: str, value: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


# -- a minimal manifest of every kind, built from the kind table itself ----------------------

def _set(doc: dict[str, Any], pointer: str, value: Any) -> None:
    tokens = split_pointer(pointer)
    node = doc
    for token in tokens[:-1]:
        node = node.setdefault(token, {})
    node[tokens[-1]] = value


def manifest(kind: KindSpec, pod_spec: dict[str, Any], usage: str | None = "training") -> dict[str, Any]:
    """An object of ``kind`` whose every pod template has ``pod_spec`` (copied)."""
    api = f"{kind.group}/v1" if kind.group else "v1"
    labels = {CFG.workload_key: usage} if usage else {}
    doc: dict[str, Any] = {"apiVersion": api, "kind": kind.kind,
                           "metadata": {"name": "demo", "namespace": "ml", "labels": labels}}
    for source in kind.pod_sets:
        template = {"spec": copy.deepcopy(pod_spec)}
        entry: dict[str, Any] = template
        if source.template:  # a path of keys for a JobSet ("template/spec/template")
            entry = {}
            _set(entry, "/" + source.template, template)
        if source.layout == "single":
            if source.at:  # several sources may share one entry (LWS leader and worker templates)
                found = resolve(doc, source.at)
                if isinstance(found, dict):
                    found.update(entry)
                else:
                    _set(doc, source.at, entry)
            else:
                doc.update(entry)
        elif source.layout == "list":
            _set(doc, source.at, [{source.name_key: "g0", **entry},
                                  {source.name_key: "g1", **copy.deepcopy(entry)}])
        else:
            _set(doc, source.at, {"Master": entry, "Worker": copy.deepcopy(entry)})
    return doc


POD_KINDS = [k for k in KINDS if k.pod_sets]


def _templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    workload = build_workload(doc)
    assert workload is not None
    return [(p.path, p.spec) for p in workload.pod_sets]


def _apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The RFC 6902 reference implementation, not ours."""
    return jsonpatch.JsonPatch(ops).apply(doc)


def _usage_exprs(term: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in term.get("matchExpressions", []) if e.get("key") == USAGE]


@pytest.mark.parametrize("kind", POD_KINDS, ids=lambda k: k.label)
def test_every_kind_minimal_manifest_gets_usage_in_every_template(kind: KindSpec) -> None:
    doc = manifest(kind, {"containers": [GPU_CONTAINER]})
    result = evaluate(doc, POLICY)
    assert result.patch, kind.label
    patched = _apply(doc, result.patch)
    assert patched == result.mutated
    templates = _templates(patched)
    assert len(templates) == len(kind.pod_sets) + sum(1 for s in kind.pod_sets if s.layout != "single")
    for path, spec in templates:
        affinity = spec["affinity"]["nodeAffinity"]
        assert affinity[REQ]["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": USAGE, "operator": "In", "values": ["training", "hybrid"]}]}], path
        assert affinity[PREF] == [{"weight": 100, "preference": {"matchExpressions": [
            {"key": USAGE, "operator": "In", "values": ["training"]}]}}], path
        assert spec["tolerations"] == [tol(USAGE, "training"), tol(USAGE, "hybrid")], path
    fixable = [f for f in result.findings if f.rule == "GG101"]
    assert len(fixable) == len(templates) and all(f.fixable for f in fixable)
    assert evaluate(patched, POLICY).patch == []


EXISTING: dict[str, Any] = {
    "containers": [GPU_CONTAINER],
    "affinity": {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
        "nodeAffinity": {
            REQ: {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]},
            PREF: [{"weight": 5, "preference": {"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]}]}}],
        },
    },
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    tol(USAGE, "hybrid")],
}


@pytest.mark.parametrize("kind", POD_KINDS, ids=lambda k: k.label)
def test_every_kind_existing_affinity_and_tolerations_are_merged(kind: KindSpec) -> None:
    doc = manifest(kind, EXISTING)
    result = evaluate(doc, POLICY)
    patched = _apply(doc, result.patch)
    for path, spec in _templates(patched):
        assert spec["affinity"]["podAntiAffinity"] == EXISTING["affinity"]["podAntiAffinity"]
        terms = spec["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
        assert len(terms) == 2, "terms are ORed: none may be added"
        assert terms[0]["matchExpressions"][0] == {"key": "zone", "operator": "In", "values": ["a"]}
        assert terms[1]["matchFields"] == EXISTING["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"][1][
            "matchFields"]
        for term in terms:
            assert _usage_exprs(term) == [{"key": USAGE, "operator": "In", "values": ["training", "hybrid"]}]
        preferred = spec["affinity"]["nodeAffinity"][PREF]
        assert preferred[0]["weight"] == 5 and len(preferred) == 2
        assert spec["tolerations"] == [*EXISTING["tolerations"], tol(USAGE, "training")], path
        # the ops append (/-) to existing lists: they never replace the user's entries
        for op in result.patch:
            assert op["op"] == "add"
            assert not op["path"].endswith("/tolerations") and not op["path"].endswith("/nodeSelectorTerms")
    assert evaluate(patched, POLICY).patch == []


def pod(spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml",
                         "labels": {CFG.workload_key: "training"} if labels is None else labels},
            "spec": {"containers": [GPU_CONTAINER], **spec}}


def test_ored_terms_each_get_the_usage_expression_and_none_is_created() -> None:
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
             {"matchExpressions": []}]
    doc = pod({"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": terms}}}})
    ops = evaluate(doc, POLICY).patch
    paths = [op["path"] for op in ops]
    base = f"/spec/affinity/nodeAffinity/{REQ}/nodeSelectorTerms"
    assert [f"{base}/{i}/matchExpressions/-" for i in range(3)] == [p for p in paths if p.startswith(base)]
    patched = _apply(doc, ops)
    got = patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    assert len(got) == 3 and all(_usage_exprs(t) for t in got)
    assert got[0]["matchExpressions"][0]["values"] == ["a"]
    assert got[1]["matchExpressions"][0]["values"] == ["b"]


def test_no_terms_creates_one_term() -> None:
    required: dict[str, Any]
    for required in ({}, {"nodeSelectorTerms": []}, {"nodeSelectorTerms": None}):
        doc = pod({"affinity": {"nodeAffinity": {REQ: required}}})
        patched = _apply(doc, evaluate(doc, POLICY).patch)
        assert patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": USAGE, "operator": "In", "values": ["training", "hybrid"]}]}]


def test_users_own_usage_expression_is_respected() -> None:
    own = {"key": USAGE, "operator": "In", "values": ["training"]}   # stricter than the pool: fine
    doc = pod({"affinity": {"nodeAffinity": {
        REQ: {"nodeSelectorTerms": [{"matchExpressions": [own]},
                                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]},
        PREF: [{"weight": 10, "preference": {"matchExpressions": [own]}}]}}})
    result = evaluate(doc, POLICY)
    patched = _apply(doc, result.patch)
    terms = patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    assert terms[0] == {"matchExpressions": [own]}
    assert _usage_exprs(terms[1]) == [{"key": USAGE, "operator": "In", "values": ["training", "hybrid"]}]
    assert patched["spec"]["affinity"]["nodeAffinity"][PREF] == [
        {"weight": 10, "preference": {"matchExpressions": [own]}}]
    assert not [f for f in result.findings if f.rule == "GG105"]


def test_contradicting_usage_is_gg105_and_left_alone() -> None:
    doc = pod({"nodeSelector": {USAGE: "training"},
               "affinity": {"nodeAffinity": {
                   REQ: {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": USAGE, "operator": "In", "values": ["training"]}]},
                       {"matchExpressions": [{"key": USAGE, "operator": "DoesNotExist"}]}]},
                   PREF: [{"weight": 1, "preference": {"matchExpressions": [
                       {"key": USAGE, "operator": "In", "values": ["training"]}]}}]}},
               "tolerations": [tol(USAGE, "training")]},
              labels={CFG.workload_key: "inference"})
    result = evaluate(doc, POLICY)
    patched = _apply(doc, result.patch)
    affinity = patched["spec"]["affinity"]["nodeAffinity"]
    assert affinity == doc["spec"]["affinity"]["nodeAffinity"], "a contradiction is never overwritten"
    # the tolerations it lacks are still added; the user's stays
    assert patched["spec"]["tolerations"] == [tol(USAGE, "training"), tol(USAGE, "inference"),
                                              tol(USAGE, "hybrid")]
    conflicts = sorted(f.path for f in result.findings if f.rule == "GG105")
    base = "/spec/affinity/nodeAffinity"
    assert conflicts == sorted([
        f"{base}/{PREF}/0/preference/matchExpressions/0",
        f"{base}/{REQ}/nodeSelectorTerms/0/matchExpressions/0",
        f"{base}/{REQ}/nodeSelectorTerms/1/matchExpressions/0",
        "/spec/nodeSelector/maip.mxsf.io~1node.usage",
        "/spec/tolerations/0",
    ])
    message = next(f.message for f in result.findings if f.path == "/spec/tolerations/0")
    assert message.startswith("pod set pod: ") and "training" in message and "inference" in message


def test_tolerations_already_present_or_covered_are_not_added() -> None:
    covered = [
        [tol(USAGE, "training"), tol(USAGE, "hybrid")],
        [{"key": USAGE, "operator": "Exists"}],                        # any value, any effect
        [{"key": USAGE, "operator": "Exists", "effect": "NoSchedule"}],
        [{"operator": "Exists"}],                                      # everything (GG106)
        [{"key": USAGE, "value": "training", "effect": "NoSchedule"},  # operator defaults to Equal
         {"key": USAGE, "operator": "Equal", "value": "hybrid"}],      # empty effect: all effects
    ]
    for tolerations in covered:
        doc = pod({"tolerations": tolerations})
        ops = evaluate(doc, POLICY).patch
        assert not [op for op in ops if "tolerations" in op["path"]], tolerations
    not_covered = [tol(USAGE, "training", "NoExecute"), {"key": "other", "operator": "Exists"}]
    doc = pod({"tolerations": not_covered})
    patched = _apply(doc, evaluate(doc, POLICY).patch)
    assert patched["spec"]["tolerations"] == [*not_covered, tol(USAGE, "training"), tol(USAGE, "hybrid")]


def test_toleration_semantics() -> None:
    assert tolerates({"key": "k", "operator": "Equal", "value": "v"}, "k", "v")
    assert not tolerates({"key": "k", "operator": "Equal", "value": "w"}, "k", "v")
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, "k", "v")
    assert tolerates({"operator": "Exists"}, "any", "thing")
    assert not tolerates({"operator": "Equal"}, "any", "thing")
    assert not tolerates("junk", "k", "v")


# -- scope --------------------------------------------------------------------------------------

def test_scope_gpu_leaves_cpu_workloads_without_label_alone() -> None:
    cpu = {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    deployment = next(k for k in KINDS if k.kind == "Deployment")
    doc = manifest(deployment, cpu, usage=None)
    assert evaluate(doc, POLICY).patch == []
    assert evaluate(manifest(deployment, cpu, usage="inference"), POLICY).patch  # labelled: in scope
    everything = policy_from_data({"usage": {"scope": "all"}})
    patched = _apply(doc, evaluate(doc, everything).patch)
    spec = patched["spec"]["template"]["spec"]
    assert spec["tolerations"] == [tol(USAGE, "inference"), tol(USAGE, "hybrid")]  # Deployment default


def test_gpu_workload_uses_the_kind_default_and_gg103_when_there_is_none() -> None:
    pytorch = next(k for k in KINDS if k.kind == "PyTorchJob")
    patched = _apply(d := manifest(pytorch, {"containers": [GPU_CONTAINER]}, usage=None),
                     evaluate(d, POLICY).patch)
    assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"][0] == \
        tol(USAGE, "training")
    bare = pod({}, labels={})
    result = evaluate(bare, POLICY)
    assert result.patch == []
    assert [f.rule for f in result.findings if f.rule == "GG103"] == ["GG103"]
    wrong = evaluate(pod({}, labels={CFG.workload_key: "gaming"}), POLICY)
    gg103 = [f for f in wrong.findings if f.rule == "GG103"]
    assert gg103 and gg103[0].path == "/metadata/labels/maip.mxsf.io~1usage"
    assert "'gaming'" in gg103[0].message and wrong.patch == []


# -- GG102, GG104, GG106 ----------------------------------------------------------------------

def test_product_toleration_from_selector_affinity_or_label() -> None:
    product = "nvidia.com/gpu.product"
    by_selector = pod({"nodeSelector": {product: "H20"}})
    by_affinity = pod({"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": product, "operator": "In", "values": ["H20", "H100"]}]}]}}}})
    by_label = pod({}, labels={CFG.workload_key: "training", product: "H20"})
    for doc, wanted in ((by_selector, ["H20"]), (by_affinity, ["H20", "H100"]), (by_label, ["H20"])):
        result = evaluate(doc, POLICY)
        patched = _apply(doc, result.patch)
        assert [t for t in patched["spec"]["tolerations"] if t["key"] == product] == \
            [tol(product, p) for p in wanted]
        assert not [f for f in result.findings if f.rule == "GG104"]
        assert [f.fixable for f in result.findings if f.rule == "GG102"] == [True]
        assert evaluate(patched, POLICY).patch == []


def test_workload_label_pins_only_gpu_pod_sets() -> None:
    ray = next(k for k in KINDS if k.kind == "RayCluster")
    doc = manifest(ray, {"containers": [GPU_CONTAINER]})
    doc["metadata"]["labels"]["nvidia.com/gpu.product"] = "H20"
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {}
    patched = _apply(doc, evaluate(doc, POLICY).patch)
    head = patched["spec"]["headGroupSpec"]["template"]["spec"]
    worker = patched["spec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"]
    # the CPU-only head is neither steered into the usage pools nor given the product toleration
    assert "tolerations" not in head and "affinity" not in head
    assert worker[-1] == tol("nvidia.com/gpu.product", "H20")


def test_gg104_names_the_pod_set_and_the_numbers() -> None:
    result = evaluate(pod({}), POLICY)
    gg104 = [f for f in result.findings if f.rule == "GG104"]
    assert len(gg104) == 1 and "2 nvidia.com/gpu" in gg104[0].message and str(gg104[0].object) == "Pod ml/p"
    assert gg104[0].path == "/spec"


def test_gg106_control_plane_and_wildcard_tolerations() -> None:
    taint = POLICY.data["controlPlaneTaint"]
    result = evaluate(pod({"tolerations": [{"key": taint, "operator": "Exists"}, {"operator": "Exists"},
                                           {"key": "x", "operator": "Exists"}]}), POLICY)
    assert sorted(f.path for f in result.findings if f.rule == "GG106") == ["/spec/tolerations/0",
                                                                           "/spec/tolerations/1"]
    excluded = pod({"tolerations": [{"operator": "Exists"}]})
    excluded["metadata"]["namespace"] = "kube-system"
    assert not evaluate(excluded, POLICY).findings


# -- pointers, the seed, the patch as a whole -------------------------------------------------

def test_pointer_escaping_in_ops_and_findings() -> None:
    assert join_pointer("/metadata/labels", "maip.mxsf.io/usage") == "/metadata/labels/maip.mxsf.io~1usage"
    pytorch = next(k for k in KINDS if k.kind == "PyTorchJob")
    doc = manifest(pytorch, {"containers": [GPU_CONTAINER]})
    specs = doc["spec"]["pytorchReplicaSpecs"]
    specs["a/b~c"] = specs.pop("Worker")
    ops = evaluate(doc, POLICY).patch
    escaped = [op["path"] for op in ops if "a~1b~0c" in op["path"]]
    assert escaped and all(p.startswith("/spec/pytorchReplicaSpecs/a~1b~0c/template/spec/") for p in escaped)
    patched = _apply(doc, ops)
    assert patched["spec"]["pytorchReplicaSpecs"]["a/b~c"]["template"]["spec"]["tolerations"]
    for finding in evaluate(doc, POLICY).findings:
        assert resolve(doc, finding.path) is not None


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    workload = build_workload(doc)
    for pod_set in workload.pod_sets if workload else []:  # a Service has none
        pod_set.spec.pop("affinity", None)
        pod_set.spec.pop("tolerations", None)
    return doc


@pytest.mark.parametrize("name", ["training-job", "inference-service"])
def test_seed_003_documents_come_back_identical(name: str) -> None:
    expected = [d for d in yaml.safe_load_all((EXAMPLES / f"{name}.expected.yaml").read_text()) if d]
    written = [d for d in yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()) if d]
    for want, source in zip(expected, written, strict=True):
        for doc in (_strip(want), source):
            result = evaluate(doc, POLICY)
            got = _apply(doc, result.patch) if result.patch else doc
            assert got == want
            assert evaluate(got, POLICY).patch == []
            assert not [f for f in evaluate(got, POLICY).findings if f.rule.startswith("GG10")]


def test_ops_apply_to_the_original_with_jsonpatch_and_match_the_engine() -> None:
    for kind in POD_KINDS:
        for spec in ({"containers": [GPU_CONTAINER]}, EXISTING):
            doc = manifest(kind, spec)
            original = copy.deepcopy(doc)
            result = evaluate(doc, POLICY)
            assert doc == original, "evaluate never modifies its input"
            assert jsonpatch.JsonPatch(result.patch).apply(doc) == result.mutated


def test_template_or_spec_missing_are_created() -> None:
    ray = next(k for k in KINDS if k.kind == "RayJob")
    doc = manifest(ray, {"containers": [GPU_CONTAINER]})
    doc["spec"]["submitterPodTemplate"] = {}   # no spec at all
    doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"] = {"metadata": {}}
    # scope gpu: templates without GPUs (these two have no containers at all) are not steered
    cpu_only = ("/spec/submitterPodTemplate", "/spec/rayClusterSpec/workerGroupSpecs/1")
    assert not [op for op in evaluate(doc, POLICY).patch if op["path"].startswith(cpu_only)]
    # scope all: every template is steered, its spec created where there is none
    everything = policy_from_data({"usage": {"scope": "all"}})
    patched = _apply(doc, evaluate(doc, everything).patch)
    assert patched["spec"]["submitterPodTemplate"]["spec"]["tolerations"] == [tol(USAGE, "training"),
                                                                             tol(USAGE, "hybrid")]
    assert patched["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["affinity"]


@pytest.mark.parametrize("bad", [
    {"tolerations": "everything"}, {"affinity": "near"}, {"affinity": {"nodeAffinity": []}},
    {"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": ["x", 3, None]}}}},
    {"affinity": {"nodeAffinity": {PREF: {"weight": 1}}}}, {"nodeSelector": ["a"]},
    {"tolerations": [None, 3, "x", {"key": 5, "operator": ["Equal"]}]},
])
def test_malformed_fields_never_crash(bad: dict[str, Any]) -> None:
    doc = pod(bad)
    result = evaluate(doc, POLICY)
    assert not [f for f in result.findings if "internal error" in f.message]
    _apply(doc, result.patch)


# -- the idempotency property ----------------------------------------------------------------

_keys = st.sampled_from([USAGE, "nvidia.com/gpu.product", "zone", ""])
_values = st.lists(st.sampled_from(["training", "inference", "hybrid", "H20", "a"]), max_size=3)
_expression = st.fixed_dictionaries({
    "key": _keys, "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]), "values": _values})
_term = st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(_expression, max_size=3)})
_node_affinity = st.fixed_dictionaries({}, optional={
    REQ: st.fixed_dictionaries({}, optional={"nodeSelectorTerms": st.lists(_term, max_size=3)}),
    PREF: st.lists(st.fixed_dictionaries({"weight": st.integers(1, 100), "preference": _term}), max_size=2),
})
_toleration = st.fixed_dictionaries({}, optional={
    "key": _keys, "operator": st.sampled_from(["Equal", "Exists"]),
    "value": st.sampled_from(["training", "inference", "hybrid", "H20"]),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", ""])})
_pod_spec = st.fixed_dictionaries({"containers": st.just([GPU_CONTAINER])}, optional={
    "nodeSelector": st.dictionaries(_keys.filter(bool), st.sampled_from(["training", "H20"]), max_size=2),
    "affinity": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"nodeAffinity": _node_affinity})),
    "tolerations": st.one_of(st.none(), st.lists(_toleration, max_size=4)),
})
_labels = st.dictionaries(st.sampled_from([CFG.workload_key, "nvidia.com/gpu.product"]),
                          st.sampled_from(["training", "inference", "H20", "nonsense"]), max_size=2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(POD_KINDS), spec=_pod_spec, labels=_labels)
def test_mutating_a_mutated_object_yields_no_patch(kind: KindSpec, spec: dict[str, Any],
                                                   labels: dict[str, str]) -> None:
    doc = manifest(kind, spec, usage=None)
    doc["metadata"]["labels"] = labels
    result = evaluate(doc, POLICY)
    patched = _apply(doc, result.patch)          # valid RFC 6902 against the original
    assert patched == (result.mutated if result.patch else doc)
    again = evaluate(patched, POLICY)
    assert again.patch == []
    assert not [f for f in again.findings if f.rule in ("GG101", "GG102")]
    assert not [f for f in result.findings if "internal error" in f.message]
    # the merging rules hold on every template of the result
    usage = labels.get(CFG.workload_key, CFG.defaults.get(kind.kind))
    if result.patch and usage is not None and usage in CFG.pools:
        before = dict(_templates(doc))
        for path, template in _templates(patched):
            old_terms = resolve(before[path], f"/affinity/nodeAffinity/{REQ}/nodeSelectorTerms")
            new_terms = template["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
            if isinstance(old_terms, list) and old_terms:
                assert len(new_terms) == len(old_terms)
                for old, new in zip(old_terms, new_terms, strict=True):
                    assert new["matchExpressions"][:len(old.get("matchExpressions", []))] == \
                        old.get("matchExpressions", [])
            for pool in CFG.pools[usage]:
                assert any(tolerates(t, USAGE, pool) for t in template["tolerations"])


def test_a_pod_created_from_a_mutated_template_is_recognised() -> None:
    deployment = next(k for k in KINDS if k.kind == "Deployment")
    doc = manifest(deployment, {"containers": [GPU_CONTAINER]}, usage=None)
    mutated = _apply(doc, evaluate(doc, POLICY).patch)
    created = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-abc12", "namespace": "ml"},
               "spec": mutated["spec"]["template"]["spec"]}
    result = evaluate(created, POLICY)
    assert result.patch == []
    assert not [f for f in result.findings if f.rule in ("GG101", "GG103", "GG105")]
    # without the preference there is nothing to go by
    del created["spec"]["affinity"]["nodeAffinity"][PREF]
    assert [f.rule for f in evaluate(created, POLICY).findings if f.rule == "GG103"] == ["GG103"]
