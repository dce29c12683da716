"""The gang's minimum resources exceed what its queue can ever hold.

Volcano admits a gang into a queue only when the queue can hold the gang's minimum
resources (its PodGroup's `minResources`: the requests of the `minAvailable` pods).
What a queue can ever hold is computed as Volcano's capacity and proportion plugins
do: `min(capability, (cluster total - sum of all queues' guarantees) + own guarantee)`
per resource, and never more than a parent queue's capability. For kube-queue
(ElasticQuotaTree, seed 002) the `max` of the namespace's quota node and of its
ancestors bounds every job. A Volcano PodGroup of its own is judged on its
`minResources`. For KAI Scheduler (label `kai.scheduler/queue`, pods KAI schedules) the
queue's `limit` of each resource, and its parent queues', bound the gang. A gang above
such a limit waits forever; this is an error.

A gang that is within the limit but above what is *left* now (other pod groups are
running in the queue) will wait: that is GG404 (gang-waits), a warning. With
`feasibility.autoscaling: true` the cluster total no longer bounds the queue (nodes
may be added); `capability` still does.

Seed 001: queue `kuberay-test-queue` has capability 4 CPU / 6Gi. A RayCluster of a
head (1 CPU, 2Gi) and two workers (1 CPU, 1Gi) needs 3 CPU / 4Gi and runs; one
whose workers need 2 CPU each needs 5 CPU and can never be admitted.

```yaml cluster
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-0}
  status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-1}
  status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: kuberay-test-queue}
  spec:
    weight: 1
    capability: {cpu: 4, memory: 6Gi}
  status: {state: Open}
```

```yaml pass
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-0
  labels: {ray.io/scheduler-name: volcano, volcano.sh/queue-name: kuberay-test-queue}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.9.0
          resources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
  workerGroupSpecs:
  - groupName: worker
    replicas: 2
    minReplicas: 2
    maxReplicas: 2
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.9.0
          resources: {requests: {cpu: "1", memory: 1Gi}, limits: {cpu: "1", memory: 1Gi}}
```

```yaml fail
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-big
  labels: {ray.io/scheduler-name: volcano, volcano.sh/queue-name: kuberay-test-queue}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.9.0
          resources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
  workerGroupSpecs:
  - groupName: worker
    replicas: 2
    minReplicas: 2
    maxReplicas: 2
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.9.0
          resources: {requests: {cpu: "2", memory: 1Gi}, limits: {cpu: "2", memory: 1Gi}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.gpu import GPU_RESOURCES
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG402"
SLUG = "gang-exceeds-queue"
SEVERITY = Severity.ERROR
SEES = Sees()
NEEDS_TOPOLOGY = True
OPTIONS = ("feasibility.mode", "feasibility.autoscaling", "feasibility.staleAfterSeconds",
           "feasibility.whenStale", "feasibility.budgetMilliseconds", GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
