"""The kinds of 2026 in the kinds table (issue 19): JobSet, LeaderWorkerSet, HyperPodPyTorchJob,
the KAI and YuniKorn queue vocabularies, and the KubeRay gaps (suspended worker groups, the
RayJob submitter under the pod rules). Model first (pod sets, counts, gang minimum, queues,
schedulers), then what the rules make of it (feasibility with a cluster snapshot, mutation
paths, UPDATEs)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
import yaml
from feasibility_helpers import gpu_node, node, queue, snapshot

from policies.config import Policy
from policies.engine import evaluate
from policies.findings import Severity
from policies.kinds import COMMON_QUEUES, KINDS, kind_spec
from policies.topology import ClusterSnapshot
from policies.workload import ShapeError, Workload, build_workload
from webhook.admission import admit, scale_target

GPU = "nvidia.com/gpu"
USAGE_LABEL = "maip.mxsf.io/usage"
POLICY = Policy()


def workload(text: str) -> Workload:
    built = build_workload(yaml.safe_load(text))
    assert built is not None
    return built


def pod_sets(w: Workload) -> list[tuple[str, int, int, str]]:
    """(name, pods, pods in the gang, template path) of each pod set."""
    return [(p.name, p.replicas, p.gang_count, p.path) for p in w.pod_sets]


def queues(w: Workload) -> list[tuple[str, str, str]]:
    return [(q.name, q.system, q.path) for q in w.queues if q.explicit]


def gpu_container(gpus: int, limit: bool = True) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {GPU: str(gpus)}}
    if limit:
        resources["limits"] = {GPU: str(gpus)}
    return {"name": "main", "image": "trainer", "resources": resources}


def gpu_cluster(nodes: int = 4, gpus: int = 8,
                extra: list[dict[str, Any]] | None = None) -> list[ClusterSnapshot]:
    """``nodes`` nodes of ``gpus`` nvidia.com/gpu each, in the training pool, and an untainted
    CPU node (for the pods the usage rules leave where the scheduler puts them)."""
    cpu = node("cpu-0", {"cpu": "16", "memory": "64Gi"})
    return [snapshot([gpu_node(f"gpu-{i}", gpus, GPU) for i in range(nodes)] + [cpu] + (extra or []))]


def rules_of(doc: dict[str, Any], clusters: list[ClusterSnapshot] | None = None,
             policy: Policy = POLICY) -> dict[str, list[str]]:
    """Rule -> messages of the error findings (GG601, the kinds' validators, left out)."""
    out: dict[str, list[str]] = {}
    for f in evaluate(doc, policy, clusters).findings:
        if f.rule != "GG601" and f.severity >= Severity.ERROR:
            out.setdefault(f.rule, []).append(f.message)
    return out


# -- JobSet -----------------------------------------------------------------------------------

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  replicatedJobs:
  - name: workers
    replicas: 3
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          spec:
            schedulerName: kai-scheduler
            containers: [{name: main, image: trainer}]
  - name: driver
    template:
      spec:
        template:
          spec:
            containers: [{name: main, image: driver}]
  - name: capped
    replicas: 2
    template:
      spec:
        parallelism: 5
        completions: 2
        template:
          spec:
            containers: [{name: main, image: trainer}]
"""


def test_jobset_pods_are_replicas_times_parallelism_capped_by_completions() -> None:
    w = workload(JOBSET)
    assert pod_sets(w) == [
        ("workers", 12, 12, "/spec/replicatedJobs/0/template/spec/template"),
        ("driver", 1, 1, "/spec/replicatedJobs/1/template/spec/template"),   # replicas, parallelism: 1
        ("capped", 4, 4, "/spec/replicatedJobs/2/template/spec/template"),
    ]
    assert w.gang_min == 17 and w.gang_min_path == ""
    assert queues(w) == [("user-queue", "kueue", "/metadata/labels/kueue.x-k8s.io~1queue-name")]
    assert [p.scheduler for p in w.pod_sets] == ["kai-scheduler", "default-scheduler", "default-scheduler"]
    spec = kind_spec("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert spec is not None and not spec.gang and spec.templates_immutable
    assert spec.validate == "jobset.jobset"
    assert spec.scale_replicas == ""  # the JobSet CRD has no scale subresource


def test_jobset_zero_replicas_and_empty_spec() -> None:
    w = workload("""
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: j}
spec:
  replicatedJobs:
  - {name: none, replicas: 0, template: {spec: {parallelism: 8, template: {spec: {containers: []}}}}}
