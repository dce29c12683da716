"""Lifecycle semantics (README "Lifecycle") at the engine and review level: what is judged
and mutated on CREATE, UPDATE, scale and controller-made objects. The same points are
proven on a real API server in tests/e2e/."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from feasibility_helpers import (
    USAGE,
    gpu_node,
    node,
    pod,
    podgroup,
    pytorch_job,
    queue,
    snapshot,
)

from policies.changes import changed_pointers, controller_owner, identity_keys, owner_keys, touches
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from webhook.admission import admit, scale_target

Obj = dict[str, Any]
GPU = "metax-tech.com/gpu"


def fresh(objects: list[Obj], policy: Policy | None = None) -> Any:
    return snapshot(objects, policy, updated_at=time.monotonic())


def owned_by(obj: Obj, owner: Obj) -> Obj:
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    obj["metadata"]["namespace"] = meta["namespace"]
    return obj


def stored(obj: Obj, policy: Policy | None = None) -> Obj:
    """``obj`` as the API server stores it after a CREATE through gpugate (mutated)."""
    return evaluate(obj, policy or Policy()).mutated or obj


def rules(evaluation: Any) -> set[str]:
    return {f.rule for f in evaluation.findings}


def review(obj: Obj, operation: str = "CREATE", old: Obj | None = None, sub: str = "",
           resource: dict[str, str] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u", "operation": operation, "object": obj,
                               "namespace": obj.get("metadata", {}).get("namespace", "default"),
                               "name": obj.get("metadata", {}).get("name", "")}
    if old is not None:
        request["oldObject"] = old
    if sub:
        request["subResource"] = sub
    if resource is not None:
        request["resource"] = resource
    return request


# -- pure helpers ------------------------------------------------------------------------------


def test_changed_pointers_leave_out_metadata_and_status() -> None:
    old = {"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1, 2], "y": {"z": 1}}, "status": {"s": 1}}
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["b"] = "2"
    new["status"]["s"] = 2
    assert changed_pointers(old, new) == []
    new["spec"]["x"][1] = 3
    new["spec"]["y"]["a/b"] = 1
    assert changed_pointers(old, new) == ["/spec/x/1", "/spec/y/a~1b"]
    new["spec"]["x"].append(4)  # a list of another length changes as a whole
    assert "/spec/x" in changed_pointers(old, new)
    assert changed_pointers(old, {**old, "spec": {"x": [1, 2], "y": {"z": True}}}) == ["/spec/y/z"]


def test_touches_is_containment_either_way() -> None:
    assert touches("/spec/template/spec", ["/spec/template/spec/containers/0/env"])
    assert touches("/spec/template/spec/containers/0", ["/spec/template"])
    assert not touches("/spec/template/spec", ["/spec/replicas"])
    assert not touches("/spec/templates", ["/spec/template"])
    assert touches("", ["/spec/replicas"])


def test_owner_keys_link_pods_to_their_roots() -> None:
    rs_pod = {"metadata": {"namespace": "ml", "labels": {"pod-template-hash": "5d8f"},
                           "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d8f", "uid": "RS",
                                                "controller": True}]}}
    assert owner_keys(rs_pod) == ("RS", "apps/Deployment:ml/web")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "ml"}}
    assert "apps/Deployment:ml/web" in identity_keys(deployment)
    ray_pod = {"metadata": {"namespace": "ml", "labels": {"ray.io/originated-from-crd": "RayJob",
                                                          "ray.io/originated-from-cr-name": "train"}}}
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train", "namespace": "ml",
                                                                      "uid": "RJ"}}
    assert set(owner_keys(ray_pod)) <= identity_keys(rayjob)
    # an owner reference that is not the controller does not make it someone's
    assert owner_keys({"metadata": {"ownerReferences": [{"kind": "Job", "uid": "J"}]}}) == ()


@pytest.mark.parametrize(("api_version", "kind", "owned"), [
    ("apps/v1", "ReplicaSet", True), ("batch/v1", "Job", True), ("batch.volcano.sh/v1alpha1", "Job", True),
    ("kubeflow.org/v1", "PyTorchJob", True), ("ray.io/v1", "RayJob", True), ("apps/v1", "DaemonSet", False),
    ("argoproj.io/v1alpha1", "Workflow", False),
])
def test_controller_owner_is_a_kind_of_the_table(api_version: str, kind: str, owned: bool) -> None:
    obj = {"metadata": {"ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "x", "uid": "u",
                                              "controller": True}]}}
    assert (controller_owner(obj) is not None) is owned
    obj["metadata"]["ownerReferences"][0]["controller"] = False
    assert controller_owner(obj) is None


# -- judge once, at the top ------------------------------------------------------------------


def gpu_job(name: str = "train", uid: str = "U1", replicas: int = 2, gpus: int = 8,
            queue_name: str | None = None) -> Obj:
    spec: Obj = {"minAvailable": replicas, "schedulerName": "volcano",
                 "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {"containers": [
                     {"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]}}}]}
    if queue_name:
        spec["queue"] = queue_name
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "uid": uid}, "spec": spec}


def test_controller_made_pod_is_neither_patched_nor_judged() -> None:
    job = gpu_job()
    worker = pod("train-worker-0", None, {GPU: "8"})
    worker["spec"]["containers"][0]["resources"]["limits"] = {GPU: "64"}  # would be GG403 and GG502
    owned_by(worker, job)
    cluster = fresh([gpu_node("n0")])
    for endpoint in ("mutate", "validate"):
        outcome = admit(review(worker), endpoint, Policy(), [cluster])
        assert outcome.verdict == "owned"
        assert outcome.response == {"uid": "u", "allowed": True}
    # the same pod made by hand is judged
    del worker["metadata"]["ownerReferences"]
    assert admit(review(worker), "validate", Policy(), [cluster]).verdict == "denied"


# -- updates ------------------------------------------------------------------------------------


def test_metadata_only_update_is_allowed_whatever_the_cluster_says() -> None:
    job = gpu_job(queue_name="q", replicas=4)
    # the queue is closed and too small, no node fits: a CREATE would be denied
    cluster = fresh([gpu_node("n0", gpus=4), queue("q", {GPU: "8"}, state="Closed")])
    assert admit(review(job), "validate", Policy(), [cluster]).verdict == "denied"
    new = copy.deepcopy(job)
    new["metadata"]["finalizers"] = []
    new["metadata"]["labels"] = {"team": "a"}
    new["status"] = {"state": {"phase": "Running"}}
    for endpoint in ("mutate", "validate"):
        outcome = admit(review(new, "UPDATE", job), endpoint, Policy(), [cluster])
        assert outcome.verdict == "unchanged", endpoint
        assert outcome.response == {"uid": "u", "allowed": True}


def test_update_patches_only_changed_templates() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "ml", "uid": "D"},
                  "spec": {"replicas": 1, "template": {"spec": {"containers": [
                      {"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}}}}
    # predates the install: no usage affinity. A label edit is no reason to roll it out.
    labelled = copy.deepcopy(deployment)
    labelled["metadata"]["labels"] = {USAGE.replace("node.usage", "usage"): "inference"}
    assert admit(review(labelled, "UPDATE", deployment), "mutate", Policy()).verdict == "unchanged"
    # replicas changed, the template did not: nothing to patch
    scaled = copy.deepcopy(deployment)
    scaled["spec"]["replicas"] = 3
    out = evaluate(scaled, Policy(), previous=deployment)
    assert out.patch == [] and "GG101" not in rules(out)
    # the template changed: it is patched, as on a CREATE
    edited = copy.deepcopy(deployment)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "y"
    out = evaluate(edited, Policy(), previous=deployment)
    assert out.patch and all(op["path"].startswith("/spec/template/") for op in out.patch)
    assert out.patch == evaluate(edited, Policy()).patch


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_immutable_templates_are_never_patched_on_update(kind: str) -> None:
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}
    if kind == "Pod":
        obj: Obj = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                    "metadata": {"name": "p", "namespace": "ml",
                                 "labels": {"maip.mxsf.io/usage": "training"}}}
        changed = copy.deepcopy(obj)
        changed["spec"]["containers"][0]["image"] = "y"   # a Pod's image may change
    else:
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
               "spec": {"parallelism": 1, "template": {"spec": spec}}}
        changed = copy.deepcopy(obj)
        changed["spec"]["parallelism"] = 2
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = "y"
    assert evaluate(obj, Policy()).patch, "a CREATE of it is patched"
    out = evaluate(changed, Policy(), previous=obj)
    assert out.patch == []
    assert admit(review(changed, "UPDATE", obj), "mutate", Policy()).response == {"uid": "u", "allowed": True}


def test_update_counts_its_own_pods_and_pod_group_as_free() -> None:
    job = stored(gpu_job(queue_name="q", replicas=2))
    bound = [owned_by(pod(f"train-worker-{i}", f"n{i}", {GPU: "8"}, phase="Running"), job) for i in range(2)]
    for p in bound:
        p["spec"]["containers"][0]["resources"]["limits"] = {GPU: "8"}
    group = owned_by(podgroup("train-pg", "q", {GPU: "16"}), job)
    cluster = fresh([gpu_node("n0"), gpu_node("n1"), gpu_node("n2"), gpu_node("n3"),
                     queue("q", {GPU: "32"}), *bound, group])
    # grow from 2 to 4 workers: 4 x 8 GPUs fit the 4 nodes once its own 2 pods are free
    grown = copy.deepcopy(job)
    grown["spec"]["tasks"][0]["replicas"] = grown["spec"]["minAvailable"] = 4
    out = evaluate(grown, Policy(), [cluster], previous=job)
    assert not rules(out) & {"GG402", "GG403", "GG404", "GG405"}, out.findings
    # another job of the same shape is someone else: it waits for the room the first holds
    other = copy.deepcopy(grown)
    other["metadata"]["uid"] = "U2"
    other["metadata"]["name"] = "other"
    assert "GG404" in rules(evaluate(other, Policy(), [cluster]))


def test_update_that_asks_the_same_is_not_judged_again() -> None:
    job = stored(gpu_job(queue_name="q", replicas=2))
    cluster = fresh([gpu_node("n0", gpus=4), queue("q", {GPU: "8"})])
    assert rules(evaluate(job, Policy(), [cluster])) & {"GG402", "GG403"}
    edited = copy.deepcopy(job)
    edited["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    assert not rules(evaluate(edited, Policy(), [cluster], previous=job)) & {"GG402", "GG403", "GG404"}


def test_update_keeping_a_closed_queue_is_judged_on_capacity_only() -> None:
    job = stored(gpu_job(queue_name="q", replicas=1))
    cluster = fresh([gpu_node("n0"), gpu_node("n1"), queue("q", {GPU: "16"}, state="Closed")])
    assert "GG306" in rules(evaluate(job, Policy(), [cluster]))
    grown = copy.deepcopy(job)
    grown["spec"]["tasks"][0]["replicas"] = grown["spec"]["minAvailable"] = 2
    assert not rules(evaluate(grown, Policy(), [cluster], previous=job)) & {"GG306", "GG402", "GG403"}
    too_big = copy.deepcopy(job)
    too_big["spec"]["tasks"][0]["replicas"] = too_big["spec"]["minAvailable"] = 3
    assert "GG402" in rules(evaluate(too_big, Policy(), [cluster], previous=job))
    moved = copy.deepcopy(grown)
    moved["spec"]["queue"] = "q"
    job_elsewhere = copy.deepcopy(job)
    job_elsewhere["spec"]["queue"] = "other"
    assert "GG306" in rules(evaluate(moved, Policy(), [cluster], previous=job_elsewhere))


def test_update_keeps_only_findings_about_what_changed() -> None:
    job = pytorch_job(workers=1, gpus=8)
    job["metadata"]["uid"] = "P"
    # GG104 (no GPU product pinned) is about each template
    created = rules(evaluate(job, Policy()))
    assert "GG104" in created
    ttl = copy.deepcopy(job)
    ttl["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 60}
    assert "GG104" not in rules(evaluate(ttl, Policy(), previous=job))
    worker = copy.deepcopy(job)
    worker["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "y"
    paths = [f.path for f in evaluate(worker, Policy(), previous=job).findings if f.rule == "GG104"]
    assert paths and all("/Worker/" in p for p in paths)


# -- scale --------------------------------------------------------------------------------------


def scale(replicas: int) -> Obj:
    return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "ml"},
            "spec": {"replicas": replicas}}


DEPLOYMENTS = {"group": "apps", "version": "v1", "resource": "deployments"}


def test_scale_down_is_allowed_and_scale_up_names_its_target() -> None:
    down = review(scale(1), "UPDATE", scale(3), sub="scale", resource=DEPLOYMENTS)
    assert scale_target(down, "validate") is None
    assert admit(down, "validate", Policy()).response == {"uid": "u", "allowed": True}
    up = review(scale(5), "UPDATE", scale(3), sub="scale", resource=DEPLOYMENTS)
    target = scale_target(up, "validate")
    assert target is not None and (target.resource, target.name, target.replicas) == ("deployments", "web", 5)
    assert scale_target(up, "mutate") is None
    unknown = review(scale(5), "UPDATE", scale(3), sub="scale",
                     resource={"group": "apps", "version": "v1", "resource": "daemonsets"})
    assert scale_target(unknown, "validate") is None


def test_scale_up_is_judged_as_the_spec_change() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "ml", "uid": "D"},
                  "spec": {"replicas": 3, "template": {"spec": {
                      "tolerations": [{"key": USAGE, "operator": "Exists"}],
                      "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}}
    cluster = fresh([gpu_node("n0", usage="inference"), gpu_node("n1", usage="inference")])
    up = review(scale(5), "UPDATE", scale(3), sub="scale", resource=DEPLOYMENTS)
    judged = admit(up, "validate", Policy(), [cluster], parent=deployment)
    assert judged.verdict in ("allowed", "denied") and judged.evaluation is not None
    assert judged.evaluation.workload is not None and judged.evaluation.workload.pod_sets[0].replicas == 5
    unread = admit(up, "validate", Policy(), [cluster], parent_error="no API server access")
    assert unread.response["allowed"] is True
    (warning,) = unread.response["warnings"]
    assert "not checked" in warning and "5" in warning and len(warning) <= 256


# -- placement ---------------------------------------------------------------------------------


def test_node_name_pods_ignore_no_schedule_taints_and_cordons() -> None:
    tainted = node("t0", {"cpu": "8", "memory": "8Gi", GPU: "8"},
                   taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}], unschedulable=True)
    cluster = fresh([tainted])
    bound = pod("p", "t0", {GPU: "1"}, phase="Pending")
    bound["spec"]["containers"][0]["resources"]["limits"] = {GPU: "1"}
    bound["metadata"]["namespace"] = "ml"
    assert "GG403" not in rules(evaluate(bound, Policy(), [cluster]))
    unbound = copy.deepcopy(bound)
    del unbound["spec"]["nodeName"]
    assert "GG403" in rules(evaluate(unbound, Policy(), [cluster]))
    evicting = node("t1", {"cpu": "8", "memory": "8Gi", GPU: "8"},
                    taints=[{"key": "dedicated", "value": "x", "effect": "NoExecute"}])
    bound["spec"]["nodeName"] = "t1"
    assert "GG403" in rules(evaluate(bound, Policy(), [fresh([evicting])]))


def test_cordoned_nodes_give_no_room_to_new_gangs() -> None:
    pol = policy_from_data({"gpu": {"supernodeLabels": ["nvidia.com/gpu.clique"]}})
    nodes = ([gpu_node(f"a{i}", labels={"nvidia.com/gpu.clique": "a"}) for i in range(4)]
             + [gpu_node(f"b{i}", labels={"nvidia.com/gpu.clique": "b"}) for i in range(5)])
    job = pytorch_job(workers=7, gpus=8, group=32)   # two groups of 32 GPUs, each inside one clique
    assert not rules(evaluate(job, pol, [fresh(nodes, pol)])) & {"GG403", "GG405"}
    nodes[3]["spec"]["unschedulable"] = True          # clique a: 24 GPUs left for new pods
    assert "GG405" in rules(evaluate(job, pol, [fresh(nodes, pol)]))
    # the pods bound to a cordoned node still hold what they hold
    one = [gpu_node("c0", gpus=8)]
    one[0]["spec"]["unschedulable"] = True
    holder = pod("old", "c0", {GPU: "8"})
    single = pytorch_job(workers=0, gpus=8)
    assert "GG403" in rules(evaluate(single, Policy(), [fresh([*one, holder])]))
    big = node("g", {"cpu": "8", "memory": "8Gi", GPU: "8"},
               {USAGE: "training"}, [{"key": USAGE, "value": "training", "effect": "NoSchedule"}])
    held = rules(evaluate(single, Policy(), [fresh([*one, holder, big, pod("p", "g", {GPU: "8"})])]))
    assert "GG404" in held and "GG403" not in held


# -- CPU-only members --------------------------------------------------------------------------


def test_cpu_only_members_are_not_steered() -> None:
    head = {"name": "head", "image": "x", "resources": {"requests": {"cpu": "2"}}}
    worker = {"name": "w", "image": "x", "resources": {"limits": {GPU: "8"}}}
    group = {"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
             "template": {"spec": {"containers": [worker]}}}
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r", "namespace": "ml"},
           "spec": {"headGroupSpec": {"template": {"spec": {"containers": [head]}}},
                    "workerGroupSpecs": [group]}}
    patch = evaluate(ray, Policy()).patch
    assert patch and all(op["path"].startswith("/spec/workerGroupSpecs/0/") for op in patch)
    # CPU nodes in no usage pool: the head still fits, so nothing is rejected
    cpu = node("cpu0", {"cpu": "16", "memory": "64Gi"})
    out = evaluate(ray, Policy(), [fresh([cpu, gpu_node("g0")])])
    assert not rules(out) & {"GG403", "GG404"}, out.findings
    # scope all steers every template
    everything = policy_from_data({"usage": {"scope": "all"}})
    assert any(op["path"].startswith("/spec/headGroupSpec/") for op in evaluate(ray, everything).patch)


def test_rayjob_submitter_is_judged_with_its_parent() -> None:
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": "ml"},
              "spec": {"entrypoint": "python x.py",
                       "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [
                           {"name": "head", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}},
                       "submitterPodTemplate": {"spec": {"containers": [
                           {"name": "s", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}
    cluster = fresh([node("cpu0", {"cpu": "4", "memory": "8Gi"})])
    assert "GG403" not in rules(evaluate(rayjob, Policy(), [cluster]))
    rayjob["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    found = [f for f in evaluate(rayjob, Policy(), [cluster]).findings if f.rule == "GG403"]
    assert found and found[0].path.startswith("/spec/submitterPodTemplate")
    assert "submitter" in found[0].message
    # the submitter Job KubeRay makes from it passes as its own
    submitter = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rj"},
                 "spec": {"template": rayjob["spec"]["submitterPodTemplate"]}}
    rayjob["metadata"]["uid"] = "RJ"
    rayjob["apiVersion"] = "ray.io/v1"
    owned_by(submitter, rayjob)
    assert evaluate(submitter, Policy(), [cluster]).owned


def _manifests() -> list[Obj]:
    import yaml
    from conftest import EXAMPLES, corpus_files

    files = sorted(EXAMPLES.rglob("*.yaml")) + corpus_files()[::4]   # a quarter of the corpus: seconds
    docs: list[Obj] = []
    for path in files:
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        docs.extend(d for d in loaded if isinstance(d, dict) and isinstance(d.get("kind"), str))
    return docs


def test_validate_gives_the_same_answer_whether_or_not_mutate_ran() -> None:
    from conftest import EXAMPLES

    from lint.cluster import load_clusters

    pol = Policy()
    clusters = list(load_clusters([str(EXAMPLES / "cluster" / "cluster.yaml")], pol))
    compared = 0
    for doc in _manifests():
        mutated = evaluate(doc, pol).mutated
        if mutated is None:
            continue
        request = {"uid": "u", "operation": "CREATE", "namespace": "default"}
        alone = admit({**request, "object": doc}, "validate", pol, clusters).response
        after = admit({**request, "object": mutated}, "validate", pol, clusters).response
        assert (alone["allowed"], alone.get("warnings")) == (after["allowed"], after.get("warnings")), doc
        compared += 1
    assert compared > 20
