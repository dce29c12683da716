"""Builders of the workloads the end-to-end tests submit."""

from __future__ import annotations

import copy
from typing import Any

from .kube import GPU, PRODUCT, PRODUCT_KEY, TEST_KEY, USAGE_KEY, WORKLOAD_KEY

CPU_KEY = "e2e.gpugate.io/cpu-group"


def selector(group: str, product: bool = True) -> dict[str, str]:
    """Pods of this test land on its own nodes only (and pin the GPU product: no GG104)."""
    return {TEST_KEY: group, PRODUCT_KEY: PRODUCT} if product else {TEST_KEY: group}


def tolerations(pool: str = "training") -> list[dict[str, str]]:
    """What gpugate would inject for a training workload pinned to the product: used on objects
    made while gpugate is not called, so that the scheduler can still place their pods."""
    pools = {"training": ["training", "hybrid"], "inference": ["inference", "hybrid"]}[pool]
    return [*({"key": USAGE_KEY, "operator": "Equal", "value": p, "effect": "NoSchedule"} for p in pools),
            {"key": PRODUCT_KEY, "operator": "Equal", "value": PRODUCT, "effect": "NoSchedule"}]


def usage_affinity(pool: str = "training") -> dict[str, Any]:
    """The node affinity gpugate would inject for a workload of ``pool`` (GG101): used on objects
    made while gpugate is not called that should pass its lint rules."""
    pools = [t["value"] for t in tolerations(pool) if t["key"] == USAGE_KEY]
    return {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": USAGE_KEY, "operator": "In", "values": pools}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": USAGE_KEY, "operator": "In", "values": [pool]}]}}]}}


def container(gpus: int = 0, cpu: str = "1", memory: str = "1Gi", name: str = "main") -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory, **({GPU: str(gpus)} if gpus else {})}
    return {"name": name, "image": "busybox:1.36", "command": ["sleep", "1"],
            "resources": {"requests": requests, "limits": dict(requests)}}


def pod_spec(group: str, gpus: int, *, restart: str | None = "Never", product: bool = True,
             **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(gpus, name=extra.pop("container_name", "main"))],
                            "nodeSelector": selector(group, product)}
    if restart:
        spec["restartPolicy"] = restart
    spec.update(extra)
    return spec


def pod(namespace: str, name: str, group: str, gpus: int, *, usage: str = "training",
        **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {WORKLOAD_KEY: usage}},
            "spec": pod_spec(group, gpus, **extra)}


def batch_job(namespace: str, name: str, group: str, gpus: int, parallelism: int = 1,
              **extra: Any) -> dict[str, Any]:
    # the pods carry the usage label too (from the template): gpugate would steer them as Pods
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"app": name, WORKLOAD_KEY: "training"}},
                                  "spec": pod_spec(group, gpus, **extra)}}}


def deployment(namespace: str, name: str, group: str, gpus: int, replicas: int = 1, *,
               product: bool = True, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": pod_spec(group, gpus, restart=None, product=product, **extra)}}}


def queue(name: str, gpus: int, cpu: str = "256", memory: str = "1Ti") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": False,
                     "capability": {"cpu": cpu, "memory": memory, GPU: str(gpus)}}}


def volcano_job(namespace: str, name: str, group: str, queue_name: str, gpus: int,
                replicas: int = 2) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "volcano", "queue": queue_name, "minAvailable": replicas,
                     "tasks": [{"name": "worker", "replicas": replicas,
                                "template": {"spec": pod_spec(group, gpus)}}]}}


def pytorch_job(namespace: str, name: str, group: str, gpus: int, workers: int = 1,
                cpu: str = "4") -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        spec = pod_spec(group, gpus, container_name="pytorch")
        spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
        spec["containers"][0]["resources"]["limits"]["cpu"] = cpu
        return {"replicas": count, "restartPolicy": "Never", "template": {"spec": spec}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 1 + workers}},
                     "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def ray_cluster_spec(group: str, workers: int = 2, gpus: int = 1) -> dict[str, Any]:
    """A CPU-only head on the test's CPU node (in no usage pool) and GPU workers."""
    head = {"containers": [container(0, cpu="2", memory="4Gi", name="ray-head")],
            "nodeSelector": {CPU_KEY: group}}
    worker = pod_spec(group, gpus, restart=None, container_name="ray-worker")
    return {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": head}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": workers,
                                  "maxReplicas": workers, "rayStartParams": {},
                                  "template": {"spec": worker}}]}


def ray_cluster(namespace: str, name: str, group: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace}, "spec": ray_cluster_spec(group)}


def ray_job(namespace: str, name: str, group: str) -> dict[str, Any]:
    # The submitter tolerates every taint: GG106 (a warning) for the RayJob, once.
    submitter = {"spec": {"restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
                          "containers": [container(0, cpu="500m", memory="256Mi", name="ray-job-submitter")]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": ray_cluster_spec(group),
                     "submitterPodTemplate": submitter}}


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with a controller owner reference to the stored ``owner``."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return obj


