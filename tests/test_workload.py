"""The workload model over every row of the kind table (policies/kinds.py, workload.py,
resources.py): pod sets, replicas, gang minimum, queues, schedulers, effective requests."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
import yaml

from policies.kinds import KINDS
from policies.workload import ShapeError, Workload, build_workload


def workload(text: str) -> Workload:
    built = build_workload(yaml.safe_load(text))
    assert built is not None
    return built


def pod_sets(w: Workload) -> list[tuple[str, int, int, bool]]:
    return [(p.name, p.replicas, p.gang_count, p.counted) for p in w.pod_sets]


def queues(w: Workload) -> list[tuple[str, str, str, bool]]:
    return [(q.name, q.system, q.path, q.explicit) for q in w.queues]


POD_SPEC = "{containers: [{name: main, image: busybox}]}"


# -- Pod ------------------------------------------------------------------------------

def test_pod() -> None:
    w = workload("""
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: ns
  annotations: {scheduling.volcano.sh/queue-name: q1, scheduling.volcano.sh/group-min-member: "4"}
spec: {schedulerName: volcano, containers: [{name: main, image: busybox}]}
""")
    assert pod_sets(w) == [("pod", 1, 1, True)]
    assert w.pod_sets[0].path == "" and w.pod_sets[0].template is w.doc
    assert w.gang_min == 4
    assert w.gang_min_path == "/metadata/annotations/scheduling.volcano.sh~1group-min-member"
    assert queues(w) == [("q1", "volcano", "/metadata/annotations/scheduling.volcano.sh~1queue-name", True)]
    assert w.schedulers == {"volcano"}
    assert str(w) == "Pod ns/p"


def test_pod_defaults() -> None:
    w = workload(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {POD_SPEC}")
    assert w.gang_min == 1 and w.gang_min_path == ""
    assert w.queues == [] and w.queue is None
    assert w.schedulers == {"default-scheduler"}


# -- apps/v1 and batch/v1 -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet"])
def test_apps_kinds(kind: str) -> None:
    w = workload(f"""
apiVersion: apps/v1
kind: {kind}
metadata: {{name: d, labels: {{kueue.x-k8s.io/queue-name: lq}}}}
spec:
  replicas: 3
  template:
    metadata: {{annotations: {{scheduling.volcano.sh/queue-name: vq}}}}
    spec: {{schedulerName: volcano, containers: [{{name: main, image: busybox}}]}}
""")
    assert pod_sets(w) == [("pods", 3, 3, True)]
    assert w.pod_sets[0].path == "/spec/template"
    assert w.gang_min == 3
    kueue = [] if kind == "ReplicaSet" else [   # Kueue has no ReplicaSet integration
        ("lq", "kueue", "/metadata/labels/kueue.x-k8s.io~1queue-name", True)]
    assert queues(w) == [
        ("vq", "volcano", "/spec/template/metadata/annotations/scheduling.volcano.sh~1queue-name", True),
        *kueue,
    ]
    assert w.schedulers == {"volcano"}


def test_deployment_replicas_default_to_one() -> None:
    w = workload(f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n"
                 f"spec: {{template: {{spec: {POD_SPEC}}}}}")
    assert pod_sets(w) == [("pods", 1, 1, True)]


def test_batch_job_uses_parallelism() -> None:
    w = workload(f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\n"
                 f"spec: {{parallelism: 4, completions: 8, template: {{spec: {POD_SPEC}}}}}")
    assert pod_sets(w) == [("pods", 4, 4, True)]
    assert w.gang_min == 4


def test_cronjob_job_template() -> None:
    w = workload(f"""
apiVersion: batch/v1
kind: CronJob
metadata: {{name: c}}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      parallelism: 2
      template: {{spec: {POD_SPEC}}}
""")
    assert pod_sets(w) == [("pods", 2, 2, True)]
    assert w.pod_sets[0].path == "/spec/jobTemplate/spec/template"


# -- Volcano --------------------------------------------------------------------------

VCJOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: vj}}
spec:
  {extra}
  tasks:
  - name: master
    replicas: 1
    template: {{spec: {{containers: [{{name: m, image: busybox}}]}}}}
  - name: worker
    replicas: 4
    {task_min}
    template: {{spec: {{{worker_sched} containers: [{{name: w, image: busybox}}]}}}}
"""


def test_volcano_job_defaults() -> None:
    w = workload(VCJOB.format(extra="", task_min="", worker_sched=""))
    assert pod_sets(w) == [("master", 1, 1, True), ("worker", 4, 4, True)]
    assert w.gang_min == 5 and w.gang_min_path == ""
    assert queues(w) == [("default", "volcano", "", False)]
    assert w.schedulers == {"volcano"}
    assert not w.pytorch_style


