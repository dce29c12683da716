"""The `ray.io/scheduler-name` label names a batch scheduler KubeRay does not know.

KubeRay's batch-scheduler integrations are `volcano`, `yunikorn`, `kai-scheduler` and
`scheduler-plugins`; any other value (a typo like `volcaon`, or `default-scheduler`) is
not a batch scheduler: a **warning**. Where the value is valid an **info** note says that
the label is legacy: KubeRay >= 1.3 ignores it, and the operator flag
`--batch-scheduler` decides.

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
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-0
  labels: {ray.io/scheduler-name: volcaon}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: rayproject/ray:2.9.0}]
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, join_pointer, quoted_repr
from policies.kinds import RAY_SCHEDULER_LABEL
from policies.workload import Workload

ID = "GG303"
SLUG = "ray-scheduler-name"
SEVERITY = Severity.WARNING
SEES = Sees()

KUBERAY_BATCH_SCHEDULERS = ("volcano", "yunikorn", "kai-scheduler", "scheduler-plugins")
_PATH = join_pointer("/metadata/labels", RAY_SCHEDULER_LABEL)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # Only kinds whose scheduler the kind table takes from this label (the Ray kinds).
    if workload.spec.scheduler_override != _PATH or RAY_SCHEDULER_LABEL not in workload.labels:
        return []
    value = workload.labels[RAY_SCHEDULER_LABEL]
    if value not in KUBERAY_BATCH_SCHEDULERS:
        return [Problem(f"label {RAY_SCHEDULER_LABEL} is {quoted_repr(value)}, not one of KubeRay's batch "
                        f"schedulers ({', '.join(KUBERAY_BATCH_SCHEDULERS)})", _PATH)]
    return [Problem(f"label {RAY_SCHEDULER_LABEL}={value} is legacy: KubeRay >= 1.3 ignores it "
                    "and uses the operator flag --batch-scheduler", _PATH, severity=Severity.INFO)]
