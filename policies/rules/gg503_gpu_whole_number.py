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

from policies.config import Policy
from policies.context import Context, Sees
from policies.findings import (
    SHORT_QUOTED_CHARS,
    Problem,
    Severity,
    SpecProblem,
    join_pointer,
    quoted,
)
from policies.gpu import GPU_RESOURCES, gpu_facts_blind, spec_gpu_resources
from policies.spec_problems import pod_set_problems
from policies.workload import PodSet, Workload

ID = "GG503"
SLUG = "gpu-whole-number"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)
OPTIONS = (GPU_RESOURCES,)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # the GPU resources alone: no cpu or memory amount, unless the policy names one a GPU
    return pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec,
                            blind=gpu_facts_blind(ctx.policy))


def _in_spec(pod_set: PodSet, policy: Policy) -> Iterator[SpecProblem]:
    for entry in spec_gpu_resources(pod_set, policy):
        for part, raw, amount in (("requests", entry.request, entry.request_amount),
                                  ("limits", entry.limit, entry.limit_amount)):
            if amount is None:
                continue  # not set, or not a quantity (GG504 reports it)
            # the numerator carries the sign (Fractions keep a positive denominator)
            problem = ("negative" if amount.numerator < 0
                       else "fractional" if amount.denominator != 1 else "")
            if problem:
                container = quoted(entry.container, SHORT_QUOTED_CHARS)
                yield SpecProblem(f" container {container}: {entry.resource} {part} "
                                  f"{quoted(raw)} is {problem}; GPUs are whole devices",
                                  join_pointer(entry.path, part, entry.resource))
