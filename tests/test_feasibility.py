"""The gang feasibility engine end to end (through policies.engine.evaluate): the seed
stories, eligibility semantics, queues and quotas, fleets, modes and GG406."""

from __future__ import annotations

import time
from typing import Any

import pytest
from feasibility_helpers import (
    feasibility_findings,
    gpu_node,
    node,
    pod,
    podgroup,
    policy,
    pytorch_job,
    queue,
    ray_cluster,
    run,
    snapshot,
)

from policies.config import Policy
from policies.engine import Context
from policies.feasibility import Verdict
from policies.rules._feasibility import feasibility
from policies.workload import build_workload

CLIQUE = "nvidia.com/gpu.clique"


def verdict_of(doc: dict[str, Any], clusters: list[Any], pol: Policy | None = None) -> Any:
    """The feasibility result for the workload as the engine would check it (mutated)."""
    result = run(doc, clusters, pol)
    workload = result.workload if result.mutated is None else build_workload(result.mutated)
    assert workload is not None
    # as run(): with the default policy, no wall-clock budget decides the verdict
    deadline = time.monotonic() + 60 if pol is None else None
    ctx = Context(policy=pol or Policy(), clusters=clusters, deadline=deadline)
    return feasibility(workload, ctx)


# -- seed 001: KubeRay + Volcano queue capability -------------------------------------------


def seed001_cluster(first_running: bool) -> list[Any]:
    objects = [
        node("n1", {"cpu": "16", "memory": "64Gi"}),
        node("n2", {"cpu": "16", "memory": "64Gi"}),
        queue("kuberay-test-queue", {"cpu": 4, "memory": "6Gi"}),
    ]
    if first_running:
        objects += [
            podgroup(
                "ray-test-cluster-0-pg", "kuberay-test-queue", {"cpu": "3", "memory": "4Gi"}, namespace="test"
            ),
            pod("test-cluster-0-head", "n1", {"cpu": "1", "memory": "2Gi"}, "test"),
            pod("test-cluster-0-worker-a", "n1", {"cpu": "1", "memory": "1Gi"}, "test"),
            pod("test-cluster-0-worker-b", "n2", {"cpu": "1", "memory": "1Gi"}, "test"),
        ]
    return [snapshot(objects)]


def test_seed001_first_raycluster_fits_the_queue() -> None:
    clusters = seed001_cluster(first_running=False)
    result = run(ray_cluster("test-cluster-0"), clusters)
    assert feasibility_findings(result) == {}
    assert verdict_of(ray_cluster("test-cluster-0"), clusters).verdict == Verdict.FITS


def test_seed001_second_raycluster_waits_and_is_not_rejected() -> None:
    result = run(ray_cluster("test-cluster-1"), seed001_cluster(first_running=True))
    found = feasibility_findings(result)
    assert list(found) == ["GG404"], found
    message = found["GG404"][0]
    assert message.startswith("warning: ")
    assert "kuberay-test-queue" in message and "cpu 3 asked, 3 of 4 held" in message


def test_seed001_raycluster_of_5_cpu_exceeds_the_queue() -> None:
    result = run(ray_cluster("big", worker_cpu="2"), seed001_cluster(first_running=False))
    found = feasibility_findings(result)
    assert list(found) == ["GG402"], found
    assert found["GG402"][0].startswith("error: ")
    assert "cpu 5 asked" in found["GG402"][0] and "capability 4" in found["GG402"][0]


def test_queue_capacity_is_capped_by_cluster_minus_other_guarantees() -> None:
    objects = [
        node("n1", {"cpu": "8", "memory": "64Gi"}),
        queue("a", {"cpu": 100}),
        queue("b", guarantee={"cpu": 6}),
    ]
    result = run(ray_cluster("r", queue_name="a"), [snapshot(objects)])  # 3 CPU > 8 - 6
    found = feasibility_findings(result)
    assert list(found) == ["GG402"], found
    assert "never hold more than 2" in found["GG402"][0]
    # with autoscaling the cluster total is no limit, the capability is
    assert "GG402" not in feasibility_findings(
        run(ray_cluster("r", queue_name="a"), [snapshot(objects)], policy(autoscaling=True))
    )


