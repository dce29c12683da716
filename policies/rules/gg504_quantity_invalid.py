"""A resource quantity that does not parse.

Kubernetes quantities are a number with an optional suffix: `500m`, `2`, `1.5Gi`,
`1e3`. Anything else (`2 GB`, `1.5 cpu`, `abc`) is refused by the API server, and for
a workload kind that embeds pod templates it is refused only when the controller
tries to create the pods, long after `kubectl apply` said "created". The message names
the resource and the value. A null quantity (`cpu: null`) is not a finding: the API server
reads it as unset.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: ok}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: {cpu: 500m, memory: 1.5Gi}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: {cpu: 500m, memory: 2 GB}
```
"""

from policies.config import Policy
from policies.context import Context, Sees
from policies.findings import Problem, Severity, SpecProblem, bounded_words, split_pointer
from policies.spec_problems import pod_set_problems
from policies.workload import PodSet, Workload

ID = "GG504"
SLUG = "quantity-invalid"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # the pod spec alone decides (the policy does not): no facts token in the key
    return pod_set_problems(workload, ctx.policy, ID, _in_spec)


def _in_spec(pod_set: PodSet, policy: Policy) -> list[SpecProblem]:
    base = len(pod_set.spec_path)  # the errors' pointers start with it
    return [SpecProblem(f": {_message(path, reason)}", path[base:])
            for path, reason in pod_set.request_errors]


def _message(path: str, reason: str) -> str:
    """Never empty: the resource (the pointer's last token) and why its value is refused."""
    tokens = split_pointer(path)
    where = f"{'.'.join(tokens[-2:])}: " if len(tokens) >= 2 else ""
    why = " ".join(str(reason).split()) or "not a quantity"
    return bounded_words(f"{where}{why}")