""")
    assert [(p.name, p.replicas) for p in w.pod_sets] == [("none", 0)]
    assert workload("{apiVersion: jobset.x-k8s.io/v1alpha2, kind: JobSet, metadata: {name: j}, spec: {}}"
                    ).pod_sets == []


@pytest.mark.parametrize(("spec", "path"), [
    ("{replicatedJobs: [{name: a, template: []}]}", "/spec/replicatedJobs/0/template"),
    ("{replicatedJobs: [{name: a, template: {spec: {parallelism: two}}}]}",
     "/spec/replicatedJobs/0/template/spec/parallelism"),
    ("{replicatedJobs: [{name: a, template: {spec: {template: {spec: {containers: {}}}}}}]}",
     "/spec/replicatedJobs/0/template/spec/template/spec/containers"),
])
def test_jobset_shape_errors_name_the_nested_field(spec: str, path: str) -> None:
    with pytest.raises(ShapeError) as err:
        workload(f"{{apiVersion: jobset.x-k8s.io/v1alpha2, kind: JobSet, metadata: {{name: j}}, "
                 f"spec: {spec}}}")
    assert err.value.path == path


def _jobset(gpus: int, pods: int = 1, scheduler: str | None = None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [gpu_container(gpus)]}
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "ml", "labels": {USAGE_LABEL: "training"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": pod_spec}}}}]}}


def test_a_16_gpu_pod_in_a_jobset_never_fits_8_gpu_nodes() -> None:
    """Issue 19's opening case: the JobSet used to pass unseen."""
    found = rules_of(_jobset(16), gpu_cluster())
    assert "GG403" in found, found
    assert "16 asked per pod" in found["GG403"][0] and "offers 8" in found["GG403"][0]
    assert "GG403" not in rules_of(_jobset(8), gpu_cluster())


@pytest.mark.parametrize("scheduler", [None, "volcano", "yunikorn", "kai-scheduler"])
def test_jobset_pods_are_judged_one_by_one(scheduler: str | None) -> None:
    """Five 8-GPU pods on four 8-GPU nodes: each pod fits, so no "never" whatever the
    scheduler (Volcano and YuniKorn place a JobSet's pods one by one; replicated jobs joined
    by dependsOn never run together). Under KAI, which gangs every pod, that is a "never"
    missed, not a false one."""
    assert "GG403" not in rules_of(_jobset(8, pods=5, scheduler=scheduler), gpu_cluster())


def test_jobset_usage_is_injected_at_the_nested_pod_template() -> None:
    doc = _jobset(8)
    result = evaluate(doc, POLICY)
    base = "/spec/replicatedJobs/0/template/spec/template/spec"
    assert {op["path"] for op in result.patch} == {f"{base}/affinity", f"{base}/tolerations"}
    patched = jsonpatch.JsonPatch(result.patch).apply(doc)
    assert patched == result.mutated
    assert evaluate(patched, POLICY).patch == []


def test_jobset_update_injects_nothing_its_templates_are_immutable() -> None:
    """The JobSet webhook refuses changes to spec.replicatedJobs (but a few fields of a
    suspended one): an UPDATE that touches the template gets no patch."""
    old = _jobset(8)
    new = copy.deepcopy(old)
    new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"
    assert evaluate(new, POLICY, previous=old).patch == []


def test_jobs_made_by_a_jobset_are_not_judged_again() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train-workers-0", "namespace": "ml", "ownerReferences": [
               {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "u",
                "controller": True}]},
           "spec": {"template": {"spec": {"containers": [gpu_container(16)]}}}}
    assert evaluate(job, POLICY, gpu_cluster()).owned


# -- LeaderWorkerSet --------------------------------------------------------------------------

LWS = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
  annotations: {scheduling.volcano.sh/queue-name: inference}
spec:
  replicas: 3
  leaderWorkerTemplate:
    size: 4
    leaderTemplate:
      spec:
        schedulerName: volcano
        containers: [{name: leader, image: vllm}]
    workerTemplate:
      spec:
        schedulerName: volcano
        containers: [{name: worker, image: vllm}]