def test_volcano_job_task_min_available_and_job_min_available() -> None:
    w = workload(VCJOB.format(extra="", task_min="minAvailable: 2", worker_sched=""))
    assert pod_sets(w) == [("master", 1, 1, True), ("worker", 4, 2, True)]
    assert w.gang_min == 3  # sum of task minimums
    w = workload(VCJOB.format(extra="minAvailable: 4", task_min="minAvailable: 2", worker_sched=""))
    assert w.gang_min == 4 and w.gang_min_path == "/spec/minAvailable"


def test_volcano_job_queue_scheduler_and_pytorch_plugin() -> None:
    extra = "queue: team-a\n  schedulerName: other\n  plugins: {pytorch: []}"
    w = workload(VCJOB.format(extra=extra, task_min="", worker_sched="schedulerName: volcano,"))
    assert queues(w) == [("team-a", "volcano", "/spec/queue", True)]
    assert [p.scheduler for p in w.pod_sets] == ["other", "volcano"]  # the template wins
    assert w.pytorch_style


def test_podgroup() -> None:
    w = workload("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: pg}
spec: {minMember: 3, queue: q, minResources: {cpu: "3", memory: 4Gi}}
""")
    assert w.pod_sets == []
    assert w.gang_min == 3
    assert queues(w) == [("q", "volcano", "/spec/queue", True)]


# -- Kubeflow -------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "key", "version"), [
    ("PyTorchJob", "pytorchReplicaSpecs", "v1"), ("TFJob", "tfReplicaSpecs", "v1"),
    ("XGBoostJob", "xgbReplicaSpecs", "v1"), ("PaddleJob", "paddleReplicaSpecs", "v1"),
    ("JAXJob", "jaxReplicaSpecs", "v1"), ("MPIJob", "mpiReplicaSpecs", "v2beta1"),
])
def test_kubeflow_kinds(kind: str, key: str, version: str) -> None:
    text = f"""
apiVersion: kubeflow.org/{version}
kind: {kind}
metadata: {{name: k}}
spec:
  {key}:
    Master: {{replicas: 1, template: {{spec: {POD_SPEC}}}}}
    Worker:
      replicas: 3
      template: {{spec: {{schedulerName: volcano, containers: [{{name: w, image: b}}]}}}}
"""
    w = workload(text)
    assert pod_sets(w) == [("Master", 1, 1, True), ("Worker", 3, 3, True)]
    assert w.pod_sets[1].path == f"/spec/{key}/Worker/template"
    assert w.gang_min == 4
    assert queues(w) == [("default", "volcano", "", False)]
    assert [p.scheduler for p in w.pod_sets] == ["default-scheduler", "volcano"]
    assert w.pytorch_style == (kind == "PyTorchJob")


def test_pytorchjob_scheduling_policy() -> None:
    w = workload(f"""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: k}}
spec:
  runPolicy: {{schedulingPolicy: {{minAvailable: 2, queue: train}}}}
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{spec: {POD_SPEC}}}}}
    Worker: {{replicas: 3, template: {{spec: {POD_SPEC}}}}}
""")
    assert w.gang_min == 2 and w.gang_min_path == "/spec/runPolicy/schedulingPolicy/minAvailable"
    assert w.queue is not None and (w.queue.name, w.queue.explicit) == ("train", True)
    assert w.total_replicas == 4


# -- Ray ------------------------------------------------------------------------------

RAY_CLUSTER = """
  headGroupSpec:
    rayStartParams: {{}}
    template: {{spec: {{containers: [{{name: head, image: ray}}]}}}}
  workerGroupSpecs:
  - groupName: small
    replicas: 2
    minReplicas: 1
    template: {{spec: {{containers: [{{name: w, image: ray}}]}}}}
  - groupName: tpu
    replicas: 2
    minReplicas: 0
    numOfHosts: 4
    template: {{spec: {{containers: [{{name: w, image: ray}}]}}}}
