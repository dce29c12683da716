"""Custom checks: users' own policies written as JSON Schema (policies/custom.py, SPEC 6)."""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES, ROOT, corpus_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lint.policyfile import load_policy
from policies import memo
from policies.config import Policy, PolicyError, policy_from_data
from policies.custom import CompiledSchema, CustomCheck, compiled_validator
from policies.engine import evaluate
from policies.findings import Finding, Severity
from policies.registry import all_rules
from policies.workload import MISSING, ShapeError, build_workload, is_kubernetes_object, resolve

ALLOWED_IMAGE = {
    "id": "MYORG002", "slug": "allowed-registry", "severity": "error", "target": "Container",
    "message": "container {container} of {object} (pod set {podSet}) uses a foreign image",
    "schema": {"required": ["image"],
               "properties": {"image": {"type": "string", "pattern": r"^registry\.example\.com/"}}},
}
PRIORITY_CLASS = {
    "id": "MYORG010", "slug": "priority-class", "severity": "warning", "target": "PodSpec",
    "message": "pod set {podSet} of {kind} {namespace}/{name} sets no priorityClassName",
    "schema": {"required": ["priorityClassName"]},
}
TEAM_LABEL = {
    "id": "MYORG020", "slug": "team-label", "severity": "error", "target": "Workload",
    "message": "{object} has no team label",
    "schema": {"required": ["metadata"],
               "properties": {"metadata": {"required": ["labels"],
                                           "properties": {"labels": {"required": ["team"]}}}}},
}


@pytest.fixture(params=["jsonschema-rs", "jsonschema"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with jsonschema-rs deciding, and again with jsonschema alone."""
    if request.param == "jsonschema":
        monkeypatch.setitem(sys.modules, "jsonschema_rs", None)  # import fails as if not installed
    compiled_validator.cache_clear()
    yield request.param
    compiled_validator.cache_clear()


def required(name: str, message: str) -> bool:
    """The validators quote differently: jsonschema 'name', jsonschema-rs "name"."""
    return re.search(rf"""["']{re.escape(name)}["'] is a required property""", message) is not None


def policy(*entries: dict[str, Any], **extra: Any) -> Policy:
    return policy_from_data({"custom": [copy.deepcopy(e) for e in entries], **extra}, "test-policy")


def custom_findings(doc: dict[str, Any], pol: Policy) -> list[Finding]:
    ids = {c.id for c in pol.custom_checks}
    return [f for f in evaluate(doc, pol).findings if f.rule in ids]


def container(name: str, image: str, **resources: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    if resources:
        c["resources"] = resources
    return c


def pod_spec(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **fields: Any
             ) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers), **fields}
    if init:
        spec["initContainers"] = list(init)
    return spec


GOOD = "registry.example.com/ml/train:1"


def deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "srv"},
            "spec": {"replicas": 2, "template": {"spec": spec}}}


def volcano_job(*task_specs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "ml"},
            "spec": {"minAvailable": 1, "tasks": [
                {"name": f"t{i}", "replicas": 1, "template": {"spec": s}} for i, s in enumerate(task_specs)]}}


def ray_cluster(head: dict[str, Any], worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": "ml"},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": head}},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "rayStartParams": {},
                                           "template": {"spec": worker}}]}}


def pytorch_job(master: dict[str, Any], worker: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": master}},
                "Worker": {"replicas": 3, "template": {"spec": worker}}}}}


# -- targets across kinds ------------------------------------------------------------------

CONTAINER_CASES = [
    (deployment(pod_spec(container("app", "docker.io/nginx"))),
     ["/spec/template/spec/containers/0/image"]),
    (volcano_job(pod_spec(container("a", GOOD)),
                 pod_spec(container("b", "quay.io/x:1"), init=(container("init", "busybox"),))),
     ["/spec/tasks/1/template/spec/initContainers/0/image",
      "/spec/tasks/1/template/spec/containers/0/image"]),
    (ray_cluster(pod_spec(container("head", "rayproject/ray")), pod_spec(container("w", GOOD))),
     ["/spec/headGroupSpec/template/spec/containers/0/image"]),
    (pytorch_job(pod_spec(container("pytorch", GOOD)), pod_spec(container("pytorch", "pytorch/pytorch"))),
     ["/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/image"]),
]


