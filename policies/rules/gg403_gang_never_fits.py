"""The gang cannot be placed on the cluster even with every node empty.

Checked against the cluster snapshot, on the workload as the API server will see it
(after usage injection, GG101/GG102): for each pod set, the nodes it may use
(`spec.unschedulable`, NoSchedule/NoExecute taints against its tolerations,
`nodeSelector`, required node affinity with In/NotIn/Exists/DoesNotExist/Gt/Lt and
`matchFields`), and what those nodes hold: every resource including extended ones
(GPUs) and the node's `pods` limit. The gang is rejected only on a condition that
every placement needs:

- a pod set fits no node (the message says which nodes were excluded and why, or
  what the largest eligible node offers);
- a pod set's minimum pods do not fit its eligible nodes even when they are empty;
- the gang's total of a resource exceeds what the nodes its pods can use offer.

For a gang-scheduled workload the minimum is the gang (Volcano `minAvailable`,
`schedulingPolicy.minAvailable`, Ray's head plus workers). Workloads whose pods are
placed one by one (Deployment, StatefulSet, batch Job) are rejected only when not one
of their pods fits; if only part of the replicas can ever fit, this is a warning.
With `feasibility.autoscaling: true` node shortages are not final (GG404 instead).

Shares of one device (`gpu.shares`: HAMi's `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage`
and `nvidia.com/gpucores`, Volcano vGPU's `volcano.sh/vgpu-*`, Alibaba's `aliyun.com/gpu-mem` and
`aliyun.com/gpu-core.percentage`) are not node capacity and are never compared with a node's
allocatable. Each container's share is held against one device: a percent share above 100
never fits, nor a memory share above the largest device any node registers (HAMi's
`hami.io/node-nvidia-register` and Volcano vGPU's `volcano.sh/node-vgpu-register` annotations;
for Alibaba, a node's `aliyun.com/gpu-mem` divided by its `aliyun.com/gpu-count`). With no node
showing its devices, nothing is said of the shares.

Under YuniKorn the pods are placed one by one; its gang is the placeholder pods of the
task groups (`yunikorn.apache.org/task-groups`, read as GG407 says), which must all be
placed first: `minMember` pods of `minResource` per group, with the group's node selector,
tolerations and required node affinity (and the tolerations gpugate's own webhook gives
them). Placeholders that can never all be placed are an error with
`gangSchedulingStyle=Hard` (YuniKorn fails the application at the placeholder timeout), a
warning with `Soft`, its default (after the timeout it places the pods one by one). The
gang is judged only when YuniKorn surely creates those placeholders: one application ID
and one definition for all the pods, and placeholders the API server admits.

```yaml cluster
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-0
    labels: {maip.mxsf.io/node.usage: training, nvidia.com/gpu.product: A100-SXM4-80GB}
  spec:
    taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]
  status: {allocatable: {cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-1
    labels: {maip.mxsf.io/node.usage: training, nvidia.com/gpu.product: A100-SXM4-80GB}
  spec:
    taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]
  status: {allocatable: {cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-0, labels: {maip.mxsf.io/node.usage: inference}}
  spec:
    taints: [{key: maip.mxsf.io/node.usage, value: inference, effect: NoSchedule}]
  status: {allocatable: {cpu: "32", memory: 128Gi, pods: "110"}}
```

```yaml pass
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llm-finetune, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
            resources: {limits: {nvidia.com/gpu: 8, cpu: "32", memory: 256Gi}}
    Worker:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
            resources: {limits: {nvidia.com/gpu: 8, cpu: "32", memory: 256Gi}}
```

```yaml fail
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llm-finetune, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
            resources: {limits: {nvidia.com/gpu: 16, cpu: "32", memory: 256Gi}}
    Worker:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime
            resources: {limits: {nvidia.com/gpu: 16, cpu: "32", memory: 256Gi}}
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.gpu import GPU_RESOURCES, GPU_SHARES
from policies.options import Option
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG403"
SLUG = "gang-never-fits"
SEVERITY = Severity.ERROR
SEES = Sees()
NEEDS_TOPOLOGY = True

MODE = Option("feasibility.mode", {"enum": ["off", "warn", "enforce"]}, "enforce",
              "`enforce`: refuse what can **never** fit; `warn`: report it as a warning; `off`: no "
              "check against the cluster.")
AUTOSCALING = Option("feasibility.autoscaling", {"type": "boolean"}, False,
                     "`true`: nodes may be added, so only queue limits are hard.")
EXTENDED_RESOURCE_TOLERATION = Option(
    "platform.extendedResourceToleration", {"enum": ["auto", True, False]}, "auto",
    "The ExtendedResourceToleration admission plugin (GKE runs it): a pod requesting an extended "
    "resource tolerates `<resource>:NoSchedule` taints. `auto`: on for a snapshot whose nodes carry "
    "GKE labels.")
OPTIONS = (MODE, AUTOSCALING, EXTENDED_RESOURCE_TOLERATION, "feasibility.staleAfterSeconds",
           "feasibility.whenStale", "feasibility.budgetMilliseconds", GPU_RESOURCES, GPU_SHARES,
           "queues.kueueFrameworks", "queues.kueueManagedJobsNamespaceSelector")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
