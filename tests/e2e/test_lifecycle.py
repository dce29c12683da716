"""README "Lifecycle: what is judged, and when", proved on a real kube-apiserver,
kube-controller-manager and kube-scheduler, with gpugate registered through the project's own
``deploy/base/webhooks.yaml``. Each test reads back what the API server stored."""

from __future__ import annotations

import pytest

from .conftest import Session
from .kube import GPU, USAGE_KEY, canonical, wait_until
from .objects import (
    batch_job,
    deployment,
    owned_by,
    pytorch_job,
    queue,
    steered,
    tolerations,
    volcano_job,
)
from .steps import bound_pods, cordon, denied_for, eventually, rules, ungate

pytestmark = pytest.mark.e2e


# -- a. pod spec immutability --------------------------------------------------------------

def test_job_created_before_gpugate_completes(e2e: Session, ignored_namespace: str) -> None:
    """A batch Job whose pods exist from before gpugate was installed completes: the Job
    controller's finalizer removal (an UPDATE of each pod) is not refused because gpugate
    would patch the immutable pod spec, and no pod spec or template changes."""
    ns = group = ignored_namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group)
    job = batch_job(ns, "train", group, gpus=4, parallelism=2, tolerations=tolerations())
    created = e2e.api.create(job)
    assert created.status == 201, created
    template = created.body["spec"]["template"]
    assert not steered(template["spec"]), "gpugate was called in an ignored namespace"
    pods = bound_pods(e2e, ns, 2)
    specs = {p["metadata"]["name"]: canonical(p["spec"]) for p in pods}
    assert all("batch.kubernetes.io/job-tracking" in (p["metadata"].get("finalizers") or []) for p in pods)

    ungate(e2e, ns)   # gpugate is now called for this namespace (it would inject into a new Job)
    before = e2e.gate.counters()
    for p in pods:
        done = e2e.api.patch(p, {"status": {"phase": "Succeeded"}}, subresource="status")
        assert done.ok, done

    def complete() -> bool:
        stored = e2e.api.read(job)
        return any(c["type"] == "Complete" and c["status"] == "True"
                   for c in stored.get("status", {}).get("conditions") or [])
    finished = wait_until(complete, 45, 0.25)
    after = e2e.gate.counters()
    left = {p["metadata"]["name"]: e2e.api.read(p) for p in pods}
    assert finished, ("Job did not complete; pod finalizers: "
                      f"{ {n: p['metadata'].get('finalizers') for n, p in left.items()} }; "
                      f"gpugate log: {e2e.gate.log(1500)}")
    # the finalizer removals went through gpugate (failurePolicy Ignore: prove it was called)
    assert (after - before).reviews(kind="Pod", endpoint="mutate") >= 2
    for name, stored in left.items():
        assert "batch.kubernetes.io/job-tracking" not in (stored["metadata"].get("finalizers") or [])
        assert canonical(stored["spec"]) == specs[name], f"pod {name} spec changed"
        assert stored["spec"].get("affinity") is None
    assert canonical(e2e.api.read(job)["spec"]["template"]) == canonical(template)


# -- b. metadata-only updates, finalizers, spec changes of running gangs ---------------------

def _metadata_updates(e2e: Session, obj: dict) -> None:
    """Label, annotation, finalizer added and removed: each allowed, with no warning."""
    steps = [
        {"metadata": {"labels": {"team": "vision"}}},
        {"metadata": {"annotations": {"e2e.gpugate.io/note": "checked"}}},
        {"metadata": {"finalizers": ["e2e.gpugate.io/hold"]}},
        {"metadata": {"finalizers": None}},
    ]
    before = e2e.gate.counters()
    for patch in steps:
        response = e2e.api.patch(obj, patch)
        assert response.status == 200, (patch, response)
        assert response.warnings == [], (patch, response.warnings)
    stored = e2e.api.read(obj)
    assert stored["metadata"]["labels"]["team"] == "vision"
    assert stored["metadata"]["annotations"]["e2e.gpugate.io/note"] == "checked"
    assert not stored["metadata"].get("finalizers")
    assert (e2e.gate.counters() - before).reviews(endpoint="validate") >= len(steps), "gpugate not called"


