"""A fractional or negative GPU quantity.

Extended resources are counted in whole devices: `nvidia.com/gpu: 0.5` or `500m` is
refused by the API server ("must be an integer"), and so is a negative amount.
Sharing a GPU is done with a device plugin's own resource (MIG, time-slicing
replicas), not with fractions.

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
      limits: {nvidia.com/gpu: 0.5}
```
"""

from collections.abc import Iterator

from policies.engine import Context
from policies.findings import Problem, Severity, join_pointer
from policies.gpu import spec_gpu_resources
from policies.workload import Workload

ID = "GG503"
SLUG = "gpu-whole-number"
SEVERITY = Severity.ERROR


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    for pod_set in workload.pod_sets:
        for entry in spec_gpu_resources(pod_set, ctx.policy):
            for part, raw, amount in (("requests", entry.request, entry.request_amount),
                                      ("limits", entry.limit, entry.limit_amount)):
                if amount is None:
                    continue  # not set, or not a quantity (GG504 reports it)
                # the numerator carries the sign (Fractions keep a positive denominator)
                problem = ("negative" if amount.numerator < 0
                           else "fractional" if amount.denominator != 1 else "")
                if problem:
                    yield Problem(f"{workload} pod set {pod_set.name} container {entry.container}: "
                                  f"{entry.resource} {part} {raw} is {problem}; GPUs are whole devices",
                                  join_pointer(pod_set.spec_path + entry.path, part, entry.resource))
