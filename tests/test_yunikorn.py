"""YuniKorn task groups (policies.yunikorn): the shim's reading of the annotations, rule
GG407 (what it ignores or cannot match), and the feasibility of the placeholders' gang
(GG403: an error for gangSchedulingStyle Hard, a warning for Soft), with the pods
themselves judged one by one.

Upstream tables are ported as rows, each with its reference (apache/yunikorn-k8shim at
23b6b47f9835211e7bfb82bfbd203a8a0e00958f)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from feasibility_helpers import USAGE, node
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_feasibility_property import clusters as random_clusters
from test_feasibility_property import eligible, expressions, free_resources, placeable, units

from policies import memo
from policies.config import Policy, policy_from_data
from policies.context import Context
from policies.engine import evaluate
from policies.feasibility import Cause, Verdict, fit_question
from policies.findings import Finding, Severity
from policies.rules._feasibility import feasibility
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload
from policies.yunikorn import (
    DEFAULT_TIMEOUT_SECONDS,
    gang_of,
    placeholder_refusal,
    read_parameters,
    read_task_groups,
)

POLICY = Policy()
UPSTREAM = "apache/yunikorn-k8shim@23b6b47"
TG = "yunikorn.apache.org/task-groups"
TG_NAME = "yunikorn.apache.org/task-group-name"
PARAMS = "yunikorn.apache.org/schedulingPolicyParameters"
Obj = dict[str, Any]


# -- the reader: GetTaskGroupsFromAnnotation's own cases -------------------------------------------

UPSTREAM_GROUPS = """[
  {"name": "test-group-1", "minMember": 10, "minResource": {"cpu": 1, "memory": "2Gi"},
   "nodeSelector": {"test": "testnode", "locate": "west"},
   "tolerations": [{"key": "key", "operator": "Equal", "value": "value", "effect": "NoSchedule"}]},
  {"name": "test-group-2", "minMember": 5, "minResource": {"cpu": 2, "memory": "4Gi"}}
]"""

# (case, annotation, read?) -- pkg/cache/utils_test.go TestGetTaskGroupFromAnnotation and
# TestGetTaskGroupsFromAnnotationValidatesResources; the e2e error Applications of
# test/e2e/testdata/app (their taskGroups as the JSON the annotation carries).
READER_ROWS: list[tuple[str, str, bool]] = [
    ("utils_test correct", UPSTREAM_GROUPS, True),
    ("utils_test correct 2",
     '[{"name": "test-group-3", "minMember": 3, "minResource": {"cpu": 2, "memory": "1Gi"}}]', True),
    ("utils_test error json", '[{"name": "e", "minMember": "ERR", "minResource": {"cpu": "ERR"},}]', False),
    ("utils_test without name", '[{"minMember": 3, "minResource": {"cpu": 2, "memory": "1Gi"}}]', False),
    ("utils_test without minMember", '[{"name": "e", "minResource": {"cpu": 2, "memory": "1Gi"}}]', False),
    ("utils_test without minResource", '[{"name": "e", "minMember": 3}]', False),
    ("utils_test negative minMember, no minResource", '[{"name": "e", "minMember": -100}]', False),
    ("utils_test negative minMember", '[{"name": "e", "minMember": -100, "minResource": {"cpu": 2}}]', False),
    ("validates negative cpu", '[{"name":"g","minMember":1,"minResource":{"cpu":"-1"}}]', False),
    ("validates cpu MilliValue overflow",
     '[{"name":"g","minMember":1,"minResource":{"cpu":"9223372036854776"}}]', False),
    ("validates memory Value overflow",
     '[{"name":"g","minMember":1,"minResource":{"memory":"9223372036854775808"}}]', False),
    ("validates minMember x minResource overflow",
     '[{"name":"g","minMember":2000000000,"minResource":{"cpu":"5000000"}}]', False),
    ("validates aggregate overflow",
     '[{"name":"a","minMember":1,"minResource":{"memory":"5E"}},{"name":"b","minMember":1,'
     '"minResource":{"memory":"5E"}}]', False),
    ("validates cpu and vcore aggregate overflow",
     '[{"name":"a","minMember":1,"minResource":{"cpu":"5P"}},{"name":"b","minMember":1,'
     '"minResource":{"vcore":"5E"}}]', False),
    ("validates cpu and vcore collide",
     '[{"name":"g","minMember":1,"minResource":{"cpu":"1","vcore":"1"}}]', False),
    ("validates explicit pods",
     '[{"name":"a","minMember":2147483647,"minResource":{}},{"name":"b","minMember":1,'
     '"minResource":{"pods":"9223372036854775807"}}]', False),
    ("validates accepted", '[{"name":"g","minMember":2,"minResource":{"cpu":"1","memory":"1Gi"}}]', True),
    ("e2e application", '[{"name": "test-task-0001", "minMember": 1, "minResource": {"cpu": "300m", '
     '"memory": "128Mi"}, "nodeSelector": {"locate": "west"}, "tolerations": [{"key": "key", '
     '"operator": "Equal", "value": "value", "effect": "NoSchedule"}]}]', True),
    ("e2e err_minmember", '[{"name": "t", "minMember": "string", "minResource": {"cpu": "300m"}}]', False),
    ("e2e err_minresource", '[{"name": "t", "minMember": 1, "minResource": {"cpu": "300A"}}]', False),
    ("e2e err_name", '[{"name": 100, "minMember": 1, "minResource": {"cpu": "300m"}}]', False),
    ("e2e err_nodeselector", '[{"name": "t", "minMember": 1, "minResource": {"cpu": "300m"}, '
     '"nodeSelector": {"locate": 1}}]', False),
    ("e2e err_tolerations", '[{"name": "t", "minMember": 1, "minResource": {"cpu": "300m"}, '
     '"tolerations": [{"key": 1, "operator": "ERR", "value": "value", "effect": "ERR"}]}]', False),
]


@pytest.mark.parametrize("case,text,read", READER_ROWS, ids=[r[0] for r in READER_ROWS])
def test_the_reader_agrees_with_the_shim(case: str, text: str, read: bool) -> None:
    definition = read_task_groups(text)
    assert not definition.unsure, f"{UPSTREAM} {case}"
    assert definition.read is read, f"{UPSTREAM} {case}: {definition.ignored}"
    assert bool(definition.ignored) is not read


def test_the_upstream_groups_read_as_upstream_asserts() -> None:
    groups = read_task_groups(UPSTREAM_GROUPS).groups
    assert [(g.name, g.min_member) for g in groups] == [("test-group-1", 10), ("test-group-2", 5)]
    assert [(n, t) for n, t, _ in groups[0].resources or ()] == [("cpu", "1"), ("memory", "2Gi")]
    placement = dict(groups[0].placement)
    assert placement["nodeSelector"] == {"locate": "west", "test": "testnode"}
    assert placement["tolerations"] == [
        {"key": "key", "operator": "Equal", "value": "value", "effect": "NoSchedule"}]


@pytest.mark.parametrize("text,read,groups", [
    ("null", True, 0),                                   # nil slice: no task groups
    ("[]", True, 0),
    ('{"name": "g"}', False, 0),                         # an object, not a list
    ("[null]", False, 0),                                # the zero group has no name
    ('[{"Name": "g", "MINMEMBER": 1, "minresource": {}}]', True, 1),   # Go matches keys without case
    ('[{"name": "g", "minMember": 1, "minResource": {}, "name": ""}]', False, 0),  # the last key wins
    ('[{"name": "g", "minMember": 2.0, "minResource": {}}]', False, 0),           # no float into int32
    ('[{"name": "g", "minMember": 2147483648, "minResource": {}}]', False, 0),    # past int32
    ('[{"name": "g", "minMember": 1, "minResource": null}]', False, 0),           # nil map: refused
    ('[{"name": "g", "minMember": 1, "minResource": {"cpu": null}}]', True, 1),   # a null quantity is 0
    ('[{"name": "g", "minMember": 1, "minResource": {"cpu": 1.5e3}}]', True, 1),
    ('[{"name": "g", "minMember": 1, "minResource": {"cpu": true}}]', False, 0),
    ('[{"name": "g", "minMember": 1, "minResource": {"cpu": NaN}}]', False, 0),
    ('[{"name": "g", "minMember": 1, "minResource": {}, "tolerations": {}}]', False, 0),
    ('[{"name": "g", "minMember": 1, "minResource": {}, "affinity": []}]', False, 0),
    ('[{"name": "g", "minMember": 1, "minResource": {}, "labels": {"a": 1}}]', False, 0),
    ('[{"name": "g", "minMember": 1, "minResource": {"\\u0063pu": "1"}}]', None, 0),   # escapes: unsure
    ("[" * 5000 + "]" * 5000, None, 0),                  # deeper than Python parses: unsure
    ("not json", False, 0),
])
def test_go_json_decoding(text: str, read: bool | None, groups: int) -> None:
    definition = read_task_groups(text)
    if read is None:
        assert definition.unsure and not definition.ignored
        return
    assert definition.read is read, definition
    assert len(definition.groups) == groups


def test_keys_match_like_go_including_its_case_folding() -> None:
    """Go's simple case folding: the Kelvin sign is a k, the long s an s."""
    text = ('[{"name": "g", "minMember": 1, "minRe\u017fource": {"cpu": "1"}, '
            '"toleration\u017f": [{"\u212aey": "a"}]}]')
    group = read_task_groups(text).groups[0]
    assert group.resources is not None and group.resources[0][:2] == ("cpu", "1")
    assert dict(group.placement)["tolerations"][0]["key"] == "a"


