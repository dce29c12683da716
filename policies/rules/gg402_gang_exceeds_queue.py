"""The gang's minimum resources exceed what its queue can ever hold.

Volcano admits a gang into a queue only when the queue can hold the gang's minimum
resources (its PodGroup's `minResources`: the requests of the `minAvailable` pods).
What a queue can ever hold is computed as Volcano's capacity and proportion plugins
do: `min(capability, (cluster total - sum of all queues' guarantees) + own guarantee)`
per resource, and never more than a parent queue's capability. For kube-queue
(ElasticQuotaTree, seed 002) the `max` of the namespace's quota node and of its
ancestors bounds every job. A Volcano PodGroup of its own is judged on its
`minResources`. For KAI Scheduler (label `kai.scheduler/queue`, pods KAI schedules) the
queue's `limit` of each resource, and its parent queues', bound the gang. For Kueue (label
`kueue.x-k8s.io/queue-name`), the ClusterQueue its LocalQueue points at must cover every
resource asked ("resource X unavailable in ClusterQueue"), and some flavor of each resource
group must hold each pod set within the most the ClusterQueue can ever get of it: its nominal
quota plus what it may borrow up its cohort tree (borrowing limits; what other queues lend,
within their lending limits), as Kueue's flavor assigner computes it. A gang above
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
from policies.kinds import KUEUE_FRAMEWORKS
from policies.labelselectors import NAME_LABEL, SELECTOR_SCHEMA
from policies.options import Option
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG402"
SLUG = "gang-exceeds-queue"
SEVERITY = Severity.ERROR
SEES = Sees()
NEEDS_TOPOLOGY = True
KUEUE_EXCLUDED = Option(
    "queues.kueueExcludeResourcePrefixes", {"type": "array", "items": {"type": "string"}}, [],
    "Resource name prefixes Kueue does not account: set it to Kueue's own "
    "`resources.excludeResourcePrefixes` (its manager configuration, which gpugate cannot see). A "
    "resource no ClusterQueue resource group covers is otherwise an error, as Kueue never admits such a "
    "workload.")
KUEUE_INTEGRATIONS = Option(
    "queues.kueueFrameworks", {"type": "array", "items": {"type": "string"}}, list(KUEUE_FRAMEWORKS),
    "The integrations Kueue runs: set it to Kueue's own `integrations.frameworks` (and "
    "`externalFrameworks`) when it runs fewer than these (older releases' manifests leave some out, "
    "`pod`, `deployment`, `statefulset` and `leaderworkerset.x-k8s.io/leaderworkerset` among them). "
    "Kueue ignores the queue label of a kind whose integration is off, and so does gpugate: no Kueue "
    "verdict for it.")
KUEUE_NAMESPACES = Option(
    "queues.kueueManagedJobsNamespaceSelector", {**SELECTOR_SCHEMA, "type": ["object", "null"]},
    {"matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn",
                           "values": ["kube-system", "kueue-system"]}]},
    "The namespaces whose jobs Kueue manages: set it to Kueue's own `managedJobsNamespaceSelector` (a "
    "label selector; the default is Kueue's, with Kueue in `kueue-system`; null: every namespace). From "
    "Kueue 0.15 (and for pods, Deployments and StatefulSets in every release that has the selector) Kueue "
    "ignores the queue label of an object in any other namespace, and so does gpugate: no Kueue verdict "
    "for it. A selector on labels other than the namespace's name is matched against the Namespaces of "
    "the cluster snapshot; a namespace the snapshot does not hold is judged with and without Kueue, "
    "and is unknown (GG406) where the two answers differ.")
OPTIONS = ("feasibility.mode", "feasibility.autoscaling", "feasibility.staleAfterSeconds",
           "feasibility.whenStale", "feasibility.budgetMilliseconds", GPU_RESOURCES, KUEUE_EXCLUDED,
           KUEUE_INTEGRATIONS, KUEUE_NAMESPACES)


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
