"""A file or document that does not parse as YAML (or JSON).

Reported by the front end that reads the text, with the line and column where the
parser gave up; the run goes on with the next file. The webhook never sees YAML, so
for it this rule does not exist.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: ok}
spec:
  containers: [{name: main, image: busybox}]
```

```yaml fail
apiVersion: v1
kind: Pod
metadata:
  name: broken
  labels: {app: [unclosed
```
"""

from policies.findings import Severity

ID = "GG001"
SLUG = "invalid-yaml"
SEVERITY = Severity.ERROR
STAGE = "input"