def affinity_of(spec: dict[str, Any]) -> Any:
    return spec.get("affinity")


def steered(spec: dict[str, Any]) -> bool:
    """Whether a pod spec carries gpugate's required usage affinity."""
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return any(e.get("key") == USAGE_KEY for t in terms for e in t.get("matchExpressions") or [])


# -- the kinds of 2026 (issue 19) ------------------------------------------------------------

def jobset(namespace: str, name: str, group: str, gpus: int, replicas: int = 2,
           parallelism: int = 1) -> dict[str, Any]:
    """A JobSet of one replicated job: ``replicas`` batch Jobs of ``parallelism`` pods each."""
    job = {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
           "template": {"spec": pod_spec(group, gpus)}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {WORKLOAD_KEY: "training"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                         "template": {"spec": job}}]}}


def jobset_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a JobSet, where it keeps them."""
    return [r["template"]["spec"]["template"]["spec"] for r in obj["spec"]["replicatedJobs"]]


def leader_worker_set(namespace: str, name: str, group: str, gpus: int, size: int = 2,
                      replicas: int = 1) -> dict[str, Any]:
    """``replicas`` groups of one leader and ``size`` - 1 workers, each pod with ``gpus``."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {WORKLOAD_KEY: "training"}},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {
                         "size": size,
                         "leaderTemplate": {"spec": pod_spec(group, gpus, restart=None,
                                                             container_name="leader")},
                         "workerTemplate": {"spec": pod_spec(group, gpus, restart=None,
                                                             container_name="worker")}}}}


def lws_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a LeaderWorkerSet (leader, worker), where it keeps them."""
    template = obj["spec"]["leaderWorkerTemplate"]
    return [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]


def volcano_podgroup(namespace: str, name: str, queue_name: str, members: int = 2,
                     min_gpus: int | None = None) -> dict[str, Any]:
    """A Volcano PodGroup in ``queue_name``; ``min_gpus``: its ``minResources`` GPUs."""
    spec: dict[str, Any] = {"minMember": members, "queue": queue_name}
    if min_gpus is not None:
        spec["minResources"] = {GPU: str(min_gpus)}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def cluster_training_runtime(name: str, group: str, gpus: int) -> dict[str, Any]:
    """A Trainer v2 runtime whose trainer step ("node", labelled as the trainer ancestor) asks
    for ``gpus`` per pod on the test's nodes."""
    node = pod_spec(group, gpus, restart=None, container_name="node")
    step = {"name": "node", "replicas": 1,
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": node}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name, "labels": {WORKLOAD_KEY: "training"}},
            "spec": {"mlPolicy": {"numNodes": 1},
                     "template": {"spec": {"replicatedJobs": [step]}}}}


def train_job(namespace: str, name: str, runtime: str, gpus: int, nodes: int = 2) -> dict[str, Any]:
    """A TrainJob on the ClusterTrainingRuntime ``runtime``: ``nodes`` pods of ``gpus`` each."""
    per_node = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {WORKLOAD_KEY: "training"}},
            "spec": {"runtimeRef": {"name": runtime, "apiGroup": "trainer.kubeflow.org",
                                    "kind": "ClusterTrainingRuntime"},
                     "trainer": {"numNodes": nodes,
                                 "resourcesPerNode": {"requests": per_node, "limits": dict(per_node)}}}}


# -- Kueue's quota objects (its CRDs; no Kueue controller runs) -------------------------------

KUEUE_API = "kueue.x-k8s.io/v1beta1"


def kueue_queues(namespace: str, name: str, local_queue: str, gpus: int) -> list[tuple[dict[str, Any], str]]:
    """A ResourceFlavor and a ClusterQueue ``name`` granting ``gpus`` GPUs (in no cohort: all it
    can ever grant), and the LocalQueue ``local_queue`` of ``namespace`` pointing at it; each
    with its plural, in the order they are created."""
    flavor = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}}
    cluster_queue = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", GPU],
            "flavors": [{"name": name, "resources": [
                {"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "256Gi"},
                {"name": GPU, "nominalQuota": gpus}]}]}]}}
    local = {"apiVersion": KUEUE_API, "kind": "LocalQueue",
             "metadata": {"name": local_queue, "namespace": namespace}, "spec": {"clusterQueue": name}}
    return [(flavor, "resourceflavors"), (cluster_queue, "clusterqueues"), (local, "localqueues")]


def kueue_workload(job: dict[str, Any], queue_name: str) -> dict[str, Any]:
    """The Workload Kueue's job controller makes for the stored batch Job ``job`` (one pod set)."""
    meta, spec = job["metadata"], job["spec"]
    workload = {"apiVersion": KUEUE_API, "kind": "Workload",
                "metadata": {"name": f"job-{meta['name']}", "namespace": meta["namespace"]},
                "spec": {"queueName": queue_name,
                         "podSets": [{"name": "main", "count": spec.get("parallelism", 1),
                                      "template": spec["template"]}]}}
    return owned_by(workload, job)
