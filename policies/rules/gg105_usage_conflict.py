"""The workload's own affinity or tolerations contradict its usage.

A training workload may run on the pools `usage.pools.training` (training, hybrid),
an inference workload on `usage.pools.inference` (inference, hybrid). A pod template
that requires or prefers nodes of another pool (`maip.mxsf.io/node.usage In [training]`
on an inference Deployment), selects one with a `nodeSelector`, or tolerates another
pool's taint contradicts the declared usage. gpugate respects the user's expression and
does not overwrite it (GG101 leaves that term alone); this rule says so.

```yaml pass
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, labels: {maip.mxsf.io/usage: inference}}
spec:
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: maip.mxsf.io/node.usage, operator: In, values: [inference]}
      containers:
      - {name: main, image: nginx}
```

```yaml fail
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, labels: {maip.mxsf.io/usage: inference}}
spec:
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: maip.mxsf.io/node.usage, operator: In, values: [training]}
      tolerations:
      - {key: maip.mxsf.io/node.usage, operator: Equal, value: training, effect: NoSchedule}
      containers:
      - {name: main, image: nginx}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, quoted
from policies.gpu import GPU_RESOURCES
from policies.usage import steered_pod_sets, usage_conflicts, workload_usage
from policies.workload import Workload

ID = "GG105"
SLUG = "usage-conflict"
SEVERITY = Severity.WARNING
SEES = Sees(usage_scope=True)
OPTIONS = ("usage.nodeKey", "usage.pools", "usage.workloadKey", "usage.scope", "usage.defaults",
           GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    usage, source = workload_usage(workload, ctx.policy)
    if usage is None:
        return []
    problems: list[Problem] = []
    for pod_set in steered_pod_sets(workload, ctx.policy):
        for conflict in usage_conflicts(pod_set, usage, ctx.policy):
            problems.append(Problem(f"pod set {quoted(pod_set.name)}: {bounded_words(conflict.message)} "
                                    f"({bounded_words(source)})",
                                    conflict.path))
    return problems
