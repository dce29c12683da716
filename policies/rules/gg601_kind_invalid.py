"""The kind's own admission webhook or schema would refuse the object.

Each project validates its own kinds when they are submitted: Volcano's admission webhook,
KubeRay's validation, the training-operator's and Trainer's webhooks, JobSet's and
LeaderWorkerSet's webhooks, and the CRD schemas. gpugate refuses first, in the linter and at
admission, what those checks would refuse and can be decided from the object alone, with the
project's reason in plain words. `docs/kinds.md` lists every upstream check and the rule
that covers it, or why it cannot be decided before admission.

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers:
        - name: main
          image: busybox
```

```yaml fail
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  minAvailable: 1
  tasks: []
```
"""

from collections.abc import Iterator

from policies.context import Context, Sees
from policies.findings import Problem, Severity
from policies.validation import validator
from policies.workload import Workload

ID = "GG601"
SLUG = "kind-invalid"
SEVERITY = Severity.ERROR
SEES = Sees(kinds_with="validate")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    for refusal in validator(workload.spec.validate)(workload.doc):
        yield Problem(refusal.message, refusal.path)