def test_order_of_keys_and_tolerations_does_not_make_another_definition() -> None:
    a = read_task_groups('[{"name": "g", "minMember": 1, "minResource": {"cpu": "1", "memory": "1Gi"}, '
                         '"tolerations": [{"key": "a"}, {"key": "b"}]}]')
    b = read_task_groups('[{"minResource": {"memory": "1Gi", "cpu": "1"}, "minMember": 1, "name": "g", '
                         '"tolerations": [{"key": "b"}, {"key": "a"}]}]')
    assert a == b


# GetSchedulingPolicyParam: pkg/cache/gang_utils_test.go TestGetSchedulingPolicyParams (timeout
# 0 there is the core's default, 15 minutes, here).
PARAMETER_ROWS = [
    ("unknownPara=unkown placeholderTimeoutInSeconds=50=25 gangSchedulingStyle=Hard=Soft", 0, False),
    ("unknownPara=unkown placeholderTimeoutInSeconds=50 gangSchedulingStyle=Hard=Soft", 50, False),
    ("unknownPara=unkown placeholderTimeoutInSeconds=oneSecond gangSchedulingStyle=Soft", 0, False),
    ("unknownPara=unkown", 0, False),
    ("unknownPara=unkown placeholderTimeoutInSeconds=50  gangSchedulingStyle=Hard", 50, True),
    ("unknownPara=unkown gangSchedulingStyle=Soft", 0, False),
    ("unknownPara=unkown gangSchedulingStyle=abc", 0, False),
    ("placeholderTimeoutInSeconds gangSchedulingStyle", 0, False),
]


