"""GPU group-size annotations belong on pod templates, with one value per job.

The scheduler reads `metax-tech.com/gpu-group-size` (and the atomic size) on pods. Two
pod templates of one job with different values leave the plugin with two answers for
one gang: an **error**. A value set only on the workload's own metadata is, for most
controllers, never copied to the pods: a **warning** (move it to a pod template).

Setting it on one template only (the seed's own form: the PyTorchJob Master) is fine.

```yaml pass
apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: pytorch-demo, namespace: dlrover}
spec:
  distributionStrategy: AllreduceStrategy
  replicaSpecs:
    worker:
      replicas: 8
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32"}
        spec:
          schedulerName: volcano
          restartPolicy: Never
          containers:
          - name: main
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```

```yaml fail
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32"}
        spec:
          schedulerName: volcano
          containers:
          - {name: pytorch, image: alpine:3.19, resources: {limits: {metax-tech.com/gpu: 8}}}
    Worker:
      replicas: 7
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "16"}
        spec:
          schedulerName: volcano
          containers:
          - {name: pytorch, image: alpine:3.19, resources: {limits: {metax-tech.com/gpu: 8}}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity, quoted
from policies.groups import ATOMIC_GROUP_SIZE_ANNOTATION, GROUP_SIZE_ANNOTATION, GroupValue, group_annotations
from policies.workload import Workload

ID = "GG205"
SLUG = "gpu-group-annotation-placement"
SEVERITY = Severity.WARNING
SEES = Sees()
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION)


def _compared(values: list[GroupValue]) -> bool:
    """Whether a key is written in several places, or only on the workload's metadata:
    unset, or set on one pod template only (the usual case), there is nothing to compare."""
    return len(values) > 1 or (len(values) == 1 and values[0].pod_set is None)


# Bounds of what one message quotes: it names two places and two values, and fits a warning.
_VALUE_CHARS = 12
_NAME_CHARS = 24


def _where(v: GroupValue) -> str:
    return f"pod set {quoted(v.pod_set.name, _NAME_CHARS)}" if v.pod_set is not None else "workload metadata"


def _check_key(workload: Workload, values: list[GroupValue]) -> Iterator[Problem]:
    on_templates = [v for v in values if v.pod_set is not None]
    on_metadata = [v for v in values if v.pod_set is None]
    key = values[0].key

    def shown(v: GroupValue) -> object:
        return v.value if v.value is not None else v.raw

    def value(v: GroupValue) -> str:  # a size is a small number: anything long is garbage (GG201)
        return quoted(shown(v), _VALUE_CHARS)

    first = on_templates[0] if on_templates else None
    for other in on_templates[1:]:
        if first is not None and shown(other) != shown(first):
            yield Problem(f"{key} is {value(other)} on {_where(other)} but {value(first)} on "
                          f"{_where(first)}; one gang needs one value", other.path, severity=Severity.ERROR)
    for meta in on_metadata:
        if first is None:
            yield Problem(f"{key} {value(meta)} is set only on the workload's metadata; the scheduler "
                          "reads it on pods, so set it on a pod template", meta.path)
        elif shown(meta) != shown(first):
            yield Problem(f"{key} is {value(meta)} on the workload's metadata but {value(first)} on "
                          f"{_where(first)}; the pods carry {value(first)}", meta.path)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    found = group_annotations(workload, ctx.policy)
    problems: list[Problem] = []
    if _compared(found.size):
        problems.extend(_check_key(workload, found.size))
    if _compared(found.atomic):
        problems.extend(_check_key(workload, found.atomic))
    return problems
