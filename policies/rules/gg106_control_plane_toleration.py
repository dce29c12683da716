"""A workload tolerates the control-plane taint, or every taint.

Control-plane nodes carry the taint `controlPlaneTaint` (`maip.mxsf.io/control-plane`,
seed 003) to keep business pods off them. A pod template that tolerates it, or that
tolerates everything (`operator: Exists` with no key), may be scheduled there, and
with the GPU and usage taints tolerated as well it escapes every pool. Namespaces in
`exclude.namespaces` (kube-system, ...) are not checked.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: ml}
spec:
  tolerations:
  - {key: maip.mxsf.io/node.usage, operator: Equal, value: training, effect: NoSchedule}
  containers:
  - {name: main, image: nginx}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: ml}
spec:
  tolerations:
  - {operator: Exists}
  containers:
  - {name: main, image: nginx}
```
"""

from collections.abc import Iterator

from policies.engine import Context
from policies.findings import Problem, Severity, join_pointer
from policies.workload import Workload

ID = "GG106"
SLUG = "control-plane-toleration"
SEVERITY = Severity.WARNING


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    taint = ctx.policy.data.get("controlPlaneTaint") or ""
    for pod_set in workload.pod_sets:
        tolerations = pod_set.spec.get("tolerations")
        if not isinstance(tolerations, list):
            continue
        for i, tol in enumerate(tolerations):
            if not isinstance(tol, dict):
                continue
            key = tol.get("key") or ""
            if not key and tol.get("operator") == "Exists":
                yield Problem(f"{workload} pod set {pod_set.name}: toleration {i} (operator Exists, no key) "
                              f"tolerates every taint, including the control-plane taint {taint}",
                              join_pointer(pod_set.spec_path, "tolerations", i))
            elif taint and key == taint:
                yield Problem(f"{workload} pod set {pod_set.name}: toleration {i} tolerates the "
                              f"control-plane taint {taint}",
                              join_pointer(pod_set.spec_path, "tolerations", i))
