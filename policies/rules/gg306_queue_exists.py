"""The Volcano queue a gang is submitted to must exist, be `Open`, and be a leaf.

Volcano's admission refuses a job whose queue is not `Open`
(``can only submit job to queue with state `Open`, queue `q` status is `Closed` ``),
and with hierarchical queues only leaf queues take jobs: `root` and queues with
children never run anything themselves. A queue that does not exist leaves the
job's PodGroup pending forever (KubeRay's `volcano.sh/queue-name` label is only
honoured "once the Queue resource has been created", seed 001).

Needs a cluster snapshot (`gpugate lint --cluster FILE`, or the webhook's live
topology). Checked for workloads whose pods Volcano schedules, and only against a
snapshot that contains Queues; the implicit `default` queue of Volcano Jobs and
Kubeflow jobs is not reported missing (Volcano creates it itself). In a fleet the
workload is fine when one member cluster can run it. A Volcano PodGroup of its own is
judged against the queue it names like a job.

Other schedulers' queues, where the snapshot holds queues of that system: a Kueue
LocalQueue (label `kueue.x-k8s.io/queue-name`, on a kind whose Kueue integration is on:
`queues.kueueFrameworks`) missing from the workload's namespace, or
a KAI queue (label `kai.scheduler/queue`, for pods KAI schedules; a KAI PodGroup's
`spec.queue`) that does not exist, is a **warning**: Kueue and KAI hold the workload until the
queue is created. So is a LocalQueue that is stopped (its `stopPolicy`), one whose ClusterQueue
does not exist, is stopped, uses a ResourceFlavor that does not exist, or names an AdmissionCheck
that does not exist or that its controller has not set `Active`, and one whose ClusterQueue's
`namespaceSelector` does not select the workload's namespace ("Workload namespace doesn't
match ClusterQueue selector"): Kueue holds the workload. A ClusterQueue with no
`namespaceSelector` at all selects no namespace (`namespaceSelector: {}` selects every one).
The namespace's labels are read from the snapshot's Namespaces; a selector on labels of a
namespace the snapshot does not hold says nothing. An update that keeps its queue is not
judged again.

```yaml cluster
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-0, labels: {kubernetes.io/hostname: cpu-0}}
  status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: root}
  spec: {weight: 1}
  status: {state: Open}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: default}
  spec: {weight: 1, parent: root}
  status: {state: Open}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: team-a}
  spec: {weight: 1, parent: root}
  status: {state: Open}
- apiVersion: scheduling.volcano.sh/v1beta1
  kind: Queue
  metadata: {name: team-archive}
  spec: {weight: 1, parent: root}
  status: {state: Closed}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ResourceFlavor
  metadata: {name: default}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ClusterQueue
  metadata: {name: research}
  spec:   # no namespaceSelector: Kueue admits no namespace's workloads
    resourceGroups:
    - coveredResources: [cpu, memory]
      flavors:
      - name: default
        resources:
        - {name: cpu, nominalQuota: "16"}
        - {name: memory, nominalQuota: 64Gi}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: LocalQueue
  metadata: {name: research, namespace: team-a}
  spec: {clusterQueue: research}
```

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: etl, namespace: team-a}
spec:
  schedulerName: volcano
  queue: team-a
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: main
          image: busybox
          resources: {requests: {cpu: "2", memory: 4Gi}}
```

```yaml fail
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: etl, namespace: team-a}
spec:
  schedulerName: volcano
  queue: team-archive
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: main
          image: busybox
          resources: {requests: {cpu: "2", memory: 4Gi}}
```

```yaml fail
apiVersion: batch/v1
kind: Job
metadata:
  name: etl
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: research}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {requests: {cpu: "2", memory: 4Gi}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG306"
SLUG = "queue-exists"
SEVERITY = Severity.ERROR
SEES = Sees()
NEEDS_TOPOLOGY = True
OPTIONS = ("feasibility.mode", "feasibility.staleAfterSeconds", "feasibility.whenStale",
           "queues.kueueFrameworks", "queues.kueueManagedJobsNamespaceSelector")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
