"""GPU group sizes must be positive integers.

`metax-tech.com/gpu-group-size` (G) and `metax-tech.com/atomic-gpu-group-size` (A) are
read by Volcano's gpu-podaffinity plugin as integers: a positive whole number, written
as a quoted string in an annotation (`"32"`). Anything else (`"32GPUs"`, `"0"`, `"-8"`,
`"16.5"`) leaves the plugin unable to form groups, so the job never schedules as
intended. The annotation keys are configurable (`gpu.groupSizeAnnotation`,
`gpu.atomicGroupSizeAnnotation`).

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 4
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
      replicas: 4
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32 GPUs"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, quoted, quoted_repr
from policies.groups import ATOMIC_GROUP_SIZE_ANNOTATION, GROUP_SIZE_ANNOTATION, GroupValue, group_annotations
from policies.workload import Workload

ID = "GG201"
SLUG = "gpu-group-size-format"
SEVERITY = Severity.ERROR
SEES = Sees()
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    found = group_annotations(workload, ctx.policy)
    return [Problem(f"annotation {value.key} is {quoted_repr(value.raw)}, not a positive integer "
                    f"(on {_where(value)})", value.path)
            for value in (*found.size, *found.atomic) if value.value is None]


def _where(value: GroupValue) -> str:
    return f"pod set {quoted(value.pod_set.name)}" if value.pod_set is not None else "workload metadata"