@pytest.mark.parametrize("text,timeout,hard", PARAMETER_ROWS)
def test_parameters_read_as_the_shim_reads_them(text: str, timeout: int, hard: bool) -> None:
    params = read_parameters(text)
    assert (params.timeout, params.hard) == (timeout or DEFAULT_TIMEOUT_SECONDS, hard), f"{UPSTREAM} {text}"
    assert params.problems  # every upstream row has an entry the shim skips or ignores


@pytest.mark.parametrize("text,says", [
    ("gangSchedulingStyle=Hard placeholderTimeoutInSeconds=60", ""),
    ("gangSchedulingStyle=hard", "neither Hard nor Soft"),
    ("placeholderTimeoutSeconds=30", "is not a parameter YuniKorn reads"),
    ("placeholderTimeoutInSeconds=0", "is not positive"),
    ("placeholderTimeoutInSeconds=6_0", "is not a whole number"),
    ("placeholderTimeoutInSeconds= 60", "no name=value pair"),
])
def test_parameter_problems(text: str, says: str) -> None:
    problems = read_parameters(text).problems
    assert (says in " ".join(problems)) if says else problems == ()


# GeneratePlaceholderName (pkg/cache/gang_utils_test.go TestGeneratePlaceholderName): these
# names are pod names, so their placeholders are admitted.
@pytest.mark.parametrize("group,app", [
    ("my-group", "app0001"),
    ("my-group", "app00000000000000000000000000000000000000000001"),
    ("a-very-long-task-group-name------------------------------------------",
     ("a-very-long-app-ID" + "-" * 65).lower()[:62] + "1"),
])
def test_upstream_placeholder_names_are_pod_names(group: str, app: str) -> None:
    """(The app ID is also the placeholders' label: at most 63 characters, as a label it comes from.)"""
    definition = read_task_groups(json.dumps([{"name": group, "minMember": 1, "minResource": {"cpu": "1"}}]))
    assert placeholder_refusal(definition.groups[0], app, "root.a") == ""


@pytest.mark.parametrize("group,app,says", [
    ({"name": "Worker"}, "train", "is not a pod name"),
    ({"name": "w"}, "Train", "is not a pod name"),
    ({"name": ".w"}, "train", "is not a pod name"),
    ({"name": "w", "minResource": {"vcore": "1"}}, "train", "YuniKorn's own name for cpu"),
    ({"name": "w", "minResource": {"gpu": "1"}}, "train", "not a container resource"),
    ({"name": "w", "minResource": {"nvidia.com/gpu": "0.5"}}, "train", "not a whole number"),
    ({"name": "w", "labels": {"a": "b c"}}, "train", "is not a label"),
    ({"name": "w", "nodeSelector": {"zone": "a b"}}, "train", "is not a label"),
    ({"name": "w", "tolerations": [{"key": "k", "operator": "exists"}]}, "train", "not a valid toleration"),
    ({"name": "w", "tolerations": [{"operator": "Equal", "value": "v"}]}, "train", "not a valid toleration"),
    ({"name": "w", "tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}, "train",
     "not a valid toleration"),
    ({"name": "w", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": []}}}}, "train", "no nodeSelectorTerms"),
    ({"name": "w", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "in", "values": ["a"]}]}]}}}},
     "train", "has operator 'in'"),
])
def test_placeholders_the_api_server_refuses(group: Obj, app: str, says: str) -> None:
    definition = read_task_groups(json.dumps([{"minMember": 1, "minResource": {"cpu": "1"}, **group}]))
    assert definition.read
    assert says in (placeholder_refusal(definition.groups[0], app, "") or "")