"""


def test_lws_groups_of_one_leader_and_size_minus_one_workers() -> None:
    w = workload(LWS)
    assert pod_sets(w) == [
        ("leader", 3, 1, "/spec/leaderWorkerTemplate/leaderTemplate"),
        ("worker", 9, 3, "/spec/leaderWorkerTemplate/workerTemplate"),
    ]
    # a gang is one group (LWS's Volcano provider and KAI's podgrouper: minMember = size)
    assert w.gang_min == 4 and w.total_replicas == 12
    assert queues(w) == [("inference", "volcano",
                          "/metadata/annotations/scheduling.volcano.sh~1queue-name")]
    spec = kind_spec("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert spec is not None and spec.scale_replicas == "/spec/replicas"
    assert spec.validate == "lws.leaderworkerset"


def test_lws_without_leader_template_is_one_pod_set_of_size_pods_per_group() -> None:
    """The leader is made from workerTemplate: one template, so one pod set (no finding or
    patch twice for the same template)."""
    w = workload("""
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: vllm}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
    workerTemplate: {spec: {containers: [{name: w, image: vllm}]}}
""")
    assert pod_sets(w) == [("worker", 6, 3, "/spec/leaderWorkerTemplate/workerTemplate")]
    assert w.gang_min == 3


def test_lws_defaults_one_group_of_one_pod() -> None:
    w = workload("""
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: one}
spec:
  leaderWorkerTemplate:
    workerTemplate: {spec: {containers: [{name: w, image: x}]}}
""")
    assert pod_sets(w) == [("worker", 1, 1, "/spec/leaderWorkerTemplate/workerTemplate")]
    scaled_to_zero = workload(LWS.replace("replicas: 3", "replicas: 0"))
    assert [(p.replicas, p.gang_count) for p in scaled_to_zero.pod_sets] == [(0, 0), (0, 0)]
    assert scaled_to_zero.gang_min == 0


def test_lws_replicas_of_the_wrong_type_is_a_shape_error() -> None:
    with pytest.raises(ShapeError) as err:
        workload(LWS.replace("replicas: 3", "replicas: three"))
    assert err.value.path == "/spec/replicas"


def _lws(size: int, replicas: int, gpus: int = 8) -> dict[str, Any]:
    template = {"spec": {"schedulerName": "volcano", "containers": [gpu_container(gpus)]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "ml", "labels": {USAGE_LABEL: "training"}},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                "size": size, "leaderTemplate": copy.deepcopy(template), "workerTemplate": template}}}


def test_lws_feasibility_is_one_group_not_every_group() -> None:
    """Each group is its own gang: three groups of two 8-GPU pods on two 8-GPU nodes can run
    one group at a time (not "never"); a group of three can never run."""
    assert "GG403" not in rules_of(_lws(size=2, replicas=3), gpu_cluster(nodes=2))
    assert "GG403" in rules_of(_lws(size=3, replicas=1), gpu_cluster(nodes=2))


def test_lws_scale_up_is_judged_as_the_spec_change() -> None:
    """``kubectl scale lws`` writes spec.replicas: judged on the LeaderWorkerSet read back."""
    parent = _lws(size=2, replicas=1)
    resource = {"group": "leaderworkerset.x-k8s.io", "version": "v1", "resource": "leaderworkersets"}
    request = {"uid": "u", "operation": "UPDATE", "subResource": "scale", "namespace": "ml", "name": "vllm",
               "resource": resource,
               "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 4}},
               "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 1}}}
    target = scale_target(request, "validate")
    assert target is not None and (target.resource, target.replicas) == ("leaderworkersets", 4)
    judged = admit(request, "validate", POLICY, gpu_cluster(), parent=parent)
    assert judged.evaluation is not None and judged.evaluation.workload is not None
    assert [(p.replicas, p.gang_count) for p in judged.evaluation.workload.pod_sets] == [(4, 1), (4, 1)]


def test_lws_usage_is_injected_into_both_templates() -> None:
    doc = _lws(size=2, replicas=1)
    result = evaluate(doc, POLICY)
    paths = {op["path"].rsplit("/spec/", 1)[0] for op in result.patch}
    assert paths == {"/spec/leaderWorkerTemplate/leaderTemplate", "/spec/leaderWorkerTemplate/workerTemplate"}
    assert evaluate(jsonpatch.JsonPatch(result.patch).apply(doc), POLICY).patch == []


# -- HyperPodPyTorchJob -----------------------------------------------------------------------

def test_hyperpod_pytorch_job() -> None:
    w = workload("""
