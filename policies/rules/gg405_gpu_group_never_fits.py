"""No supernode can hold the job's GPU groups (gpu-group-size), even when empty.

With `metax-tech.com/gpu-group-size: G` (seed 000) the gpu-podaffinity plugin places
each model-parallel unit of G GPUs inside one supernode, and fails the job when no
supernode can take it; with `atomic-gpu-group-size: A` each A-GPU part must sit inside
one supernode. A supernode is a set of nodes sharing a value of one of the policy's
`gpu.supernodeLabels` (default `nvidia.com/gpu.clique`), or the node members of a
tier-1 Volcano HyperNode (`exactMatch`, `regexMatch`, `labelMatch`).

Rejected when no supernode can hold one unit (its eligible nodes do not have G, or A,
GPUs in pods of g GPUs), or when all supernodes together hold fewer units than the
job forms (T/G, or T/A). The message gives the unit, the largest supernode and its
GPUs. When the cluster has no supernode information at all, groups are not checked
(GG406 says so).

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
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-2, labels: {maip.mxsf.io/node.usage: training}}
  spec: {taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]}
  status: {allocatable: {cpu: "128", memory: 1000Gi, metax-tech.com/gpu: "8", pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-3, labels: {maip.mxsf.io/node.usage: training}}
  spec: {taints: [{key: maip.mxsf.io/node.usage, value: training, effect: NoSchedule}]}
  status: {allocatable: {cpu: "128", memory: 1000Gi, metax-tech.com/gpu: "8", pods: "110"}}
- apiVersion: topology.volcano.sh/v1alpha1
  kind: HyperNode
  metadata: {name: supernode-a}
  spec:
    tier: 1
    members:
    - type: Node
      selector: {exactMatch: {name: gpu-0}}
    - type: Node
      selector: {exactMatch: {name: gpu-1}}
- apiVersion: topology.volcano.sh/v1alpha1
  kind: HyperNode
  metadata: {name: supernode-b}
  spec:
    tier: 1
    members:
    - type: Node
      selector: {regexMatch: {pattern: "gpu-[23]"}}
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
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "16"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 3
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
          annotations: {metax-tech.com/gpu-group-size: "32"}
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: alpine:3.19
            resources: {limits: {metax-tech.com/gpu: 8}}
    Worker:
      replicas: 3
      template:
        metadata:
          annotations: {metax-tech.com/gpu-group-size: "32"}
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
from policies.gpu import GPU_RESOURCES
from policies.groups import ATOMIC_GROUP_SIZE_ANNOTATION, GROUP_SIZE_ANNOTATION
from policies.options import Option
from policies.rules._feasibility import problems  # numpy: loaded only when a topology is given
from policies.workload import Workload

ID = "GG405"
SLUG = "gpu-group-never-fits"
SEVERITY = Severity.ERROR
SEES = Sees()
NEEDS_TOPOLOGY = True

SUPERNODE_LABELS = Option("gpu.supernodeLabels", {"type": "array", "items": {"type": "string"}},
                          ["nvidia.com/gpu.clique"],
                          "Node labels whose value names a supernode; Volcano HyperNodes are read too.")
OPTIONS = (SUPERNODE_LABELS, GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION, "feasibility.mode",
           "feasibility.autoscaling", "platform.extendedResourceToleration", GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    return problems(workload, ctx, ID)  # an iterator already: no generator of our own
