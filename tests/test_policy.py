"""The policy file (policies/config.py, lint/policyfile.py): declared options, generated defaults and
schema, validation, overrides, discovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lint.cli import Report, lint_main, lint_text
from lint.policyfile import CONFIG_FILENAME, find_policy_file, load_policy
from policies import memo
from policies.config import (
    FRAME_OPTIONS,
    MAX_POLICY_BYTES,
    MAX_POLICY_DEPTH,
    Policy,
    PolicyError,
    option_table,
    policy_defaults,
    policy_from_data,
    policy_from_text,
    policy_schema,
)
from policies.custom import OPTIONS as CUSTOM_OPTIONS
from policies.findings import Severity
from policies.gpu import GPU_RESOURCES
from policies.kinds import KINDS
from policies.options import Option, OptionTable
from policies.registry import all_rules

DEFAULT_POLICY = policy_defaults()

# 7 workers x 8 GPUs = 56, which a group of 16 does not divide: GG202 (error); no product: GG104 (warning).
JOB = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 7
      template:
        metadata: {annotations: {metax-tech.com/gpu-group-size: "16"}}
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: b, resources: {limits: {metax-tech.com/gpu: 8}}}]
"""


def findings(policy: Policy, text: str = JOB) -> dict[str, Severity]:
    report = Report()
    lint_text(text, "job.yaml", policy, report)
    return {f.finding.rule: f.finding.severity for f in report.findings}