"""


def _ray(kind: str, at: str, extra: str = "", autoscaling: bool = False, labels: str = "{}") -> Workload:
    """A Ray object whose cluster spec is ``spec`` itself or ``spec.<at>``."""
    cluster = RAY_CLUSTER.format() + ("  enableInTreeAutoscaling: true\n" if autoscaling else "")
    if at != "spec":
        cluster = f"\n  {at}:" + cluster.replace("\n  ", "\n    ") + extra
    return workload(f"apiVersion: ray.io/v1\nkind: {kind}\nmetadata: {{name: r, labels: {labels}}}\n"
                    f"spec:{cluster}")


def test_raycluster_pod_sets_and_hosts() -> None:
    w = _ray("RayCluster", "spec")
    assert pod_sets(w) == [("head", 1, 1, True), ("small", 2, 2, True), ("tpu", 8, 8, True)]
    assert w.gang_min == 11
    assert w.pod_sets[1].path == "/spec/workerGroupSpecs/0/template"


def test_raycluster_autoscaling_uses_min_replicas() -> None:
    w = _ray("RayCluster", "spec", autoscaling=True)
    assert pod_sets(w) == [("head", 1, 1, True), ("small", 1, 1, True), ("tpu", 0, 0, True)]
    assert w.gang_min == 2


def test_raycluster_queue_and_scheduler_label() -> None:
    w = _ray("RayCluster", "spec", labels="{ray.io/scheduler-name: volcano, volcano.sh/queue-name: q}")
    assert queues(w) == [("q", "volcano", "/metadata/labels/volcano.sh~1queue-name", True)]
    assert w.schedulers == {"volcano"}
    assert _ray("RayCluster", "spec").schedulers == {"default-scheduler"}


def test_rayjob_submitter_is_not_counted() -> None:
    submitter = "\n  submitterPodTemplate: {spec: {containers: [{name: s, image: ray}]}}\n"
    w = _ray("RayJob", "rayClusterSpec", extra=submitter)
    assert pod_sets(w)[-1] == ("submitter", 1, 1, False)
    assert w.gang_min == 11 and w.total_replicas == 11
    assert [p.name for p in w.gang_pod_sets] == ["head", "small", "tpu"]
    assert w.pod_sets[0].path == "/spec/rayClusterSpec/headGroupSpec/template"


def test_rayjob_autoscaling_and_rayservice() -> None:
    assert _ray("RayJob", "rayClusterSpec", autoscaling=True).gang_min == 2
    w = _ray("RayService", "rayClusterConfig")
    assert [p.name for p in w.pod_sets] == ["head", "small", "tpu"]
    assert w.pod_sets[0].path == "/spec/rayClusterConfig/headGroupSpec/template"


# -- DLRover --------------------------------------------------------------------------

def test_elasticjob() -> None:
    w = workload(f"""
apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {{name: e}}
spec:
  replicaSpecs:
    worker: {{replicas: 8, template: {{spec: {POD_SPEC}}}}}
    ps: {{replicas: 2, template: {{spec: {POD_SPEC}}}}}
