"""YuniKorn's gang scheduling, as its Kubernetes shim reads it off the pods.

Upstream: apache/yunikorn-k8shim (read at 23b6b47): ``GetTaskGroupsFromAnnotation`` and
``validateTaskGroupResources`` (pkg/cache/utils.go), ``GetSchedulingPolicyParam`` and
``GeneratePlaceholderName`` (pkg/cache/gang_utils.go), ``newPlaceholder``
(pkg/cache/placeholder.go), ``GetApplicationIDFromPod`` and ``GetQueueNameFromPod``
(pkg/common/utils); apache/yunikorn-core (read at be3bb48) for the placeholder timer.

A YuniKorn application (the pods of one application ID) declares its gang as task groups,
in the pod annotation ``yunikorn.apache.org/task-groups``: a JSON list of ``{name,
minMember, minResource, nodeSelector, tolerations, affinity, topologySpreadConstraints,
labels, annotations}``; each pod names its group in ``yunikorn.apache.org/task-group-name``.
The shim takes the task groups of the application's first pod and, before any of its pods
is placed, creates ``minMember`` placeholder pods per group, each requesting (and limited
to) ``minResource`` with the group's placement; the real pods then take the placeholders'
places. ``gangSchedulingStyle`` (in ``yunikorn.apache.org/schedulingPolicyParameters``)
says what happens when the placeholders are not all placed within
``placeholderTimeoutInSeconds`` (15 minutes by default; the timer starts when the first
placeholder is placed): ``Hard`` fails the application, ``Soft`` (the default) drops the
placeholders and places the pods one by one.

Nothing here is refused by YuniKorn at admission: an annotation the shim cannot read is
ignored (an event on the pod, and no gang), and a placeholder pod the API server refuses
turns the gang off as well (the application falls back to normal scheduling). This
module reads all of it the way the shim does (Go's JSON decoding included: field names
matched without regard to case, the last duplicate winning, numbers kept as written), and
says which gang, if any, the feasibility check may judge (:func:`gang_of`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from policies import specfacts
from policies.config import Policy
from policies.findings import listed, quoted
from policies.kinds import (
    COMMON_QUEUES,
    YUNIKORN_QUEUE_ANNOTATION,
    YUNIKORN_SCHEDULER,
    YUNIKORN_TASK_GROUPS,
)
from policies.patch import apply_patch
from policies.pointers import join_pointer
from policies.taskgroups import (
    APP_ID_LABEL,
    DEFAULT_TIMEOUT_SECONDS,
    Definition,
    Parameters,
    TaskGroup,
    _qn,
    _qr,
    placeholder_refusal,
    read_parameters,
    read_task_groups,
)
from policies.usage import product_patch, usage_patch
from policies.workload import MAX_POD_SETS, PodSet, ShapeError, Workload, build_workload

__all__ = ["TASK_GROUPS", "TASK_GROUP_NAME", "POLICY_PARAMETERS", "DEFAULT_TIMEOUT_SECONDS", "TaskGroup",
           "Definition", "Parameters", "Gang", "read_task_groups", "read_parameters", "gang_of",
           "placeholder_pod_sets"]

TASK_GROUPS = YUNIKORN_TASK_GROUPS
TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
POLICY_PARAMETERS = "yunikorn.apache.org/schedulingPolicyParameters"
# Where the shim reads a pod's application ID, in its order (GetApplicationIDFromPod).
APP_ID_SOURCES = (("labels", APP_ID_LABEL), ("annotations", APP_ID_LABEL), ("labels", "applicationId"),
                  ("labels", "spark-app-selector"))
# ... and its queue (GetQueueNameFromPod): the kinds table's YuniKorn queue sources, in order.
QUEUE_SOURCES = tuple(s.in_metadata for s in COMMON_QUEUES if s.system == "yunikorn" and s.in_metadata)
# The annotation that marks YuniKorn's placeholder pods (GetPlaceholderFlagFromPodSpec; the
# second is the one before YuniKorn 1.6).
PLACEHOLDER_FLAGS = ("internal.yunikorn.apache.org/placeholder", "yunikorn.apache.org/placeholder")
_DOMAIN = "yunikorn.apache.org/"
_ROLE = "; the API server refuses YuniKorn's placeholder pods"


# -- a workload's YuniKorn applications -----------------------------------------------------------

@dataclass
class Gang:
    """What YuniKorn makes of a workload's task groups.

    ``problems``: (message, JSON Pointer) of what the shim ignores or cannot match, for
    GG407. ``groups``: the gang the feasibility check may judge, the placeholders of these
    task groups (None when there is none, or when anything about it is unsure: pod sets
    of several applications, or without an application ID, definitions that differ or
    that gpugate cannot read for sure, placeholders the API server may refuse)."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    groups: tuple[TaskGroup, ...] | None = None
    hard: bool = False
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    path: str = ""           # the task-groups annotation the placeholders are judged from


