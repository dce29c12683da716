"""The queue is named with a key the scheduler or operator does not read there.

Volcano takes the queue of a plain pod from the pod annotation
`scheduling.volcano.sh/queue-name`; the label `volcano.sh/queue-name` on a Pod, a
Deployment or a batch Job (or their pod templates) is not read, and the pods go to the
`default` queue. KubeRay does the opposite: it reads the **label**
`volcano.sh/queue-name` on the RayCluster/RayJob/RayService, so the annotation there is
ignored. Volcano Jobs and Kubeflow jobs name their queue in the spec (`spec.queue`,
`runPolicy.schedulingPolicy.queue`), so the label on them is ignored too. Where each kind
reads its queue is the kind table (`policies/kinds.py`).

```yaml pass
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: ml}
spec:
  replicas: 2
  template:
    metadata:
      annotations: {scheduling.volcano.sh/queue-name: inference}
    spec:
      schedulerName: volcano
      containers: [{name: main, image: nginx}]
```

```yaml fail
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-0
  annotations: {scheduling.volcano.sh/queue-name: kuberay-test-queue}
  labels: {ray.io/scheduler-name: volcano}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: rayproject/ray:2.9.0}]
```
"""

from collections.abc import Iterable, Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity, join_pointer, quoted, split_pointer
from policies.kinds import VOLCANO_QUEUE_ANNOTATION, VOLCANO_QUEUE_LABEL, QueueSource
from policies.workload import Workload

ID = "GG301"
SLUG = "queue-key-placement"
SEVERITY = Severity.WARNING
SEES = Sees()

_LABEL = join_pointer("/metadata/labels", VOLCANO_QUEUE_LABEL)
_ANNOTATION = join_pointer("/metadata/annotations", VOLCANO_QUEUE_ANNOTATION)


def _describe(source: QueueSource, kind: str) -> str:
    parts = split_pointer(source.at)
    on = "the pod template" if source.scope == "template" else f"the {kind}"
    if parts[:2] == ["metadata", "labels"] and len(parts) == 3:
        return f"label {parts[2]} on {on}"
    if parts[:2] == ["metadata", "annotations"] and len(parts) == 3:
        return f"annotation {parts[2]} on {on}"
    return ".".join(parts)


def check(workload: Workload, ctx: Context) -> Iterable[Problem]:
    if not _names_volcano_queue_key(workload):
        return ()  # no Volcano queue key anywhere: the usual case
    return _misplaced(workload)


def _names_volcano_queue_key(workload: Workload) -> bool:
    """Whether the object or a pod template carries a Volcano queue label or annotation:
    what :func:`_misplaced` looks at (it finds nothing without one)."""
    if VOLCANO_QUEUE_LABEL in workload.labels or VOLCANO_QUEUE_ANNOTATION in workload.annotations:
        return True
    for pod_set in workload.pod_sets:
        if VOLCANO_QUEUE_LABEL in pod_set.labels:
            return True
    return False


def _misplaced(workload: Workload) -> Iterator[Problem]:
    sources = [s for s in workload.spec.queues if s.system == "volcano"]
    if not sources:
        return  # the kind has no Volcano queue at all: nothing to compare against
    # Annotations on the object's own metadata are flagged only where the queue is read
    # from metadata; kinds with a spec field may have controllers that copy annotations.
    metadata_only = True
    for source in sources:  # a loop, not all(<generator>): this runs on every object
        if not source.at.startswith("/metadata/"):
            metadata_only = False
            break

    candidates: list[tuple[str, str, str, str]] = []  # (scope, at, what, full path)
    if VOLCANO_QUEUE_LABEL in workload.labels:
        candidates.append(("object", _LABEL, f"label {VOLCANO_QUEUE_LABEL}", _LABEL))
    if metadata_only and VOLCANO_QUEUE_ANNOTATION in workload.annotations:
        candidates.append(("object", _ANNOTATION, f"annotation {VOLCANO_QUEUE_ANNOTATION}", _ANNOTATION))
    for pod_set in workload.pod_sets:
        if pod_set.template is workload.doc:
            continue  # a bare Pod: its metadata was looked at above
        if VOLCANO_QUEUE_LABEL in pod_set.labels:
            candidates.append(("template", _LABEL,
                               f"label {VOLCANO_QUEUE_LABEL} on pod set {quoted(pod_set.name)}",
                               pod_set.path + _LABEL))
    if not candidates:
        return  # no Volcano queue key anywhere: the usual case
    read = {(s.scope, s.at) for s in sources}
    instead = " or ".join(_describe(s, workload.kind) for s in sources)
    for scope, at, what, path in candidates:
        if (scope, at) in read:
            continue
        yield Problem(f"{what} is not read for a {workload.kind}; the queue is read from "
                      f"{instead}, so this one is ignored", path)