""")
    assert pod_sets(w) == [("worker", 8, 8, True), ("ps", 2, 2, True)]
    assert w.gang_min == 10 and w.queues == [] and w.pytorch_style


# -- the table itself -----------------------------------------------------------------

def test_every_row_of_the_kind_table_is_covered() -> None:
    covered = {"Pod", "Deployment", "StatefulSet", "ReplicaSet", "Job", "CronJob", "PodGroup", "PyTorchJob",
               "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob", "RayCluster", "RayJob", "RayService",
               "ElasticJob", "Queue", "HyperNode"}
    covered |= {"JobSet", "LeaderWorkerSet", "HyperPodPyTorchJob"}  # tests/test_kinds_2026.py
    covered |= {"Workload", "CompositePodGroup"}  # tests/test_workload_api.py (PodGroup: both groups)
    covered |= {"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"}  # tests/test_trainjob.py
    assert {k.kind for k in KINDS} <= covered


def test_unknown_kinds_are_not_modelled() -> None:
    assert build_workload({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}) is None
    assert build_workload({"apiVersion": "example.com/v1", "kind": "Job", "spec": {}}) is None


@pytest.mark.parametrize(("doc", "path"), [
    ({"spec": {"replicas": "two", "template": {}}}, "/spec/replicas"),
    ({"spec": {"replicas": -1, "template": {}}}, "/spec/replicas"),
    ({"spec": {"template": {"spec": {"containers": {"name": "x"}}}}}, "/spec/template/spec/containers"),
    ({"metadata": {"labels": {"tier": 1}}, "spec": {}}, "/metadata/labels/tier"),
    ({"spec": {"template": {"spec": {"containers": [{"resources": {"limits": ["1"]}}]}}}},
     "/spec/template/spec/containers/0/resources/limits"),
])
def test_shape_errors_name_the_path(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(ShapeError) as info:
        build_workload({"apiVersion": "apps/v1", "kind": "Deployment", **doc})
    assert info.value.path == path


# -- effective pod requests -----------------------------------------------------------

def requests(spec: str) -> dict[str, Fraction]:
    return workload(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {spec}").pod_sets[0].requests


def test_requests_sum_containers_and_default_from_limits() -> None:
    got = requests("""
  containers:
  - {name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  - {name: b, resources: {limits: {cpu: "1", memory: 2Gi, nvidia.com/gpu: 1}}}
  - {name: c, resources: {requests: {cpu: 100m}, limits: {cpu: "2"}}}
""")
    assert got == {"cpu": Fraction(16, 10), "memory": 3 * 2**30, "nvidia.com/gpu": 1}


def test_regular_init_containers_take_the_max() -> None:
    got = requests("""
  initContainers:
  - {name: i1, resources: {requests: {cpu: "4"}}}
  - {name: i2, resources: {requests: {memory: 8Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
""")
    assert got == {"cpu": 4, "memory": 8 * 2**30}


def test_sidecars_add_to_app_containers_and_to_later_init_containers() -> None:
    got = requests("""
  initContainers:
  - {name: before, resources: {requests: {cpu: "3"}}}
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m}}}
  - {name: after, resources: {requests: {cpu: "3"}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1"}}}
""")
    # app phase 1 + 0.5 = 1.5; init "before" alone 3; init "after" with the sidecar 3.5
    assert got == {"cpu": Fraction(7, 2)}


def test_overhead_is_added() -> None:
    got = requests("""
  overhead: {cpu: 250m, memory: 120Mi}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
""")
    assert got == {"cpu": Fraction(5, 4), "memory": 2**30 + 120 * 2**20}


def test_unparsable_quantities_are_reported_not_raised() -> None:
    w = workload("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                 "spec: {containers: [{name: a, resources: {requests: {cpu: lots, memory: 1Gi}}}]}")
    assert w.pod_sets[0].requests == {"memory": 2**30}
    assert w.pod_sets[0].request_errors[0][0] == "/spec/containers/0/resources/requests/cpu"


@pytest.mark.parametrize(("group", "autoscaling", "pods"), [
    ("{groupName: g, template: {}}", False, 0),                          # CRD defaults: replicas 0
    ("{groupName: g, minReplicas: 2, template: {}}", False, 2),          # replicas raised to min
    ("{groupName: g, replicas: 9, maxReplicas: 4, template: {}}", False, 4),   # capped at max
    ("{groupName: g, replicas: 1, minReplicas: 5, maxReplicas: 3, template: {}}", False, 3),  # max wins
    ("{groupName: g, replicas: 3, numOfHosts: 2, template: {}}", False, 6),
    ("{groupName: g, replicas: 3, minReplicas: 1, template: {}}", True, 1),
    ("{groupName: g, replicas: 3, template: {}}", True, 0),              # minReplicas defaults to 0
])
def test_ray_worker_replicas_follow_kuberay(group: str, autoscaling: bool, pods: int) -> None:
    scaling = ", enableInTreeAutoscaling: true" if autoscaling else ""
    w = workload(f"apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {{name: r}}\n"
                 f"spec: {{headGroupSpec: {{template: {{}}}}, workerGroupSpecs: [{group}]{scaling}}}\n")
    assert w.pod_sets[1].replicas == pods
    assert w.gang_min == 1 + pods


def test_volcano_job_zero_min_available_and_empty_queue_mean_defaults() -> None:
    # Volcano's admission webhook patches minAvailable 0 and queue "" with its defaults.
    extra = 'minAvailable: 0\n  queue: ""'
    w = workload(VCJOB.format(extra=extra, task_min="minAvailable: 2", worker_sched=""))
    assert w.gang_min == 3 and w.gang_min_path == ""
    assert queues(w) == [("default", "volcano", "", False)]


def test_pytorchjob_zero_min_available_is_kept() -> None:
    # training-operator uses an explicit minAvailable as written, even 0.
    w = workload(f"""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: k}}
spec:
  runPolicy: {{schedulingPolicy: {{minAvailable: 0}}}}
  pytorchReplicaSpecs:
    Worker: {{replicas: 3, template: {{spec: {POD_SPEC}}}}}
""")
    assert w.gang_min == 0 and w.gang_min_path.endswith("/minAvailable")


def test_a_bad_overhead_quantity_points_at_the_overhead() -> None:
    w = workload("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                 "spec: {overhead: {example.com/dev: lots}, containers: [{name: a}]}")
    assert w.pod_sets[0].request_errors[0][0] == "/spec/overhead/example.com~1dev"


# -- Volcano's cluster objects ---------------------------------------------------------

def test_volcano_queue_and_hypernode_have_no_pods() -> None:
    for api, kind in (("scheduling.volcano.sh/v1beta1", "Queue"),
                      ("topology.volcano.sh/v1alpha1", "HyperNode")):
        w = workload(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: q}}\nspec: {{}}\n")
        assert w.pod_sets == [] and w.gang_min == 0 and not w.spec.gang and w.spec.validate
