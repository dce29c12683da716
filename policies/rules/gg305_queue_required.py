"""A GPU workload names no queue, where the policy requires one.

Off unless the policy says `queues: {require: true}`: then every workload that requests
a GPU must name a queue explicitly (Volcano `spec.queue`, `schedulingPolicy.queue`, the
`scheduling.volcano.sh/queue-name` annotation, the KubeRay label
`volcano.sh/queue-name`, or Kueue's `kueue.x-k8s.io/queue-name`), so that GPU quota
is enforced. A default queue the controller would pick does not count, nor does a Kueue label
Kueue ignores: on a kind whose integration it does not run (`queues.kueueFrameworks`), or in a
namespace it does not manage (`queues.kueueManagedJobsNamespaceSelector`; where that hangs on
labels of the namespace other than its name, the label counts).

```yaml policy
queues: {require: true}
```

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  queue: ml-team
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers:
        - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: 1}}}
```

```yaml fail
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers:
        - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: 1}}}
```

```yaml fail
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: kueue-system      # Kueue's own namespace: it manages no job there
  labels: {kueue.x-k8s.io/queue-name: team}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: 1}}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, quoted_repr
from policies.gpu import GPU_RESOURCES
from policies.options import Option
from policies.workload import Workload

ID = "GG305"
SLUG = "queue-required"
SEVERITY = Severity.WARNING
SEES = Sees(gpu=True)

REQUIRE_QUEUE = Option("queues.require", {"type": "boolean"}, False,
                       "`true`: every GPU workload must name a queue.")
OPTIONS = (REQUIRE_QUEUE, GPU_RESOURCES, "queues.kueueFrameworks",
           "queues.kueueManagedJobsNamespaceSelector")


def check(workload: Workload, ctx: Context) -> list[Problem]:
    if not REQUIRE_QUEUE.value(ctx.policy):
        return []
    named = [q for q in workload.queues if q.explicit and q.name]
    if any(q.system != "kueue" for q in named) or \
            (named and workload.kueue_reads_queue(ctx.policy.data["queues"]) is not False):
        return []
    if named:
        return [Problem(f"requests GPUs but names no queue Kueue reads: it ignores queue "
                        f"{quoted_repr(named[0].name)} here (queues.kueueFrameworks, "
                        "queues.kueueManagedJobsNamespaceSelector); the policy requires one (queues.require)",
                        named[0].path)]
    default = next((q.name for q in workload.queues if not q.explicit), None)
    fallback = f" (it would go to the default queue {quoted_repr(default)})" if default else ""
    return [Problem(f"requests GPUs but names no queue{fallback}; the policy requires one "
                    "(queues.require)", "/metadata")]
