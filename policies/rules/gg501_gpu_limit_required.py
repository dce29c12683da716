"""A GPU is requested without a limit.

Extended resources such as `nvidia.com/gpu` cannot be overcommitted: the API server
refuses a pod that requests one without a limit ("Limit must be set for non
overcommitable resources"). For a Volcano Job or a PyTorchJob the job object itself is
accepted, and then no pod is ever created. Setting only the limit is fine: the request
defaults to it.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: cuda}
spec:
  containers:
  - name: main
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {nvidia.com/gpu: 1}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: cuda}
spec:
  containers:
  - name: main
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      requests: {nvidia.com/gpu: 1}
```
"""

from collections.abc import Iterator

from policies.engine import Context
from policies.findings import Problem, Severity, join_pointer
from policies.gpu import spec_gpu_resources
from policies.workload import Workload

ID = "GG501"
SLUG = "gpu-limit-required"
SEVERITY = Severity.ERROR


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    for pod_set in workload.pod_sets:
        for entry in spec_gpu_resources(pod_set, ctx.policy):
            if entry.request is not None and entry.limit is None:
                yield Problem(f"{workload} pod set {pod_set.name} container {entry.container}: requests "
                              f"{entry.resource}: {entry.request} but sets no limit for it; the API server "
                              "refuses the pods (limit must be set for non-overcommitable resources)",
                              join_pointer(pod_set.spec_path + entry.path, "requests", entry.resource))