def test_parent_queue_capability_bounds_the_child() -> None:
    objects = [
        node("n1", {"cpu": "64", "memory": "64Gi"}),
        queue("root"),
        queue("parent", {"cpu": 2}, parent="root"),
        queue("leaf", {"cpu": 10}, parent="parent"),
    ]
    found = feasibility_findings(run(ray_cluster("r", queue_name="leaf"), [snapshot(objects)]))
    assert list(found) == ["GG402"] and "parent queue `parent`" in found["GG402"][0]


# -- GG306 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue_name", "expected"),
    [
        ("archive", "can only submit job to queue with state `Open`, queue `archive` status is `Closed`"),
        ("nowhere", "queue `nowhere` does not exist"),
        ("root", "root queue"),
        ("research", "leaf queue, queue `research` has child queues team"),
    ],
)
def test_queue_must_exist_be_open_and_a_leaf(queue_name: str, expected: str) -> None:
    objects = [
        node("n1", {"cpu": "16", "memory": "64Gi"}),
        queue("root"),
        queue("default", parent="root"),
        queue("archive", state="Closed", parent="root"),
        queue("research", parent="root"),
        queue("team", parent="research"),
    ]
    found = feasibility_findings(run(ray_cluster("r", queue_name=queue_name), [snapshot(objects)]))
    assert list(found) == ["GG306"], found
    assert expected in found["GG306"][0]


def test_implicit_default_queue_is_not_reported_missing() -> None:
    objects = [gpu_node("g0"), gpu_node("g1"), queue("team")]
    found = feasibility_findings(run(pytorch_job(1, 8), [snapshot(objects)]))
    assert found == {}


def test_queues_do_not_apply_to_pods_volcano_does_not_schedule() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "x"},
        "spec": {
            "template": {
                "metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "gone"}},
                "spec": {
                    "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]
                },
            }
        },
    }
    objects = [node("n1", {"cpu": "16", "memory": "64Gi"}), queue("team")]
    assert "GG306" not in feasibility_findings(run(job, [snapshot(objects)]))


# -- seed 000: GPU groups on supernodes ---------------------------------------------------------


def supernodes(cliques: int, per_clique: int, busy_gpus: int = 0) -> list[Any]:
    return [snapshot(supernode_objects(cliques, per_clique, busy_gpus))]


def supernode_objects(cliques: int, per_clique: int, busy_gpus: int = 0) -> list[Any]:
    objects: list[Any] = []
    for c in range(cliques):
        for i in range(per_clique):
            name = f"gpu-{c}-{i}"
            objects.append(gpu_node(name, labels={CLIQUE: f"clique-{c}"}))
            if busy_gpus:
                objects.append(pod(f"busy-{name}", name, {"metax-tech.com/gpu": busy_gpus}))
    return objects


def test_seed000_64_gpus_in_groups_of_32_fit_two_supernodes_of_4x8() -> None:
    job = pytorch_job(7, 8, group=32)
    assert feasibility_findings(run(job, supernodes(2, 4))) == {}
    result = verdict_of(job, supernodes(2, 4))
    assert result.verdict == Verdict.FITS
    witness = result.outcomes[0].witness
    by_clique: dict[str, int] = {}
    for nodes in witness.values():
        for name, count in nodes.items():
            clique = name.rsplit("-", 1)[0]
            by_clique[clique] = by_clique.get(clique, 0) + count
    assert by_clique == {"gpu-0": 4, "gpu-1": 4}  # each 32-GPU group inside one supernode


def test_seed000_rejected_when_supernodes_hold_16_gpus() -> None:
    found = feasibility_findings(run(pytorch_job(7, 8, group=32), supernodes(4, 2)))
    assert list(found) == ["GG405"], found
    assert "group of 32 GPUs" in found["GG405"][0] and "has 16 metax-tech.com/gpu" in found["GG405"][0]


