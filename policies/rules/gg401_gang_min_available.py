"""The gang minimum asks for more pods than the job has.

A Volcano Job with `minAvailable` greater than the sum of its tasks' replicas, a task
whose `minAvailable` exceeds its `replicas`, or a PyTorchJob whose
`runPolicy.schedulingPolicy.minAvailable` exceeds its total replicas, can never gather
its gang: Volcano's admission refuses the job ("job 'minAvailable' should not be greater
than total replicas in tasks"), and a PodGroup made from it waits forever.

The `scheduling.volcano.sh/group-min-member` annotation of a Pod is not compared: it
counts the pods of the whole group, which the one Pod cannot know.

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  minAvailable: 3
  tasks:
  - name: master
    replicas: 1
    template:
      spec:
        containers: [{name: main, image: busybox}]
  - name: worker
    replicas: 2
    minAvailable: 2
    template:
      spec:
        containers: [{name: main, image: busybox}]
```

```yaml fail
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  minAvailable: 4
  tasks:
  - name: master
    replicas: 1
    template:
      spec:
        containers: [{name: main, image: busybox}]
  - name: worker
    replicas: 2
    minAvailable: 3
    template:
      spec:
        containers: [{name: main, image: busybox}]
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, field_name, join_pointer, listed, quoted
from policies.kinds import GROUP_MIN_MEMBER_ANNOTATION
from policies.workload import Workload

ID = "GG401"
SLUG = "gang-min-available"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)

# A group-wide count written on one member: not comparable with that member's replicas.
_GROUP_WIDE = join_pointer("/metadata/annotations", GROUP_MIN_MEMBER_ANNOTATION)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    problems: list[Problem] = []
    for pod_set in workload.gang_pod_sets:
        if pod_set.gang_count <= pod_set.replicas:
            continue  # the usual case: the sources are looked at only past this
        sources = [s for s in workload.spec.pod_sets if s.min_available]
        source = next((s for s in sources if pod_set.path.startswith(s.at + "/")), None)
        if source is None or source.min_available is None:
            continue
        entry = pod_set.path[: -len("/" + source.template)] if source.template else pod_set.path
        path = join_pointer(entry, source.min_available)
        problems.append(Problem(f"{bounded_words(field_name(path))} {pod_set.gang_count} is more than the "
                                f"{pod_set.replicas} replicas of task {quoted(pod_set.name)}; the task's "
                                "gang can never form", path))
    if workload.gang_min_path and workload.gang_min_path != _GROUP_WIDE:
        total = workload.total_replicas
        if workload.gang_min > total:
            counts = listed((f"{p.replicas} {quoted(p.name)}" for p in workload.gang_pod_sets),
                            sep=" + ") or "no pods"
            problems.append(Problem(f"{bounded_words(field_name(workload.gang_min_path))} "
                                    f"{workload.gang_min} is greater than the job's {total} replicas "
                                    f"({counts}); the gang can never form", workload.gang_min_path))
    return problems