@pytest.mark.parametrize(("doc", "paths"), CONTAINER_CASES,
                         ids=lambda v: v["kind"] if isinstance(v, dict) else "")
def test_container_target_reaches_every_container_of_every_kind(doc: dict[str, Any], paths: list[str],
                                                                 backend: str) -> None:
    findings = custom_findings(doc, policy(ALLOWED_IMAGE))
    assert [f.path for f in findings] == paths
    for f in findings:
        assert f.rule == "MYORG002" and f.slug == "allowed-registry" and f.severity == Severity.ERROR
        assert resolve(doc, f.path) is not MISSING
        assert "does not match" in f.message and resolve(doc, f.path) in f.message


def test_container_target_missing_key_points_at_the_container(backend: str) -> None:
    doc = deployment(pod_spec({"name": "noimage"}))
    [f] = custom_findings(doc, policy(ALLOWED_IMAGE))
    assert f.path == "/spec/template/spec/containers/0"
    assert required("image", f.message)
    assert "$.spec.template.spec.containers[0]" in f.message


def test_container_target_passes_clean_documents_of_every_kind() -> None:
    pol = policy(ALLOWED_IMAGE)
    for doc in (deployment(pod_spec(container("a", GOOD))), volcano_job(pod_spec(container("a", GOOD))),
                ray_cluster(pod_spec(container("h", GOOD)), pod_spec(container("w", GOOD))),
                pytorch_job(pod_spec(container("m", GOOD)), pod_spec(container("w", GOOD)))):
        assert custom_findings(doc, pol) == []


@pytest.mark.parametrize(("doc", "paths"), [
    (deployment(pod_spec(container("a", GOOD))), ["/spec/template/spec"]),
    (volcano_job(pod_spec(container("a", GOOD), priorityClassName="high"), pod_spec(container("b", GOOD))),
     ["/spec/tasks/1/template/spec"]),
    (ray_cluster(pod_spec(container("h", GOOD)), pod_spec(container("w", GOOD))),
     ["/spec/headGroupSpec/template/spec", "/spec/workerGroupSpecs/0/template/spec"]),
    (pytorch_job(pod_spec(container("m", GOOD), priorityClassName="high"), pod_spec(container("w", GOOD))),
     ["/spec/pytorchReplicaSpecs/Worker/template/spec"]),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec(container("a", GOOD))},
     ["/spec"]),
], ids=["Deployment", "VolcanoJob", "RayCluster", "PyTorchJob", "Pod"])
def test_podspec_target_reaches_every_pod_template(doc: dict[str, Any], paths: list[str],
                                                   backend: str) -> None:
    findings = custom_findings(doc, policy(PRIORITY_CLASS))
    assert [f.path for f in findings] == paths
    assert all(f.severity == Severity.WARNING for f in findings)
    assert all(required("priorityClassName", f.message) for f in findings)


@pytest.mark.parametrize("doc", [
    deployment(pod_spec(container("a", GOOD))),
    volcano_job(pod_spec(container("a", GOOD))),
    ray_cluster(pod_spec(container("h", GOOD)), pod_spec(container("w", GOOD))),
    pytorch_job(pod_spec(container("m", GOOD)), pod_spec(container("w", GOOD))),
], ids=lambda d: d["kind"])
def test_workload_target_validates_the_whole_object(doc: dict[str, Any], backend: str) -> None:
    pol = policy(TEAM_LABEL)
    doc = copy.deepcopy(doc)
    [f] = custom_findings(doc, pol)
    assert f.path == "/metadata"
    meta = doc["metadata"]
    assert f.message.startswith(f"{doc['kind']} {meta['namespace']}/{meta['name']} has no team label (")
    doc["metadata"]["labels"] = {"team": "nlp"}
    assert custom_findings(doc, pol) == []
    doc["metadata"]["labels"] = {"other": "x"}
    [f] = custom_findings(doc, pol)
    assert f.path == "/metadata/labels" and required("team", f.message)


def test_kinds_filter_by_kind_and_by_group() -> None:
    batch_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bj"},
                 "spec": {"template": {"spec": pod_spec(container("a", "x"))}}}
    vj = volcano_job(pod_spec(container("a", "x")))
    dep = deployment(pod_spec(container("a", "x")))
    by_kind = policy({**ALLOWED_IMAGE, "kinds": ["Job"]})
    assert [bool(custom_findings(d, by_kind)) for d in (batch_job, vj, dep)] == [True, True, False]
    by_group = policy({**ALLOWED_IMAGE, "kinds": ["Job.batch.volcano.sh"]})
    assert [bool(custom_findings(d, by_group)) for d in (batch_job, vj, dep)] == [False, True, False]