def test_seed000_atomic_16_fits_supernodes_of_16() -> None:
    # G=32, A=16: only each 16-GPU part must share a supernode
    assert feasibility_findings(run(pytorch_job(7, 8, group=32, atomic=16), supernodes(4, 2))) == {}


def test_seed000_waits_when_every_node_has_one_gpu_busy() -> None:
    found = feasibility_findings(run(pytorch_job(7, 8, group=32), supernodes(2, 4, busy_gpus=1)))
    assert list(found) == ["GG404"], found
    assert found["GG404"][0].startswith("warning: ")


def test_too_few_supernode_units_in_total() -> None:
    # 3 supernodes of 16 GPUs: 64 GPUs in groups of 16 need 4
    # (two more GPU nodes outside any supernode give the nodes enough GPUs in total)
    found = feasibility_findings(
        run(
            pytorch_job(7, 8, group=16),
            [snapshot([*supernode_objects(3, 2), gpu_node("loose-0"), gpu_node("loose-1")])],
        )
    )
    assert list(found) == ["GG405"], found
    assert "hold at most 3" in found["GG405"][0]


def test_hypernodes_define_supernodes() -> None:
    objects: list[Any] = [gpu_node(f"n{i}") for i in range(8)]
    objects += [
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "s0"},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "n[0-3]"}}}],
            },
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "s1"},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r1"}}}}],
            },
        },
    ]
    for i in range(4, 8):
        objects[i]["metadata"]["labels"]["rack"] = "r1"
    assert feasibility_findings(run(pytorch_job(7, 8, group=32), [snapshot(objects)])) == {}
    found = feasibility_findings(run(pytorch_job(7, 8, group=64), [snapshot(objects)]))
    assert list(found) == ["GG405"] and "HyperNode s0" in found["GG405"][0]


def test_no_supernode_information_is_gg406_not_a_rejection() -> None:
    found = feasibility_findings(
        run(pytorch_job(7, 8, group=32), [snapshot([gpu_node(f"n{i}") for i in range(8)])])
    )
    assert list(found) == ["GG406"] and found["GG406"][0].startswith("info: ")


# -- GG403: eligibility and packing -------------------------------------------------------------


def cpu_job(
    pods: int, cpu: str, spec_extra: dict[str, Any] | None = None, scheduler: str = "volcano"
) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "schedulerName": scheduler,
            "minAvailable": pods,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": pods,
                    "template": {
                        "spec": {
                            **(spec_extra or {}),
                            "containers": [
                                {"name": "m", "image": "x", "resources": {"requests": {"cpu": cpu}}}
                            ],
                        }
                    },
                }
            ],
        },
    }


def test_pod_fits_no_node_names_the_largest_offer() -> None:
    found = feasibility_findings(
        run(cpu_job(1, "20"), [snapshot([node("a", {"cpu": "16"}), node("b", {"cpu": "8"})])])
    )
    assert list(found) == ["GG403"], found
    assert "cpu 20 asked per pod, the largest eligible node offers 16" in found["GG403"][0]


def test_pods_do_not_pack_into_the_nodes() -> None:
    # 3 pods of 6 CPU on two 10-CPU nodes: each pod fits a node, only two fit at once
    found = feasibility_findings(
        run(cpu_job(3, "6"), [snapshot([node("a", {"cpu": "10"}), node("b", {"cpu": "10"})])])
    )
    assert list(found) == ["GG403"] and "hold at most 2" in found["GG403"][0]


def test_pod_count_limit_counts() -> None:
    objects = [node("a", {"cpu": "100", "pods": "2"})]
    found = feasibility_findings(run(cpu_job(3, "1"), [snapshot(objects)]))
    assert list(found) == ["GG403"]


def test_extended_resource_no_node_offers() -> None:
    job = cpu_job(1, "1")
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"example.com/fpga": 1}
    }
    found = feasibility_findings(run(job, [snapshot([node("a", {"cpu": "8"})])]))
    assert list(found) == ["GG403"] and "no node offers example.com/fpga" in found["GG403"][0]


