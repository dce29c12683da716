"""The Kubernetes Workload API (scheduling.k8s.io) across 1.35 (v1alpha1), 1.36 (v1alpha2) and
1.37 (v1alpha3): the model per version (policies/workload_api.py), a Pod's gang minimum from
the Workload or PodGroup of the same file (policies/references.py), a batch Job's 1.37 gang
policy, and the API server's create-time validation (policies/validation/workload_api.py).
The upstream test table itself is ported in tests/parity/kubernetes_workload.yaml."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from feasibility_helpers import snapshot

from policies import references, workload_api
from policies.config import Policy
from policies.engine import evaluate
from policies.validation.workload_api import composite_podgroup, podgroup, workload
from policies.workload import Workload, build_workload

Obj = dict[str, Any]
GROUP = "scheduling.k8s.io"


def workload_135(groups: list[Obj] | None = None, name: str = "train", namespace: str = "ml") -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podGroups": groups
            if groups is not None
            else [
                {"name": "driver", "policy": {"basic": {}}},
                {"name": "workers", "policy": {"gang": {"minCount": 4}}},
            ]
        },
    }


def workload_136(version: str = "v1alpha2", groups: list[Obj] | None = None) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "podGroupTemplates": groups
            if groups is not None
            else [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}]
        },
    }


def pod_group(
    version: str = "v1alpha2", min_count: int = 6, name: str = "train-workers-0", **spec: Any
) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def pod(gang: Obj, namespace: str = "ml") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "x"}], **gang},
    }


def built(doc: Obj, *others: Obj) -> Workload:
    with references.scope(references.References.of([doc, *others]) if others else None):
        found = build_workload(doc)
    assert found is not None
    return found


def refusals(check: Any, doc: Obj) -> list[tuple[str, str]]:
    return [(r.path, r.message) for r in check(doc)]


# -- the model per version -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, kubernetes, groups, policy, podgroup",
    [
        ("v1alpha1", "1.35", "podGroups", "policy", False),
        ("v1alpha2", "1.36", "podGroupTemplates", "schedulingPolicy", True),
        ("v1alpha3", "1.37", "podGroupTemplates", "schedulingPolicy", True),
    ],
)
def test_versions_understood(version: str, kubernetes: str, groups: str, policy: str, podgroup: bool) -> None:
    found = workload_api.version_of({"apiVersion": f"{GROUP}/{version}"})
    assert found is not None
    assert (found.kubernetes, found.groups, found.policy, found.podgroup) == (
        kubernetes,
        groups,
        policy,
        podgroup,
    )


@pytest.mark.parametrize(
    "api_version", [f"{GROUP}/v1", f"{GROUP}/v1beta1", "scheduling.x-k8s.io/v1alpha1", "v1", 3]
)
def test_other_versions_are_not_understood(api_version: Any) -> None:
    assert workload_api.version_of({"apiVersion": api_version}) is None
    assert workload_api.group_minimum({**workload_135(), "apiVersion": api_version}, "workers") is None
    assert refusals(workload, {**workload_135([]), "apiVersion": api_version}) == [], "not judged"


def test_group_minimum_per_version() -> None:
    assert workload_api.group_minimum(workload_135(), "workers") == 4
    assert workload_api.group_minimum(workload_135(), "driver") is None, "basic: no gang"
    assert workload_api.group_minimum(workload_135(), "nope") is None
    assert workload_api.group_minimum(workload_136(), "workers") == 3
    assert workload_api.group_minimum(workload_136("v1alpha3"), "workers") == 3
    # 1.35's field names in a 1.36 object (and back) are not read: each version as it is defined
    wrong = workload_136(groups=[{"name": "workers", "policy": {"gang": {"minCount": 3}}}])
    assert workload_api.group_minimum(wrong, "workers") is None
    assert workload_api.podgroup_minimum(pod_group()) == 6
    assert workload_api.podgroup_minimum(pod_group("v1alpha3")) == 6
    assert workload_api.podgroup_minimum(pod_group("v1alpha1")) is None, "no PodGroup object in 1.35"
    assert workload_api.podgroup_minimum(pod_group(min_count=0)) is None


@pytest.mark.parametrize("kind", ["Workload", "PodGroup", "CompositePodGroup"])
def test_workload_api_objects_hold_gangs_not_pods(kind: str) -> None:
    doc = {
        "apiVersion": f"{GROUP}/v1alpha3",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": {},
    }
    w = built(doc)
    assert w.pod_sets == [] and w.derived == [] and w.spec.validate


# -- a Pod's gang minimum from the Workload API object of the same file ------------------------------


def test_135_pod_gang_minimum_from_its_workload_group() -> None:
    member = pod({"workloadRef": {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "r0"}})
    w = built(member, workload_135())
    assert (w.gang_min, w.gang_min_path) == (4, ""), "the whole gang's count: not comparable with one pod"
    assert built(pod({"workloadRef": {"name": "train", "podGroup": "driver"}}), workload_135()).gang_min == 1


@pytest.mark.parametrize("version", ["v1alpha2", "v1alpha3"])
def test_136_137_pod_gang_minimum_from_its_podgroup(version: str) -> None:
    member = pod({"schedulingGroup": {"podGroupName": "train-workers-0"}})
    assert built(member, pod_group(version)).gang_min == 6


def test_pod_alone_is_judged_alone() -> None:
    member = pod({"schedulingGroup": {"podGroupName": "train-workers-0"}})
    assert built(member).gang_min == 1, "no file scope (the webhook): the pod alone"
    other_namespace = pod({"schedulingGroup": {"podGroupName": "train-workers-0"}}, namespace="elsewhere")
    assert built(other_namespace, pod_group()).gang_min == 1
    wrong_kind = pod({"workloadRef": {"name": "train-workers-0", "podGroup": "workers"}})
    assert built(wrong_kind, pod_group()).gang_min == 1, "workloadRef names a Workload, not a PodGroup"


@pytest.mark.parametrize("holder, gang", [
    (workload_135(), {"workloadRef": {"name": "train", "podGroup": "workers"}}),
    (pod_group("v1alpha3"), {"schedulingGroup": {"podGroupName": "train-workers-0"}}),
])
def test_pod_gang_minimum_from_the_cluster(holder: Obj, gang: Obj) -> None:
    """Judged against one member cluster (the webhook's live view, `lint --cluster`), a Pod
    reads its gang from the Workload or PodGroup that cluster holds; the linted files' own
    come first; a holder deleted from the cluster is forgotten."""
    member = pod(gang)
    cluster = snapshot([holder])
    expected = 4 if holder["kind"] == "Workload" else 6
    found = evaluate(member, Policy(), [cluster]).workload
    assert found is not None and found.gang_min == expected
    assert evaluate(member, Policy(), [snapshot([])]).workload.gang_min == 1  # type: ignore[union-attr]
    own = copy.deepcopy(holder)
    for group in (own["spec"].get("podGroups") or []):
        group["policy"] = {"gang": {"minCount": 2}}
    if "schedulingPolicy" in own["spec"]:
        own["spec"]["schedulingPolicy"] = {"gang": {"minCount": 2}}
    with references.scope(references.References.of([own])):
        assert evaluate(member, Policy(), [cluster]).workload.gang_min == 2  # type: ignore[union-attr]
    cluster.topology.apply("DELETED", holder)
    assert evaluate(member, Policy(), [cluster]).workload.gang_min == 1  # type: ignore[union-attr]


def test_volcano_annotation_wins_over_the_workload_api() -> None:
    member = pod({"schedulingGroup": {"podGroupName": "train-workers-0"}})
    member["metadata"]["annotations"] = {"scheduling.volcano.sh/group-min-member": "2"}
    assert built(member, pod_group()).gang_min == 2


def test_pod_with_a_big_gang_is_not_refused() -> None:
    member = pod({"schedulingGroup": {"podGroupName": "train-workers-0"}})
    with references.scope(references.References.of([member, pod_group(min_count=100)])):
        result = evaluate(member, Policy(), None)
    assert result.workload is not None and result.workload.gang_min == 100
    assert [f.rule for f in result.findings if str(f.severity) == "error"] == []


# -- a batch Job's own gang fields (1.37) -----------------------------------------------------------


def job(scheduling: Obj | None, parallelism: int = 4) -> Obj:
    spec: Obj = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}},
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    "scheduling, gang_min",
    [
        (None, 4),
        ({"schedulingPolicy": {"basic": {}}}, 4),
        ({"schedulingPolicy": {"gang": {}}}, 4),  # unset minCount: the controller uses parallelism
        ({"schedulingPolicy": {"gang": {"minCount": 3}}}, 3),
    ],
)
def test_137_job_gang_policy(scheduling: Obj | None, gang_min: int) -> None:
    w = built(job(scheduling))
    assert (w.gang_min, w.gang_min_path) == (gang_min, "")


@pytest.mark.parametrize("min_count", [0, -1, 9, "three"])
def test_137_job_gang_policy_is_never_refused(min_count: Any) -> None:
    # where the alpha WorkloadWithJob gate is off, the API server clears spec.scheduling
    result = evaluate(job({"schedulingPolicy": {"gang": {"minCount": min_count}}}), Policy(), None)
    assert [f.rule for f in result.findings if str(f.severity) == "error"] == []


# -- the API server's validation, per version (beyond the ported 1.36 table) ------------------------


def test_135_workload_valid() -> None:
    assert refusals(workload, workload_135()) == []


@pytest.mark.parametrize(
    "groups, path, says",
    [
        ([], "/spec/podGroups", "is empty"),
        (
            [{"name": f"g{i}", "policy": {"basic": {}}} for i in range(9)],
            "/spec/podGroups",
            "9 entries, more than 8",
        ),
        (
            [{"name": "g", "policy": {"basic": {}}}, {"name": "g", "policy": {"basic": {}}}],
            "/spec/podGroups/1/name",
            "duplicate",
        ),
        ([{"name": "G_1", "policy": {"basic": {}}}], "/spec/podGroups/0/name", "is not an RFC 1123 label"),
        ([{"policy": {"basic": {}}}], "/spec/podGroups/0/name", "is not set"),
        ([{"name": "g", "policy": {}}], "/spec/podGroups/0/policy", "sets none of `basic` or `gang`"),
        ([{"name": "g"}], "/spec/podGroups/0/policy", "sets none of"),
        (
            [{"name": "g", "policy": {"basic": {}, "gang": {"minCount": 1}}}],
            "/spec/podGroups/0/policy",
            "sets 2 of",
        ),
        (
            [{"name": "g", "policy": {"gang": {"minCount": 0}}}],
            "/spec/podGroups/0/policy/gang/minCount",
            "0 is less than 1",
        ),
        (
            [{"name": "g", "policy": {"gang": {"minCount": -2}}}],
            "/spec/podGroups/0/policy/gang/minCount",
            "-2",
        ),
        ([{"name": "g", "policy": {"gang": {}}}], "/spec/podGroups/0/policy/gang/minCount", "is not set"),
    ],
)
def test_135_workload_refusals(groups: list[Obj], path: str, says: str) -> None:
    found = refusals(workload, workload_135(groups))
    assert any(p == path and says in m for p, m in found), found


def test_135_fields_in_a_136_object_are_refused_as_missing() -> None:
    found = refusals(workload, workload_136(groups=[]))
    assert found and found[0][0] == "/spec/podGroupTemplates"


@pytest.mark.parametrize(
    "ref, path",
    [
        ({"name": "baz"}, "/spec/controllerRef/kind"),
        ({"kind": "Job"}, "/spec/controllerRef/name"),
        ({"kind": "a/b", "name": "x"}, "/spec/controllerRef/kind"),
        ({"kind": "Job", "name": ".."}, "/spec/controllerRef/name"),
        ({"apiGroup": "Batch_", "kind": "Job", "name": "x"}, "/spec/controllerRef/apiGroup"),
    ],
)
def test_controller_ref_refusals(ref: Obj, path: str) -> None:
    doc = workload_136()
    doc["spec"]["controllerRef"] = ref
    assert [p for p, _ in refusals(workload, doc)] == [path]


def test_137_templates_or_composite_templates() -> None:
    assert refusals(workload, workload_136("v1alpha3")) == []
    neither = workload_136("v1alpha3", groups=[])
    assert any(
        "sets none of `podGroupTemplates` or `compositePodGroupTemplates`" in m
        for _, m in refusals(workload, neither)
    )
    both = workload_136("v1alpha3")
    both["spec"]["compositePodGroupTemplates"] = [
        {
            "name": "c",
            "schedulingPolicy": {"basic": {}},
            "podGroupTemplates": [{"name": "p", "schedulingPolicy": {"basic": {}}}],
        }
    ]
    assert any("sets 2 of" in m for _, m in refusals(workload, both))


def test_137_composite_templates() -> None:
    def composite(depth: int, policy: Obj) -> Obj:
        leaf = {"name": "leaf", "schedulingPolicy": {"gang": {"minCount": 2}}}
        node: Obj = {"name": f"c{depth}", "schedulingPolicy": policy, "podGroupTemplates": [leaf]}
        for level in range(depth - 1, 0, -1):
            node = {
                "name": f"c{level}",
                "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [node],
            }
        doc = workload_136("v1alpha3", groups=[])
        del doc["spec"]["podGroupTemplates"]
        doc["spec"]["compositePodGroupTemplates"] = [node]
        return doc

    assert refusals(workload, composite(4, {"gang": {"minGroupCount": 2}})) == []
    assert any("deeper than 4" in m for _, m in refusals(workload, composite(5, {"basic": {}})))
    assert any(
        p.endswith("/schedulingPolicy/gang/minGroupCount") and "0 is less than 1" in m
        for p, m in refusals(workload, composite(1, {"gang": {"minGroupCount": 0}}))
    )
    empty = composite(1, {"basic": {}})
    del empty["spec"]["compositePodGroupTemplates"][0]["podGroupTemplates"]
    assert any(
        "neither podGroupTemplates nor compositePodGroupTemplates" in m for _, m in refusals(workload, empty)
    )


def test_137_template_priority_and_disruption_mode() -> None:
    doc = workload_136(
        "v1alpha3",
        groups=[
            {
                "name": "w",
                "schedulingPolicy": {"basic": {}},
                "priority": 2_000_000_000,
                "priorityClassName": "Not_A_Name",
                "disruptionMode": {"single": {}, "all": {}},
            }
        ],
    )
    paths = [p for p, _ in refusals(workload, doc)]
    assert paths == [
        "/spec/podGroupTemplates/0/priority",
        "/spec/podGroupTemplates/0/priorityClassName",
        "/spec/podGroupTemplates/0/disruptionMode",
    ]
    # 1.36 has no such fields: not judged there
    assert refusals(workload, workload_136(groups=doc["spec"]["podGroupTemplates"])) == []


def test_podgroup_per_version() -> None:
    assert (
        refusals(
            podgroup,
            pod_group(
                podGroupTemplateRef={"workload": {"workloadName": "train", "podGroupTemplateName": "workers"}}
            ),
        )
        == []
    )
    assert [p for p, _ in refusals(podgroup, pod_group(podGroupTemplateRef={}))] == [
        "/spec/podGroupTemplateRef"
    ]
    assert [p for p, _ in refusals(podgroup, pod_group(min_count=0))] == [
        "/spec/schedulingPolicy/gang/minCount"
    ]
    ok = pod_group("v1alpha3", workloadRef={"workloadName": "train.v1", "templateName": "workers"})
    assert refusals(podgroup, ok) == []
    bad = pod_group("v1alpha3", workloadRef={"workloadName": "train"})
    assert [p for p, _ in refusals(podgroup, bad)] == ["/spec/workloadRef/templateName"]
    assert refusals(podgroup, pod_group("v1alpha1", min_count=0)) == [], (
        "no PodGroup object in 1.35: not judged"
    )


def test_composite_podgroup() -> None:
    doc = {
        "apiVersion": f"{GROUP}/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {
            "workloadRef": {"workloadName": "train", "templateName": "c"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        },
    }
    assert refusals(composite_podgroup, doc) == []
    del doc["spec"]["workloadRef"]
    doc["spec"]["schedulingPolicy"] = {"gang": {"minGroupCount": 0}}
    assert [p for p, _ in refusals(composite_podgroup, doc)] == [
        "/spec/workloadRef",
        "/spec/schedulingPolicy/gang/minGroupCount",
    ]


def test_wrong_types_are_not_refusals() -> None:
    doc = workload_135([{"name": 3, "policy": {"gang": {"minCount": "four"}}}])
    assert refusals(workload, doc) == []
    assert (
        refusals(
            workload,
            {
                "apiVersion": f"{GROUP}/v1alpha2",
                "kind": "Workload",
                "metadata": {"name": "w"},
                "spec": {"podGroupTemplates": "x"},
            },
        )
        == []
    )


def test_name_or_generate_name() -> None:
    doc = workload_135()
    doc["metadata"] = {"generateName": "train-"}
    assert refusals(workload, doc) == []
    doc["metadata"] = {}
    assert [p for p, _ in refusals(workload, doc)] == ["/metadata"]


def test_what_a_front_end_indexes() -> None:
    assert {(GROUP, "Workload"), (GROUP, "PodGroup")} <= references.REFERABLE
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train", "namespace": "ml"}}
    indexed = references.References.of([other, workload_135()]).objects
    assert indexed.keys() == {(GROUP, "Workload", "ml", "train")}


def test_files_that_may_hold_a_referable_object() -> None:
    """Only files holding such an object are read twice in a multi-file lint run: the group
    of an apiVersion (with its slash) and the kind must both occur. A Volcano PodGroup CRD beside
    an RBAC rule on scheduling.k8s.io (Volcano's 1.1 MB installer) holds none."""
    volcano = (b"rules:\n- apiGroups: [\"scheduling.k8s.io\"]\n  resources: [priorityclasses]\n---\n"
               b"kind: CustomResourceDefinition\nspec:\n  group: scheduling.volcano.sh\n"
               b"  names: {kind: PodGroup}\n")
    assert not references.may_hold_referable(volcano)
    assert references.may_hold_referable(b"apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\n")
    assert references.may_hold_referable('{"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload"}')