def test_volcano_job_metadata_updates_after_queue_closed(e2e: Session, namespace: str) -> None:
    ns = group = namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group)
    q = queue(f"q-{group}"[:60], gpus=16)
    assert e2e.api.create(q).status == 201
    assert e2e.api.patch(q, {"status": {"state": "Open"}}, subresource="status").ok
    e2e.wait_nodes_synced()
    job = volcano_job(ns, "train", group, q["metadata"]["name"], gpus=4)
    probe = dict(job, metadata={"name": "probe", "namespace": ns})
    opened = eventually(lambda: e2e.api.create(probe, dry_run=True), lambda r: r.status == 201)
    assert opened.status == 201, opened
    created = e2e.api.create(job)
    assert created.status == 201, created
    assert steered(created.body["spec"]["tasks"][0]["template"]["spec"])

    assert e2e.api.patch(q, {"status": {"state": "Closed"}}, subresource="status").ok
    closed = eventually(lambda: e2e.api.create(probe, dry_run=True), lambda r: denied_for(r, "GG306"))
    assert denied_for(closed, "GG306"), f"a new job in the closed queue is not refused: {closed}"

    _metadata_updates(e2e, job)


def test_pytorchjob_metadata_updates_after_nodes_cordoned(crds: Session, namespace: str) -> None:
    e2e, ns, group = crds, namespace, namespace
    nodes = [f"{group}-{i}" for i in range(2)]
    for node in nodes:
        e2e.cluster.gpu_node(node, group)
    e2e.wait_nodes_synced()
    job = pytorch_job(ns, "train", group, gpus=8)
    created = e2e.api.create(job)
    assert created.status == 201, created
    for node in nodes:
        cordon(e2e, node)
    probe = dict(job, metadata={"name": "probe", "namespace": ns})
    refused = eventually(lambda: e2e.api.create(probe, dry_run=True),
                         lambda r: denied_for(r, "GG403", "GG405"))
    assert denied_for(refused, "GG403", "GG405"), f"a new gang on cordoned nodes is not refused: {refused}"

    _metadata_updates(e2e, job)


def test_volcano_job_spec_change_beyond_queue_capability_denied(e2e: Session, namespace: str) -> None:
    ns = group = namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group)   # 16 GPUs: nodes are not the limit
    q = queue(f"q-{group}"[:60], gpus=8)
    assert e2e.api.create(q).status == 201
    assert e2e.api.patch(q, {"status": {"state": "Open"}}, subresource="status").ok
    e2e.wait_nodes_synced()
    job = volcano_job(ns, "train", group, q["metadata"]["name"], gpus=4, replicas=2)   # 8 GPUs
    created = eventually(lambda: e2e.api.create(job), lambda r: r.status != 403)
    assert created.status == 201, created

    grow = [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3},
            {"op": "replace", "path": "/spec/minAvailable", "value": 3}]             # 12 GPUs > 8
    refused = e2e.api.patch(job, grow, merge=False)
    assert refused.status == 403 and "GG402" in refused.message, refused
    stored = e2e.api.read(job)
    assert stored["spec"]["tasks"][0]["replicas"] == 2 and stored["spec"]["minAvailable"] == 2


