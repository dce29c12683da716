"""A resource quantity that does not parse.

Kubernetes quantities are a number with an optional suffix: `500m`, `2`, `1.5Gi`,
`1e3`. Anything else (`2 GB`, `1.5 cpu`, `abc`) is refused by the API server, and for
a workload kind that embeds pod templates it is refused only when the controller
tries to create the pods, long after `kubectl apply` said "created".

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

from collections.abc import Iterator

from policies.engine import Context
from policies.findings import Problem, Severity
from policies.workload import Workload

ID = "GG504"
SLUG = "quantity-invalid"
SEVERITY = Severity.ERROR


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    for pod_set in workload.pod_sets:
        for path, reason in pod_set.request_errors:
            yield Problem(f"{workload} pod set {pod_set.name}: {reason}", path)
