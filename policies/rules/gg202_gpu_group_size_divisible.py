"""The GPU group size must fit the job: a multiple of the GPUs per pod, and a divisor of
the job's GPUs.

With G = `metax-tech.com/gpu-group-size`, g the GPUs of one pod and T the GPUs of the
whole job, the gpu-podaffinity plugin needs `G % g == 0` for every GPU pod set (a group
is made of whole pods) and `T % G == 0` (the job is made of whole groups). Otherwise the
gang can never be split into groups and stays Pending.

Seed example: Master 1x8 + Worker 7x8 GPUs is T = 64, so G = 32 gives two groups.
With 6 workers T = 56, which 32 does not divide.

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pytorch-demo, namespace: kubeflow}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 7
      restartPolicy: Never
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```

```yaml fail
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pytorch-demo, namespace: kubeflow}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 6
      restartPolicy: Never
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, listed, quoted
from policies.gpu import GPU_RESOURCES
from policies.groups import (
    ATOMIC_GROUP_SIZE_ANNOTATION,
    GROUP_SIZE_ANNOTATION,
    format_gpus,
    group_sizes,
    is_multiple,
)
from policies.workload import Workload

ID = "GG202"
SLUG = "gpu-group-size-divisible"
SEVERITY = Severity.ERROR
SEES = Sees()
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION, GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    spec = group_sizes(workload, ctx.policy)
    if spec is None or not spec.pod_sets:
        return []
    problems: list[Problem] = []
    key = GROUP_SIZE_ANNOTATION.value(ctx.policy)
    for part in spec.pod_sets:
        if not is_multiple(spec.size, part.gpus):
            problems.append(Problem(f"{key} {spec.size} is not a multiple of the {format_gpus(part.gpus)} "
                                    f"GPUs per pod of pod set {quoted(part.pod_set.name)} (a group is made "
                                    "of whole pods)", spec.size_path))
    total = spec.total_gpus
    if not is_multiple(total, spec.size):
        breakdown = listed((f"{p.pod_set.replicas}x{format_gpus(p.gpus)} {quoted(p.pod_set.name)}"
                            for p in spec.pod_sets), sep=" + ")
        problems.append(Problem(f"{key} {spec.size} does not divide the job's {format_gpus(total)} GPUs "
                                f"({breakdown})", spec.size_path))
    return problems
