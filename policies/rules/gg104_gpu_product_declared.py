"""A GPU workload pins the GPU product it wants.

GPU nodes are tainted with their product (`nvidia.com/gpu.product=NVIDIA-H20:NoSchedule`,
seed 003): a pod that names no product tolerates none of them and waits forever, or,
where a node is untainted, lands on whatever card is free (a small model on the big
cards). Each GPU pod template should pin a product with a `nodeSelector` or a required
node affinity on the product label of its resource (`gpu.resources`), or the workload
carries that label (`nvidia.com/gpu.product: NVIDIA-H20`) and GG102 adds the toleration.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: h20}
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H20}
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: any-gpu}
spec:
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```
"""

from collections.abc import Iterator

from policies.engine import Context
from policies.findings import Problem, Severity
from policies.gpu import gpu_pod_sets, gpu_requests
from policies.quantity import format_quantity
from policies.usage import pinned_products
from policies.workload import Workload

ID = "GG104"
SLUG = "gpu-product-declared"
SEVERITY = Severity.WARNING


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    resources = ctx.policy.gpu_resources
    for pod_set in gpu_pod_sets(workload, ctx.policy):
        if pinned_products(pod_set, workload, ctx.policy):
            continue
        requested = gpu_requests(pod_set, ctx.policy)
        wanted = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in requested.items())
        labels = " or ".join(dict.fromkeys(resources[r] for r in requested))
        yield Problem(f"{workload} pod set {pod_set.name} requests {wanted} per pod but pins no GPU "
                      f"product: set nodeSelector {labels} (or the workload label)", pod_set.spec_path)
