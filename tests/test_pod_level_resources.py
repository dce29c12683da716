"""Pod-level resources (``spec.resources``, KEP-2837) count in what a pod needs, as
Kubernetes counts them (``k8s.io/component-helpers/resource.PodRequests``): a pod-level
request of ``cpu``, ``memory`` or huge pages is the pod's request for that resource,
overhead added; other resources keep the containers' sum/max. Where gpugate is unsure
(requests the API server would default from pod-level limits) the smaller need wins, so
no pod is judged never to fit on a request it would not make. And GG505 refuses the
pod-level resources (and container resources) the API server refuses, without reporting
GPU resources twice (GG501-GG503 own those)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
import yaml

from lint.cli import Report, lint_text
from policies.config import Policy
from policies.resources import pod_requests
from policies.workload import build_workload
from tests.feasibility_helpers import feasibility_findings, node, run, snapshot

Obj = dict[str, Any]


def _spec(containers: list[Obj], resources: Obj | None = None, **extra: Any) -> Obj:
    spec: Obj = {"containers": containers, **extra}
    if resources is not None:
        spec["resources"] = resources
    return spec


def _ctr(requests: Obj | None = None, limits: Obj | None = None, name: str = "main") -> Obj:
    resources: Obj = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def _job(spec: Obj) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", **spec}}}}


# -- pod_requests ---------------------------------------------------------------------------------

def test_pod_level_request_replaces_the_containers_and_overhead_is_added() -> None:
    spec = _spec([_ctr({"cpu": "1", "memory": "1Gi"}), _ctr({"cpu": "2"}, name="side")],
                 {"requests": {"cpu": "4"}}, overhead={"cpu": "250m"})
    requests, errors = pod_requests(spec, "/spec")
    assert errors == []
    assert requests == {"cpu": Fraction(17, 4), "memory": Fraction(2**30)}  # memory: the containers'


def test_pod_level_request_may_be_below_or_above_the_containers_and_still_replaces() -> None:
    # (an invalid pod when below: GG505 says so; its need is the smaller one)
    below, _ = pod_requests(_spec([_ctr({"cpu": "8"})], {"requests": {"cpu": "2"}}), "")
    above, _ = pod_requests(_spec([_ctr({"cpu": "1"})], {"requests": {"cpu": "6"}}), "")
    assert below["cpu"] == 2 and above["cpu"] == 6


def test_resources_not_taken_at_pod_level_keep_the_containers() -> None:
    spec = _spec([_ctr({"nvidia.com/gpu": 2, "ephemeral-storage": "1Gi"}, {"nvidia.com/gpu": 2})],
                 {"requests": {"nvidia.com/gpu": 8, "ephemeral-storage": "10Gi", "hugepages-2Mi": "4Mi",
                               "memory": "2Gi"}})
    requests, _ = pod_requests(spec, "")
    assert requests == {"nvidia.com/gpu": 2, "ephemeral-storage": 2**30, "hugepages-2Mi": 4 * 2**20,
                        "memory": 2 * 2**30}


def test_pod_level_limits_alone_change_nothing() -> None:
    # The API server would default a pod-level cpu request of 8 from the limit (no container
    # requests cpu); gpugate does not count it: the smaller need wins.
    spec = _spec([_ctr({"memory": "1Gi"})], {"limits": {"cpu": "8", "memory": "4Gi"}})
    requests, _ = pod_requests(spec, "")
    assert requests == {"memory": 2**30}


def test_sidecars_and_init_containers_are_replaced_too() -> None:
    spec = _spec([_ctr({"cpu": "1"})], {"requests": {"cpu": "3"}},
                 initContainers=[_ctr({"cpu": "5"}, name="init"),
                                 {**_ctr({"cpu": "1"}, name="sidecar"), "restartPolicy": "Always"}])
    assert pod_requests(spec, "")[0]["cpu"] == 3


def test_unparsable_pod_level_quantities_are_errors_with_their_pointers() -> None:
    spec = _spec([_ctr({"cpu": "1"})], {"requests": {"cpu": "2 cores", "memory": None},
                                        "limits": {"memory": "lots"}})
    requests, errors = pod_requests(spec, "/spec/template/spec")
    assert requests == {"cpu": 1}
    assert sorted(path for path, _ in errors) == ["/spec/template/spec/resources/limits/memory",
                                                  "/spec/template/spec/resources/requests/cpu"]


@pytest.mark.parametrize("resources", [None, {}, [], "x", {"requests": None}, {"requests": ["cpu"]}])
def test_odd_pod_level_resources_are_ignored(resources: Any) -> None:
    spec = _spec([_ctr({"cpu": "1"})])
    spec["resources"] = resources
    assert pod_requests(spec, "") == ({"cpu": 1}, [])


def test_the_pod_set_of_a_workload_counts_pod_level_requests() -> None:
    workload = build_workload(_job(_spec([_ctr({"cpu": "1"})], {"requests": {"cpu": "12"}})))
    assert workload is not None
    assert workload.pod_sets[0].requests["cpu"] == 12


def test_a_pod_level_request_no_node_offers_never_fits() -> None:
    doc = _job(_spec([_ctr({"cpu": "1"})], {"requests": {"cpu": "20"}}))
    found = feasibility_findings(run(doc, [snapshot([node("a", {"cpu": "16"}), node("b", {"cpu": "8"})])]))
    assert "GG403" in found and "cpu 20 asked per pod" in found["GG403"][0], found


def test_pod_level_limits_never_make_a_pod_never_fit() -> None:
    doc = _job(_spec([_ctr({"cpu": "1"})], {"limits": {"cpu": "64"}}))
    found = feasibility_findings(run(doc, [snapshot([node("a", {"cpu": "16"})])]))
    assert "GG403" not in found, found


@pytest.mark.parametrize("pod_level_cpu, waits", [("12", True), ("1", False)])
def test_bound_pods_with_pod_level_requests_use_them(pod_level_cpu: str, waits: bool) -> None:
    # the bound pod's containers ask 1 CPU; its pod-level request is what the node gives it
    bound = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "spec": {"nodeName": "a", "resources": {"requests": {"cpu": pod_level_cpu}},
                      "containers": [_ctr({"cpu": "1"})]},
             "status": {"phase": "Running"}}
    doc = _job(_spec([_ctr({"cpu": "8"})]))
    found = feasibility_findings(run(doc, [snapshot([node("a", {"cpu": "16"}), bound])]))
    assert "GG403" not in found, found  # fits the empty node
    assert ("GG404" in found) == waits, found  # and now only if the bound pod holds 1 of 16 CPUs


# -- GG505 ----------------------------------------------------------------------------------------

def _errors(doc: Obj, rule: str = "GG505") -> list[str]:
    report = Report()
    lint_text(yaml.safe_dump(doc), "t.yaml", Policy(), report)
    return [f.finding.message for f in report.findings if f.finding.rule == rule]


def test_gpu_resources_are_not_reported_twice() -> None:
    doc = _job(_spec([_ctr({"nvidia.com/gpu": "0.5", "metax-tech.com/gpu": 2},
                           {"nvidia.com/gpu": "-1", "metax-tech.com/gpu": 1})]))
    assert _errors(doc) == []
    assert _errors(doc, "GG502") and _errors(doc, "GG503")


def test_a_gpu_at_pod_level_is_refused() -> None:
    doc = _job(_spec([_ctr(None, {"nvidia.com/gpu": 1})], {"limits": {"nvidia.com/gpu": 1, "cpu": "4"}}))
    assert any("not supported at pod level" in m for m in _errors(doc))


def test_a_valid_pod_with_pod_level_resources_passes() -> None:
    doc = _job(_spec([_ctr({"cpu": "2", "memory": "4Gi"}, {"cpu": "4", "nvidia.com/gpu": 1}),
                      _ctr({"cpu": "500m"}, name="side")],
                     {"requests": {"cpu": "3", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}))
    assert _errors(doc) == []


@pytest.mark.parametrize("resources, says", [
    ({"requests": {"cpu": "1"}}, "below the 2 the containers request"),
    ({"limits": {"cpu": "2"}}, "below container"),
    ({"requests": {"cpu": "3"}, "limits": {"cpu": "2"}}, "is above limit"),
    ({"requests": {"memory": "-1Gi"}}, "is negative"),
    ({"claims": [{"name": "gpu"}]}, "claims cannot be set at pod level"),
    ({"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}, "not a whole multiple"),
    ({"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "4Mi", "cpu": "4"}},
     "differs from limit"),
])
def test_pod_level_refusals(resources: Obj, says: str) -> None:
    doc = _job(_spec([_ctr({"cpu": "2"}, {"cpu": "3"})], resources))
    assert any(says in m for m in _errors(doc)), _errors(doc)


@pytest.mark.parametrize("resources", [
    # a pod-level memory request with containers asking none: nothing to compare with
    {"requests": {"memory": "1Gi"}},
    # pod-level huge pages, no pod-level cpu or memory, but pod-level limits: the API server
    # defaults pod-level requests from the containers' cpu
    {"limits": {"hugepages-2Mi": "2Mi"}, "requests": {"hugepages-2Mi": "2Mi"}},
    # a pod-level huge-pages request without a limit: the API server may default the limit
    {"requests": {"hugepages-2Mi": "2Mi", "cpu": "2"}},
    # null amounts are unset
    {"requests": {"cpu": None}, "limits": {"cpu": None}},
    {},
])
def test_what_defaulting_may_mend_is_not_refused(resources: Obj) -> None:
    assert _errors(_job(_spec([_ctr({"cpu": "2"}, {"cpu": "3"})], resources))) == []


def test_a_containers_huge_pages_without_cpu_or_memory_are_left_to_the_api_server() -> None:
    # a namespace LimitRange may give the container cpu or memory defaults first
    doc = _job(_spec([_ctr({"hugepages-2Mi": "2Mi"}, {"hugepages-2Mi": "2Mi"})]))
    assert _errors(doc) == []


@pytest.mark.parametrize("name, ok", [
    ("cpu", True), ("ephemeral-storage", True), ("hugepages-1Gi", True), ("example.com/fpga", True),
    ("kubernetes.io/foo", True), ("nvidia.com/mig-1g.10gb", True),
    ("gpu", False), ("Example.com/x", False), ("a/b/c", False), ("/x", False),
    ("requests.example.com/x", False), ("example.com/" + "a" * 64, False),
])
def test_container_resource_names(name: str, ok: bool) -> None:
    amount = "1Gi" if name.startswith("hugepages-") else "1"
    doc = _job(_spec([_ctr({name: amount}, {name: amount})]))
    assert (_errors(doc) == []) == ok, _errors(doc)


def test_pods_on_nodes_that_differ_only_in_pod_level_resources_count_apart() -> None:
    """The topology remembers each running pod's request by what it depends on: the
    pod-level resources are part of that (two pods must not share one remembered request)."""
    from policies.topology import Topology

    def running(name: str, pod_cpu: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "d"},
                "spec": {"nodeName": "n1",
                         "resources": {"requests": {"cpu": pod_cpu}, "limits": {"cpu": pod_cpu}},
                         "containers": [{"name": "c", "image": "x",
                                         "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Running"}}

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "64", "memory": "64Gi", "pods": "110"}}}
    topo = Topology.from_objects([node, running("a", "2"), running("b", "6")])
    column = topo.res_index["cpu"]
    assert int(topo.used[topo.node_index["n1"], column]) == 8000