def test_no_file_means_the_documented_defaults() -> None:
    policy = Policy()
    assert policy.data == DEFAULT_POLICY
    assert policy_from_data(None).data == DEFAULT_POLICY
    assert policy_from_data({}).data == DEFAULT_POLICY
    assert policy.gpu_resources == {"nvidia.com/gpu": "nvidia.com/gpu.product",
                                    "metax-tech.com/gpu": "metax-tech.com/gpu.product"}
    assert policy.gpu["groupSizeAnnotation"] == "metax-tech.com/gpu-group-size"
    assert policy.data["queues"] == {"require": False, "kueueExcludeResourcePrefixes": [],
                                     "kueueFrameworks": [
        "pod", "deployment", "statefulset", "batch/job", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob", "kubeflow.org/paddlejob", "kubeflow.org/jaxjob", "kubeflow.org/mpijob",
        "ray.io/raycluster", "ray.io/rayjob", "ray.io/rayservice", "jobset.x-k8s.io/jobset",
        "leaderworkerset.x-k8s.io/leaderworkerset", "HyperPodPyTorchJob.v1.sagemaker.amazonaws.com",
        "trainer.kubeflow.org/trainjob"],
                                     "kueueManagedJobsNamespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "kueue-system"]}]}}
    assert policy.feasibility["mode"] == "enforce"
    assert policy.excluded_namespaces == {"kube-system", "kube-public", "gpugate-system"}


def test_the_spec_example_policy_is_valid() -> None:
    example = yaml.safe_load("""
apiVersion: gpugate.io/v1alpha1
kind: Policy
usage: {scope: all, preferredWeight: 50}
queues: {require: true}
feasibility: {mode: warn}
rules: {GG105: {severity: warning}, GG305: off}
exclude: {namespaces: [kube-system]}
""")
    policy = policy_from_data(example)
    assert policy.usage["scope"] == "all" and policy.usage["preferredWeight"] == 50
    assert policy.usage["nodeKey"] == DEFAULT_POLICY["usage"]["nodeKey"]  # deep-merged
    assert policy.excluded_namespaces == {"kube-system"}                   # lists replace
    assert not policy.rule_setting("GG305").enabled


def test_partial_sections_keep_the_other_defaults() -> None:
    policy = policy_from_data({"gpu": {"resources": {"amd.com/gpu": "amd.com/gpu.product"}}})
    # keyed maps (resources, pools, defaults, rules) are merged key by key into the defaults
    expected = {**DEFAULT_POLICY["gpu"]["resources"], "amd.com/gpu": "amd.com/gpu.product"}
    assert policy.gpu_resources == expected
    assert policy.gpu["groupSizeAnnotation"] == "metax-tech.com/gpu-group-size"


@pytest.mark.parametrize(("data", "named"), [
    ({"usage": {"preferredWeight": 500}}, "usage.preferredWeight"),
    ({"usage": {"scope": "some"}}, "usage.scope"),
    ({"feasibility": {"mode": "strict"}}, "feasibility.mode"),
    ({"feasibility": {"staleAfterSeconds": 0}}, "feasibility.staleAfterSeconds"),
    ({"queues": {"require": "yes"}}, "queues.require"),
    ({"rules": {"GG202": "loud"}}, "rules.GG202"),
    ({"rules": {"GG202": {"severity": "fatal"}}}, "rules.GG202"),
    ({"exclude": {"namespaces": "kube-system"}}, "exclude.namespaces"),
    ({"gpu": {"groupSizeAnnotations": "x"}}, "gpu.groupSizeAnnotations"),
    ({"feasibilty": {}}, "feasibilty"),
    ({"kind": "Config"}, "kind"),
])
def test_invalid_policy_names_the_path_of_the_bad_key(data: dict[str, object], named: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_data(data, "team.yaml")
    assert "team.yaml" in str(info.value)
    assert named in str(info.value)


@pytest.mark.parametrize("data", [[1, 2], "policy", 3])
def test_policy_must_be_a_mapping(data: object) -> None:
    with pytest.raises(PolicyError, match="mapping"):
        policy_from_data(data)


def test_defaults_severities() -> None:
    found = findings(Policy())
    assert found["GG202"] == Severity.ERROR
    assert found["GG104"] == Severity.WARNING


@pytest.mark.parametrize(("setting", "expected"), [
    ("warning", Severity.WARNING),
    ("info", Severity.INFO),
    ({"severity": "warning"}, Severity.WARNING),
    ("on", Severity.ERROR),
    (True, Severity.ERROR),
])
def test_severity_overrides(setting: object, expected: Severity) -> None:
    assert findings(policy_from_data({"rules": {"GG202": setting}}))["GG202"] == expected


def test_override_by_slug_and_raising_a_warning() -> None:
    policy = policy_from_data({"rules": {"gpu-group-size-divisible": "info", "GG104": "error"}})
    found = findings(policy)
    assert found["GG202"] == Severity.INFO and found["GG104"] == Severity.ERROR


def test_policy_severity_beats_a_problem_severity() -> None:
    # GG204 reports a non-PyTorch kind as a warning of an error rule; the policy still wins.
    text = JOB.replace("PyTorchJob", "TFJob").replace("pytorchReplicaSpecs", "tfReplicaSpecs")
    assert findings(Policy(), text)["GG204"] == Severity.WARNING
    assert findings(policy_from_data({"rules": {"GG204": "error"}}), text)["GG204"] == Severity.ERROR


@pytest.mark.parametrize("setting", ["off", False, {"enabled": False}])
def test_rules_can_be_turned_off(setting: object) -> None:
    found = findings(policy_from_data({"rules": {"GG202": setting}}))
    assert "GG202" not in found and "GG104" in found


def test_excluded_namespaces_are_not_judged() -> None:
    assert findings(policy_from_data({"exclude": {"namespaces": ["ml"]}})) == {}


def test_load_policy_reads_and_validates_files(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("rules: {GG202: warning}\n")
    assert load_policy(good).rule_setting("GG202").severity == Severity.WARNING
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("rules: {GG202: [\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad_yaml)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_policy(empty).data == DEFAULT_POLICY


def test_gpugate_yaml_is_found_upward(tmp_path: Path) -> None:
    nested = tmp_path / "repo" / "jobs" / "train"
    nested.mkdir(parents=True)
    outside = find_policy_file(nested)  # whatever lies above tmp_path is not ours
    assert outside is None or tmp_path not in outside.parents
    (tmp_path / "repo" / CONFIG_FILENAME).write_text("rules: {GG202: off}\n")
    assert find_policy_file(nested) == tmp_path / "repo" / CONFIG_FILENAME
    (nested / CONFIG_FILENAME).write_text("rules: {GG202: info}\n")
    assert find_policy_file(nested) == nested / CONFIG_FILENAME  # the nearest wins


def test_the_linter_uses_the_found_policy_and_config_overrides_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "jobs").mkdir(parents=True)
    job = repo / "jobs" / "train.yaml"
    job.write_text(JOB)
    (repo / CONFIG_FILENAME).write_text("rules: {GG202: off}\n")
    explicit = tmp_path / "strict.yaml"
    explicit.write_text("rules: {GG202: error}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: {GG202: loud}\n")
    cwd = os.getcwd()
    os.chdir(repo / "jobs")
    try:
        assert lint_main([str(job), "--fail-on", "error", "--format", "json"]) == 0
        assert '"GG202"' not in capsys.readouterr().out
        assert lint_main([str(job), "--config", str(explicit), "--format", "json"]) == 1
        assert '"GG202"' in capsys.readouterr().out
        assert lint_main([str(job), "--config", str(bad)]) == 2
        assert "rules.GG202" in capsys.readouterr().err
    finally:
        os.chdir(cwd)


def test_readme_shows_the_real_default_policy() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    if "## Policy file" not in readme:
        pytest.skip("README has no Policy file section")
    section = readme.split("## Policy file", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == DEFAULT_POLICY
    assert policy_from_data(yaml.safe_load(block)).data == DEFAULT_POLICY
    table = section.split("**Supported kinds.**", 1)[1].split("\n## ", 1)[0]
    missing = [k.label for k in KINDS if k.kind not in table or (k.group or "core") not in table]
    assert not missing, f"README kinds table lacks {missing}"


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 500) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
_SECTIONS = st.sampled_from(sorted(DEFAULT_POLICY) + ["bogus"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_SECTIONS, _JSONISH | st.dictionaries(
    st.sampled_from(["nodeKey", "scope", "require", "mode", "GG202", "namespaces", "resources", "x"]),
    _JSONISH, max_size=3), max_size=4))
def test_any_policy_document_is_valid_or_a_policy_error(data: dict[str, object]) -> None:
    try:
        policy = policy_from_data(data, "fuzz.yaml")
    except PolicyError as exc:
        assert str(exc).startswith("fuzz.yaml: ")
        return
    assert set(policy.data) >= set(DEFAULT_POLICY) - {"custom"}
    for rule_id in ("GG202", "GG305"):
        policy.rule_setting(rule_id)


# -- options are declared by the rules that read them; schema and defaults are generated --------


def _declarations() -> list[Option]:
    """Every Option object declared anywhere (frame, custom checks, rules, domain modules)."""
    found: dict[int, Option] = {}
    for option in (*FRAME_OPTIONS, *CUSTOM_OPTIONS):
        found[id(option)] = option
    for rule in all_rules().values():
        for option in rule.options:
            found[id(option)] = option
    return list(found.values())


def test_every_default_key_is_declared_exactly_once() -> None:
    declared = _declarations()
    paths = [o.path for o in declared]
    leaves = option_table().leaf_paths(policy_defaults())
    for path in leaves:
        assert paths.count(path) == 1, f"{path} declared {paths.count(path)} times"
    assert sorted(leaves) == sorted(paths)  # and nothing is declared that the defaults lack
    for option in declared:  # each declared by a module, which is its owner
        assert option.owner.startswith("policies."), option


def test_the_generated_schema_accepts_the_defaults() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(policy_schema())
    jsonschema.Draft202012Validator(policy_schema()).validate(policy_defaults())
    for option in _declarations():  # and each default against its own declaration
        jsonschema.Draft202012Validator(option.schema).validate(option.default)


def test_shared_options_are_declared_by_their_owner_and_named_by_their_readers() -> None:
    rules = all_rules()
    assert GPU_RESOURCES.owner == "policies.gpu"
    assert GPU_RESOURCES in rules["GG501"].options and GPU_RESOURCES not in rules["GG501"].declares
    node_key = next(o for o in rules["GG101"].declares if o.path == "usage.nodeKey")
    assert node_key in rules["GG105"].options  # named by path, resolved to the one declaration
    owners = [r.id for r in rules.values() for o in r.declares if o.path == "usage.nodeKey"]
    assert owners == ["GG101"]


def test_an_option_declared_twice_is_refused() -> None:
    one = Option("x.y", {"type": "string"}, "a")
    with pytest.raises(ValueError, match="declared twice"):
        OptionTable([one, Option("x.y", {"type": "string"}, "b")])
    with pytest.raises(ValueError, match="both an option and a section"):
        OptionTable([one, Option("x", {"type": "object"}, {})])
    assert OptionTable([one, one]).defaults() == {"x": {"y": "a"}}  # the same declaration, named twice


def test_the_old_names_still_give_the_generated_tables() -> None:
    from policies import config

    assert config.DEFAULT_POLICY == DEFAULT_POLICY
    assert config.SCHEMA == policy_schema()


def test_policy_from_text_takes_text_and_names_the_source() -> None:
    assert policy_from_text("rules: {GG202: warning}\n", "team.yaml").rule_setting("GG202").severity \
        == Severity.WARNING
    assert policy_from_text("", "empty.yaml").data == DEFAULT_POLICY
    with pytest.raises(PolicyError, match=r"^team\.yaml: policy file is not valid YAML"):
        policy_from_text("rules: {GG202: [\n", "team.yaml")
    with pytest.raises(PolicyError, match=r"^team\.yaml: invalid policy: usage\.scope"):
        policy_from_text("usage: {scope: some}\n", "team.yaml")


def test_policy_from_text_refuses_hostile_text() -> None:
    with pytest.raises(PolicyError, match="over the limit"):
        policy_from_text("#" * (MAX_POLICY_BYTES + 1), "big.yaml")
    with pytest.raises(PolicyError, match="nests deeper"):
        policy_from_text("[" * (MAX_POLICY_DEPTH + 1) + "]" * (MAX_POLICY_DEPTH + 1), "deep.yaml")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True))
    with pytest.raises(PolicyError, match="expands to more than"):
        policy_from_text(bomb, "bomb.yaml")


def test_policies_config_does_no_file_io() -> None:
    import inspect

    from policies import config

    source = inspect.getsource(config)
    for call in ("open(", "read_text", "read_bytes", "Path(", "pathlib", "os.walk", "is_file"):
        assert call not in source, call


def test_policy_memo_keeps_nothing_when_memoisation_is_off() -> None:
    with memo.disabled():
        policy = Policy()
        assert policy.excluded_namespaces == {"kube-system", "kube-public", "gpugate-system"}
        assert policy.rule_setting("GG202").enabled
        assert len(policy.memo) == 0
        assert policy_from_data({"rules": {"GG202": "off"}}).rule_setting("GG202").enabled is False
    policy = Policy()
    policy.rule_setting("GG202")
    assert ("rule_settings" in policy.memo) is memo.enabled()  # GPUGATE_MEMO=off: still nothing