_GANG_KEY = "yunikorn gang"
# Near misses of the keys the shim reads (letters only, lower case): the Spark example of
# YuniKorn's own gang scheduling page writes yunikorn.apache.org/taskGroupName and taskGroup.
_NEAR_MISSES = {"taskgroups": TASK_GROUPS, "taskgroup": TASK_GROUPS, "taskgroupname": TASK_GROUP_NAME,
                "schedulingpolicyparameters": POLICY_PARAMETERS, "schedulingpolicyparams": POLICY_PARAMETERS}


def gang_of(workload: Workload) -> Gang | None:
    """YuniKorn's reading of the workload's task groups; None when no pod set YuniKorn
    schedules carries a ``yunikorn.apache.org/`` annotation (nearly every workload)."""
    found = workload.memo.get(_GANG_KEY)
    if found is None:
        found = workload.memo[_GANG_KEY] = (_gang(workload),)
    return found[0]  # type: ignore[no-any-return]


def _yunikorn_sets(sets: list[PodSet]) -> list[PodSet]:
    return [p for p in sets if p.scheduler == YUNIKORN_SCHEDULER]


def _gang(workload: Workload) -> Gang | None:
    sets = _yunikorn_sets(workload.pod_sets)
    if not any(key.startswith(_DOMAIN) for p in sets for key in p.annotations):
        return None
    if any(p.annotations.get(flag) == "true" for p in sets for flag in PLACEHOLDER_FLAGS):
        # one of YuniKorn's own placeholder pods (a bare Pod the webhook sees as any other):
        # it carries the application's annotations, judged with the pods that made it; it is
        # judged as the one pod it is, not as the gang again
        return None
    gang = Gang()
    apps: dict[str, list[PodSet]] = {}
    for p in sets:
        apps.setdefault(_app_id(p) or "", []).append(p)
        gang.problems.extend(_annotation_problems(p))
    for app_id, members in apps.items():
        gang.problems.extend(_app_problems(workload, app_id or None, members))
    _judged(workload, gang)
    return gang


def _value(pod_set: PodSet, sources: tuple[tuple[str, str], ...]) -> str:
    for where, key in sources:
        value = (pod_set.labels if where == "labels" else pod_set.annotations).get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _app_id(pod_set: PodSet) -> str:
    return _value(pod_set, APP_ID_SOURCES)


def _annotation(pod_set: PodSet, key: str) -> str:
    return join_pointer(pod_set.path, "metadata", "annotations", key)


def _definition(pod_set: PodSet) -> Definition | None:
    text = pod_set.annotations.get(TASK_GROUPS)
    return read_task_groups(text) if isinstance(text, str) and text else None


def _annotation_problems(pod_set: PodSet) -> Iterator[tuple[str, str]]:
    """Problems of one pod set's own annotations: near-miss keys, parameters."""
    for key in pod_set.annotations:
        if key.startswith(_DOMAIN):
            meant = _NEAR_MISSES.get("".join(c for c in key[len(_DOMAIN):].lower() if c.isalpha()))
            if meant is not None and meant != key:
                yield (f"annotation {quoted(key)} is not read by YuniKorn: it reads {meant}",
                       _annotation(pod_set, key))
    text = pod_set.annotations.get(POLICY_PARAMETERS)
    if isinstance(text, str):
        for problem in read_parameters(text).problems:
            yield f"schedulingPolicyParameters: {problem}", _annotation(pod_set, POLICY_PARAMETERS)


