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

ID = "GG501"
SLUG = "gpu-limit-required"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)
OPTIONS = (GPU_RESOURCES,)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # the GPU resources alone: no cpu or memory amount, unless the policy names one a GPU
    return pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec,
                            blind=gpu_facts_blind(ctx.policy))


def _in_spec(pod_set: PodSet, policy: Policy) -> Iterator[SpecProblem]:
    for entry in spec_gpu_resources(pod_set, policy):
        if entry.request is not None and entry.limit is None:
            yield SpecProblem(f" container {quoted(entry.container, SHORT_QUOTED_CHARS)}: {entry.resource} "
                              f"request {quoted(entry.request, SHORT_QUOTED_CHARS)} has no limit; the API "
                              "server refuses such pods (limit must be set for non-overcommitable resources)",
                              join_pointer(entry.path, "requests", entry.resource))