TAINTED = [node("t", {"cpu": "8"}, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])]


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}], True),
        ([{"key": "dedicated", "value": "ml"}], True),  # operator defaults to Equal, any effect
        ([{"key": "dedicated", "operator": "Equal", "value": "other"}], False),
        ([{"key": "dedicated", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),  # empty key: tolerates everything
        ([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_toleration_semantics(tolerations: list[Any], fits: bool) -> None:
    found = feasibility_findings(run(cpu_job(1, "1", {"tolerations": tolerations}), [snapshot(TAINTED)]))
    assert ("GG403" not in found) == fits, found


def test_prefer_no_schedule_does_not_exclude_and_no_execute_does() -> None:
    soft = [node("s", {"cpu": "8"}, taints=[{"key": "k", "effect": "PreferNoSchedule"}])]
    assert feasibility_findings(run(cpu_job(1, "1"), [snapshot(soft)])) == {}
    hard = [node("h", {"cpu": "8"}, taints=[{"key": "k", "effect": "NoExecute"}])]
    found = feasibility_findings(run(cpu_job(1, "1"), [snapshot(hard)]))
    assert "GG403" in found and "taints it does not tolerate (k:NoExecute)" in found["GG403"][0]


def test_cordoned_nodes_are_not_eligible() -> None:
    found = feasibility_findings(
        run(cpu_job(1, "1"), [snapshot([node("c", {"cpu": "8"}, unschedulable=True)])])
    )
    assert "GG403" in found and "1 cordoned" in found["GG403"][0]


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([{"operator": "Exists"}], True),  # tolerates everything, the cordon too
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], True),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], True),  # any effect
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Equal", "value": "true"}], False),
    ],
)
def test_cordoned_nodes_take_pods_that_tolerate_the_unschedulable_taint(
    tolerations: list[Any], fits: bool
) -> None:
    # kube-scheduler's NodeUnschedulable filter (found by tests/e2e/test_differential.py)
    cordoned = [node("c", {"cpu": "8"}, unschedulable=True)]
    found = feasibility_findings(run(cpu_job(2, "1", {"tolerations": tolerations}), [snapshot(cordoned)]))
    assert ("GG403" not in found) == fits, found


LABELLED = [
    node("a", {"cpu": "8"}, {"zone": "z1", "gen": "3"}),
    node("b", {"cpu": "8"}, {"zone": "z2", "gen": "5"}),
    node("c", {"cpu": "8"}, {"gen": "x"}),
]


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


@pytest.mark.parametrize(
    ("spec", "nodes"),
    [
        ({"nodeSelector": {"zone": "z1"}}, {"a"}),
        (affinity({"matchExpressions": [expr("zone", "In", "z1", "z2")]}), {"a", "b"}),
        (affinity({"matchExpressions": [expr("zone", "NotIn", "z1")]}), {"b", "c"}),  # absent label: true
        (affinity({"matchExpressions": [expr("zone", "Exists")]}), {"a", "b"}),
        (affinity({"matchExpressions": [expr("zone", "DoesNotExist")]}), {"c"}),
        (affinity({"matchExpressions": [expr("gen", "Gt", "4")]}), {"b"}),  # "x" is not a number
        (affinity({"matchExpressions": [expr("gen", "Lt", "4")]}), {"a"}),
        (affinity({"matchExpressions": [expr("zone", "In", "z1"), expr("gen", "Gt", "4")]}), set()),  # ANDed
        (
            affinity(
                {"matchExpressions": [expr("zone", "In", "z1")]},
                {"matchExpressions": [expr("gen", "Gt", "4")]},
            ),
            {"a", "b"},
        ),  # terms ORed
        (affinity({"matchFields": [expr("metadata.name", "In", "c")]}), {"c"}),
        (affinity({"matchFields": [expr("metadata.name", "NotIn", "c")]}), {"a", "b"}),
        ({"nodeName": "b"}, {"b"}),
    ],
)
def test_selector_and_affinity_semantics(spec: dict[str, Any], nodes: set[str]) -> None:
    # 3 pods of 8 CPU: one per node, so the gang fits exactly when all three nodes are eligible
    result = verdict_of(cpu_job(1, "8", spec), [snapshot(LABELLED)])
    if not nodes:
        assert result.verdict == Verdict.NEVER
        return
    assert result.verdict == Verdict.FITS
    assert result.outcomes[0].rows[0].eligible == len(nodes)
    assert set(result.outcomes[0].witness["worker"]) <= nodes