apiVersion: sagemaker.amazonaws.com/v1
kind: HyperPodPyTorchJob
metadata:
  name: llama
  labels: {kueue.x-k8s.io/queue-name: training-queue}
spec:
  nprocPerNode: "8"
  replicaSpecs:
  - name: pod
    replicas: 4
    template:
      spec:
        containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
  - name: single
    template: {spec: {containers: [{name: c, image: x}]}}
""")
    assert pod_sets(w) == [("pod", 4, 4, "/spec/replicaSpecs/0/template"),
                           ("single", 1, 1, "/spec/replicaSpecs/1/template")]
    assert w.gang_min == 5
    assert queues(w) == [("training-queue", "kueue", "/metadata/labels/kueue.x-k8s.io~1queue-name")]


def test_hyperpod_gpu_pod_too_big_never_fits() -> None:
    doc = {"apiVersion": "sagemaker.amazonaws.com/v1", "kind": "HyperPodPyTorchJob",
           "metadata": {"name": "llama", "namespace": "ml"},
           "spec": {"replicaSpecs": [{"name": "pod", "replicas": 2, "template": {"spec": {
               "containers": [gpu_container(16)]}}}]}}
    assert "GG403" in rules_of(doc, gpu_cluster())


# -- KAI --------------------------------------------------------------------------------------

def test_kai_queue_label_on_the_object_and_on_the_pod_template() -> None:
    w = workload("""
apiVersion: batch/v1
kind: Job
metadata:
  name: j
  labels: {kai.scheduler/queue: team-a}
spec:
  template:
    metadata:
      labels: {kai.scheduler/queue: team-b}
    spec:
      schedulerName: kai-scheduler
      containers: [{name: c, image: x}]
""")
    # KAI's podgrouper reads the top owner's label first, then the pod's
    assert queues(w) == [("team-a", "kai", "/metadata/labels/kai.scheduler~1queue"),
                         ("team-b", "kai", "/spec/template/metadata/labels/kai.scheduler~1queue")]
    assert w.queue is not None and w.queue.name == "team-a"
    assert [p.scheduler for p in w.pod_sets] == ["kai-scheduler"]


def test_kai_queue_name_is_an_object_name() -> None:
    doc = yaml.safe_load("""
apiVersion: v1
kind: Pod
metadata: {name: p, labels: {kai.scheduler/queue: Team_A}}
spec: {schedulerName: kai-scheduler, containers: [{name: c, image: x}]}
""")
    assert "GG304" in rules_of(doc)


@pytest.mark.parametrize("annotation", [{"gpu-fraction": "0.5"}, {"gpu-memory": "2000"}])
def test_kai_gpu_share_pods_are_never_a_false_never(annotation: dict[str, str]) -> None:
    """A KAI fraction pod asks for a share of a GPU through annotations, not for a whole
    nvidia.com/gpu: nothing about it can "never fit" a cluster of GPU nodes, nor one whose
    nodes report no GPU at all (KAI's own device accounting)."""
    doc = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "share", "namespace": "ml", "annotations": annotation,
                        "labels": {"kai.scheduler/queue": "default-queue", USAGE_LABEL: "training"}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "cuda"}]}}
    for clusters in (gpu_cluster(nodes=1), gpu_cluster(nodes=1, gpus=0)):
        found = rules_of(doc, clusters)
        assert not {"GG403", "GG501", "GG503"} & set(found), found


# -- YuniKorn ---------------------------------------------------------------------------------

YUNIKORN_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: task0
  labels: {app: sleep, applicationId: app-1, queue: my_special_queue}
  annotations: {yunikorn.apache.org/queue: root.Team_A}
spec:
  schedulerName: yunikorn
  containers: [{name: c, image: alpine}]
"""


def test_yunikorn_queues_are_read_as_paths_not_object_names() -> None:
    """YuniKorn queue paths (root.my_team, underscores and capitals allowed) are read, and
    GG304 judges them as YuniKorn paths, never as object names (tests/test_kinds_followups.py)."""
    assert {s.system for s in COMMON_QUEUES} == {"kai", "yunikorn"}
    w = workload(YUNIKORN_POD)
    assert [p.scheduler for p in w.pod_sets] == ["yunikorn"]
    # YuniKorn's read order: the annotation yunikorn.apache.org/queue before the label queue
    assert queues(w) == [("root.Team_A", "yunikorn", "/metadata/annotations/yunikorn.apache.org~1queue"),
                         ("my_special_queue", "yunikorn", "/metadata/labels/queue")]
    assert not [f for f in evaluate(yaml.safe_load(YUNIKORN_POD), POLICY).findings if f.rule == "GG304"]


def test_yunikorn_task_group_job_passes() -> None:
    doc = yaml.safe_load("""