def test_unknown_kinds_and_excluded_namespaces_are_left_alone() -> None:
    pol = policy(TEAM_LABEL)
    assert custom_findings({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, pol) == []
    doc = deployment(pod_spec(container("a", GOOD)))
    doc["metadata"]["namespace"] = "kube-system"
    assert custom_findings(doc, pol) == []


# -- messages ------------------------------------------------------------------------------

def test_message_placeholders_are_filled() -> None:
    entry = {**ALLOWED_IMAGE, "message": "{kind}|{name}|{namespace}|{podSet}|{container}|{object}"}
    doc = volcano_job(pod_spec(container("a", GOOD)), pod_spec({"image": "bad"}))
    [f] = custom_findings(doc, policy(entry))
    # an unnamed container is named by its place in the pod template
    assert f.message.startswith("Job|vj|ml|t1|containers[0]|Job ml/vj (")
    assert f.message.endswith("at $.spec.tasks[1].template.spec.containers[0].image)")


@pytest.mark.parametrize(("value", "reason"), [
    (16, "16 is greater than the maximum of 8"),
    ("16", "does not match"),
    ([8], "is not valid under any of the"),  # neither branch has the right type: say so
])
def test_the_most_relevant_reason_is_reported(value: Any, reason: str, backend: str) -> None:
    gpus = {"anyOf": [{"type": "integer", "maximum": 8}, {"type": "string", "pattern": "^[0-8]$"}]}
    limits = {"properties": {"nvidia.com/gpu": gpus}}
    entry = {**ALLOWED_IMAGE, "schema": {"properties": {"resources": {"properties": {"limits": limits}}}}}
    doc = deployment(pod_spec(container("a", GOOD, limits={"nvidia.com/gpu": value})))
    [f] = custom_findings(doc, policy(entry))
    assert reason in f.message, f.message
    assert f.path == "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
    assert '$.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"])' in f.message


def test_literal_braces_and_long_reasons() -> None:
    entry = {**TEAM_LABEL, "message": "{{team}} missing on {name}",
             "schema": {"not": {"type": "object"}}}
    doc = deployment(pod_spec(container("a", "x" * 1000)))
    [f] = custom_findings(doc, policy(entry))
    assert f.message.startswith("{team} missing on web (")
    assert len(f.message) < 400  # the validator quotes the whole object; we shorten it


@pytest.mark.parametrize(("message", "target", "expected"), [
    ("{image} is bad", "Container", "unknown placeholder {image}"),
    ("{container} is bad", "Workload",
     "{container} in message for target Workload (only for target Container)"),
    ("{podSet} is bad", "Workload", "only for target PodSpec or Container"),
    ("{name", "Container", "message is not a valid template"),
    ("{name.upper}", "Container", "unknown placeholder {name.upper}"),
    ("{name:d}", "Container", "message cannot be formatted"),
])
def test_bad_message_is_a_load_error(message: str, target: str, expected: str) -> None:
    entry = {**ALLOWED_IMAGE, "message": message, "target": target}
    with pytest.raises(PolicyError, match="MYORG002") as info:
        policy(entry)
    assert expected in str(info.value)


# -- loading errors ------------------------------------------------------------------------

@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "strng"}, "invalid JSON Schema at schema.type"),
    ({"properties": {"image": {"minLength": -1}}}, "schema.properties.image.minLength"),
    ({"required": "image"}, "schema.required"),
    ({"$ref": "#/$defs/nothing"}, "$ref '#/$defs/nothing' cannot be resolved"),
    ({"$ref": "https://example.com/container.json"}, "gpugate never fetches schemas"),
])
def test_broken_schema_is_a_clear_load_error(schema: Any, expected: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy({**ALLOWED_IMAGE, "schema": schema})
    message = str(info.value)
    assert message.startswith("test-policy: custom.0 (MYORG002)")
    assert expected in message


def test_local_refs_and_meta_schema_refs_work_offline() -> None:
    entry = {**ALLOWED_IMAGE, "schema": {
        "$defs": {"image": {"type": "string", "pattern": "^ok/"}},
        "properties": {"image": {"$ref": "#/$defs/image"}}}}
    pol = policy(entry)
    assert custom_findings(deployment(pod_spec(container("a", "ok/x"))), pol) == []
    assert len(custom_findings(deployment(pod_spec(container("a", "no/x"))), pol)) == 1
    meta = policy({**TEAM_LABEL, "schema": {"$ref": "https://json-schema.org/draft/2020-12/schema"}})
    assert len(meta.custom_checks) == 1


@pytest.mark.parametrize(("change", "expected"), [
    ({"target": "Pod"}, "custom.0.target: 'Pod' is not one of"),
    ({"severity": "fatal"}, "custom.0.severity"),
    ({"id": "myorg1"}, "custom.0.id: 'myorg1' does not match"),
    ({"slug": "Not A Slug"}, "custom.0.slug"),
    ({"kinds": "Job"}, "custom.0.kinds"),
    ({"schema": "image"}, "custom.0.schema"),
    ({"typo": 1}, "unknown key 'custom.0.typo'"),
])
def test_entry_shape_errors_name_the_path(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(PolicyError, match="invalid policy") as info:
        policy({**ALLOWED_IMAGE, **change})
    assert expected in str(info.value)


def test_missing_keys_are_named() -> None:
    with pytest.raises(PolicyError, match="custom.0: 'schema' is a required property"):
        policy({k: v for k, v in ALLOWED_IMAGE.items() if k != "schema"})


def test_unknown_kind_is_a_load_error() -> None:
    with pytest.raises(PolicyError, match="unknown kind 'PytorchJob'"):
        policy({**ALLOWED_IMAGE, "kinds": ["PytorchJob"]})


def test_id_collisions() -> None:
    builtin = next(iter(all_rules().values()))
    with pytest.raises(PolicyError, match="'GG900' collides with the built-in rules"):
        policy({**ALLOWED_IMAGE, "id": "GG900"})
    with pytest.raises(PolicyError, match=f"'{builtin.id}' collides"):
        policy({**ALLOWED_IMAGE, "id": builtin.id})
    with pytest.raises(PolicyError,
                       match=r"custom.1 \(MYORG002\): id 'MYORG002' is already used by custom.0"):
        policy(ALLOWED_IMAGE, {**TEAM_LABEL, "id": "MYORG002"})
    with pytest.raises(PolicyError, match=f"slug '{builtin.slug}' is already the slug of built-in rule"):
        policy({**ALLOWED_IMAGE, "slug": builtin.slug})
    with pytest.raises(PolicyError, match="slug 'allowed-registry' is already used by custom check MYORG002"):
        policy(ALLOWED_IMAGE, {**TEAM_LABEL, "slug": "allowed-registry"})


def test_check_exposes_the_rule_attributes_front_ends_list() -> None:
    [check] = policy({**ALLOWED_IMAGE, "kinds": ["Deployment"], "description": "Images from our registry."}
                     ).custom_checks
    assert isinstance(check, CustomCheck)
    assert (check.id, check.slug, check.severity, check.target, check.kinds) == (
        "MYORG002", "allowed-registry", Severity.ERROR, "Container", ("Deployment",))
    assert check.message == ALLOWED_IMAGE["message"] and check.description == "Images from our registry."
    assert "Images from our registry." in check.summary


def test_schemas_are_compiled_once_and_shared_by_content() -> None:
    reordered = {**TEAM_LABEL, "id": "MYORG021", "slug": "team-label-2",
                 "schema": json.loads(json.dumps(TEAM_LABEL["schema"], sort_keys=True))}
    reordered["schema"] = dict(reversed(list(reordered["schema"].items())))
    first = policy(TEAM_LABEL, reordered)
    second = policy(TEAM_LABEL)
    validators = {id(c.validator) for c in first.custom_checks + second.custom_checks}
    assert len(validators) == 1
    assert dict(memo.inventory())["policies.custom.compiled_validator"] >= 1  # entries held


# -- overrides and suppression -------------------------------------------------------------

BAD_DEPLOYMENT = deployment(pod_spec(container("app", "docker.io/nginx")))


@pytest.mark.parametrize(("key", "setting", "expected"), [
    ("MYORG002", {"severity": "warning"}, [Severity.WARNING]),
    ("allowed-registry", "info", [Severity.INFO]),
    ("MYORG002", "off", []),
    ("allowed-registry", {"enabled": False}, []),
    ("MYORG002", "on", [Severity.ERROR]),
])
def test_severity_override_and_off(key: str, setting: Any, expected: list[Severity]) -> None:
    pol = policy(ALLOWED_IMAGE, rules={key: setting})
    assert [f.severity for f in custom_findings(BAD_DEPLOYMENT, pol)] == expected


@pytest.mark.parametrize("ignore", ["MYORG002", "allowed-registry", "GG104, MYORG002"])
def test_inline_suppression(ignore: str) -> None:
    pol = policy(ALLOWED_IMAGE, TEAM_LABEL)
    doc = copy.deepcopy(BAD_DEPLOYMENT)
    doc["metadata"]["annotations"] = {"gpugate.io/ignore": ignore}
    assert [f.rule for f in custom_findings(doc, pol)] == ["MYORG020"]


# -- robustness ----------------------------------------------------------------------------

def test_odd_instances_give_findings_not_tracebacks() -> None:
    entry = {**ALLOWED_IMAGE, "schema": {"patternProperties": {"^x": {"type": "string"}}}}
    odd: dict[Any, Any] = {1: "int key from YAML", "name": "a"}
    doc = deployment(pod_spec(odd))
    [f] = custom_findings(doc, policy(entry))
    assert f.rule == "MYORG002" and "could not be evaluated" in f.message


def test_python_regex_dialect_is_enforced_at_load() -> None:
    with pytest.raises(PolicyError, match=r"schema.properties.image.pattern: .* is not a 'regex'"):
        policy({**ALLOWED_IMAGE, "schema": {"properties": {"image": {"pattern": "^\\p{L}+$"}}}})


def test_schema_the_fast_validator_rejects_runs_on_python() -> None:
    # \Z is Python's end of string; Rust's regex does not know it, jsonschema does
    schema = {"properties": {"image": {"pattern": "^ok\\Z"}}}
    [check] = policy({**ALLOWED_IMAGE, "schema": schema}).custom_checks
    assert check.validator is not None and check.validator.fast is None
    assert custom_findings(deployment(pod_spec(container("a", "ok"))), _single(check)) == []
    assert len(custom_findings(deployment(pod_spec(container("a", "ok!"))), _single(check))) == 1


def _single(check: CustomCheck) -> Policy:
    pol = Policy()
    pol.custom_checks = [check]
    return pol


def test_without_jsonschema_rs_the_python_validator_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema_rs", None)  # import fails as if not installed
    compiled = CompiledSchema(ALLOWED_IMAGE["schema"])
    assert compiled.fast is None
    assert compiled.violation({"image": GOOD}) is None
    violation = compiled.violation({"image": "docker.io/x"})
    assert violation is not None and violation.path == ("image",)
    assert "does not match" in violation.reason


@pytest.mark.usefixtures("corpus_dir")
def test_fast_and_python_validators_agree_on_the_corpus() -> None:
    """jsonschema-rs decides validity when installed: it must agree with jsonschema on real
    manifests for the twenty checks of the benchmark."""
    pol = load_policy(ROOT / "bench" / "custom_checks.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    compared = failing = 0
    for path in corpus_files():
        try:
            docs = list(yaml.load_all(path.read_bytes(), Loader=loader))
        except yaml.YAMLError:
            continue
        for doc in docs:
            try:
                workload = build_workload(doc) if is_kubernetes_object(doc) else None
            except ShapeError:
                continue
            if workload is None:
                continue
            for check in pol.custom_checks:
                compiled = check.validator
                assert compiled is not None
                if compiled.fast is None:
                    continue
                for instance in check.instances(workload):
                    fast = compiled.fast.is_valid(instance.value)
                    assert fast == compiled.python.is_valid(instance.value), (path, check.id, instance.path)
                    compared += 1
                    failing += not fast
    assert compared > 5000 and failing > 500


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers=st.lists(st.dictionaries(st.sampled_from(["name", "image", "resources", "env"]), _json,
                                           max_size=4), max_size=3),
       spec_extra=st.dictionaries(st.sampled_from(["priorityClassName", "restartPolicy"]), _json, max_size=2))
def test_fuzzed_pod_specs_never_raise(containers: list[dict[str, Any]], spec_extra: dict[str, Any]) -> None:
    pol = _FUZZ_POLICY
    doc = volcano_job({"containers": containers, **spec_extra})
    try:
        if build_workload(doc) is None:
            return
    except Exception:  # noqa: BLE001 - a shape error is GG002, reported before custom checks
        return
    for f in custom_findings(doc, pol):
        assert resolve(doc, f.path) is not MISSING
        assert f.message


_FUZZ_POLICY = policy(ALLOWED_IMAGE, PRIORITY_CLASS, TEAM_LABEL)


_SCHEMA_KEYS = st.sampled_from(["type", "required", "$ref", "pattern", "properties", "anyOf", "not"])
_ENTRY_VALUES = st.one_of(_json, st.sampled_from(["Container", "PodSpec", "Workload", "error", "MYORG9",
                                                   "{container}", "{nope}", "{", "a-slug"]),
                          st.dictionaries(_SCHEMA_KEYS, _json, max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry=st.fixed_dictionaries({}, optional={
    key: _ENTRY_VALUES for key in ("id", "slug", "severity", "message", "target", "kinds", "schema",
                                   "description")}))
def test_fuzzed_entries_load_or_raise_policy_error(entry: dict[str, Any]) -> None:
    try:
        pol = policy_from_data({"custom": [{**ALLOWED_IMAGE, **entry}]}, "fuzz")
    except PolicyError as exc:
        assert str(exc).startswith("fuzz: ")
        return
    [check] = pol.custom_checks
    custom_findings(BAD_DEPLOYMENT, pol)  # and evaluating it never raises


# -- examples/policies ---------------------------------------------------------------------

EXAMPLE_DIRS = sorted(p for p in (EXAMPLES / "policies").iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_example_policies(folder: Path) -> None:
    pol = load_policy(folder / "policy.yaml")
    assert pol.custom_checks
    ids = {c.id for c in pol.custom_checks}
    for doc in yaml.safe_load_all((folder / "pass.yaml").read_text()):
        assert custom_findings(doc, pol) == [], doc["metadata"]["name"]
    failing = [custom_findings(doc, pol) for doc in yaml.safe_load_all((folder / "fail.yaml").read_text())]
    assert all(failing), "every document of fail.yaml must fail a custom check"
    assert {f.rule for found in failing for f in found} == ids


def test_one_container_check_covers_volcano_ray_and_kubeflow() -> None:
    """The README's Kyverno autogen comparison, as a test."""
    pol = load_policy(EXAMPLES / "policies" / "gpu-memory-limit" / "policy.yaml")
    docs = list(yaml.safe_load_all((EXAMPLES / "policies" / "gpu-memory-limit" / "fail.yaml").read_text()))
    kinds = {doc["kind"]: custom_findings(doc, pol) for doc in docs}
    assert set(kinds) == {"Job", "RayCluster", "Deployment"}
    assert all(len(found) == 1 for found in kinds.values())
    fixed = pytorch_job(pod_spec(container("m", GOOD, limits={"nvidia.com/gpu": 8})),
                        pod_spec(container("w", GOOD, limits={"nvidia.com/gpu": 8, "memory": "1Ti"})))
    [f] = custom_findings(fixed, pol)
    assert f.path == "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/resources/limits"


# -- corpus --------------------------------------------------------------------------------

@pytest.mark.usefixtures("corpus_dir")
def test_corpus_paths_resolve() -> None:
    """On real manifests every finding points at a value that exists (so lines are right)."""
    examples = yaml.safe_load((EXAMPLES / "policies" / "gpu-memory-limit" / "policy.yaml").read_text())
    pol = policy(ALLOWED_IMAGE, PRIORITY_CLASS, TEAM_LABEL, *examples["custom"])
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    seen = 0
    for path in corpus_files():
        try:
            docs = list(yaml.load_all(path.read_bytes(), Loader=loader))
        except yaml.YAMLError:
            continue
        for doc in docs:
            for f in custom_findings(doc, pol):
                seen += 1
                assert resolve(doc, f.path) is not MISSING, (path, f)
    assert seen > 100


# -- front ends ----------------------------------------------------------------------------

LINT_POLICY = """\
custom:
- id: MYORG002
  slug: allowed-registry
  severity: error
  target: Container
  message: "container {container} of {object} uses a foreign image"
  schema:
    properties: {image: {type: string, pattern: "^registry\\\\.example\\\\.com/"}}
- id: MYORG010
  slug: priority-class
  severity: warning
  target: PodSpec
  message: "pod set {podSet} of {object} sets no priorityClassName"
  schema: {required: [priorityClassName]}
rules: {MYORG010: {severity: info}}
"""

LINT_MANIFEST = """\
# a comment so that lines are not trivially document-relative
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: vj
  namespace: ml
spec:
  minAvailable: 1
  tasks:
  - name: worker
    replicas: 1
    template:
      spec:
        priorityClassName: high
        containers:
        - name: ok
          image: registry.example.com/ml/a:1
        - name: foreign
          image: docker.io/library/python:3.11
---
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: rc
  namespace: ml
  annotations:
    gpugate.io/ignore: allowed-registry
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: head
          image: rayproject/ray:2.9
"""


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_linter_json_reports_custom_findings_with_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    from lint.cli import lint_main

    (tmp_path / "policy.yaml").write_text(LINT_POLICY)
    (tmp_path / "jobs.yaml").write_text(LINT_MANIFEST)
    code = lint_main(["--format", "json", "--config", str(tmp_path / "policy.yaml"),
                      str(tmp_path / "jobs.yaml")])
    out = json.loads(capsys.readouterr().out)
    custom = [f for f in out["findings"] if f["rule"].startswith("MYORG")]
    assert [(f["rule"], f["severity"], f["line"], f["document"]) for f in custom] == [
        ("MYORG002", "error", _line_of(LINT_MANIFEST, "docker.io/library/python"), 0),
        # severity lowered to info by the policy; the ignore annotation drops MYORG002 on the RayCluster
        # a pod spec is located at its first key (the line of `containers:`)
        ("MYORG010", "info", _line_of(LINT_MANIFEST, "- name: head") - 1, 1),
    ]
    assert custom[0]["path"] == "/spec/tasks/0/template/spec/containers/1/image"
    assert custom[0]["column"] == len("          image: ") + 1
    assert custom[0]["object"] == {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                   "namespace": "ml", "name": "vj"}
    assert "container foreign of Job ml/vj uses a foreign image" in custom[0]["message"]
    assert code == 1


def test_linter_bad_custom_check_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lint.cli import lint_main

    (tmp_path / "policy.yaml").write_text(LINT_POLICY.replace("{podSet}", "{pod}"))
    (tmp_path / "jobs.yaml").write_text(LINT_MANIFEST)
    assert lint_main(["--config", str(tmp_path / "policy.yaml"), str(tmp_path / "jobs.yaml")]) == 2
    assert "MYORG010" in capsys.readouterr().err


def test_rules_command_lists_custom_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lint.cli import rules_main

    (tmp_path / "policy.yaml").write_text(LINT_POLICY)
    assert rules_main(["--config", str(tmp_path / "policy.yaml")]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "MYORG002" in line)
    assert "allowed-registry" in line and "error" in line
    assert "MYORG010" in out


PARITY_DOCS = [
    *yaml.safe_load_all((EXAMPLES / "policies" / "gpu-memory-limit" / "fail.yaml").read_text()),
    *yaml.safe_load_all((EXAMPLES / "policies" / "gpu-memory-limit" / "pass.yaml").read_text()),
    *yaml.safe_load_all((EXAMPLES / "policies" / "training-restart-policy" / "fail.yaml").read_text()),
    *yaml.safe_load_all((EXAMPLES / "policies" / "allowed-registry" / "fail.yaml").read_text()),
    *yaml.safe_load_all((EXAMPLES / "policies" / "allowed-registry" / "pass.yaml").read_text()),
    *yaml.safe_load_all(LINT_MANIFEST),
]


def test_webhook_parity_with_linter() -> None:
    """The webhook denies for a custom error and warns for a custom warning exactly where the
    linter reports them (same engine, same compiled checks, over real TLS)."""
    pytest.importorskip("webhook.app")
    from webhook_helpers import ServedWebhook, post_review, review_for

    from lint.cli import lint_text
    from lint.report import Report

    policy_files = [EXAMPLES / "policies" / folder / "policy.yaml"
                    for folder in ("gpu-memory-limit", "training-restart-policy")]
    entries = [entry for path in policy_files for entry in yaml.safe_load(path.read_text())["custom"]]
    entries += yaml.safe_load(LINT_POLICY)["custom"]
    pol = policy_from_data({"custom": entries, "rules": {"MYORG010": {"severity": "warning"}}}, "parity")
    custom_ids = {e["id"] for e in entries}
    assert {str(c.severity) for c in pol.custom_checks} >= {"error", "warning"}

    denied = warned_any = 0
    with ServedWebhook(policy=pol) as hook:
        for doc in PARITY_DOCS:
            report = Report()
            lint_text(yaml.safe_dump(doc).encode(), "doc.yaml", pol, report)
            linted = [loc.finding for loc in report.findings]
            status, answer = post_review(hook, "validate", review_for(doc))
            assert status == 200
            response = answer["response"]
            denial = response.get("status", {}).get("message", "") if not response["allowed"] else ""
            warned = {w.split(" ")[0].rstrip(":") for w in response.get("warnings", [])}
            name = doc["metadata"]["name"]

            mine = [f for f in linted if f.rule in custom_ids]
            lint_errors = {f.rule for f in mine if f.severity == Severity.ERROR}
            lint_warnings = {f.rule for f in mine if f.severity == Severity.WARNING}
            assert {r for r in custom_ids if f"{r} " in denial} == lint_errors, name
            assert warned & custom_ids == lint_warnings, name
            # allowed exactly when the linter has no error the validating webhook judges
            assert response["allowed"] == (not any(f.severity == Severity.ERROR and not f.fixable
                                                    for f in linted)), name
            denied += bool(lint_errors)
            warned_any += bool(lint_warnings)
    assert denied >= 3 and warned_any >= 2  # the comparison was not vacuous


def test_webhook_reloads_custom_checks_and_keeps_the_last_good_ones(tmp_path: Path) -> None:
    """A ConfigMap edit recompiles the checks; a broken edit is refused and the old checks stay."""
    pytest.importorskip("webhook.app")
    import os

    from webhook_helpers import ServedWebhook, post_review, review_for

    config = tmp_path / "policy.yaml"
    config.write_text(LINT_POLICY)
    doc = yaml.safe_load(LINT_MANIFEST.split("---")[0])

    def edit(text: str, step: int) -> None:
        config.write_text(text)
        stat = config.stat()
        os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + step * 1_000_000_000))

    with ServedWebhook(config_path=str(config), reload_interval=3600) as hook:
        def verdict() -> tuple[bool, str]:
            _, answer = post_review(hook, "validate", review_for(doc))
            response = answer["response"]
            return response["allowed"], json.dumps(response)

        allowed, text = verdict()
        assert not allowed and "MYORG002" in text
        edit(LINT_POLICY.replace("uses a foreign image", "uses {nothing}"), 1)
        # a new content is taken once two looks read the same bytes (not a half-written file)
        assert hook.call(hook.webhook.policy.maybe_reload) is None
        assert hook.call(hook.webhook.policy.maybe_reload) is False  # refused: unknown placeholder
        allowed, text = verdict()
        assert not allowed and "MYORG002" in text and "uses a foreign image" in text
        edit(LINT_POLICY.replace("severity: error", "severity: warning"), 2)
        assert hook.call(hook.webhook.policy.maybe_reload) is None
        assert hook.call(hook.webhook.policy.maybe_reload) is True
        allowed, text = verdict()
        assert allowed and "MYORG002" in text  # now a warning


def test_readme_example_is_a_valid_policy() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "## Custom checks" not in readme:
        pytest.skip("README has no custom checks section")
    section = readme.split("## Custom checks", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    [check] = policy_from_data(yaml.safe_load(block), "README.md").custom_checks
    assert (check.id, check.target) == ("MYORG001", "Container")
    assert check.kinds == ("PyTorchJob", "Job.batch.volcano.sh")
    bad = volcano_job(pod_spec(container("t", GOOD, limits={"nvidia.com/gpu": 2})))
    good = volcano_job(pod_spec(container("t", GOOD, limits={"nvidia.com/gpu": 2, "memory": "8Gi"})))
    pol = _single(check)
    assert len(custom_findings(bad, pol)) == 1 and custom_findings(good, pol) == []
