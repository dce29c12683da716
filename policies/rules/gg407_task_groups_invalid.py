"""YuniKorn task groups that YuniKorn ignores or cannot match: the gang is not what is declared.

YuniKorn (`schedulerName: yunikorn`) gang-schedules the task groups of the pod annotation
`yunikorn.apache.org/task-groups`: before any pod of the application runs, it creates
`minMember` placeholder pods of `minResource` per group, which the pods naming the group
(`yunikorn.apache.org/task-group-name`) then replace. Nothing of it is checked at
admission: YuniKorn's shim reads the annotation when the first pod arrives, and what it
cannot read it ignores (an event on the pod), so the job runs without a gang. Reported:

- an annotation the shim ignores whole: not JSON, a field of the wrong type (`minMember:
  "2"`, a number for a `nodeSelector` value), a group without a name or `minResource`,
  `minMember` 0 or below, a negative `minResource`, `cpu` and `vcore` both (one resource to
  YuniKorn), an explicit `pods`, amounts past 64 bits;
- placeholder pods the API server refuses (YuniKorn then drops the gang): a resource name
  that is not a container resource (`vcore`), a fractional extended resource, a
  placeholder pod name (`tg-<application ID>-<group>-<random>`) that is not a pod name (a
  capital letter in the application ID or the group name), labels, node selector,
  tolerations or node affinity the API server refuses;
- a group name declared twice; pods naming a group no definition of their application
  declares, or declaring groups and naming none (they take no placeholder); pod sets of
  one application with different task groups, or some without (YuniKorn takes the first
  pod's, whichever it is); task groups without an application ID (the pods join an
  application YuniKorn names for the whole namespace);
- `yunikorn.apache.org/schedulingPolicyParameters` entries YuniKorn skips or replaces by its
  default: no `name=value`, an unknown name (`placeholderTimeoutSeconds`), a style other
  than `Hard` or `Soft`, a timeout that is not a positive whole number; and near misses of
  the three keys (`yunikorn.apache.org/taskGroupName`, as in YuniKorn's own Spark example).

Warnings: the job still runs, without the gang it declares. Whether the placeholders can
ever all be placed is GG403's (an error for `gangSchedulingStyle=Hard`, a warning for
`Soft`, YuniKorn's default).

```yaml pass
apiVersion: batch/v1
kind: Job
metadata: {name: gang-scheduling-job-example}
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      labels: {applicationId: gang-scheduling-job-example, queue: root.sandbox}
      annotations:
        yunikorn.apache.org/task-group-name: task-group-example
        yunikorn.apache.org/task-groups: |-
          [{"name": "task-group-example", "minMember": 2,
            "minResource": {"cpu": "100m", "memory": "50M"},
            "nodeSelector": {}, "tolerations": [], "affinity": {}, "topologySpreadConstraints": []}]
    spec:
      schedulerName: yunikorn
      restartPolicy: Never
      containers:
      - name: sleep30
        image: alpine:latest
        resources: {requests: {cpu: 100m, memory: 50M}}
```

```yaml fail
apiVersion: batch/v1
kind: Job
metadata: {name: gang-scheduling-job-example}
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      labels: {applicationId: gang-scheduling-job-example, queue: root.sandbox}
      annotations:
        yunikorn.apache.org/task-group-name: task-group-example
        yunikorn.apache.org/task-groups: |-
          [{"name": "task-group-example", "minMember": "2",
            "minResource": {"cpu": "100m", "memory": "50M"}}]
    spec:
      schedulerName: yunikorn
      restartPolicy: Never
      containers:
      - name: sleep30
        image: alpine:latest
        resources: {requests: {cpu: 100m, memory: 50M}}
```

```yaml fail
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 4
  template:
    metadata:
      labels: {applicationId: Train-Run}
      annotations:
        yunikorn.apache.org/task-group-name: workers
        yunikorn.apache.org/schedulingPolicyParameters: >-
          placeholderTimeoutSeconds=600 gangSchedulingStyle=Hard
        yunikorn.apache.org/task-groups: >-
          [{"name": "workers", "minMember": 4, "minResource": {"nvidia.com/gpu": 8}}]
    spec:
      schedulerName: yunikorn
      restartPolicy: Never
      containers:
      - name: trainer
        image: pytorch/pytorch
        resources: {limits: {nvidia.com/gpu: 8}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.kinds import YUNIKORN_SCHEDULER
from policies.workload import Workload

ID = "GG407"
SLUG = "task-groups-invalid"
SEVERITY = Severity.WARNING
SEES = Sees(pod_sets=True)


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    for p in workload.pod_sets:  # nearly every object stops here: YuniKorn's reader stays unloaded
        if p.scheduler == YUNIKORN_SCHEDULER:
            break
    else:
        return
    from policies.yunikorn import gang_of  # the task groups' reader, loaded on first use

    gang = gang_of(workload)
    if gang is None:
        return
    seen: set[tuple[str, str]] = set()
    for message, path in gang.problems:
        if (message, path) not in seen:  # pod sets of one template say it once each
            seen.add((message, path))
            yield Problem(message, path)
