"""The workload kinds of 2026 (issue 19) on the real control plane with their upstream CRDs:
each is mutated and judged at admission as documented (``policies/kinds.py``).

- JobSet and LeaderWorkerSet: GPU pod templates come back steered where the kind keeps them;
  a workload that can never fit is refused (GG403); what the kind's own webhook refuses, and
  its CRD lets through, is refused by gpugate (GG601); an UPDATE of a JobSet's labels
  injects nothing (its templates are immutable).
- Volcano PodGroups are judged against their queue: GG306 for a missing or closed queue,
  GG402 when ``minResources`` exceeds the queue's capability.
- Kubeflow Trainer v2: a ClusterTrainingRuntime's templates are templates (judged, never
  placed); a TrainJob's derived pods that can never fit are refused (GG403).

- KAI's own objects (``scheduling.run.ai``): a PodGroup or Queue KAI's webhook would refuse is
  refused (GG601; KAI's webhook is not installed here, its CRDs are), a PodGroup the podgrouper
  made (an owner reference) is admitted untouched, and one naming a KAI queue that does not
  exist is admitted with a GG306 warning.

- Kueue's quota objects (``kueue.x-k8s.io``, CRDs only): a pod its ClusterQueue can never admit
  is refused (GG402); one whose LocalQueue points at a missing ClusterQueue is admitted with a
  GG306 warning.

Not here: the Workload API (``scheduling.k8s.io``), not served by Kubernetes 1.28.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import KUEUE_OPT_OUT, Session
from .kube import USAGE_KEY, Response, canonical, resource_path
from .objects import (
    KUEUE_API,
    cluster_training_runtime,
    jobset,
    jobset_templates,
    kueue_queues,
    leader_worker_set,
    lws_templates,
    pod,
    queue,
    steered,
    train_job,
    volcano_podgroup,
)
from .steps import denied_for, eventually, rules, ungate

pytestmark = pytest.mark.e2e

# Kinds that tests/e2e/kube.py's Api does not know: (plural, cluster-scoped)
RESOURCES = {
    "JobSet": ("jobsets", False), "LeaderWorkerSet": ("leaderworkersets", False),
    "TrainJob": ("trainjobs", False), "ClusterTrainingRuntime": ("clustertrainingruntimes", True),
    "PodGroup": ("podgroups", False), "Queue": ("queues", True),
}
NEVER = {"GG402", "GG403", "GG404", "GG405"}


def _path(obj: dict[str, Any], name: bool = True) -> str:
    plural, cluster = RESOURCES[obj["kind"]]
    namespace = None if cluster else obj["metadata"]["namespace"]
    return resource_path(obj["apiVersion"], plural, namespace, obj["metadata"]["name"] if name else None)


def create(e2e: Session, obj: dict[str, Any], dry_run: bool = False) -> Response:
    return e2e.api.request("POST", _path(obj, name=False), obj, dry_run=dry_run)


def read(e2e: Session, obj: dict[str, Any]) -> dict[str, Any]:
    response = e2e.api.request("GET", _path(obj))
    assert response.status == 200, response
    return dict(response.body)


def tolerates_pool(spec: dict[str, Any]) -> bool:
    return any(t.get("key") == USAGE_KEY for t in spec.get("tolerations") or [])


def two_training_nodes(e2e: Session, group: str) -> None:
    """Two 8-GPU training nodes laid out per the README's pool convention."""
    for i in range(2):
        e2e.cluster.gpu_node(f"{group}-{i}", group)
    e2e.wait_nodes_synced()


# -- JobSet and LeaderWorkerSet -------------------------------------------------------------