def test_spec_update_counts_own_bound_pods_as_free(crds: Session, namespace: str) -> None:
    """GG404 does not fire on an update because of the job's own bound pods."""
    e2e, ns, group = crds, namespace, namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group)
    e2e.wait_nodes_synced()
    job = pytorch_job(ns, "train", group, gpus=8, cpu="4")
    created = e2e.api.create(job)
    assert created.status == 201, created
    assert "GG404" not in rules(created), created
    stored = created.body
    for role in ("Master", "Worker"):
        spec = stored["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        member = owned_by({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"train-{role.lower()}-0", "namespace": ns,
                                        "labels": {"training.kubeflow.org/job-name": "train",
                                                   "training.kubeflow.org/replica-type": role.lower()}},
                           "spec": dict(spec, restartPolicy="Never")}, stored)
        made = e2e.api.create(member)
        assert made.status == 201, made
    bound_pods(e2e, ns, 2)
    # gpugate sees the two pods once a second gang of the same shape waits for them
    other = dict(job, metadata={"name": "other", "namespace": ns})
    waits = eventually(lambda: e2e.api.create(other, dry_run=True), lambda r: "GG404" in rules(r))
    assert "GG404" in rules(waits), f"precondition: the nodes are not seen as full: {waits}"

    more_cpu = [{"op": "replace", "value": "6",
                 "path": f"/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{part}/cpu"}
                for part in ("requests", "limits")]
    before = e2e.gate.counters()
    updated = e2e.api.patch(job, more_cpu, merge=False)
    assert updated.status == 200, updated
    assert "GG404" not in rules(updated), f"the job's own pods were counted against it: {updated.warnings}"
    assert (e2e.gate.counters() - before).reviews(kind="PyTorchJob", endpoint="validate") >= 1
    assert e2e.api.read(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["requests"]["cpu"] == "6"


# -- c. a label on an old Deployment causes no rollout ----------------------------------------

def test_first_label_on_old_deployment_keeps_template(e2e: Session, ignored_namespace: str) -> None:
    ns = group = ignored_namespace
    made = e2e.api.create(deployment(ns, "serve", group, gpus=1))
    assert made.status == 201, made
    assert not made.body["metadata"].get("labels")
    old = e2e.api.read(made.body)
    assert not steered(old["spec"]["template"]["spec"])
    ungate(e2e, ns)

    before = e2e.gate.counters()
    labelled = e2e.api.patch(old, [{"op": "add", "path": "/metadata/labels", "value": {"team": "search"}}],
                             merge=False)
    assert labelled.status == 200, labelled
    called = (e2e.gate.counters() - before).reviews(kind="Deployment", endpoint="mutate")
    assert called >= 1, "gpugate not called"
    new = e2e.api.read(old)
    assert new["metadata"]["labels"] == {"team": "search"}
    assert new["metadata"]["generation"] == old["metadata"]["generation"], "the label started a rollout"
    assert canonical(new["spec"]["template"]) == canonical(old["spec"]["template"])
    assert labelled.warnings == []


# -- e. kubectl scale -------------------------------------------------------------------------

def test_scale_up_judged_scale_down_allowed(e2e: Session, ignored_namespace: str) -> None:
    """A Deployment is no gang: only "not one pod fits" is an error for it. Its pods want 16
    GPUs, the nodes have 8: scaling it up is refused (as the equivalent spec change would be),
    scaling it down is allowed; a scale-up that fits is allowed."""
    ns = group = ignored_namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group, pool="inference")
    # made before gpugate judged this namespace: one pod that can never be placed
    huge = deployment(ns, "huge", group, gpus=16, replicas=1, tolerations=tolerations("inference"))
    assert e2e.api.create(huge).status == 201
    ungate(e2e, ns)
    e2e.wait_nodes_synced()
    fits = deployment(ns, "fits", group, gpus=8, replicas=1)
    assert e2e.api.create(fits).status == 201

    before = e2e.gate.counters()
    up = e2e.api.patch(huge, {"spec": {"replicas": 3}}, subresource="scale")
    called = (e2e.gate.counters() - before).reviews()
    assert up.status == 403 and "GG403" in up.message, (
        f"scale-up of pods that fit no node not refused ({called:g} gpugate reviews during it): {up}")
    assert e2e.api.read(huge)["spec"]["replicas"] == 1

    down = e2e.api.patch(huge, {"spec": {"replicas": 0}}, subresource="scale")
    assert down.status == 200, down
    assert e2e.api.read(huge)["spec"]["replicas"] == 0

    grow = e2e.api.patch(fits, {"spec": {"replicas": 2}}, subresource="scale")
    assert grow.status == 200 and not {"GG403", "GG404"} & rules(grow), grow
    assert e2e.api.read(fits)["spec"]["replicas"] == 2


# -- i. objects made by controllers ----------------------------------------------------------

def test_pods_of_a_judged_deployment_pass_unpatched_without_warnings(e2e: Session, namespace: str) -> None:
    ns = group = namespace
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group, pool="inference", product_taint=False)
    e2e.wait_nodes_synced()
    before = e2e.gate.counters()
    # no GPU product pinned: GG104, a warning the Deployment gets once
    made = e2e.api.create(deployment(ns, "serve", group, gpus=1, replicas=2, product=False))
    assert made.status == 201, made
    assert "GG104" in rules(made), f"precondition: the Deployment itself is warned about: {made.warnings}"
    template = made.body["spec"]["template"]
    assert steered(template["spec"])
    pods = bound_pods(e2e, ns, 2)
    delta = e2e.gate.counters() - before
    assert delta.reviews(kind="Pod", endpoint="mutate") >= 2
    assert delta.reviews(kind="Pod", endpoint="validate") >= 2
    assert delta.reviews(kind="ReplicaSet") >= 2
    assert delta.reviews(kind=("Pod", "ReplicaSet"), verdict=("patched", "denied")) == 0
    assert delta.findings(kind=("Pod", "ReplicaSet"), severity=("warning", "error")) == 0, "warned again"
    for p in pods:
        assert canonical(p["spec"]["affinity"]) == canonical(template["spec"]["affinity"])
        tolerated = [t for t in p["spec"].get("tolerations") or [] if t.get("key") == USAGE_KEY]
        injected = [t for t in template["spec"]["tolerations"] if t.get("key") == USAGE_KEY]
        assert len(tolerated) == len(injected)
        assert p["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"