apiVersion: batch/v1
kind: Job
metadata: {name: gang, namespace: ml}
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      labels: {applicationId: gang, queue: root.sandbox}
      annotations:
        yunikorn.apache.org/task-group-name: tg
        yunikorn.apache.org/task-groups: '[{"name": "tg", "minMember": 2, "minResource": {"cpu": "1"}}]'
    spec:
      schedulerName: yunikorn
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
""")
    assert rules_of(doc, gpu_cluster()) == {}


# -- KubeRay gaps -----------------------------------------------------------------------------

def _raycluster(suspended: bool) -> dict[str, Any]:
    head = {"name": "h", "image": "ray", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
    gpu_template = {"spec": {"containers": [gpu_container(8)]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "r", "namespace": "ml", "labels": {
                "ray.io/scheduler-name": "volcano", "volcano.sh/queue-name": "q", USAGE_LABEL: "training"}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [head]}}}, "workerGroupSpecs": [
                {"groupName": "small", "replicas": 1, "template": copy.deepcopy(gpu_template)},
                {"groupName": "big", "replicas": 4, "suspend": suspended, "template": gpu_template}]}}


def test_a_suspended_worker_group_has_no_pods() -> None:
    w = build_workload(_raycluster(True))
    assert w is not None
    assert [(p.name, p.replicas, p.gang_count) for p in w.pod_sets] == [
        ("head", 1, 1), ("small", 1, 1), ("big", 0, 0)]
    assert w.gang_min == 2


def test_a_suspended_worker_group_is_no_false_gg402() -> None:
    clusters = gpu_cluster(extra=[queue("q", {"cpu": 64, "memory": "512Gi", GPU: 8})])
    assert "GG402" not in rules_of(_raycluster(True), clusters)
    assert "GG402" in rules_of(_raycluster(False), clusters)


def _rayjob(submitter: dict[str, Any], cluster_spec: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"entrypoint": "python train.py", "submitterPodTemplate": {"spec": {
        "restartPolicy": "Never", "containers": [submitter]}}}
    if cluster_spec:
        spec["rayClusterSpec"] = {"headGroupSpec": {"template": {"spec": {
            "containers": [{"name": "h", "image": "ray"}]}}}}
    else:
        spec["clusterSelector"] = {"ray.io/cluster": "shared"}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "r", "namespace": "ml", "labels": {USAGE_LABEL: "training"}}, "spec": spec}


@pytest.mark.parametrize("cluster_spec", [True, False], ids=["own-cluster", "cluster-selector"])
def test_rayjob_submitter_is_under_the_pod_rules(cluster_spec: bool) -> None:
    """Outside the gang (counted=False) but a pod all the same: GPU limits (GG501), usage
    injection, and the feasibility of its single pod (GG403)."""
    at = "/spec/submitterPodTemplate"
    found = evaluate(_rayjob(gpu_container(16, limit=False), cluster_spec), POLICY, gpu_cluster()).findings
    assert any(f.rule == "GG501" and f.path.startswith(at) for f in found)
    assert any(f.rule == "GG403" and f.path.startswith(at) for f in found)
    result = evaluate(_rayjob(gpu_container(8), cluster_spec), POLICY, gpu_cluster())
    assert {op["path"] for op in result.patch} >= {f"{at}/spec/affinity", f"{at}/spec/tolerations"}
    assert not [f for f in result.findings if f.rule in ("GG403", "GG501")]


def test_rayjob_submitter_is_not_in_the_gang() -> None:
    w = build_workload(_rayjob(gpu_container(16)))
    assert w is not None
    assert [p.name for p in w.gang_pod_sets] == ["head"] and w.gang_min == 1


# -- the table --------------------------------------------------------------------------------

NEW_KINDS = {("jobset.x-k8s.io", "JobSet"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
             ("sagemaker.amazonaws.com", "HyperPodPyTorchJob")}


def test_new_rows_are_registered() -> None:
    rows = {(k.group, k.kind): k for k in KINDS}
    assert NEW_KINDS <= set(rows)
    for key in NEW_KINDS:
        row = rows[key]
        assert row.resource == row.kind.lower() + "s" and not row.cluster_scoped
