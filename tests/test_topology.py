"""policies.topology: the snapshot built from objects and kept current by watch events."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from feasibility_helpers import gpu_node, node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.config import Policy
from policies.engine import Context
from policies.feasibility import eligible_mask
from policies.rules._feasibility import feasibility
from policies.topology import WATCHED, ClusterSnapshot, Topology
from policies.workload import build_workload


def used(topo: Topology, name: str, resource: str) -> int:
    return int(topo.used[topo.node_index[name], topo.res_index[resource]])


def alloc(topo: Topology, name: str, resource: str) -> int:
    return int(topo.alloc[topo.node_index[name], topo.res_index[resource]])


def test_from_objects_in_scheduler_units() -> None:
    topo = Topology.from_objects(
        [
            pod("p", "a", {"cpu": "250m", "memory": "1Gi"}),  # before its node: still counted
            node("a", {"cpu": "7500m", "memory": "32Gi", "nvidia.com/gpu": "8"}),
        ]
    )
    assert alloc(topo, "a", "cpu") == 7500 and alloc(topo, "a", "memory") == 32 * 2**30
    assert alloc(topo, "a", "nvidia.com/gpu") == 8 and alloc(topo, "a", "pods") == 110
    assert used(topo, "a", "cpu") == 250 and used(topo, "a", "pods") == 1
    assert topo.counts() == {
        "Node": 1,
        "Pod": 1,
        "Namespace": 0,
        "Queue": 0,
        "PodGroup": 0,
        "HyperNode": 0,
        "ElasticQuotaTree": 0,
        "LocalQueue": 0,
        "KAIQueue": 0,
        "ClusterQueue": 0,
        "Cohort": 0,
        "ResourceFlavor": 0,
        "KueueTopology": 0,
        "AdmissionCheck": 0,
        "TrainingRuntime": 0,
        "ClusterTrainingRuntime": 0,
        "Workload": 0,
        "WorkloadAPIPodGroup": 0,
        "DeviceClass": 0,
        "ResourceSlice": 0,
        "ResourceClaim": 0,
        "ResourceClaimTemplate": 0,
    }


def test_pod_lifecycle_events() -> None:
    topo = Topology.from_objects([node("a", {"cpu": "8"}), node("b", {"cpu": "8"})])
    p = pod("p", None, {"cpu": "2"})
    topo.apply("ADDED", p)  # pending: holds nothing
    assert used(topo, "a", "cpu") == 0 and topo.counts()["Pod"] == 0
    p["spec"]["nodeName"] = "a"
    topo.apply("MODIFIED", p)  # bound
    assert used(topo, "a", "cpu") == 2000
    topo.apply("MODIFIED", copy.deepcopy(p))  # status-only update: no double count
    assert used(topo, "a", "cpu") == 2000
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"  # in-place resize
    topo.apply("MODIFIED", p)
    assert used(topo, "a", "cpu") == 3000
    p["status"]["phase"] = "Succeeded"  # terminated: releases
    topo.apply("MODIFIED", p)
    assert used(topo, "a", "cpu") == 0
    p["status"]["phase"] = "Running"
    p["spec"]["nodeName"] = "b"
    topo.apply("ADDED", p)
    topo.apply("DELETED", p)
    assert used(topo, "b", "cpu") == 0 and topo.counts()["Pod"] == 0


def test_init_containers_and_overhead_count_as_the_scheduler_sees_them() -> None:
    p = pod("p", "a", {"cpu": "1"})
    p["spec"]["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": {"cpu": "4"}}}]
    p["spec"]["overhead"] = {"cpu": "100m"}
    topo = Topology.from_objects([node("a", {"cpu": "8"}), p])
    assert used(topo, "a", "cpu") == 4100


def test_node_events_and_slot_reuse() -> None:
    topo = Topology.from_objects([node("a", {"cpu": "8"}), pod("p", "a", {"cpu": "1"})])
    version = topo.label_version
    heartbeat = node("a", {"cpu": "8"})
    topo.apply("MODIFIED", heartbeat)
    assert topo.label_version == version  # nothing that matters changed
    topo.apply("DELETED", heartbeat)
    assert topo.counts()["Node"] == 0 and not topo.live[: topo.slots].any()
    topo.apply("ADDED", node("c", {"cpu": "2"}))  # reuses the freed slot, clean
    assert topo.slots == 1 and used(topo, "c", "cpu") == 0
    topo.apply("ADDED", node("a", {"cpu": "8"}))  # back: its pod is counted again
    assert used(topo, "a", "cpu") == 1000


def test_arrays_grow_and_new_resources_get_columns() -> None:
    topo = Topology()
    for i in range(100):
        topo.apply("ADDED", node(f"n{i}", {"cpu": "4"}))
    topo.apply("ADDED", node("fpga", {"cpu": "4", "example.com/fpga": "2"}))
    assert topo.counts()["Node"] == 101 and topo.alloc.shape[0] >= 101
    assert alloc(topo, "fpga", "example.com/fpga") == 2 and alloc(topo, "n5", "example.com/fpga") == 0
    assert int(topo.cluster_total()[topo.res_index["cpu"]]) == 101 * 4000


def test_label_and_taint_changes_invalidate_eligibility() -> None:
    topo = Topology.from_objects(
        [node("a", {"cpu": "8"}, {"zone": "z1"}), node("b", {"cpu": "8"}, {"zone": "z2"})]
    )
    spec: dict[str, Any] = {"nodeSelector": {"zone": "z1"}}
    assert eligible_mask(topo, spec).mask.tolist() == [True, False]
    topo.apply("MODIFIED", node("b", {"cpu": "8"}, {"zone": "z1"}))
    assert eligible_mask(topo, spec).mask.tolist() == [True, True]
    cached = eligible_mask(topo, spec)
    topo.apply("MODIFIED", node("b", {"cpu": "8"}, {"zone": "z1", "gfd.timestamp": "1"}))
    assert eligible_mask(topo, spec) is cached  # a label the selector does not read
    topo.apply(
        "MODIFIED", node("a", {"cpu": "8"}, {"zone": "z1"}, taints=[{"key": "k", "effect": "NoSchedule"}])
    )
    assert eligible_mask(topo, spec).mask.tolist() == [False, True]
    topo.apply("MODIFIED", node("b", {"cpu": "8"}, {"zone": "z1"}, unschedulable=True))
    assert eligible_mask(topo, spec).mask.tolist() == [False, False]


def test_queues_and_podgroups() -> None:
    topo = Topology.from_objects([queue("q", {"cpu": 4}), podgroup("pg", "q", {"cpu": "3", "memory": "4Gi"})])
    assert topo.queue_held("q") == {"cpu": 3000, "memory": 4 * 2**30}
    topo.apply("MODIFIED", podgroup("pg", "q", {"cpu": "3", "memory": "4Gi"}, phase="Completed"))
    assert topo.queue_held("q") == {}
    topo.apply("MODIFIED", podgroup("pg", "q", {"cpu": "2"}, phase="Inqueue"))
    assert topo.queue_held("q") == {"cpu": 2000}
    topo.apply("DELETED", podgroup("pg", "q", {}))
    assert topo.queue_held("q") == {} and topo.counts()["PodGroup"] == 0
    assert topo.queues["q"].capability == {"cpu": 4000} and topo.queues["q"].open


def test_replace_all_removes_what_a_relist_no_longer_has() -> None:
    topo = Topology.from_objects(
        [
            node("a", {"cpu": "8"}),
            node("b", {"cpu": "8"}),
            pod("p1", "a", {"cpu": "1"}),
            pod("p2", "b", {"cpu": "1"}),
            queue("q1"),
            queue("q2"),
        ]
    )
    topo.replace_all("Node", [node("a", {"cpu": "16"})])
    assert set(topo.node_index) == {"a"} and alloc(topo, "a", "cpu") == 16000
    topo.replace_all("Pod", [pod("p2", "a", {"cpu": "2"})])
    assert used(topo, "a", "cpu") == 2000 and topo.counts()["Pod"] == 1
    topo.replace_all("Queue", [])
    assert topo.counts()["Queue"] == 0


def test_unknown_kinds_and_malformed_objects_are_ignored() -> None:
    topo = Topology()
    for obj in (
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        {"apiVersion": "apps/v1", "kind": "Node", "metadata": {"name": "x"}},  # wrong group
        {"apiVersion": "v1", "kind": "Node"},
        {"kind": "Node"},
        "text",
        None,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "spec": "x",
            "status": {"allocatable": {"cpu": "lots", "memory": "1Gi"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n", "containers": "nope"},
        },
    ):
        topo.apply("ADDED", obj)  # type: ignore[arg-type]
    assert topo.counts()["Node"] == 1 and alloc(topo, "n", "memory") == 2**30


def test_supernodes_from_labels_and_hypernodes() -> None:
    policy = Policy()
    objects: list[Any] = [gpu_node(f"n{i}", labels={"nvidia.com/gpu.clique": f"c{i // 2}"}) for i in range(4)]
    objects.append(
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "h"},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "n3"}}}]},
        }
    )
    objects.append(
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "t2"},
            "spec": {
                "tier": 2,
                "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": "h"}}}],
            },
        }
    )
    topo = Topology.from_objects(objects, policy)
    found = {name: sorted(topo.node_names[int(s)] or "" for s in rows) for name, rows in topo.supernodes()}
    assert found == {
        "nvidia.com/gpu.clique=c0": ["n0", "n1"],
        "nvidia.com/gpu.clique=c1": ["n2", "n3"],
        "HyperNode h": ["n3"],
    }
    topo.apply("DELETED", objects[4])
    assert len(topo.supernodes()) == 2


def test_snapshot_staleness() -> None:
    assert not ClusterSnapshot("file", Topology()).stale(1e9, 30)
    live = ClusterSnapshot("live", Topology(), updated_at=100.0)
    assert not live.stale(120.0, 30) and live.stale(131.0, 30)


def test_events_do_not_copy_the_arrays() -> None:
    topo = Topology.from_objects([node(f"n{i}", {"cpu": "8"}) for i in range(10)])
    before = topo.used
    topo.apply("ADDED", pod("p", "n3", {"cpu": "1"}))
    assert topo.used is before and np.count_nonzero(topo.used[:, topo.res_index["cpu"]]) == 1


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 10**12)
    | st.text(max_size=8)
    | st.sampled_from(["1", "2Gi", "500m", "NoSchedule", "Running", "Open", "n0"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "key",
                    "value",
                    "effect",
                    "cpu",
                    "memory",
                    "pods",
                    "nodeName",
                    "phase",
                    "queue",
                    "members",
                    "selector",
                    "exactMatch",
                    "regexMatch",
                    "pattern",
                    "tier",
                    "capability",
                    "state",
                    "root",
                    "children",
                    "max",
                    "namespaces",
                    "containers",
                    "resources",
                    "requests",
                    "labels",
                    "taints",
                    "allocatable",
                    # Kueue's objects
                    "clusterQueue",
                    "stopPolicy",
                    "resourceGroups",
                    "coveredResources",
                    "flavors",
                    "nominalQuota",
                    "namespaceSelector",
                    "matchLabels",
                    "matchExpressions",
                    "operator",
                    "values",
                    "admissionChecks",
                    "admissionChecksStrategy",
                    "conditions",
                    "type",
                    "status",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
# every kind the topology reads
KINDS = sorted((f"{group}/v1" if group else "v1", kind) for group, kind in WATCHED)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
            st.sampled_from(KINDS),
            st.sampled_from(["n0", "n1", 7]),
            JSON,
            JSON,
            JSON,
        ),
        max_size=12,
    )
)
def test_malformed_objects_never_raise(events: list[Any]) -> None:
    """Snapshot files are user input: any shape is ignored or read as far as it makes sense."""
    topo = Topology.from_objects([node("n0", {"cpu": "8"})])
    for event, (api_version, kind), name, spec, status, labels in events:
        obj = {
            "apiVersion": api_version,
            "kind": kind,
            "spec": spec,
            "status": status,
            "metadata": {"name": name, "namespace": "x", "labels": labels},
        }
        topo.apply(event, obj)
    topo.supernodes()
    topo.counts()
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "x"},
        "spec": {
            "schedulerName": "volcano",
            "queue": "q",
            "tasks": [
                {
                    "name": "t",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                            ]
                        }
                    },
                }
            ],
        },
    }
    workload = build_workload(job)
    assert workload is not None
    assert feasibility(workload, Context(policy=Policy(), clusters=[ClusterSnapshot("c", topo)])) is not None
    # and through Kueue: a LocalQueue `n0` of namespace x, its ClusterQueue, flavors and checks as fuzzed
    queued = {"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": "k", "namespace": "x", "labels": {"kueue.x-k8s.io/queue-name": "n0"}},
              "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                  {"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}
    kueue_workload = build_workload(queued)
    assert kueue_workload is not None
    context = Context(policy=Policy(), clusters=[ClusterSnapshot("c", topo)])
    assert feasibility(kueue_workload, context) is not None


def test_a_node_beyond_64_bits_is_left_out_whole(caplog: pytest.LogCaptureFixture) -> None:
    """All of a node or none of it: a quantity beyond int64 keeps the whole node out (and takes
    out the version already held), with a logged reason; nothing is half-applied."""
    good = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "8"}}}
    topo = Topology.from_objects([good])
    assert topo.n_nodes == 1
    huge = copy.deepcopy(good)
    huge["status"]["allocatable"]["memory"] = "100000000000000000000000Ei"
    with caplog.at_level("WARNING", logger="gpugate.topology"):
        topo.apply("MODIFIED", huge)
    assert topo.n_nodes == 0 and "n1" not in topo.node_index
    assert not topo.label_exists("zone").any()
    assert "64-bit" in caplog.text and "memory" in caplog.text
    fresh = Topology.from_objects([huge])
    assert fresh.n_nodes == 0 and not fresh.taint_matrix.any()
    topo.apply("MODIFIED", good)   # back in range: back in the view
    assert topo.n_nodes == 1


def test_a_pod_beyond_64_bits_is_left_out() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running"}}
    topo = Topology.from_objects([node, pod])
    before = topo.used.copy()
    assert before.sum() > 0
    huge = copy.deepcopy(pod)
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e40"
    topo.apply("MODIFIED", huge)
    assert topo.used.sum() == 0   # the old version released, the new one not counted
    assert ("d", "p") not in topo._pods