@pytest.mark.parametrize("group", [
    {"minResource": {"hugepages-2Mi": "2Mi"}},            # depends on a LimitRange
    {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}},
    {"topologySpreadConstraints": [{"maxSkew": 1}]},
    {"tolerations": [{"key": "k", "operator": "Gt", "value": "1"}]},   # feature-gated upstream
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In", "values": ["a b"]}]}]}}}},
])
def test_placeholders_gpugate_is_unsure_of_are_not_judged(group: Obj) -> None:
    text = json.dumps([{"name": "w", "minMember": 1, "minResource": {"cpu": "1"}, **group}])
    assert placeholder_refusal(read_task_groups(text).groups[0], "train", "") is None


# -- GG407 -----------------------------------------------------------------------------------------

def job(groups: Any = None, *, name: str | None = "tg", params: str | None = None, app: str | None = "train",
        requests: Obj | None = None, parallelism: int = 2, extra: Obj | None = None,
        scheduler: str = "yunikorn", labels: Obj | None = None) -> Obj:
    """A batch Job YuniKorn schedules, with task groups (a list, or the annotation text)."""
    annotations: Obj = {}
    if groups is not None:
        annotations[TG] = groups if isinstance(groups, str) else json.dumps(groups)
    if name is not None:
        annotations[TG_NAME] = name
    if params is not None:
        annotations[PARAMS] = params
    annotations.update(extra or {})
    pod_labels = {"applicationId": app} if app else {}
    requests = requests or {"cpu": "1"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": labels or {}},
            "spec": {"parallelism": parallelism, "completions": parallelism, "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": requests, "limits": requests}}]}}}}


def group(name: str = "tg", members: int = 2, **resources: Any) -> Obj:
    return {"name": name, "minMember": members, "minResource": resources or {"cpu": "1"}}


def findings(doc: Obj, rule: str, clusters: list[ClusterSnapshot] | None = None,
             policy: Policy = POLICY) -> list[Finding]:
    return [f for f in evaluate(doc, policy, clusters).findings if f.rule == rule]


ANNOTATIONS = "/spec/template/metadata/annotations/"


def test_a_valid_gang_gets_no_finding() -> None:
    assert findings(job([group()]), "GG407") == []


@pytest.mark.parametrize("doc,says,where", [
    (job('[{"name": "tg", "minMember": "2", "minResource": {}}]'), "not a whole number", TG),
    (job("[{name: tg}]"), "not JSON", TG),
    (job([group(members=0)]), "minMember 0", TG),
    (job([group(), group()]), "is declared 2 times", TG),
    (job([group()], name="other"), "is none of the 1 declared", TG_NAME),
    (job([group()], name=None), "these pods name none", TG),
    (job([group()], app=None), "without an application ID", TG),
    (job([group(vcore="1")]), "YuniKorn's own name for cpu", TG),
    (job([group()], app="Train"), "is not a pod name", TG),
    (job([group()], params="gangSchedulingStyle=hard"), "neither Hard nor Soft", PARAMS),
    (job([group()], extra={"yunikorn.apache.org/taskGroupName": "tg"}),
     "it reads yunikorn.apache.org/task-group-name", "yunikorn.apache.org/taskGroupName"),
])
def test_what_yunikorn_ignores_is_a_warning(doc: Obj, says: str, where: str) -> None:
    found = findings(doc, "GG407")
    assert [f.severity for f in found] == [Severity.WARNING], found
    assert says in found[0].message, found[0].message
    assert found[0].path == ANNOTATIONS + where.replace("/", "~1")


def test_no_finding_for_pods_yunikorn_does_not_schedule() -> None:
    assert findings(job("not json", scheduler="volcano"), "GG407") == []


def test_an_application_id_on_the_object_is_a_controllers_to_copy() -> None:
    """KubeRay copies the object's yunikorn.apache.org/app-id to its pods."""
    assert findings(job([group()], app=None, labels={"yunikorn.apache.org/app-id": "r"}), "GG407") == []


def pytorch(master: list[Obj], worker: list[Obj] | None, master_name: str = "master",
            worker_name: str = "worker") -> Obj:
    def replica(count: int, annotations: Obj) -> Obj:
        return {"replicas": count, "template": {
            "metadata": {"labels": {"applicationId": "pt"}, "annotations": annotations},
            "spec": {"schedulerName": "yunikorn", "containers": [
                {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}
    m = {TG_NAME: master_name, **({TG: json.dumps(master)} if master is not None else {})}
    w = {TG_NAME: worker_name, **({TG: json.dumps(worker)} if worker is not None else {})}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1, m), "Worker": replica(3, w)}}}


GPU_GROUPS = [group("master", 1, **{"nvidia.com/gpu": "8"}), group("worker", 3, **{"nvidia.com/gpu": "8"})]


