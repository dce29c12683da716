"""Pod templates get the node affinity and tolerations of their usage pool.

Nodes are labelled **and** tainted with `maip.mxsf.io/node.usage` = `training`,
`inference` or `hybrid` (seed 003). A workload of usage U (label
`maip.mxsf.io/usage` on the object, else `usage.defaults` by kind: Deployment is
inference, PyTorchJob is training, ...) may run on the nodes of `usage.pools[U]`
and prefers the nodes of U itself, so every pod template gets:

- required node affinity `nodeKey In pools[U]`, added to **every** existing
  `nodeSelectorTerm` (terms are ORed: a new term would loosen the user's constraint);
- preferred node affinity, weight `preferredWeight`, `nodeKey In [U]`;
- a toleration `nodeKey=<pool>:NoSchedule` for each pool, unless one already tolerates it.

The webhook injects these as a JSON Patch; the linter reports what is missing and
`gpugate lint --fix` writes it into the file. An expression of the user's own on the
usage key is kept (a contradicting one is GG105). In scope: workloads with the usage
label and workloads requesting a GPU; in a GPU workload only the pod templates that
request GPUs (a CPU-only Ray head or MPI launcher is left where the scheduler puts it).
`usage.scope: all`: every template of every workload.

```yaml pass
apiVersion: apps/v1
kind: Deployment
metadata: {name: inference-service, labels: {maip.mxsf.io/usage: inference}}
spec:
  replicas: 2
  selector: {matchLabels: {app: inference-service}}
  template:
    metadata: {labels: {app: inference-service}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: maip.mxsf.io/node.usage, operator: In, values: [inference, hybrid]}
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions:
              - {key: maip.mxsf.io/node.usage, operator: In, values: [inference]}
      tolerations:
      - {key: maip.mxsf.io/node.usage, operator: Equal, value: inference, effect: NoSchedule}
      - {key: maip.mxsf.io/node.usage, operator: Equal, value: hybrid, effect: NoSchedule}
      containers:
      - {name: main, image: nginx:latest}
```

```yaml fail
apiVersion: apps/v1
kind: Deployment
metadata: {name: inference-service, labels: {maip.mxsf.io/usage: inference}}
spec:
  replicas: 2
  selector: {matchLabels: {app: inference-service}}
  template:
    metadata: {labels: {app: inference-service}}
    spec:
      containers:
      - {name: main, image: nginx:latest}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, quoted
from policies.gpu import GPU_RESOURCES
from policies.options import Option
from policies.patch import PatchOp
from policies.usage import usage_patch, workload_usage
from policies.workload import Workload

ID = "GG101"
SLUG = "usage-affinity"
SEVERITY = Severity.WARNING
SEES = Sees(pod_sets=True)

NODE_KEY = Option("usage.nodeKey", {"type": "string", "minLength": 1}, "maip.mxsf.io/node.usage",
                  "Node label **and** taint key whose value names a node's pool (seed 003).")
POOLS = Option("usage.pools",
               {"type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
               {"training": ["training", "hybrid"], "inference": ["inference", "hybrid"]},
               "Usage -> the pools (values of `nodeKey`) its pods may run on. Entries you give are added.")
PREFERRED_WEIGHT = Option("usage.preferredWeight", {"type": "integer", "minimum": 1, "maximum": 100}, 100,
                          "Weight of the preferred node affinity for the pool named like the usage.")
OPTIONS = (NODE_KEY, POOLS, PREFERRED_WEIGHT, "usage.workloadKey", "usage.scope", "usage.defaults",
           GPU_RESOURCES)


def mutate(workload: Workload, ctx: Context) -> list[tuple[Problem, list[PatchOp]]]:
    patches = usage_patch(workload, ctx.policy)
    if not patches:
        return []  # nothing to add (every /validate review): no message to build
    usage, source = workload_usage(workload, ctx.policy)
    return [(Problem(f"pod set {quoted(patch.pod_set.name)}: usage {usage} ({bounded_words(source)}) needs "
                     f"{'; '.join(patch.injected)} in {bounded_words(patch.pod_set.spec_path or '/')}",
                     patch.pod_set.spec_path, fixable=True), patch.ops)
            for patch in patches]
