"""Pod templates of one workload use different schedulers.

A gang is only formed by one scheduler: if the Master is scheduled by `volcano` and the
Workers by `default-scheduler`, Volcano waits for pods it never sees and the job stays
Pending (or half of it runs without the gang guarantee). Pods outside the gang (the
RayJob submitter) are not compared.

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: demo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: alpine:3.19}]
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: alpine:3.19}]
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
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: alpine:3.19}]
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: default-scheduler
          containers: [{name: pytorch, image: alpine:3.19}]
```
"""

from collections.abc import Iterable, Iterator

from policies.context import Context, Sees
from policies.findings import SHORT_QUOTED_CHARS, Problem, Severity, listed, quoted, quoted_repr
from policies.schedulers import pod_set_scheduler, scheduler_path
from policies.workload import Workload

ID = "GG307"
SLUG = "mixed-schedulers"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)


def check(workload: Workload, ctx: Context) -> Iterable[Problem]:
    # Each pod set's scheduler is its model scheduler or unknown: one model scheduler for
    # the whole gang (nearly always) cannot mix.
    gang = workload.gang_pod_sets
    for pod_set in gang:
        if pod_set.scheduler != gang[0].scheduler:
            return _mixed(workload)
    return ()


def _mixed(workload: Workload) -> Iterator[Problem]:
    by_scheduler: dict[str, list[str]] = {}
    first_of: dict[str, str] = {}
    for pod_set in workload.gang_pod_sets:
        scheduler = pod_set_scheduler(workload, pod_set)
        if scheduler is None:
            continue  # an operator flag decides (empty Kubeflow schedulerName, KubeRay): unknown
        if scheduler not in by_scheduler:
            by_scheduler[scheduler] = []
            first_of[scheduler] = scheduler_path(workload, pod_set)
        by_scheduler[scheduler].append(pod_set.name)
    if len(by_scheduler) < 2:
        return
    parts = listed((f"{quoted_repr(scheduler, SHORT_QUOTED_CHARS)}: "
                    f"{listed([quoted(name, SHORT_QUOTED_CHARS) for name in names], 2)}"
                    for scheduler, names in by_scheduler.items()), 2, "; ")
    minority = min(by_scheduler, key=lambda s: len(by_scheduler[s]))
    yield Problem(f"pod sets use different schedulers ({parts}); one gang needs one scheduler",
                  first_of[minority])
