"""GPU pod templates pinned to a product tolerate that product's taint.

GPU nodes are tainted with their product label (`nvidia.com/gpu.product=NVIDIA-H20:NoSchedule`,
seed 003) so that CPU work and small models stay off them. A pod template pinned to a
product, by a `nodeSelector` or a required node affinity `In` on the product label of a
resource in `gpu.resources`, or by the workload label of that key, needs the toleration
`<product label>=<product>:NoSchedule`, or it can never be scheduled. The webhook injects
it; the linter reports it (fixable with `--fix`). A template pinned only through the
workload label gets it only when it requests GPUs (a CPU-only Ray head stays off GPU nodes).

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: h20, labels: {maip.mxsf.io/usage: training}}
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H20}
  tolerations:
  - {key: nvidia.com/gpu.product, operator: Equal, value: NVIDIA-H20, effect: NoSchedule}
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: h20, labels: {maip.mxsf.io/usage: training}}
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H20}
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```
"""

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, quoted
from policies.gpu import GPU_RESOURCES
from policies.patch import PatchOp
from policies.usage import product_patch
from policies.workload import Workload

ID = "GG102"
SLUG = "gpu-product-toleration"
SEVERITY = Severity.WARNING
SEES = Sees(usage_scope=True)
OPTIONS = (GPU_RESOURCES, "usage.scope", "usage.workloadKey")


def mutate(workload: Workload, ctx: Context) -> list[tuple[Problem, list[PatchOp]]]:
    return [(Problem(f"pod set {quoted(patch.pod_set.name)} is pinned to a GPU product and needs "
                     f"{bounded_words('; '.join(patch.injected))} in "
                     f"{bounded_words(patch.pod_set.spec_path or '/')}",
                     patch.pod_set.spec_path, fixable=True), patch.ops)
            for patch in product_patch(workload, ctx.policy)]