KINDS = {
    "JobSet": (lambda ns, name, group, gpus: jobset(ns, name, group, gpus, replicas=2, parallelism=2),
               jobset_templates),
    "LeaderWorkerSet": (lambda ns, name, group, gpus: leader_worker_set(ns, name, group, gpus, size=2),
                        lws_templates),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gpu_templates_steered_and_never_fitting_refused(crds: Session, namespace: str, kind: str) -> None:
    """A GPU workload comes back with the usage affinity and the pool's toleration in every
    pod template, at the paths the kind keeps them; with 16-GPU pods on 8-GPU nodes it is
    refused at admission (GG403)."""
    e2e, ns, group = crds, namespace, namespace
    make, templates = KINDS[kind]
    two_training_nodes(e2e, group)
    submitted = make(ns, "train", group, 4)          # 4 pods x 4 GPUs on 2 x 8 GPUs
    before = e2e.gate.counters()
    created = create(e2e, submitted)
    delta = e2e.gate.counters() - before
    assert created.status == 201, created
    assert not NEVER & rules(created), created
    assert delta.reviews(kind=kind, endpoint="mutate", verdict="patched") >= 1, "not mutated by gpugate"
    assert delta.reviews(kind=kind, endpoint="validate") == 1, "not judged by gpugate"
    stored = read(e2e, submitted)
    for spec in templates(stored):
        assert steered(spec) and tolerates_pool(spec), spec

    never = make(ns, "never", group, 16)
    refused = eventually(lambda: create(e2e, never, dry_run=True), lambda r: denied_for(r, "GG403"))
    assert denied_for(refused, "GG403"), refused


REFUSED_BY_WEBHOOK = {
    # JobSet's webhook: a dependsOn must name an earlier replicated job (the CRD lets it through)
    "JobSet": lambda ns, group: _depends_on_later(jobset(ns, "later", group, 1)),
    # LWS's webhook: subGroupSize must divide size or size - 1 (3 divides neither 5 nor 4); the
    # CRD sets no such bound
    "LeaderWorkerSet": lambda ns, group: _subgroups(leader_worker_set(ns, "sub", group, 1, size=5), 3),
}


def _depends_on_later(obj: dict[str, Any]) -> dict[str, Any]:
    """Three replicated jobs; the second waits for the third."""
    first = obj["spec"]["replicatedJobs"][0]
    second = {**first, "name": "launcher", "dependsOn": [{"name": "evaluators", "status": "Complete"}]}
    obj["spec"]["replicatedJobs"] = [first, second, {**first, "name": "evaluators"}]
    return obj


def _subgroups(obj: dict[str, Any], sub_group_size: int) -> dict[str, Any]:
    obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": sub_group_size}
    return obj


@pytest.mark.parametrize("kind", sorted(REFUSED_BY_WEBHOOK))
def test_what_the_kinds_webhook_refuses_gpugate_refuses(crds: Session, namespace: str, kind: str) -> None:
    """Something only the kind's own webhook refuses (which does not run here) is refused by
    gpugate with GG601: gpugate's validating webhook answered the denial."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)      # room for its pods: GG601 is the only reason
    obj = REFUSED_BY_WEBHOOK[kind](ns, group)
    before = e2e.gate.counters()
    refused = eventually(lambda: create(e2e, obj, dry_run=True), lambda r: "GG403" not in r.message)
    delta = e2e.gate.counters() - before
    assert denied_for(refused, "GG601") and not NEVER & rules(refused), refused
    assert delta.reviews(kind=kind, endpoint="validate", verdict="denied") >= 1, "gpugate did not deny it"
    assert delta.findings(rule="GG601") >= 1


def test_jobset_label_update_injects_nothing(crds: Session, ignored_namespace: str) -> None:
    """A JobSet made while gpugate was not called (no affinity in its templates): an UPDATE
    that changes only its labels passes, reviewed by gpugate, with its templates untouched
    (JobSet's templates are immutable: nothing is injected on UPDATE)."""
    e2e, ns, group = crds, ignored_namespace, ignored_namespace
    two_training_nodes(e2e, group)
    submitted = jobset(ns, "old", group, 4)
    assert create(e2e, submitted).status == 201
    stored = read(e2e, submitted)
    assert not any(steered(s) for s in jobset_templates(stored))
    ungate(e2e, ns)

    before = e2e.gate.counters()
    updated = e2e.api.request("PATCH", _path(submitted), {"metadata": {"labels": {"team": "vision"}}},
                              content_type="application/merge-patch+json")
    delta = e2e.gate.counters() - before
    assert updated.status == 200, updated
    assert delta.reviews(kind="JobSet", endpoint="mutate") >= 1, "gpugate not called"
    assert delta.reviews(kind="JobSet", endpoint="validate") >= 1, "gpugate not called"
    assert delta.reviews(kind="JobSet", verdict="patched") == 0
    assert updated.body["metadata"]["labels"]["team"] == "vision"
    assert canonical(updated.body["spec"]["replicatedJobs"]) == canonical(stored["spec"]["replicatedJobs"])


# -- Volcano PodGroups against their queue --------------------------------------------------

@pytest.fixture
def volcano_queue(e2e: Session, namespace: str) -> Iterator[dict[str, Any]]:
    """An Open Volcano queue of 16 GPUs of the test's own (cluster-scoped: deleted after)."""
    q = queue(f"q-{namespace}"[:60], gpus=16)
    assert e2e.api.create(q).status == 201
    assert e2e.api.patch(q, {"status": {"state": "Open"}}, subresource="status").ok
    yield q
    with contextlib.suppress(Exception):
        e2e.api.delete(q)


def test_volcano_podgroup_judged_against_its_queue(e2e: Session, namespace: str,
                                                   volcano_queue: dict[str, Any]) -> None:
    """A PodGroup whose minResources fit its open queue's capability is admitted; beyond it,
    GG402; in a queue that does not exist, GG306; once the queue is Closed, GG306."""
    ns, name = namespace, volcano_queue["metadata"]["name"]
    fits = volcano_podgroup(ns, "fits", name, min_gpus=16)
    admitted = eventually(lambda: e2e.api.create(fits, dry_run=True), lambda r: r.status == 201)
    assert admitted.status == 201 and not {"GG306", "GG402"} & rules(admitted), admitted

    too_big = volcano_podgroup(ns, "too-big", name, min_gpus=32)
    refused = e2e.api.create(too_big, dry_run=True)
    assert denied_for(refused, "GG402"), f"minResources beyond the queue's capability: {refused}"

    missing = e2e.api.create(volcano_podgroup(ns, "nowhere", "no-such-queue"), dry_run=True)
    assert denied_for(missing, "GG306"), f"a PodGroup in a queue that does not exist: {missing}"

    assert e2e.api.patch(volcano_queue, {"status": {"state": "Closed"}}, subresource="status").ok
    closed = eventually(lambda: e2e.api.create(fits, dry_run=True), lambda r: denied_for(r, "GG306"))
    assert denied_for(closed, "GG306"), f"a PodGroup in a closed queue: {closed}"


# -- Kubeflow Trainer v2 --------------------------------------------------------------------

@pytest.fixture
def runtime(crds: Session, namespace: str) -> Iterator[dict[str, Any]]:
    """A ClusterTrainingRuntime of 4 GPUs per node on the test's nodes (deleted after)."""
    made = cluster_training_runtime(f"rt-{namespace}"[:60], namespace, gpus=4)
    yield made
    with contextlib.suppress(Exception):
        crds.api.request("DELETE", _path(made))


def test_trainjob_on_a_cluster_runtime(crds: Session, namespace: str, runtime: dict[str, Any]) -> None:
    """The runtime's templates are templates: admitted (steered), even when one pod of it
    could never fit (a TrainJob sets the resources); a TrainJob whose training nodes fit is
    admitted, one whose 16-GPU nodes can never fit is refused (GG403), and one whose runtime
    (read from the cluster) places its pods where no node is, too."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)
    huge = cluster_training_runtime(runtime["metadata"]["name"] + "-x", group, gpus=16)
    answer = create(e2e, huge, dry_run=True)
    assert answer.status == 201 and not NEVER & rules(answer), answer
    before = e2e.gate.counters()
    made = create(e2e, runtime)
    delta = e2e.gate.counters() - before
    assert made.status == 201, made
    assert delta.reviews(kind="ClusterTrainingRuntime", endpoint="validate") == 1, "not judged by gpugate"
    # a cluster-wide runtime's templates are steered like any pod template: the pods its
    # TrainJobs get are made from them
    assert delta.reviews(kind="ClusterTrainingRuntime", endpoint="mutate", verdict="patched") == 1
    node = made.body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert steered(node), node

    job = train_job(ns, "train", runtime["metadata"]["name"], gpus=4)
    created = create(e2e, job)
    assert created.status == 201 and not NEVER & rules(created), created

    never = train_job(ns, "never", runtime["metadata"]["name"], gpus=16)
    refused = eventually(lambda: create(e2e, never, dry_run=True), lambda r: denied_for(r, "GG403"))
    assert denied_for(refused, "GG403"), refused

    # gpugate reads the runtimes of the cluster: a TrainJob that would fit the nodes by
    # itself is refused when its runtime's trainer pods select nodes the cluster has not
    nowhere = cluster_training_runtime(runtime["metadata"]["name"] + "-nowhere", group, gpus=4)
    step = nowhere["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    step["nodeSelector"] = {**step.get("nodeSelector", {}), "gpugate.e2e/pool": "nowhere"}
    assert create(e2e, nowhere).status == 201
    try:
        placed = train_job(ns, "placed", nowhere["metadata"]["name"], gpus=4)
        refused = eventually(lambda: create(e2e, placed, dry_run=True), lambda r: denied_for(r, "GG403"))
        assert denied_for(refused, "GG403"), refused
    finally:
        with contextlib.suppress(Exception):
            e2e.api.request("DELETE", _path(nowhere))


# -- KAI Scheduler queues --------------------------------------------------------------------

def test_kai_queue_read_from_the_cluster(crds: Session, namespace: str) -> None:
    """gpugate's live view holds the cluster's KAI Queues: a pod KAI schedules that asks for
    more GPUs than its queue's limit is refused (GG402); within it, admitted; naming a queue
    that does not exist yet, admitted with a GG306 warning (KAI holds it until it exists)."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)
    name = f"kai-{namespace}"[:60]
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    kai_queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                 "spec": {"resources": {"gpu": {"quota": -1, "limit": 4, "overQuotaWeight": 1},
                                        "cpu": unlimited, "memory": unlimited}}}
    queues = resource_path("scheduling.run.ai/v2", "queues", None)
    assert e2e.api.request("POST", queues, kai_queue).status == 201
    try:
        def kai_pod(pod_name: str, gpus: int, queue_name: str) -> dict[str, Any]:
            made = pod(ns, pod_name, group, gpus, schedulerName="kai-scheduler")
            made["metadata"]["labels"]["kai.scheduler/queue"] = queue_name
            return made

        over = kai_pod("over", 8, name)
        refused = eventually(lambda: e2e.api.create(over, dry_run=True), lambda r: denied_for(r, "GG402"))
        assert denied_for(refused, "GG402"), refused
        within = e2e.api.create(kai_pod("within", 4, name), dry_run=True)
        assert within.status == 201 and not NEVER & rules(within), within
        absent = e2e.api.create(kai_pod("absent", 4, "no-such-kai-queue"), dry_run=True)
        assert absent.status == 201 and "GG306" in rules(absent), absent
    finally:
        with contextlib.suppress(Exception):
            e2e.api.request("DELETE", resource_path("scheduling.run.ai/v2", "queues", None, name))


def test_kai_podgroups_and_queues_judged(crds: Session, namespace: str) -> None:
    """The webhook configurations route KAI's PodGroups and Queues to gpugate: what KAI's own
    webhook refuses is refused (GG601), a podgrouper's PodGroup (owner reference without
    ``controller``) passes untouched, a missing KAI queue is a GG306 warning."""
    e2e, ns = crds, namespace
    name = f"kai-pg-{namespace}"[:60]
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    kai_queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                 "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}}
    bare = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name + "-bare"},
            "spec": {"parentQueue": name}}
    refused = eventually(lambda: create(e2e, bare, dry_run=True), lambda r: denied_for(r, "GG601"))
    assert denied_for(refused, "GG601") and "spec.resources" in refused.message, refused
    assert create(e2e, kai_queue).status == 201
    try:
        def podgroup(pg_name: str, queue_name: str, **spec: Any) -> dict[str, Any]:
            return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                    "metadata": {"name": pg_name, "namespace": ns},
                    "spec": {"minMember": 2, "queue": queue_name, **spec}}

        twice = podgroup("twice", name, subGroups=[{"name": "a", "minMember": 1}] * 2)
        denied = create(e2e, twice, dry_run=True)
        assert denied_for(denied, "GG601") and "duplicate subGroup names" in denied.message, denied
        twice["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                                 "uid": "00000000-0000-0000-0000-000000000001"}]
        made = create(e2e, twice, dry_run=True)
        assert made.status == 201 and not rules(made), made
        # once gpugate's live view holds the new queue: KAI queues are judged
        absent = eventually(lambda: create(e2e, podgroup("absent", "no-such-kai-queue"), dry_run=True),
                            lambda r: "GG306" in rules(r))
        assert absent.status == 201 and "GG306" in rules(absent), absent
        fine = eventually(lambda: create(e2e, podgroup("fine", name), dry_run=True), lambda r: not rules(r))
        assert fine.status == 201 and not rules(fine), fine
    finally:
        with contextlib.suppress(Exception):
            e2e.api.request("DELETE", _path(kai_queue))


# -- Kueue quota -----------------------------------------------------------------------------

def test_kueue_quota_read_from_the_cluster(crds: Session, namespace: str) -> None:
    """gpugate's live view holds the cluster's Kueue LocalQueues, ClusterQueues and
    ResourceFlavors (Kueue's CRDs, not its controller): a pod whose LocalQueue's ClusterQueue can
    never grant its GPUs is refused in Kueue's terms (GG402, "insufficient quota"); within the
    quota, admitted; a LocalQueue pointing at a ClusterQueue that does not exist, admitted with
    a GG306 warning (Kueue holds the workload)."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)
    name = f"kq-{namespace}"[:60]
    api = "kueue.x-k8s.io/v1beta1"
    flavor = {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": name}}
    cluster_queue = {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": name, "resources": [
                {"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "256Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}}
    local_queues = [{"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": lq, "namespace": ns},
                     "spec": {"clusterQueue": cq}} for lq, cq in (("team", name), ("orphan", f"{name}-gone"))]
    made = [(flavor, "resourceflavors", None), (cluster_queue, "clusterqueues", None),
            *((lq, "localqueues", ns) for lq in local_queues)]
    for obj, plural, where in made:
        assert e2e.api.request("POST", resource_path(api, plural, where), obj).status == 201
    try:
        def queued(pod_name: str, gpus: int, local_queue: str) -> dict[str, Any]:
            made_pod = pod(ns, pod_name, group, gpus)
            made_pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = local_queue
            return made_pod

        over = queued("over", 8, "team")
        refused = eventually(lambda: e2e.api.create(over, dry_run=True), lambda r: denied_for(r, "GG402"))
        assert denied_for(refused, "GG402") and "insufficient quota" in refused.message, refused
        within = e2e.api.create(queued("within", 4, "team"), dry_run=True)
        assert within.status == 201 and not NEVER & rules(within), within
        held = e2e.api.create(queued("held", 4, "orphan"), dry_run=True)
        assert held.status == 201 and "GG306" in rules(held), held
    finally:
        for obj, plural, where in reversed(made):
            with contextlib.suppress(Exception):
                e2e.api.request("DELETE", resource_path(api, plural, where, obj["metadata"]["name"]))


def test_kueue_verdicts_follow_the_namespaces_labels(crds: Session, namespace: str) -> None:
    """The session's policy mirrors a Kueue that leaves out namespaces labelled KUEUE_OPT_OUT:
    a pod beyond its ClusterQueue's quota is refused (GG402) while its namespace is Kueue's; once
    the namespace is labelled out, the live topology sees the label and the same pod is admitted
    (Kueue ignores its queue label there); unlabelled, refused again."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)
    made = kueue_queues(ns, f"kn-{namespace}"[:60], "team", gpus=4)
    for obj, plural in made:
        where = ns if plural == "localqueues" else None
        assert e2e.api.request("POST", resource_path(KUEUE_API, plural, where), obj).status == 201
    namespace_path = f"/api/v1/namespaces/{ns}"
    try:
        over = pod(ns, "over", group, 8)
        over["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
        refused = eventually(lambda: e2e.api.create(over, dry_run=True), lambda r: denied_for(r, "GG402"))
        assert denied_for(refused, "GG402"), refused
        merge = "application/merge-patch+json"
        label = {"metadata": {"labels": {KUEUE_OPT_OUT: "true"}}}
        assert e2e.api.request("PATCH", namespace_path, label, content_type=merge).ok
        admitted = eventually(lambda: e2e.api.create(over, dry_run=True), lambda r: r.status == 201)
        assert admitted.status == 201 and not NEVER & rules(admitted), admitted
        unlabel = {"metadata": {"labels": {KUEUE_OPT_OUT: None}}}
        assert e2e.api.request("PATCH", namespace_path, unlabel, content_type=merge).ok
        again = eventually(lambda: e2e.api.create(over, dry_run=True), lambda r: denied_for(r, "GG402"))
        assert denied_for(again, "GG402"), again
    finally:
        for obj, plural in reversed(made):
            where = ns if plural == "localqueues" else None
            with contextlib.suppress(Exception):
                e2e.api.request("DELETE", resource_path(KUEUE_API, plural, where, obj["metadata"]["name"]))


def test_kueue_cluster_queue_namespace_selector_held(crds: Session, namespace: str) -> None:
    """A ClusterQueue admits workloads only from the namespaces its namespaceSelector selects, and
    from none without one (Kueue holds the others: a GG306 warning, admitted): the live view follows
    the ClusterQueue's selector and the namespace's labels as they change; so it does a LocalQueue
    stopped by its stopPolicy, and an AdmissionCheck the ClusterQueue names until it is Active."""
    e2e, ns, group = crds, namespace, namespace
    two_training_nodes(e2e, group)
    made = kueue_queues(ns, f"ks-{namespace}"[:60], "team", gpus=4)
    cluster_queue = made[1][0]
    team_label = "e2e.gpugate.io/kueue-team"
    cluster_queue["spec"]["namespaceSelector"] = {"matchLabels": {team_label: "yes"}}
    for obj, plural in made:
        where = ns if plural == "localqueues" else None
        assert e2e.api.request("POST", resource_path(KUEUE_API, plural, where), obj).status == 201
    merge = "application/merge-patch+json"
    namespace_path = f"/api/v1/namespaces/{ns}"
    cluster_queue_path = resource_path(KUEUE_API, "clusterqueues", None, cluster_queue["metadata"]["name"])

    def held(response: Response) -> str:
        return " ".join(w for w in response.warnings if "GG306" in w)

    try:
        within = pod(ns, "within", group, 4)
        within["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
        outside = eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: bool(held(r)))
        assert outside.status == 201 and "not selected by ClusterQueue" in held(outside), outside
        label = {"metadata": {"labels": {team_label: "yes"}}}
        assert e2e.api.request("PATCH", namespace_path, label, content_type=merge).ok
        selected = eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: not held(r))
        assert selected.status == 201 and not held(selected) and not NEVER & rules(selected), selected
        unset = {"spec": {"namespaceSelector": None}}
        assert e2e.api.request("PATCH", cluster_queue_path, unset, content_type=merge).ok
        nothing = eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: bool(held(r)))
        assert nothing.status == 201 and "has no namespaceSelector" in held(nothing), nothing
        every = {"spec": {"namespaceSelector": {}}}
        assert e2e.api.request("PATCH", cluster_queue_path, every, content_type=merge).ok
        assert not held(eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: not held(r)))
        local_queue_path = resource_path(KUEUE_API, "localqueues", ns, "team")
        stop = {"spec": {"stopPolicy": "Hold"}}
        assert e2e.api.request("PATCH", local_queue_path, stop, content_type=merge).ok
        stopped = eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: bool(held(r)))
        assert stopped.status == 201 and "LocalQueue `team` is stopped" in held(stopped), stopped
        resume = {"spec": {"stopPolicy": "None"}}
        assert e2e.api.request("PATCH", local_queue_path, resume, content_type=merge).ok
        # an AdmissionCheck its controller has not set Active holds the whole ClusterQueue
        check = {"apiVersion": KUEUE_API, "kind": "AdmissionCheck", "metadata": {"name": f"ac-{ns}"[:60]},
                 "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}}
        made.append((check, "admissionchecks"))
        assert e2e.api.request("POST", resource_path(KUEUE_API, "admissionchecks", None), check).status == 201
        # admissionChecksStrategy: the form both API versions hold (no conversion webhook here)
        rule = {"name": check["metadata"]["name"]}
        names = {"spec": {"admissionChecksStrategy": {"admissionChecks": [rule]}}}
        assert e2e.api.request("PATCH", cluster_queue_path, names, content_type=merge).ok
        inactive = eventually(lambda: e2e.api.create(within, dry_run=True),
                              lambda r: "is not active" in held(r))
        assert inactive.status == 201 and "is not active" in held(inactive), inactive
        active = {"status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                                             "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
        check_path = resource_path(KUEUE_API, "admissionchecks", None, check["metadata"]["name"])
        assert e2e.api.request("PATCH", f"{check_path}/status", active, content_type=merge).ok
        assert not held(eventually(lambda: e2e.api.create(within, dry_run=True), lambda r: not held(r)))
    finally:
        for obj, plural in reversed(made):
            where = ns if plural == "localqueues" else None
            with contextlib.suppress(Exception):
                e2e.api.request("DELETE", resource_path(KUEUE_API, plural, where, obj["metadata"]["name"]))
