"""A queue name that is not a valid object name.

Volcano Queues and Kueue LocalQueues are Kubernetes objects, so their names are
DNS-1123 subdomains: lower-case letters, digits, `-` and `.`, starting and ending with
an alphanumeric character, at most 253 characters. A job naming `ML_Team` can never
find its queue.

```yaml pass
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  queue: ml-team.a100
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers: [{name: main, image: busybox}]
```

```yaml fail
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  queue: ML_Team
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers: [{name: main, image: busybox}]
```
"""

import re

from policies.context import Context, Sees
from policies.findings import Problem, Severity, bounded_words, field_name, quoted_repr
from policies.workload import Workload

ID = "GG304"
SLUG = "queue-name-format"
SEVERITY = Severity.ERROR
SEES = Sees(kinds_with="queues")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
MAX_LENGTH = 253


def check(workload: Workload, ctx: Context) -> list[Problem]:
    problems: list[Problem] = []
    for queue in workload.queues:
        if not queue.explicit or not queue.name:
            continue  # an empty name means "the default queue" to the controllers
        if len(queue.name) > MAX_LENGTH:
            problems.append(Problem(f"{queue.system} queue name is {len(queue.name)} characters long, more "
                                    f"than {MAX_LENGTH} (at {bounded_words(field_name(queue.path))})",
                                    queue.path))
        elif not _is_subdomain(queue.name):
            where = bounded_words(field_name(queue.path))  # only for a finding: most names are fine
            problems.append(Problem(f"{queue.system} queue name {quoted_repr(queue.name)} at {where} is not "
                                    "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
                                    "alphanumeric at both ends)", queue.path))
    return problems


def _is_subdomain(name: str) -> bool:
    """Whether ``name`` (at most MAX_LENGTH long) is a DNS-1123 subdomain."""
    return DNS1123_SUBDOMAIN.fullmatch(name) is not None