def test_usage_injection_is_applied_before_the_check() -> None:
    # GG101 pins a PyTorchJob to training/hybrid nodes: an inference-only cluster never fits it
    inference = [gpu_node(f"i{i}", usage="inference") for i in range(2)]
    found = feasibility_findings(run(pytorch_job(1, 8), [snapshot(inference)]))
    assert list(found) == ["GG403"], found
    assert "not matching its nodeSelector/affinity" in found["GG403"][0] or "taints" in found["GG403"][0]


def test_gang_total_exceeds_what_usable_nodes_offer() -> None:
    # two pod sets, each fits alone; together they need 24 CPU of 20
    job = cpu_job(2, "6")
    job["spec"]["tasks"].append(
        {
            "name": "ps",
            "replicas": 2,
            "template": {
                "spec": {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "6"}}}]}
            },
        }
    )
    job["spec"]["minAvailable"] = 4
    found = feasibility_findings(run(job, [snapshot([node("a", {"cpu": "10"}), node("b", {"cpu": "10"})])]))
    assert list(found) == ["GG403"], found


def test_deployment_is_not_a_gang() -> None:
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "x"},
        "spec": {
            "replicas": 5,
            "template": {
                "spec": {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "4"}}}]}
            },
        },
    }
    found = feasibility_findings(run(deployment, [snapshot([node("a", {"cpu": "10"})])]))
    assert list(found) == ["GG403"]
    assert found["GG403"][0].startswith("warning: ") and "2 of 5" in found["GG403"][0]
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "12"
    found = feasibility_findings(run(deployment, [snapshot([node("a", {"cpu": "10"})])]))
    assert found["GG403"][0].startswith("error: ")


def test_flexible_gang_needs_only_min_available() -> None:
    job = cpu_job(4, "6")
    job["spec"]["minAvailable"] = 2  # any 2 of the 4 pods
    assert feasibility_findings(run(job, [snapshot([node("a", {"cpu": "13"})])])) == {}
    job["spec"]["minAvailable"] = 3
    assert list(feasibility_findings(run(job, [snapshot([node("a", {"cpu": "13"})])]))) == ["GG403"]


def test_waits_names_what_is_short_now() -> None:
    objects = [node("a", {"cpu": "8"}), pod("p", "a", {"cpu": "6"})]
    found = feasibility_findings(run(cpu_job(1, "4"), [snapshot(objects)]))
    assert list(found) == ["GG404"], found
    # a pod that finished releases its requests
    objects[1]["status"]["phase"] = "Succeeded"
    assert feasibility_findings(run(cpu_job(1, "4"), [snapshot(objects)])) == {}


def test_elastic_quota_tree_max_bounds_the_namespace() -> None:
    tree = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
        "spec": {
            "root": {
                "name": "root",
                "max": {"cpu": 999900, "memory": "400000Gi"},
                "min": {"cpu": 9999, "memory": "40Gi"},
                "children": [
                    {"name": "child-2", "max": {"kube-queue/max-jobs": 1, "cpu": 10}, "namespaces": ["ns"]}
                ],
            }
        },
    }
    objects = [node("a", {"cpu": "64"}), tree]
    assert feasibility_findings(run(cpu_job(2, "4"), [snapshot(objects)])) == {}
    found = feasibility_findings(run(cpu_job(3, "4"), [snapshot(objects)]))
    assert list(found) == ["GG402"] and "root/child-2" in found["GG402"][0]


# -- modes, autoscaling, GG406, fleets ---------------------------------------------------------