def _app_problems(workload: Workload, app_id: str | None, members: list[PodSet]) -> Iterator[tuple[str, str]]:
    """Problems of the pod sets of one application (one application ID, or none)."""
    definitions = {id(p): d for p in members if (d := _definition(p)) is not None}
    if not definitions:
        return
    read = [d for d in definitions.values() if d.read]
    first = next(p for p in members if id(p) in definitions)
    for p in members:
        d = definitions.get(id(p))
        path = _annotation(p, TASK_GROUPS)
        if d is None:
            yield (f"no task groups, while pod set {_qr(first.name)} of the same application has some: if "
                   "one of these pods comes first, YuniKorn reserves no placeholders",
                   join_pointer(p.path, "metadata"))
            continue
        if d.ignored:
            yield (f"task-groups annotation: {d.ignored}; YuniKorn ignores all its task groups (no "
                   "placeholders, no gang)", path)
            continue
        if d.unsure:
            continue
        first_d = definitions[id(first)]
        if p is not first and first_d.read and d != first_d:
            yield (f"task groups differ from those of pod set {_qr(first.name)} of the "
                   "same application: YuniKorn takes the first pod's, whichever it is", path)
        yield from _definition_problems(p, d, app_id, path)
        if d.groups and not p.annotations.get(TASK_GROUP_NAME):
            yield (f"{len(d.groups)} task groups declared, and these pods name none ({TASK_GROUP_NAME}): "
                   "they take no placeholder, which holds its resources until the placeholder timeout", path)
        if app_id is None and d.groups and not workload.labels.get(APP_ID_LABEL):
            yield ("task groups without an application ID (label applicationId or "
                   "yunikorn.apache.org/app-id): YuniKorn files the pods under an application it names, "
                   "shared by the namespace", path)
    if not read:
        return
    declared = {name for d in read for name in d.names}
    for p in members:
        name = p.annotations.get(TASK_GROUP_NAME)
        if isinstance(name, str) and name and name not in declared:
            yield (f"task group {_qr(name)} is none of the {len(declared)} declared "
                   f"({listed(sorted(_qn(n) for n in declared))}): these pods take no "
                   "placeholder", _annotation(p, TASK_GROUP_NAME))


def _definition_problems(pod_set: PodSet, d: Definition, app_id: str | None,
                         path: str) -> Iterator[tuple[str, str]]:
    counts = Counter(d.names)
    for name in sorted(n for n, count in counts.items() if count > 1):
        yield (f"task group {_qr(name)} is declared {counts[name]} times: "
               "YuniKorn matches pods to placeholders by name alone", path)
    queue = _value(pod_set, QUEUE_SOURCES)
    for group in d.groups:
        reason = placeholder_refusal(group, app_id, queue)
        if reason:
            yield (f"task group {_qr(group.name)}: {reason}{_ROLE}; it then places "
                   "the pods without a gang", path)


