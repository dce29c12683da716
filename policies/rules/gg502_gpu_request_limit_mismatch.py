"""A GPU request differs from its limit.

For extended resources such as `nvidia.com/gpu` the API server requires request ==
limit; the pods are refused otherwise ("must be equal to ... limit"). For a job kind the
object is accepted and its pods are not. Quantities are compared exactly, so `1` and
`"1"` are equal.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: cuda}
spec:
  containers:
  - name: main
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      requests: {nvidia.com/gpu: "2"}
      limits: {nvidia.com/gpu: 2}
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
      limits: {nvidia.com/gpu: 2}
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

ID = "GG502"
SLUG = "gpu-request-limit-mismatch"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)
OPTIONS = (GPU_RESOURCES,)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # the GPU resources alone: no cpu or memory amount, unless the policy names one a GPU
    return pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec,
                            blind=gpu_facts_blind(ctx.policy))


def _in_spec(pod_set: PodSet, policy: Policy) -> Iterator[SpecProblem]:
    for entry in spec_gpu_resources(pod_set, policy):
        request, limit = entry.request_amount, entry.limit_amount
        if request is None or limit is None:
            continue  # one is not set, or not a quantity (GG504 reports it)
        if request != limit:
            container = quoted(entry.container, SHORT_QUOTED_CHARS)
            yield SpecProblem(f" container {container}: {entry.resource} request "
                              f"{quoted(entry.request)} differs from limit {quoted(entry.limit)}; for GPUs "
                              "they must be equal",
                              join_pointer(entry.path, "requests", entry.resource))
