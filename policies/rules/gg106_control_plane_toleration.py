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

from policies.config import Policy
from policies.context import Context, Sees
from policies.findings import Problem, Severity, SpecProblem, join_pointer
from policies.options import Option
from policies.spec_problems import pod_set_problems
from policies.workload import PodSet, Workload

ID = "GG106"
SLUG = "control-plane-toleration"
SEVERITY = Severity.WARNING
SEES = Sees(pod_sets=True)

CONTROL_PLANE_TAINT = Option("controlPlaneTaint", {"type": "string"}, "maip.mxsf.io/control-plane",
                             "Taint key of the control-plane nodes no workload may tolerate (empty: off).")
OPTIONS = (CONTROL_PLANE_TAINT,)


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # the tolerations alone: no requested amount is read
    return pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec, blind=True)


def _in_spec(pod_set: PodSet, policy: Policy) -> Iterator[SpecProblem]:
    taint = CONTROL_PLANE_TAINT.value(policy) or ""
    tolerations = pod_set.spec.get("tolerations")
    if not isinstance(tolerations, list):
        return
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, dict):
            continue
        key = tol.get("key") or ""
        if not key and tol.get("operator") == "Exists":
            yield SpecProblem(f": toleration {i} (operator Exists, no key) tolerates every taint, including "
                              f"the control-plane taint {taint}", join_pointer("", "tolerations", i))
        elif taint and key == taint:
            yield SpecProblem(f": toleration {i} tolerates the control-plane taint {taint}",
                              join_pointer("", "tolerations", i))
