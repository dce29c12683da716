"""A Volcano queue is named, but the pods are not scheduled by Volcano.

Only the Volcano scheduler reads Volcano queues. A Deployment whose pod template names
`scheduling.volcano.sh/queue-name` but keeps the default scheduler, or a RayCluster with
`volcano.sh/queue-name` whose `ray.io/scheduler-name` label picks another batch
scheduler, is never queued: the quota the queue stands for is silently bypassed.

Not judged, to avoid false alarms: a RayCluster with `volcano.sh/queue-name` and **no**
`ray.io/scheduler-name` label (KubeRay started with `--batch-scheduler=volcano` sets the
scheduler itself, and KubeRay >= 1.3 ignores the label), and a Kubeflow job whose
templates leave `schedulerName` empty (training-operator with gang scheduling fills it).

```yaml pass
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-0
  labels: {volcano.sh/queue-name: kuberay-test-queue}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: rayproject/ray:2.9.0}]
```

```yaml fail
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: ml}
spec:
  replicas: 2
  template:
    metadata:
      annotations: {scheduling.volcano.sh/queue-name: inference}
    spec:
      containers: [{name: main, image: nginx}]
```
"""

from policies.context import Context, Sees
from policies.findings import (
    SHORT_QUOTED_CHARS,
    Problem,
    Severity,
    bounded_words,
    field_name,
    quoted,
    quoted_repr,
    split_pointer,
)
from policies.schedulers import VOLCANO_SCHEDULER, non_volcano_pod_sets, scheduler_path
from policies.workload import PodSet, QueueRef, Workload

ID = "GG302"
SLUG = "queue-without-volcano"
SEVERITY = Severity.ERROR
SEES = Sees(kinds_with="queues")


def check(workload: Workload, ctx: Context) -> list[Problem]:
    for queue in workload.queues:  # the first Volcano queue named explicitly
        if queue.system == "volcano" and queue.explicit and queue.name:
            outside = non_volcano_pod_sets(workload)
            return [_unused_queue(workload, queue, outside)] if outside else []
    return []


def _unused_queue(workload: Workload, queue: QueueRef, outside: list[PodSet]) -> Problem:
    first = outside[0]
    more = f" (and {len(outside) - 1} more)" if len(outside) > 1 else ""
    tokens = split_pointer(queue.path)  # a label or annotation key says it all; else the field
    where = tokens[-1] if tokens and "/" in tokens[-1] else field_name(queue.path)
    return Problem(f"Volcano queue {quoted_repr(queue.name, SHORT_QUOTED_CHARS)} named at "
                   f"{bounded_words(where)} is never used: pod set {quoted(first.name, SHORT_QUOTED_CHARS)}"
                   f"{more} is scheduled by {quoted_repr(first.scheduler, SHORT_QUOTED_CHARS)}, not "
                   f"{VOLCANO_SCHEDULER!r}", scheduler_path(workload, first))