def test_mode_off_and_warn() -> None:
    clusters = [snapshot([node("a", {"cpu": "4"})])]
    assert feasibility_findings(run(cpu_job(1, "8"), clusters, policy(mode="off"))) == {}
    found = feasibility_findings(run(cpu_job(1, "8"), clusters, policy(mode="warn")))
    assert found["GG403"][0].startswith("warning: ")


def test_autoscaling_makes_only_queue_limits_hard() -> None:
    objects = [
        node("a", {"cpu": "4", "memory": "64Gi"}),
        queue("kuberay-test-queue", {"cpu": 4, "memory": "6Gi"}),
    ]
    found = feasibility_findings(run(cpu_job(1, "8"), [snapshot(objects)], policy(autoscaling=True)))
    assert list(found) == ["GG404"], found
    found = feasibility_findings(
        run(ray_cluster("r", worker_cpu="2"), [snapshot(objects)], policy(autoscaling=True))
    )
    assert list(found) == ["GG402"], found


def test_stale_topology_is_said_aloud_empty_and_missing_are_info() -> None:
    stale = snapshot([node("a", {"cpu": "1"})], updated_at=time.monotonic() - 120)
    found = feasibility_findings(run(cpu_job(1, "8"), [stale]))
    # a stale view is never a verdict, and never silent: a warning that reaches the answer
    assert (
        list(found) == ["GG406"] and "120s old" in found["GG406"][0]
        and found["GG406"][0].startswith("warning")
    )
    fresh = snapshot([node("a", {"cpu": "1"})], updated_at=time.monotonic())
    assert list(feasibility_findings(run(cpu_job(1, "8"), [fresh]))) == ["GG403"]
    assert list(feasibility_findings(run(cpu_job(1, "8"), []))) == ["GG406"]
    assert list(feasibility_findings(run(cpu_job(1, "8"), [snapshot([queue("q")])]))) == ["GG406"]
    assert feasibility_findings(run(cpu_job(1, "8"), None)) == {}  # no topology given: rules do not run


def test_exhausted_budget_is_info_never_a_rejection() -> None:
    found = feasibility_findings(
        run(cpu_job(1, "8"), [snapshot([node("a", {"cpu": "1"})])], deadline=time.monotonic() - 1)
    )
    assert list(found) == ["GG406"] and "budget" in found["GG406"][0]


def test_fleet_fits_when_any_member_fits() -> None:
    small = snapshot([node("a", {"cpu": "4"})], name="small")
    big = snapshot([node("b", {"cpu": "16"})], name="big")
    result = verdict_of(cpu_job(1, "8"), [small, big])
    assert result.verdict == Verdict.FITS
    assert [o.verdict for o in result.outcomes] == [Verdict.NEVER, Verdict.FITS]
    assert feasibility_findings(run(cpu_job(1, "8"), [small, big])) == {}


def test_fleet_rejection_names_every_member() -> None:
    small = snapshot([node("a", {"cpu": "4"})], name="small")
    tiny = snapshot([node("b", {"cpu": "2"})], name="tiny")
    found = feasibility_findings(run(cpu_job(1, "8"), [small, tiny]))
    assert list(found) == ["GG403"]
    assert "cluster small:" in found["GG403"][0] and "cluster tiny:" in found["GG403"][0]


def test_fleet_with_a_stale_member_does_not_reject() -> None:
    small = snapshot([node("a", {"cpu": "4"})], name="small")
    stale = snapshot([node("b", {"cpu": "64"})], name="old", updated_at=time.monotonic() - 300)
    found = feasibility_findings(run(cpu_job(1, "8"), [small, stale]))
    assert list(found) == ["GG406"], found


def test_result_is_computed_once_per_evaluation() -> None:
    clusters = [snapshot([node("a", {"cpu": "4"})])]
    workload = build_workload(cpu_job(1, "8"))
    assert workload is not None
    ctx = Context(policy=Policy(), clusters=clusters)
    assert feasibility(workload, ctx) is feasibility(workload, ctx)
