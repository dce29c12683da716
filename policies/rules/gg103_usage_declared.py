"""A GPU workload declares what it is for: training or inference.

The usage decides which node pool the pods may use (seed 003). It comes from the label
`maip.mxsf.io/usage` (`usage.workloadKey`) on the object, else from `usage.defaults`
for the kind (Deployment: inference, PyTorchJob: training, ...), else from a preferred
node affinity `maip.mxsf.io/node.usage In [<pool>]` already in the pod templates (a Pod
created from a template the webhook has mutated). A workload in scope (a
GPU workload, or labelled, or any with `usage.scope: all`) whose usage cannot be
determined gets no usage affinity and tolerations, so it cannot run on the tainted
GPU pools: a workload of a kind without a `usage.defaults` entry (by default a bare Pod,
a ReplicaSet or a CronJob) and without the label, or a label value that is not a pool of
`usage.pools`. By default Job (batch and Volcano), PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob, MPIJob, RayJob, RayCluster, ElasticJob, JobSet, HyperPodPyTorchJob,
TrainJob and the Trainer runtimes are `training`, and Deployment, StatefulSet, RayService and
LeaderWorkerSet are `inference`.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: infer, labels: {maip.mxsf.io/usage: inference}}
spec:
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: infer}
spec:
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, join_pointer
from policies.gpu import GPU_RESOURCES
from policies.options import Option
from policies.usage import usage_config, workload_usage
from policies.workload import Workload

ID = "GG103"
SLUG = "usage-declared"
SEVERITY = Severity.WARNING
SEES = Sees(usage_scope=True)

WORKLOAD_KEY = Option("usage.workloadKey", {"type": "string", "minLength": 1}, "maip.mxsf.io/usage",
                      "Label on a workload declaring its usage (`training` or `inference`).")
SCOPE = Option("usage.scope", {"enum": ["gpu", "all"]}, "gpu",
               "`gpu`: workloads with the usage label or requesting a GPU; `all`: every workload.")
DEFAULTS = Option(
    "usage.defaults", {"type": "object", "additionalProperties": {"type": "string"}},
    {"Deployment": "inference", "StatefulSet": "inference", "RayService": "inference",
     "Job": "training", "PyTorchJob": "training", "RayJob": "training", "RayCluster": "training",
     "ElasticJob": "training",
     # The other Kubeflow training kinds are training by definition.
     "TFJob": "training", "XGBoostJob": "training", "PaddleJob": "training", "JAXJob": "training",
     "MPIJob": "training",
     # Batch training kinds of 2026 (a JobSet's jobs, HyperPod's and Trainer's jobs), and
     # LeaderWorkerSet, made for serving large models across nodes.
     "JobSet": "training", "HyperPodPyTorchJob": "training", "TrainJob": "training",
     "TrainingRuntime": "training", "ClusterTrainingRuntime": "training",
     "LeaderWorkerSet": "inference"},
    "Kind -> usage of a workload without the usage label. Entries you give are added.")
OPTIONS = (WORKLOAD_KEY, SCOPE, DEFAULTS, "usage.pools", "usage.nodeKey", GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    usage, reason = workload_usage(workload, ctx.policy)
    if usage is not None:
        return []
    cfg = usage_config(ctx.policy)
    pools = "|".join(sorted(cfg.pools))
    path = (join_pointer("/metadata/labels", cfg.workload_key) if cfg.workload_key in workload.labels
            else "/metadata")
    return [Problem(f"usage cannot be determined ({bounded_words(reason)}); set label "
                    f"{cfg.workload_key}: {pools}", path)]