def test_pod_sets_of_one_application_must_carry_the_same_task_groups() -> None:
    assert findings(pytorch(GPU_GROUPS, GPU_GROUPS), "GG407") == []
    found = findings(pytorch(GPU_GROUPS, GPU_GROUPS[:1]), "GG407")
    messages = " ".join(f.message for f in found)
    assert "differ from those of pod set 'Master'" in messages
    assert "is none of the 2 declared" not in messages  # worker is declared by Master's
    found = findings(pytorch(GPU_GROUPS, None), "GG407")
    assert [f.path for f in found] == ["/spec/pytorchReplicaSpecs/Worker/template/metadata"]
    assert "if one of these pods comes first" in found[0].message


def test_a_name_no_definition_declares() -> None:
    found = findings(pytorch(GPU_GROUPS, GPU_GROUPS, worker_name="workers"), "GG407")
    assert [f.path for f in found] == [
        "/spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/yunikorn.apache.org~1task-group-name"]


def test_gg407_messages_fit_a_kubectl_warning() -> None:
    long = "x" * 253
    docs = [job([group(long)], name=long), job("[" + "{" * 3), job([group(long, vcore="1")], name=long),
            job([group()], params=" ".join([f"{long}=1", f"gangSchedulingStyle={long}"])),
            job(json.dumps([{"name": long, "minMember": long, "minResource": {}}]))]
    for doc in docs:
        for f in findings(doc, "GG407"):
            assert len(f"GG407 task-groups-invalid: {f.message}") <= 256, f.message


# -- feasibility -----------------------------------------------------------------------------------

def cluster(nodes: int = 2, cpu: str = "8", gpus: str = "8",
            labels: Obj | None = None) -> list[ClusterSnapshot]:
    objects = [node(f"n{i}", {"cpu": cpu, "memory": "64Gi", "nvidia.com/gpu": gpus}, labels)
               for i in range(nodes)]
    return [ClusterSnapshot("c", Topology.from_objects(objects, POLICY))]


def verdict(doc: Obj, clusters: list[ClusterSnapshot], policy: Policy = POLICY) -> tuple[Verdict, Cause, str]:
    workload = build_workload(doc)
    assert workload is not None
    result = feasibility(workload, Context(policy=policy, clusters=clusters))
    assert result is not None
    out = result.outcomes[0]
    return out.verdict, out.cause, out.message


def gg403(doc: Obj, clusters: list[ClusterSnapshot], policy: Policy = POLICY) -> list[tuple[Severity, str]]:
    return [(f.severity, f.message) for f in findings(doc, "GG403", clusters, policy)]


def test_hard_placeholders_that_never_all_fit_are_an_error() -> None:
    doc = job([group(members=3, cpu="8")], params="gangSchedulingStyle=Hard")
    found = gg403(doc, cluster())
    assert [s for s, _ in found] == [Severity.ERROR], found
    assert "placeholders never all fit" in found[0][1] and "Hard style" in found[0][1]
    assert findings(doc, "GG403", cluster())[0].path == ANNOTATIONS + TG.replace("/", "~1")
    assert verdict(doc, cluster())[:2] == (Verdict.NEVER, Cause.PLACEHOLDERS_NEVER_HOLD)
    # the real pods (1 cpu each) fit: no placeholder, no never
    assert gg403(job([group(members=2, cpu="8")], params="gangSchedulingStyle=Hard"), cluster()) == []


def test_soft_placeholders_that_never_all_fit_are_a_warning() -> None:
    for params in (None, "gangSchedulingStyle=Soft placeholderTimeoutInSeconds=60"):
        found = gg403(job([group(members=3, cpu="8")], params=params), cluster())
        assert [s for s, _ in found] == [Severity.WARNING], found
        assert "Soft style" in found[0][1]
    assert "after the 60 s timeout" in found[0][1]


def test_no_placeholder_placeable_says_the_timeout_never_starts() -> None:
    for params, severity in (("gangSchedulingStyle=Hard", Severity.ERROR), (None, Severity.WARNING)):
        found = gg403(job([group(members=1, cpu="9")], params=params), cluster())
        assert found and found[0][0] == severity and "timeout never starts" in found[0][1], found


def test_the_pods_are_judged_one_by_one_too() -> None:
    """A pod bigger than every node never runs, placeholders or not."""
    found = gg403(job([group()], params="gangSchedulingStyle=Soft", requests={"cpu": "16"}), cluster())
    assert found and found[0][0] == Severity.ERROR and "cpu 16 asked per pod" in found[0][1]


def test_placeholders_that_wait_are_a_wait() -> None:
    busy = [node(f"n{i}", {"cpu": "8", "memory": "64Gi"}) for i in range(2)] + [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"},
         "spec": {"nodeName": "n0", "containers": [{"name": "m", "image": "x",
                                                    "resources": {"requests": {"cpu": "4"}}}]},
         "status": {"phase": "Running"}}]
    clusters = [ClusterSnapshot("c", Topology.from_objects(busy, POLICY))]
    doc = job([group(members=2, cpu="8")], params="gangSchedulingStyle=Hard")
    v, cause, message = verdict(doc, clusters)
    assert (v, cause) == (Verdict.WAITS, Cause.WAITS_FOR_ROOM) and message.startswith("YuniKorn placeholders")
    assert [f.severity for f in findings(doc, "GG404", clusters)] == [Severity.WARNING]


