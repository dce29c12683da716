"""Feasibility could not be decided: the topology is missing or stale, or the budget ran out.

When gpugate cannot prove anything it does not judge: no queue or capacity verdict
(GG306, GG402-GG405) comes from data of unknown age. Information only when the cluster
list is empty, a member cluster's snapshot has no nodes, the check ran past its budget
(`feasibility.budgetMilliseconds`, or the webhook's deadline), or a part of the check
had no data: a workload with a GPU group size on a cluster without supernode labels
or tier-1 HyperNodes (its groups are not checked), or DRA claims whose devices cannot be
counted (a missing DeviceClass, claim, template or ResourceSlice, a pool being updated, a
selector that does not evaluate, a driver's opaque config: the reasons are named), or that
are counted only as an upper bound (`firstAvailable`, several or `distinctAttribute` constraints; a
note on a fit), or a Kueue verdict that hangs on labels of the workload's namespace the snapshot
does not hold (`queues.kueueManagedJobsNamespaceSelector` on other labels than its name, and no
such Namespace seen) when the answers with and without Kueue differ.
Said aloud when the live topology has not been synced yet, or not confirmed by the API server for longer than
`feasibility.staleAfterSeconds` (default 5 s): a warning naming the age
(`topology is 12s old ...: queue and capacity rules not applied`), which kubectl
prints, so an impossible gang is never admitted silently; with
`feasibility.whenStale: deny` an error instead, and the webhook refuses the workload
until the view is fresh again (fail closed; `mode: warn` keeps it a warning).

```yaml cluster
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-0, labels: {maip.mxsf.io/node.usage: training}}
  spec: {taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]}
  status: {allocatable: {cpu: "128", memory: 1000Gi, metax-tech.com/gpu: "8", pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-1, labels: {maip.mxsf.io/node.usage: training}}
  spec: {taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]}
  status: {allocatable: {cpu: "128", memory: 1000Gi, metax-tech.com/gpu: "8", pods: "110"}}
```

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pytorch-demo, namespace: kubeflow}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 1
      template:
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
metadata: {name: pytorch-demo, namespace: kubeflow}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "16"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 1
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "16"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.options import Option
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG406"
SLUG = "feasibility-unknown"
SEVERITY = Severity.INFO
SEES = Sees()
NEEDS_TOPOLOGY = True

STALE_AFTER_SECONDS = Option(
    "feasibility.staleAfterSeconds", {"type": "number", "exclusiveMinimum": 0}, 5,
    "A live topology not confirmed by the API server for longer than this is stale: no capacity "
    "verdict from it, this rule says so instead.")
WHEN_STALE = Option("feasibility.whenStale", {"enum": ["warn", "deny"]}, "warn",
                    "`deny`: a stale topology is an error that refuses the workload (unless `mode: warn`).")
BUDGET_MILLISECONDS = Option("feasibility.budgetMilliseconds", {"type": "number", "exclusiveMinimum": 0}, 200,
                             "Time the capacity check may take per object; past it, this rule reports it.")
OPTIONS = (STALE_AFTER_SECONDS, WHEN_STALE, BUDGET_MILLISECONDS, "feasibility.mode",
           "queues.kueueManagedJobsNamespaceSelector")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
