"""A queue name its queue system can never use.

Volcano Queues, KAI Queues (both cluster-scoped objects) and Kueue LocalQueues are
Kubernetes objects, so their names are DNS-1123 subdomains: lower-case letters, digits, `-`
and `.`, starting and ending with an alphanumeric character, at most 253 characters (Kueue's
webhook refuses a `kueue.x-k8s.io/queue-name` that is not one, on the kinds whose integration
it runs, `queues.kueueFrameworks`, in the namespaces it manages,
`queues.kueueManagedJobsNamespaceSelector`: where that depends on a namespace label other
than its name, not judged). A job naming `ML_Team` can never find its queue.

YuniKorn queues are no objects but paths in its configuration, `root.team_a.ML`: each part
of letters, digits and `_`, `-`, `:`, `#`, `/`, `@`, at most 64 characters. A name without
the `root.` prefix is one queue under the placement rule's parent, its dots made `_dot_`.
YuniKorn reads the pod's label `yunikorn.apache.org/queue`, else the annotation of that key,
else the label `queue` (which KubeRay overwrites with the object's label
`yunikorn.apache.org/queue`), and only for pods it schedules (`schedulerName: yunikorn`): the
one it reads is judged, as a warning, since its placement rules decide what a bad name does
(the default `provided` rule rejects the application; an earlier rule may place it
elsewhere).

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
from policies.kinds import YUNIKORN_QUEUE_ANNOTATION, YUNIKORN_QUEUE_LABEL, YUNIKORN_SCHEDULER
from policies.names import DNS1123_SUBDOMAIN
from policies.pointers import join_pointer
from policies.workload import PodSet, Workload

ID = "GG304"
SLUG = "queue-name-format"
SEVERITY = Severity.ERROR
SEES = Sees(kinds_with="queues")
OPTIONS = ("queues.kueueFrameworks", "queues.kueueManagedJobsNamespaceSelector")

MAX_LENGTH = 253

# YuniKorn (apache/yunikorn-core pkg/common/configs QueueNameRegExp, read at be3bb48): one
# part of a queue path. Fully qualified paths start with "root."; any other name is one
# queue, its dots replaced (pkg/scheduler/placement, the provided rule).
YUNIKORN_PART = re.compile(r"[a-zA-Z0-9_:#/@-]{1,64}")
YUNIKORN_MAX_PART = 64
YUNIKORN_ROOT = "root."
YUNIKORN_DOT = "_dot_"
# The pod label read first (apache/yunikorn-k8shim GetQueueNameFromPod, read at 23b6b47):
# before the annotation of the same key, then the plain label ``queue``.
YUNIKORN_CANONICAL_LABEL = "yunikorn.apache.org/queue"
_YUNIKORN_CHARACTERS = "letters, digits, '_', '-', ':', '#', '/' and '@'"


def check(workload: Workload, ctx: Context) -> list[Problem]:
    problems: list[Problem] = []
    for queue in workload.queues:
        if not queue.explicit or not queue.name or queue.system == "yunikorn":
            continue  # an empty name means "the default queue"; YuniKorn's are paths (below)
        if queue.system == "kueue" and not workload.kueue_reads_queue(ctx.policy.data["queues"]):
            continue  # a label Kueue ignores (its webhook too), or may
        if len(queue.name) > MAX_LENGTH:
            problems.append(Problem(f"{queue.system} queue name is {len(queue.name)} characters long, more "
                                    f"than {MAX_LENGTH} (at {bounded_words(field_name(queue.path))})",
                                    queue.path))
        elif not _is_subdomain(queue.name):
            where = bounded_words(field_name(queue.path))  # only for a finding: most names are fine
            problems.append(Problem(f"{queue.system} queue name {quoted_repr(queue.name)} at {where} is not "
                                    "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
                                    "alphanumeric at both ends)", queue.path))
    for pod_set in workload.pod_sets:  # a loop, not a comprehension: this runs on every object
        if pod_set.scheduler == YUNIKORN_SCHEDULER:
            problems.extend(_yunikorn_problems(workload))
            break
    return problems


def _is_subdomain(name: str) -> bool:
    """Whether ``name`` (at most MAX_LENGTH long) is a DNS-1123 subdomain."""
    return DNS1123_SUBDOMAIN.fullmatch(name) is not None


def _yunikorn_problems(workload: Workload) -> list[Problem]:
    """The YuniKorn queue each pod set YuniKorn schedules names, when it is no queue path;
    each name once."""
    problems: list[Problem] = []
    judged: set[str] = set()
    for pod_set in workload.pod_sets:
        if pod_set.scheduler != YUNIKORN_SCHEDULER:
            continue  # nobody else reads these keys (the label ``queue`` is anyone's)
        found = _yunikorn_queue(pod_set, workload)
        if found is None or found[0] in judged:
            continue
        name, path = found
        judged.add(name)
        reason = yunikorn_queue_problem(name)
        if reason:
            problems.append(Problem(
                f"yunikorn queue {quoted_repr(name)} at {bounded_words(field_name(path))} is not a YuniKorn "
                f"queue path: {reason}; YuniKorn's provided placement rule rejects the application, "
                "and no other rule places it in that queue", path, severity=Severity.WARNING))
    return problems


def _yunikorn_queue(pod_set: PodSet, workload: Workload) -> tuple[str, str] | None:
    """(name, JSON Pointer) of the queue YuniKorn reads for the pod set's pods, or None."""
    base = pod_set.path
    # A controller may write the plain label from the object's own label of the canonical
    # key (KubeRay does, for its YuniKorn pods): then the template's is not what is read.
    replaced = bool(base) and bool(workload.labels.get(YUNIKORN_CANONICAL_LABEL))
    for where, key in (("labels", YUNIKORN_CANONICAL_LABEL), ("annotations", YUNIKORN_QUEUE_ANNOTATION),
                       ("labels", YUNIKORN_QUEUE_LABEL)):
        if replaced and key == YUNIKORN_QUEUE_LABEL:
            break
        value = (pod_set.labels if where == "labels" else pod_set.annotations).get(key)
        if isinstance(value, str) and value:
            return value, join_pointer(base, "metadata", where, key)
        # an empty (or malformed: GG002's) value is skipped, as YuniKorn skips an empty one
    return None


def yunikorn_queue_problem(name: str) -> str:
    """Why ``name`` is no YuniKorn queue path ("" when it is one)."""
    if name.startswith(YUNIKORN_ROOT):
        for part in name.split("."):
            if not part:
                return "it has an empty part (two dots in a row, or one at the end)"
            if len(part) > YUNIKORN_MAX_PART:
                return (f"part {quoted_repr(part)} is {len(part)} characters long, "
                        f"more than {YUNIKORN_MAX_PART}")
            if YUNIKORN_PART.fullmatch(part) is None:
                return f"part {quoted_repr(part)} has a character other than {_YUNIKORN_CHARACTERS}"
        return ""
    single = name.replace(".", YUNIKORN_DOT)  # not under root: one queue, its dots replaced
    if len(single) > YUNIKORN_MAX_PART:
        dots = f" once each '.' is '{YUNIKORN_DOT}'" if "." in name else ""
        return f"it is {len(single)} characters long{dots}, more than {YUNIKORN_MAX_PART}"
    if YUNIKORN_PART.fullmatch(single) is None:
        return f"it has a character other than {_YUNIKORN_CHARACTERS} (and '.')"
    return ""