def test_autoscaling_makes_a_hard_never_a_wait() -> None:
    policy = policy_from_data({"feasibility": {"autoscaling": True}}, "t")
    doc = job([group(members=3, cpu="8")], params="gangSchedulingStyle=Hard")
    assert verdict(doc, cluster(), policy)[:2] == (Verdict.WAITS, Cause.WAITS_FOR_NEW_NODES)


def test_the_placement_of_the_task_group_is_the_placeholders() -> None:
    selector = {"gpu": "a100"}
    doc = job([{**group(members=1), "nodeSelector": selector}], params="gangSchedulingStyle=Hard")
    assert gg403(doc, cluster(labels=selector)) == []
    found = gg403(doc, cluster())
    assert found and "not matching its nodeSelector" in found[0][1]


def test_a_gang_kind_under_yunikorn_places_its_pods_one_by_one() -> None:
    """Five 8-GPU pods on four 8-GPU nodes: each pod fits (YuniKorn places them one by one);
    the placeholders (one of 8 GPUs per group member) decide the gang."""
    gpu_nodes = cluster(nodes=4, labels={USAGE: "training"})  # gpugate steers the pods there
    five = pytorch(GPU_GROUPS, GPU_GROUPS)
    five["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    assert gg403(five, gpu_nodes) == []
    hard = copy.deepcopy(five)
    groups = [group("master", 1, **{"nvidia.com/gpu": "8"}), group("worker", 4, **{"nvidia.com/gpu": "8"})]
    for role in ("Master", "Worker"):
        meta = hard["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]
        meta["annotations"][TG] = json.dumps(groups)
        meta["annotations"][PARAMS] = "gangSchedulingStyle=Hard"
    assert [s for s, _ in gg403(hard, gpu_nodes)] == [Severity.ERROR]


@pytest.mark.parametrize("doc", [
    job('[{"name": "tg", "minMember": "3", "minResource": {"cpu": "8"}}]', params="gangSchedulingStyle=Hard"),
    job([group(members=3, cpu="8")], params="gangSchedulingStyle=Hard", app=None),
    job([group(members=3, cpu="8"), group(members=3, cpu="8")], params="gangSchedulingStyle=Hard"),
    job([group(members=3, cpu="8")], params="gangSchedulingStyle=Hard", app="Train"),
    job([{**group(members=3, cpu="8"), "topologySpreadConstraints": [{"maxSkew": 1}]}],
        params="gangSchedulingStyle=Hard"),
])
def test_no_never_from_placeholders_yunikorn_may_not_create(doc: Obj) -> None:
    """Ignored task groups, no application ID, duplicate names, a placeholder the API server
    refuses, placement gpugate does not check: the gang is not judged (the pods still are)."""
    workload = build_workload(doc)
    assert workload is not None
    question = fit_question(workload, POLICY)
    assert question is not None and question.placeholders is None
    assert gg403(doc, cluster()) == []


def test_the_placeholders_are_part_of_the_question() -> None:
    """Memo keys: questions differing only in the placeholders, style or timeout differ."""
    def question(doc: Obj) -> Any:
        workload = build_workload(doc)
        assert workload is not None
        return fit_question(workload, POLICY)

    base = question(job([group()], params="gangSchedulingStyle=Hard"))
    assert base == question(job([group()], params="gangSchedulingStyle=Hard"))
    for other in (job([group()]), job([group(members=1)], params="gangSchedulingStyle=Hard"),
                  job([group()], params="gangSchedulingStyle=Hard placeholderTimeoutInSeconds=60"),
                  job(None)):
        assert question(other) != base


def test_an_update_that_changes_only_the_task_groups_is_judged_again() -> None:
    old = job([group()], params="gangSchedulingStyle=Hard")
    new = job([group(members=3, cpu="8")], params="gangSchedulingStyle=Hard")
    result = evaluate(new, POLICY, cluster(), previous=old)
    assert [f.severity for f in result.findings if f.rule == "GG403"] == [Severity.ERROR]
    assert [f for f in evaluate(old, POLICY, cluster(), previous=old).findings if f.rule == "GG403"] == []


def test_the_gang_is_read_once_per_workload() -> None:
    workload = build_workload(job([group()]))
    assert workload is not None
    assert gang_of(workload) == gang_of(workload)
    if memo.enabled():
        assert gang_of(workload) is gang_of(workload)


# -- the corpus ------------------------------------------------------------------------------------

def _yunikorn_corpus(corpus_dir: Path) -> list[Path]:
    return sorted(p for p in corpus_dir.rglob("*.yaml") if "yunikorn" in p.read_text(errors="replace"))


def test_the_corpus_yunikorn_examples_lint_clean(corpus_dir: Path) -> None:
    """No crash, no GG407, and the two gang examples of YuniKorn's own page fit a cluster of
    roomy nodes; their gang is judged (Hard for the second)."""
    from lint.cli import Report, lint_text

    files = _yunikorn_corpus(corpus_dir)
    assert len(files) > 20
    roomy = [ClusterSnapshot("c", Topology.from_objects(
        [node(f"n{i}", {"cpu": "64", "memory": "256Gi"}) for i in range(4)], POLICY))]
    for path in files:
        report = Report()
        lint_text(path.read_text(errors="replace"), str(path), POLICY, report, roomy)
        assert [f.finding.message for f in report.findings if f.finding.rule == "GG407"] == [], path
    gangs = [p for p in files if "gang_scheduling" in p.name]
    assert len(gangs) == 2
    styles = []
    for path in gangs:
        workload = build_workload(yaml.safe_load(path.read_text()))
        assert workload is not None
        question = fit_question(workload, POLICY)
        assert question is not None and question.placeholders is not None
        styles.append((question.placeholder_hard, question.placeholder_timeout))
        assert verdict(yaml.safe_load(path.read_text()), roomy)[0] == Verdict.FITS
    assert sorted(styles) == [(False, DEFAULT_TIMEOUT_SECONDS), (True, 60)]


# -- gpugate's own webhook on the placeholder pods -------------------------------------------------

PRODUCT = "nvidia.com/gpu.product"


def product_nodes(taint: bool = True) -> list[ClusterSnapshot]:
    objects = []
    for i in range(2):
        n = node(f"g{i}", {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                 {PRODUCT: "NVIDIA-H20", USAGE: "training"},
                 [{"key": PRODUCT, "value": "NVIDIA-H20", "effect": "NoSchedule"}] if taint else None)
        objects.append(n)
    return [ClusterSnapshot("c", Topology.from_objects(objects, POLICY))]


def gpu_job(group_extra: Obj, members: int = 2) -> Obj:
    doc = job([{**group(members=members, **{"nvidia.com/gpu": "8"}), **group_extra}],
              params="gangSchedulingStyle=Hard", requests={"nvidia.com/gpu": "8"}, parallelism=2)
    doc["metadata"]["labels"] = {"maip.mxsf.io/usage": "training"}
    doc["spec"]["template"]["spec"]["nodeSelector"] = {PRODUCT: "NVIDIA-H20"}
    return doc


def test_placeholders_pinned_to_a_product_get_its_toleration_from_gpugate() -> None:
    """A placeholder is a bare Pod: gpugate's webhook (GG102) adds the product toleration to
    it as to any pod pinned to a GPU product, so it may use the product's tainted nodes."""
    doc = gpu_job({"nodeSelector": {PRODUCT: "NVIDIA-H20"}})
    assert gg403(doc, product_nodes()) == []
    assert [s for s, _ in gg403(gpu_job({"nodeSelector": {PRODUCT: "NVIDIA-H20"}}, members=3),
                                product_nodes())] == [Severity.ERROR]


def test_placeholders_that_tolerate_no_taint_never_fit_tainted_nodes() -> None:
    """Not pinned to the product, the placeholder gets no toleration: the taint keeps it off."""
    found = gg403(gpu_job({}), product_nodes())
    assert [s for s, _ in found] == [Severity.ERROR] and "taints it does not tolerate" in found[0][1]
    assert gg403(gpu_job({}), product_nodes(taint=False)) == []


# -- soundness against brute force -----------------------------------------------------------------

TOLERATIONS = [{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"},
               {"key": "dedicated", "operator": "Exists"}, {"key": "gpu", "operator": "Equal", "value": "y"},
               {"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, {"operator": "Exists"}]


@st.composite
def placements(draw: st.DrawFn) -> Obj:
    spec: Obj = {}
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
    if draw(st.integers(0, 2)) == 0:
        terms = [{"matchExpressions": draw(st.lists(expressions(), min_size=1, max_size=2))}
                 for _ in range(draw(st.integers(1, 2)))]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return spec


@st.composite
def yunikorn_jobs(draw: st.DrawFn, resources: list[str]) -> tuple[Obj, list[Obj], Obj]:
    """(a batch Job YuniKorn schedules, its task groups, the pods' placement)."""
    groups = [{"name": f"g{i}", "minMember": draw(st.integers(1, 3)),
               "minResource": {r: str(draw(st.integers(0, 3))) for r in resources}, **draw(placements())}
              for i in range(draw(st.integers(1, 2)))]
    style = draw(st.sampled_from(["Hard", "Soft"]))
    pod_spec = {"schedulerName": "yunikorn", "restartPolicy": "Never", **draw(placements()),
                "containers": [{"name": "m", "image": "x", "resources": {
                    "requests": {r: str(draw(st.integers(0, 3))) for r in resources}}}]}
    pods = draw(st.integers(1, 3))
    doc = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "g", "namespace": "x"},
           "spec": {"parallelism": pods, "completions": pods, "template": {
               "metadata": {"labels": {"applicationId": "g"}, "annotations": {
                   TG: json.dumps(groups), TG_NAME: "g0", PARAMS: f"gangSchedulingStyle={style}"}},
               "spec": pod_spec}}}
    return doc, groups, pod_spec


def _eligible(spec: Obj, node: Obj) -> bool:
    """The naive eligibility, and kube-scheduler's NodeUnschedulable filter: a pod tolerating
    the cordon taint (here: everything) may use a cordoned node."""
    if node["spec"].get("unschedulable") and any(
            t.get("operator") == "Exists" and not t.get("key") and t.get("effect", "") in ("", "NoSchedule")
            for t in spec.get("tolerations", [])):
        node = {**node, "spec": {**node["spec"], "unschedulable": False}}
    return eligible(spec, node)


def _request(values: Obj) -> dict[str, int]:
    out = {r: units(r, v) for r, v in values.items() if units(r, v) > 0}
    out["pods"] = 1
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_placeholder_verdicts_never_contradict_brute_force(data: st.DataObject) -> None:
    """A never from the placeholders: they cannot all be placed on the empty cluster; a never
    from the pods: one of them fits no node; fits: the placeholders fit the free resources
    now (checked by exact search, eligibility re-implemented naively)."""
    objects, resources = data.draw(random_clusters())
    doc, groups, pod_spec = data.draw(yunikorn_jobs(resources))
    workload = build_workload(doc)
    assert workload is not None
    policy = Policy()
    topo = Topology.from_objects(objects, policy)
    result = feasibility(workload, Context(policy=policy, clusters=[ClusterSnapshot("c", topo)]))
    assert result is not None
    out = result.outcomes[0]
    event(f"{out.verdict.value} {out.cause.value}")
    nodes = [o for o in objects if o["kind"] == "Node"]

    def placeholders(empty: bool) -> bool:
        pods = [(_request(g["minResource"]), [n["metadata"]["name"] for n in nodes if _eligible(g, n)])
                for g in groups for _ in range(g["minMember"])]
        return placeable(pods, free_resources(objects, empty))

    pod = (_request(pod_spec["containers"][0]["resources"]["requests"]),
           [n["metadata"]["name"] for n in nodes if _eligible(pod_spec, n)])
    if out.cause in (Cause.PLACEHOLDERS_NEVER_HOLD, Cause.PLACEHOLDERS_TIME_OUT):
        assert not placeholders(empty=True), f"false never: {out.message}"
        params = doc["spec"]["template"]["metadata"]["annotations"][PARAMS]
        assert (out.cause is Cause.PLACEHOLDERS_NEVER_HOLD) == (params == "gangSchedulingStyle=Hard")
    elif out.verdict == Verdict.NEVER:
        assert out.cause in (Cause.NODES_NEVER_HOLD, Cause.NODES_HOLD_PART), out
        if out.cause is Cause.NODES_NEVER_HOLD:
            assert not placeable([pod], free_resources(objects, empty=True)), f"false never: {out.message}"
    if out.verdict == Verdict.FITS:
        assert placeholders(empty=False), "fits, but the placeholders do not fit now"


def test_a_label_only_the_placeholders_select_moves_the_remembered_answer() -> None:
    """The outcome memo's versions cover the labels the placeholders read, not only the pods'."""
    objects = [node(f"n{i}", {"cpu": "8", "memory": "64Gi"}) for i in range(2)]
    topo = Topology.from_objects(objects, POLICY)
    clusters = [ClusterSnapshot("c", topo)]
    doc = job([{**group(members=1), "nodeSelector": {"pool": "gang"}}], params="gangSchedulingStyle=Hard")
    assert [s for s, _ in gg403(doc, clusters)] == [Severity.ERROR]
    topo.apply("MODIFIED", node("n0", {"cpu": "8", "memory": "64Gi"}, {"pool": "gang"}))
    assert gg403(doc, clusters) == []


def test_yunikorns_placeholder_pods_are_judged_as_the_pods_they_are() -> None:
    """A placeholder pod (a bare Pod YuniKorn creates, which the webhook reviews) carries the
    application's annotations: no gang is built from them again, and no GG407 is repeated."""
    groups = json.dumps([group(members=3, cpu="8")])
    placeholder = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "tg-train-tg-abcdefghij", "namespace": "ml",
        "labels": {"yunikorn.apache.org/app-id": "train", "yunikorn.apache.org/queue": "root.a"},
        "annotations": {"internal.yunikorn.apache.org/placeholder": "true", TG_NAME: "tg", TG: groups,
                        PARAMS: "gangSchedulingStyle=hard"}},
        "spec": {"schedulerName": "yunikorn", "containers": [
            {"name": "pause", "image": "registry.k8s.io/pause:3.7",
             "resources": {"requests": {"cpu": "8"}, "limits": {"cpu": "8"}}}]}}
    assert findings(placeholder, "GG407") == []
    assert gg403(placeholder, cluster()) == []      # it fits a node on its own
    real = copy.deepcopy(placeholder)
    del real["metadata"]["annotations"]["internal.yunikorn.apache.org/placeholder"]
    assert [s for s, _ in gg403(real, cluster())] == [Severity.WARNING]   # its gang times out (Soft)
    assert findings(real, "GG407")
