"""A Kubernetes object whose fields have the wrong type or shape where gpugate's
workload model needs them.

Examples: `replicas: "two"`, `containers` that is a mapping instead of a list, a label
value that is a number (`tier: 1` must be quoted). The API server would refuse the
object, so this is an error. A `null` is not a wrong type: `labels:`,
`annotations:` or a label value left empty (`tier: null`), and a `null` quantity, are
read as unset, as the API server reads them. A workload with more than 256 pod sets (Volcano tasks,
Ray worker groups, replica specs) is refused here too: no real job has that many, and
judging one would hold the webhook for seconds. A YAML document with no `apiVersion`/`kind` (a Helm values
file, a CI workflow found while walking a directory) is not a finding: it is skipped
and counted as skipped in the summary.

```yaml pass
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: main, image: nginx}]
```

```yaml fail
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: two
  template:
    spec:
      containers: [{name: main, image: nginx}]
```
"""

from policies.findings import Severity

ID = "GG002"
SLUG = "invalid-object"
SEVERITY = Severity.ERROR
STAGE = "input"
