"""The atomic GPU group size must be a multiple of the GPUs per pod and divide the
group size.

A = `metax-tech.com/atomic-gpu-group-size` (default: G) is the part of a group that
must sit inside one supernode when the whole group cannot. The plugin needs
`A % g == 0` for every GPU pod set (g = GPUs per pod) and `G % A == 0`.

Seed example: G = 32 with A = 16 and 8 GPUs per pod.

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 8
      template:
        metadata:
          annotations:
            metax-tech.com/gpu-group-size: "32"
            metax-tech.com/atomic-gpu-group-size: "16"
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
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 8
      template:
        metadata:
          annotations:
            metax-tech.com/gpu-group-size: "32"
            metax-tech.com/atomic-gpu-group-size: "12"
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, quoted
from policies.gpu import GPU_RESOURCES
from policies.groups import (
    ATOMIC_GROUP_SIZE_ANNOTATION,
    GROUP_SIZE_ANNOTATION,
    format_gpus,
    group_sizes,
    is_multiple,
)
from policies.workload import Workload

ID = "GG203"
SLUG = "atomic-gpu-group-size"
SEVERITY = Severity.ERROR
SEES = Sees()
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION, GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    spec = group_sizes(workload, ctx.policy)
    if spec is None or not spec.atomic_explicit:
        return []
    problems: list[Problem] = []
    key = ATOMIC_GROUP_SIZE_ANNOTATION.value(ctx.policy)
    size_key = GROUP_SIZE_ANNOTATION.value(ctx.policy)
    for part in spec.pod_sets:
        if not is_multiple(spec.atomic, part.gpus):
            problems.append(Problem(f"{key} {spec.atomic} is not a multiple of the {format_gpus(part.gpus)} "
                                    f"GPUs per pod of pod set {quoted(part.pod_set.name)}",
                                    spec.atomic_path))
    if spec.size % spec.atomic:
        problems.append(Problem(f"{key} {spec.atomic} does not divide {size_key} {spec.size}",
                                spec.atomic_path))
    return problems