def _judged(workload: Workload, gang: Gang) -> None:
    """Set ``gang.groups`` when the whole gang is one application's, whose placeholders
    gpugate can judge: every pod set with pods is YuniKorn's, carries the same application
    ID and the same task groups (read for sure: unique names, placeholders the API server
    admits) and the same scheduling policy parameters."""
    placed = [p for p in workload.gang_pod_sets if p.gang_count > 0 or p.replicas > 0]
    if not placed or _yunikorn_sets(placed) != placed:
        return
    app_ids = {_app_id(p) for p in placed}
    texts = {p.annotations.get(TASK_GROUPS) for p in placed}
    params = {(r.hard, r.timeout) for r in (read_parameters(p.annotations.get(POLICY_PARAMETERS) or "")
                                            for p in placed)}
    if len(app_ids) != 1 or "" in app_ids or len(params) != 1 or any(not isinstance(t, str) for t in texts):
        return
    definitions = [read_task_groups(t) for t in texts if isinstance(t, str)]
    d = definitions[0]
    if any(not x.read or x != d for x in definitions) or not d.groups:
        return
    names = d.names
    if len(set(names)) != len(names) or len(names) > MAX_POD_SETS:
        return  # (as many placeholder pod sets as gpugate judges pod sets of a workload)
    app_id = next(iter(app_ids))
    queues = {_value(p, QUEUE_SOURCES) for p in placed}
    if any(placeholder_refusal(g, app_id, q) != "" for g in d.groups for q in queues):
        return
    gang.groups = d.groups
    gang.hard, gang.timeout = next(iter(params))
    gang.path = _annotation(placed[0], TASK_GROUPS)


def placeholder_pod_sets(workload: Workload, policy: Policy) -> tuple[list[PodSet], bool, int] | None:
    """(the placeholder pods of the judged gang as pod sets, one per task group; whether its
    style is Hard; its placeholder timeout in seconds), or None when there is no gang to
    judge (see :class:`Gang`). Remembered on the workload, per policy."""
    key = ("yunikorn placeholders", id(policy))
    found = workload.memo.get(key)
    if found is None:
        found = workload.memo[key] = (_placeholder_pod_sets(workload, policy),)
    return found[0]  # type: ignore[no-any-return]


def _placeholder_pod_sets(workload: Workload, policy: Policy) -> tuple[list[PodSet], bool, int] | None:
    gang = gang_of(workload)
    if gang is None or gang.groups is None:
        return None
    placed = [p for p in workload.gang_pod_sets if p.gang_count > 0 or p.replicas > 0]
    app_id, queue = _app_id(placed[0]), _value(placed[0], QUEUE_SOURCES)
    sets = []
    for group in gang.groups:
        resources = {name: text for name, text, _ in group.resources or () if name}
        container = {"name": "pause", "resources": {"requests": resources, "limits": dict(resources)}}
        spec: dict[str, Any] = {"schedulerName": YUNIKORN_SCHEDULER, "containers": [container],
                                **dict(group.placement)}
        labels = {**dict(group.labels), APP_ID_LABEL: app_id, YUNIKORN_QUEUE_ANNOTATION: queue}
        tolerations = _tolerations_added(spec, labels, workload.namespace, policy)
        if tolerations is None:
            return None
        if tolerations:
            spec["tolerations"] = [*spec.get("tolerations", []), *tolerations]
        pod_set = PodSet(f"placeholders {quoted(group.name)}", group.min_member,
                         group.min_member, True, {"spec": spec}, gang.path, YUNIKORN_SCHEDULER)
        facts = specfacts.spec_facts(spec)
        if facts is not None:
            pod_set.facts = facts
        sets.append(pod_set)
    return sets, gang.hard, gang.timeout


def _tolerations_added(spec: dict[str, Any], labels: dict[str, str], namespace: str | None,
                       policy: Policy) -> list[Any] | None:
    """The tolerations gpugate's own webhook adds to a placeholder pod (a bare Pod, which
    it judges and mutates as any other): the usage pool's (GG101) and the GPU product's
    (GG102). Only what widens where it may run: the usage affinity, which only narrows
    it, is left out, so a "never" stays a proof. None when the pod cannot be modelled."""
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "placeholder", "namespace": namespace,
                                                          "labels": labels}, "spec": spec}
    try:
        pod = build_workload(doc)
    except ShapeError:
        return None
    if pod is None:
        return None
    ops = [op for patch in (*usage_patch(pod, policy), *product_patch(pod, policy)) for op in patch.ops]
    if not ops:
        return []
    mutated = apply_patch(doc, ops)["spec"].get("tolerations")
    before = spec.get("tolerations", [])
    return mutated[len(before):] if isinstance(mutated, list) else []
