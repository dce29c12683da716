"""The kind's own admission webhook or schema would refuse the object.

Each project validates its own kinds when they are submitted: Volcano's admission webhook,
KubeRay's validation, the training-operator's and Trainer's webhooks, JobSet's and
LeaderWorkerSet's webhooks, KAI Scheduler's PodGroup and Queue webhooks, and the CRD schemas.
gpugate refuses first, in the linter and at admission, what those checks would refuse and can
be decided from the object alone, with the project's reason in plain words. Kinds whose
webhook runs these checks on CREATE only (Volcano Jobs, JobSets, TrainingRuntimes) are not
judged again on UPDATE. `docs/kinds.md` lists every upstream check and the rule that covers
it, or why it cannot be decided before admission.

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
from policies.findings import SHORT_QUOTED_CHARS, Problem, Severity, bounded_words
from policies.validation import validator
from policies.workload import Workload

ID = "GG601"
SLUG = "kind-invalid"
SEVERITY = Severity.ERROR
SEES = Sees(kinds_with="validate")


# what kubectl shows of a warning: "<ID> <slug>: <message>", at most 256 characters
_ROOM = 256 - len(f"{ID} {SLUG}: ")


def check(workload: Workload, ctx: Context) -> Iterator[Problem]:
    if ctx.change is not None and not workload.spec.validate_on_update:
        return  # an UPDATE the kind's own webhook judges by its immutability rules alone
    for refusal in validator(workload.spec.validate)(workload.doc):
        yield Problem(_fitted(refusal.message), refusal.path)


def _fitted(message: str) -> str:
    """A validator's message as is when it fits; else the long words in it (names from the
    object, hostile ones too) bounded: never cut."""
    if len(message) <= _ROOM:
        return message
    bounded = bounded_words(message)
    return bounded if len(bounded) <= _ROOM else bounded_words(message, SHORT_QUOTED_CHARS)
