"""The gang fits the empty cluster and its queue, but not what is free now: it will wait.

Not an error: the gang is valid and runs once resources are released. The message
says what is short: room in the queue (the running and inqueue PodGroups of the
queue hold part of its capability), Kueue quota (the ClusterQueue's admitted workloads,
and its cohort's, reserve what the gang needs in every flavor), free node resources, or free
supernode slots for GPU groups. Seed 001: a second RayCluster of 3 CPU / 4Gi in `kuberay-test-queue`
(capability 4 CPU / 6Gi) while the first one runs stays Pending until the first one
is deleted; Volcano reports `NotEnoughResources`, gpugate warns at submission.

With `feasibility.autoscaling: true` a gang that does not fit the nodes at all is
reported here too (it waits for new nodes) instead of GG403/GG405.

```yaml cluster
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-0}
  status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: kuberay-test-queue}
  spec:
    weight: 1
    capability: {cpu: 4, memory: 6Gi}
  status: {state: Open, running: 1}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: PodGroup
  metadata: {name: ray-test-cluster-0-pg, namespace: test}
  spec:
    minMember: 3
    minResources: {cpu: "3", memory: 4Gi}
    queue: kuberay-test-queue
  status: {phase: Running, running: 3}
```

```yaml pass
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-small
  namespace: test
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
  workerGroupSpecs: []
```

```yaml fail
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-1
  namespace: test
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
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.gpu import GPU_RESOURCES
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG404"
SLUG = "gang-waits"
SEVERITY = Severity.WARNING
SEES = Sees()
NEEDS_TOPOLOGY = True
OPTIONS = ("feasibility.mode", "feasibility.autoscaling", "platform.extendedResourceToleration",
           "feasibility.staleAfterSeconds", "feasibility.budgetMilliseconds", GPU_RESOURCES,
           "queues.kueueFrameworks", "queues.kueueManagedJobsNamespaceSelector")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
