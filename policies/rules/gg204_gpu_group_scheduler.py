"""GPU group sizes only work with the Volcano scheduler and PyTorch-style jobs.

`metax-tech.com/gpu-group-size` is read by Volcano's gpu-podaffinity plugin. If the
pods are scheduled by another scheduler the annotation does nothing and the
model-parallel units land anywhere: an **error**. The plugin acts only on PyTorch jobs
(a PyTorchJob, a Volcano Job with the `pytorch` plugin, a DLRover ElasticJob); on any
other kind the annotation is ignored: a **warning**.

A RayCluster without the `ray.io/scheduler-name` label is not judged: the KubeRay
operator may be running with `--batch-scheduler=volcano` and set the scheduler itself.

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: pytorch-demo}
spec:
  schedulerName: volcano
  plugins:
    pytorch: ["--master=master", "--worker=worker", "--port=23456"]
  tasks:
  - replicas: 1
    name: master
    template:
      metadata:
        annotations: {metax-tech.com/gpu-group-size: "32"}
      spec:
        restartPolicy: Never
        containers:
        - name: master
          image: alpine:3.19
          resources: {limits: {metax-tech.com/gpu: 8}}
  - replicas: 7
    name: worker
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: worker
          image: alpine:3.19
          resources: {limits: {metax-tech.com/gpu: 8}}
```

```yaml fail
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 4
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "16"}
        spec:
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```
"""

from policies.context import Context, Sees
from policies.findings import SHORT_QUOTED_CHARS, Problem, Severity, quoted, quoted_repr
from policies.groups import ATOMIC_GROUP_SIZE_ANNOTATION, GROUP_SIZE_ANNOTATION, group_annotations
from policies.schedulers import VOLCANO_SCHEDULER, non_volcano_pod_sets, scheduler_path
from policies.workload import Workload

ID = "GG204"
SLUG = "gpu-group-scheduler"
SEVERITY = Severity.ERROR
SEES = Sees()
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    sizes = group_annotations(workload, ctx.policy).size
    if not sizes:
        return []
    problems: list[Problem] = []
    key = GROUP_SIZE_ANNOTATION.value(ctx.policy)
    for pod_set in non_volcano_pod_sets(workload, trust_operator=False):
        scheduler = quoted_repr(pod_set.scheduler, SHORT_QUOTED_CHARS)
        problems.append(Problem(f"{key} is set but pod set {quoted(pod_set.name)} is scheduled by "
                                f"{scheduler}, not {VOLCANO_SCHEDULER!r}; the gpu-podaffinity plugin never "
                                "sees these pods",
                                scheduler_path(workload, pod_set)))
    if not workload.pytorch_style:
        problems.append(Problem(f"{key} is set on a {workload.kind}, but the gpu-podaffinity "
                                "plugin acts on PyTorch jobs only (PyTorchJob, Volcano Job with "
                                "plugins.pytorch, ElasticJob); the annotation is ignored", sizes[0].path,
                                severity=Severity.WARNING))
    return problems
