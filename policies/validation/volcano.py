"""Volcano's admission webhook (``pkg/webhooks/admission``) and CRD schemas: what they refuse
of a Job, PodGroup, Queue and HyperNode, judged on the object alone.

Upstream: volcano-sh/volcano ``pkg/webhooks/admission/{jobs,podgroups,queues,hypernodes}/validate``
and the CRDs of ``config/crd/volcano``. Volcano's mutating webhook runs first, so its defaults
are applied here before judging: a task without a name is ``default<index>``, a job or task
``minAvailable`` of 0 or unset is filled in, a queue ``weight`` of 0 becomes 1. Checks that are
already other rules' are not repeated: a gang minimum above the replicas (GG401), the queue's
name (GG304) and state (GG306), unparseable quantities (GG504).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from policies.names import DNS1123_LABEL as _DNS_LABEL
from policies.names import DNS1123_SUBDOMAIN as _DNS_SUBDOMAIN
from policies.names import QUALIFIED_NAME as _QUALIFIED_NAME
from policies.pointers import join_pointer
from policies.quantity import QuantityError, parse_quantity
from policies.shapes import type_name
from policies.validation import Refusal
from policies.workload import MISSING, resolve

# -- names ------------------------------------------------------------------------------------



def _is_dns_label(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None


def _is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


def _is_qualified_name(name: str) -> bool:
    """Kubernetes' qualified name: an optional DNS-subdomain prefix and ``/``, then a name of at
    most 63 alphanumerics, ``-``, ``_`` and ``.`` starting and ending alphanumeric."""
    prefix, slash, rest = name.rpartition("/")
    if slash and (not prefix or not _is_dns_subdomain(prefix) or "/" in prefix):
        return False
    return 0 < len(rest) <= 63 and _QUALIFIED_NAME.fullmatch(rest) is not None


# -- small readers: a field of the wrong type is GG002's, never a refusal here ----------------

def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    """A string field as Go reads it: unset and ``null`` are the empty string."""
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _set(value: Any) -> bool:
    """Go's "is set" for a pointer field: present and not ``null``."""
    return value is not MISSING and value is not None


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _minimum(doc: Any, pointer: str, least: int, what: str) -> Iterator[Refusal]:
    """The CRD schema's ``minimum`` on an integer field."""
    value = _int(resolve(doc, pointer))
    if value is not None and value < least:
        yield Refusal(f"{what} {value} is less than {least}: Volcano's CRD schema refuses it", pointer)


def _one_of(doc: Any, pointer: str, allowed: tuple[str, ...], what: str) -> Iterator[Refusal]:
    """The CRD schema's ``enum`` on a string field."""
    value = resolve(doc, pointer)
    if isinstance(value, str) and value not in allowed:
        yield Refusal(f"{what} {value!r} is not one of {', '.join(allowed)}: Volcano's CRD schema "
                      "refuses it", pointer)


def _network_topology(doc: Any, pointer: str) -> Iterator[Refusal]:
    """A network topology names its highest tier either by number or by name, never both
    (webhook); the mode and tier number are the schema's."""
    topology = resolve(doc, pointer)
    if not isinstance(topology, dict):
        return
    if _set(topology.get("highestTierAllowed", MISSING)) and _text(topology.get("highestTierName")):
        yield Refusal(f"{_dotted(pointer)} sets both highestTierAllowed and highestTierName: "
                      "Volcano's webhook allows only one", pointer)
    yield from _minimum(doc, pointer + "/highestTierAllowed", 0, "highestTierAllowed")
    yield from _one_of(doc, pointer + "/mode", ("hard", "soft"), "networkTopology mode")


# -- Job --------------------------------------------------------------------------------------

# The lifecycle-policy events and actions a user may name (the others are Volcano's own).
_POLICY_EVENTS = ("*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed",
                  "JobUpdated")
_POLICY_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob",
                   "CompleteJob", "ResumeJob")
_JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")
_TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def job(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What Volcano refuses of a new ``batch.volcano.sh`` Job."""
    tasks = resolve(doc, "/spec/tasks")
    if not isinstance(tasks, list) or not tasks:
        if tasks is MISSING or tasks is None or tasks == []:
            yield Refusal("spec.tasks is empty: a Volcano Job needs at least one task", "/spec/tasks")
        return
    names = [_task_name(task, index) for index, task in enumerate(tasks)]
    yield from _job_schema(doc, tasks)
    yield from _mpi_master(doc, names)
    yield from _network_topology(doc, "/spec/networkTopology")
    seen: set[str] = set()
    job_name = _text(resolve(doc, "/metadata/name"))
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        at = f"/spec/tasks/{index}"
        if names[index] in seen:
            yield Refusal(f"spec.tasks[{index}].name {names[index]!r} is used by an earlier task: Volcano's "
                          "webhook refuses duplicated task names", at + "/name")
            break  # upstream stops judging tasks at the first duplicate
        seen.add(names[index])
        yield from _policies(task.get("policies"), at + "/policies")
        pod = f"{job_name}-{names[index]}-{index}"
        if job_name and not _is_qualified_name(pod):
            yield Refusal(
                f"spec.tasks[{index}]: pod name {pod!r} ({len(pod)} characters) is not a valid "
                "qualified name of at most 63 characters: Volcano's webhook refuses it", at + "/name")
        yield from _topology_policy(task, index)
        yield from _partition_policy(doc, task, index)
    if job_name and not _is_qualified_name(job_name):
        yield Refusal(f"metadata.name ({len(job_name)} characters) is not a valid qualified name of at most "
                      "63 characters: Volcano's webhook refuses it", "/metadata/name")
    yield from _policies(resolve(doc, "/spec/policies"), "/spec/policies")
    plugins = resolve(doc, "/spec/plugins")
    for plugin in _dict(plugins):
        if plugin not in _JOB_PLUGINS:
            yield Refusal(
                f"spec.plugins has unknown plugin {plugin!r} (Volcano knows {', '.join(_JOB_PLUGINS)}): "
                "Volcano's webhook refuses it", join_pointer("/spec/plugins", plugin))
    yield from _volumes(resolve(doc, "/spec/volumes"))
    if any(isinstance(task, dict) and _set(task.get("dependsOn", MISSING)) for task in tasks):
        if not _is_dag(tasks, names):
            yield Refusal(
                "spec.tasks dependsOn does not form a directed acyclic graph (a cycle, or a task that "
                "does not exist): Volcano's webhook refuses it", "/spec/tasks")


def _task_name(task: Any, index: int) -> str:
    """The task's name after Volcano's mutating webhook, which names a nameless task."""
    name = _text(task.get("name")) if isinstance(task, dict) else ""
    return name or f"default{index}"


def _job_schema(doc: dict[str, Any], tasks: list[Any]) -> Iterator[Refusal]:
    """The minimums, enums and patterns of the Job CRD's schema."""
    yield from _minimum(doc, "/spec/minAvailable", 0, "spec.minAvailable")
    yield from _minimum(doc, "/spec/maxRetry", 0, "spec.maxRetry")
    yield from _minimum(doc, "/spec/minSuccess", 1, "spec.minSuccess")
    yield from _minimum(doc, "/spec/ttlSecondsAfterFinished", 0, "spec.ttlSecondsAfterFinished")
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        at = f"/spec/tasks/{index}"
        name = _text(task.get("name"))
        if name and not _is_dns_label(name):
            yield Refusal(
                f"spec.tasks[{index}].name {name!r} is not a lowercase RFC 1123 label of at most 63 "
                "characters: Volcano's CRD schema refuses it", at + "/name")
        yield from _minimum(doc, at + "/replicas", 0, f"spec.tasks[{index}].replicas")
        yield from _minimum(doc, at + "/minAvailable", 0, f"spec.tasks[{index}].minAvailable")
        yield from _minimum(doc, at + "/maxRetry", 0, f"spec.tasks[{index}].maxRetry")
        yield from _one_of(doc, at + "/topologyPolicy", _TOPOLOGY_POLICIES,
                           f"spec.tasks[{index}].topologyPolicy")
    for index, volume in enumerate(_list(resolve(doc, "/spec/volumes"))):
        path = _text(_dict(volume).get("mountPath"))
        if ":" in path:
            yield Refusal(
                f"spec.volumes[{index}].mountPath {path!r} contains ':': Volcano's CRD schema refuses it",
                f"/spec/volumes/{index}/mountPath")


def _mpi_master(doc: dict[str, Any], names: list[str]) -> Iterator[Refusal]:
    """The mpi plugin's master task (``--master``, default ``master``) must be one of the tasks."""
    plugins = resolve(doc, "/spec/plugins")
    if not isinstance(plugins, dict) or "mpi" not in plugins:
        return
    master = _mpi_master_name(plugins["mpi"])
    if master is not None and master not in names:
        yield Refusal(f"spec.plugins.mpi names master task {master!r}, which is not one of the tasks "
                      f"({', '.join(names)}): Volcano's webhook refuses it", "/spec/plugins/mpi")


def _mpi_master_name(arguments: Any) -> str | None:
    """The master task the mpi plugin reads from its arguments, as Go's ``flag`` package parses
    them; ``None`` when they cannot be read with certainty (then nothing is refused)."""
    if arguments is None:
        arguments = []
    if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
        return None
    master = "master"
    known = ("master", "worker", "port")
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        if argument == "--" or not argument.startswith("-") or argument == "-":
            break  # flag parsing stops at the first non-flag
        name, equals, value = argument.lstrip("-").partition("=")
        if argument.startswith("---") or name not in known:
            return None  # a parse error: the plugin keeps what it read so far; do not guess
        if not equals:
            if index + 1 >= len(arguments):
                return None
            index += 1
            value = arguments[index]
        if name == "port" and not re.fullmatch(r"[+-]?[0-9]+", value):
            return None
        if name == "master":
            master = value
        index += 1
    return master


def _policies(policies: Any, at: str) -> Iterator[Refusal]:
    """Lifecycle policies: an event (or events) or an exit code, not both; user-facing events and
    actions only; no event or exit code twice; ``*`` alone. Upstream stops at the first fault."""
    events_seen: set[str] = set()
    codes_seen: set[int] = set()
    for index, policy in enumerate(_list(policies)):
        if not isinstance(policy, dict):
            continue
        here = f"{at}/{index}"
        for key, kind in (("events", list), ("event", str)):
            if policy.get(key) is not None and not isinstance(policy[key], kind):
                # `events: PodFailed` for `events: [PodFailed]`: the schema refuses it, and
                # without this the policy would read as having no event at all
                yield Refusal(f"{_dotted(here)}.{key} is {type_name(policy[key])}, not "
                              f"{type_name(kind())}: Volcano's CRD schema refuses it", f"{here}/{key}")
                return
        event = _text(policy.get("event"))
        events = [e for e in _list(policy.get("events")) if isinstance(e, str)]
        code = _int(policy.get("exitCode"))
        has_events = bool(event) or bool(_list(policy.get("events")))
        if has_events and code is not None:
            yield Refusal(
                f"{_dotted(here)} sets both an event and exitCode {code}: Volcano's webhook allows only "
                "one", here)
            return
        if not has_events and code is None:
            if _set(policy.get("exitCode", MISSING)):
                return  # an exit code of the wrong type: GG002's
            yield Refusal(
                f"{_dotted(here)} sets neither an event nor an exitCode: Volcano's webhook needs one", here)
            return
        if has_events:
            action = _text(policy.get("action"))
            for name in dict.fromkeys([*events, *([event] if event else [])]):
                if name not in _POLICY_EVENTS:
                    yield Refusal(
                        f"{_dotted(here)} event {name!r} is not one users may set "
                        f"({', '.join(_POLICY_EVENTS)}): Volcano's webhook refuses it", here)
                    return
                if action not in _POLICY_ACTIONS:
                    yield Refusal(
                        f"{_dotted(here)} action {action!r} is not one users may set "
                        f"({', '.join(_POLICY_ACTIONS)}): Volcano's webhook refuses it", here + "/action")
                    return
                if name in events_seen:
                    yield Refusal(f"{_dotted(here)} event {name!r} is already handled by an earlier policy: "
                                  "Volcano's webhook refuses a duplicate event", here)
                    return
                events_seen.add(name)
        elif code is not None:
            if code == 0:
                yield Refusal(
                    f"{_dotted(here)}.exitCode 0 is not a failure code: Volcano's webhook refuses it",
                    here + "/exitCode")
                return
            if code in codes_seen:
                yield Refusal(f"{_dotted(here)}.exitCode {code} is already handled by an earlier policy: "
                              "Volcano's webhook refuses a duplicate exitCode", here + "/exitCode")
                return
            codes_seen.add(code)
    if "*" in events_seen and len(events_seen) > 1:
        yield Refusal(
            f"{_dotted(at)} has the '*' event and other events: with '*' Volcano's webhook allows no "
            "other policy event", at)


def _dotted(pointer: str) -> str:
    """``/spec/tasks/0/policies/1`` as ``spec.tasks[0].policies[1]``."""
    parts = pointer.strip("/").split("/")
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts).lstrip(".")


def _topology_policy(task: dict[str, Any], index: int) -> Iterator[Refusal]:
    """A NUMA topology policy pins whole CPUs: each container must ask for a whole, non-zero
    number of CPUs (its limits stand in for requests it does not set)."""
    policy = task.get("topologyPolicy")
    if not isinstance(policy, str) or policy in ("", "none"):
        return
    spec = resolve(task, "/template/spec")
    if not isinstance(spec, dict):
        return
    containers = [("containers", i, c) for i, c in enumerate(_list(spec.get("containers")))]
    containers += [("initContainers", i, c) for i, c in enumerate(_list(spec.get("initContainers")))]
    for kind, number, container in containers:
        resources = _dict(_dict(container).get("resources"))
        amounts = _dict(resources.get("requests")) or _dict(resources.get("limits"))
        cpu = amounts.get("cpu")
        amount = Fraction(0) if cpu is None else _quantity(cpu)
        if amount is None:
            continue  # unparseable: GG504's
        # Volcano counts the CPUs as a whole number or zero; a negative amount is the pod's own
        # validation's to refuse
        if amount.denominator != 1 or amount == 0:
            yield Refusal(
                f"spec.tasks[{index}].template.spec.{kind}[{number}] cpu {cpu if cpu is not None else 0} "
                f"is not a whole number of CPUs, which topologyPolicy {policy!r} needs: Volcano's webhook "
                "refuses it", f"/spec/tasks/{index}/template/spec/{kind}/{number}/resources")


def _partition_policy(doc: dict[str, Any], task: dict[str, Any], index: int) -> Iterator[Refusal]:
    """A partitioned task: whole partitions that add up to its replicas, and a gang minimum of
    whole partitions when ``minPartitions`` is set."""
    policy = task.get("partitionPolicy")
    if not isinstance(policy, dict):
        return
    at = f"/spec/tasks/{index}/partitionPolicy"
    where = f"spec.tasks[{index}].partitionPolicy"
    total = _int(policy.get("totalPartitions"))
    size = _int(policy.get("partitionSize"))
    minimum = _int(policy.get("minPartitions")) or 0
    replicas = _int(task.get("replicas"))
    replicas = 0 if replicas is None and not _set(task.get("replicas", MISSING)) else replicas
    task_min = task.get("minAvailable")
    if not _set(policy.get("totalPartitions", MISSING)) or not _set(policy.get("partitionSize", MISSING)):
        missing = "totalPartitions" if not _set(policy.get("totalPartitions", MISSING)) else "partitionSize"
        yield Refusal(f"{where}.{missing} is not set: Volcano's CRD schema requires it", at)
    elif total is not None and total <= 0:
        yield Refusal(f"{where}.totalPartitions {total} is not positive: Volcano's webhook refuses it",
                      at + "/totalPartitions")
    elif size is not None and size <= 0:
        yield Refusal(f"{where}.partitionSize {size} is not positive: Volcano's webhook refuses it",
                      at + "/partitionSize")
    elif total is not None and size is not None and replicas is not None and replicas != total * size:
        yield Refusal(
            f"spec.tasks[{index}].replicas {replicas} is not totalPartitions {total} x partitionSize "
            f"{size}: Volcano's webhook refuses it", f"/spec/tasks/{index}/replicas")
    elif (size is not None and minimum > 0 and _int(task_min) is not None
          and minimum * size != task_min):
        yield Refusal(
            f"spec.tasks[{index}].minAvailable {task_min} is not minPartitions {minimum} x partitionSize "
            f"{size}: Volcano's webhook refuses it", f"/spec/tasks/{index}/minAvailable")
    yield from _minimum(doc, at + "/minPartitions", 0, f"{where}.minPartitions")
    yield from _network_topology(doc, at + "/networkTopology")


def _volumes(volumes: Any) -> Iterator[Refusal]:
    """Job volumes: a distinct mount path each, and either an existing claim's name or a claim
    to create. Upstream stops at the first fault."""
    paths: set[str] = set()
    for index, volume in enumerate(_list(volumes)):
        if not isinstance(volume, dict):
            continue
        at = f"/spec/volumes/{index}"
        path = _text(volume.get("mountPath"))
        claim_name = _text(volume.get("volumeClaimName"))
        claim = volume.get("volumeClaim")
        if not path:
            yield Refusal(f"spec.volumes[{index}].mountPath is not set: Volcano's webhook requires it",
                          at + "/mountPath")
            return
        if path in paths:
            yield Refusal(
                f"spec.volumes[{index}].mountPath {path!r} is mounted twice: Volcano's webhook refuses it",
                at + "/mountPath")
            return
        if claim is None and not claim_name:
            yield Refusal(
                f"spec.volumes[{index}] sets neither volumeClaim nor volumeClaimName: Volcano's webhook "
                "needs one", at)
            return
        if claim_name:
            if claim is not None:
                yield Refusal(
                    f"spec.volumes[{index}] sets both volumeClaim and volumeClaimName: Volcano's webhook "
                    "allows only one", at)
                return
            if not _is_dns_subdomain(claim_name):
                yield Refusal(
                    f"spec.volumes[{index}].volumeClaimName {claim_name!r} is not a valid claim name: "
                    "Volcano's webhook refuses it", at + "/volumeClaimName")
                return
        paths.add(path)


def _is_dag(tasks: list[Any], names: list[str]) -> bool:
    """Whether the tasks' ``dependsOn`` form a DAG the way Volcano counts it: a dependency on
    a task that does not exist, or the same dependency listed twice, never resolves."""
    edges: dict[str, set[str]] = {}
    waiting: dict[str, int] = {}
    for name in names:
        waiting[name] = 0
    for task, name in zip(tasks, names, strict=True):
        depends = _dict(task).get("dependsOn") if isinstance(task, dict) else None
        for before in _list(_dict(depends).get("name")):
            if not isinstance(before, str):
                continue
            edges.setdefault(before, set()).add(name)
            waiting[name] += 1
    ready = [name for name, count in waiting.items() if count == 0]
    done = 0
    while ready:
        current = ready.pop()
        done += 1
        for after in edges.pop(current, set()):
            waiting[after] -= 1
            if waiting[after] == 0:
                ready.append(after)
    return done == len(names)


# -- PodGroup ---------------------------------------------------------------------------------

def podgroup(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What Volcano refuses of a new PodGroup (its queue's state is GG306's)."""
    yield from _minimum(doc, "/spec/minMember", 0, "spec.minMember")
    yield from _network_topology(doc, "/spec/networkTopology")
    for index in range(len(_list(resolve(doc, "/spec/subGroupPolicy")))):
        at = f"/spec/subGroupPolicy/{index}"
        yield from _network_topology(doc, at + "/networkTopology")
        yield from _minimum(doc, at + "/subGroupSize", 1, f"spec.subGroupPolicy[{index}].subGroupSize")
        yield from _minimum(doc, at + "/minSubGroups", 0, f"spec.subGroupPolicy[{index}].minSubGroups")


# -- Queue ------------------------------------------------------------------------------------

_HIERARCHY = "volcano.sh/hierarchy"
_HIERARCHY_WEIGHTS = "volcano.sh/hierarchy-weights"
# Resources Kubernetes counts in whole units (besides extended resources such as GPUs).
_INTEGER_RESOURCES = frozenset({"pods", "services", "replicationcontrollers", "resourcequotas", "secrets",
                                "configmaps", "persistentvolumeclaims", "services.nodeports",
                                "services.loadbalancers"})


def queue(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What Volcano refuses of a Queue on its own (the hierarchy around it needs the other queues)."""
    spec = resolve(doc, "/spec")
    if isinstance(spec, dict):
        yield from _queue_resources(spec)
        weight = _int(spec.get("weight"))
        # 0 is "unset": the mutating webhook makes it 1
        if weight is not None and weight != 0 and not 1 <= weight <= 65535:
            yield Refusal(
                f"spec.weight {weight} is outside 1..65535: Volcano's CRD schema refuses it", "/spec/weight")
        yield from _minimum(doc, "/spec/priority", 0, "spec.priority")
        yield from _one_of(doc, "/spec/dequeueStrategy", ("fifo", "traverse"), "spec.dequeueStrategy")
        parent = _text(spec.get("parent"))
        name = _text(resolve(doc, "/metadata/name"))
        if parent and parent == name and parent != "root":
            yield Refusal(
                f"spec.parent {parent!r} is the queue itself: Volcano's webhook refuses it", "/spec/parent")
    yield from _hierarchy(doc)


def _queue_resources(spec: dict[str, Any]) -> Iterator[Refusal]:
    """No negative (or, for counted resources, fractional) amounts, and
    guarantee <= deserved <= capability resource by resource."""
    capability = _dict(spec.get("capability"))
    deserved = _dict(spec.get("deserved"))
    guarantee = _dict(_dict(spec.get("guarantee")).get("resource"))
    parsed: dict[str, dict[str, Fraction]] = {}
    for field, amounts, at in (("capability", capability, "/spec/capability"),
                               ("deserved", deserved, "/spec/deserved"),
                               ("guarantee.resource", guarantee, "/spec/guarantee/resource")):
        parsed[field] = {}
        for resource, raw in amounts.items():
            amount = None if raw is None else _quantity(raw)
            if amount is None:
                continue  # unset or unparseable (GG504's)
            parsed[field][resource] = amount
            pointer = join_pointer(at, resource)
            if amount < 0:
                yield Refusal(
                    f"spec.{field}[{resource}] {raw} is negative: Volcano's webhook refuses it", pointer)
            elif amount.denominator != 1 and _counted(resource):
                yield Refusal(
                    f"spec.{field}[{resource}] {raw} is not a whole number: Volcano's webhook refuses "
                    "it", pointer)
    for resource, raw in guarantee.items():
        wanted = parsed["guarantee.resource"].get(resource)
        if wanted is None:
            continue
        pointer = join_pointer("/spec/deserved", resource)
        if resource not in deserved:
            yield Refusal(
                f"spec.deserved[{resource}] is not set but guarantee is {raw}: Volcano's webhook needs "
                "deserved >= guarantee", pointer)
            continue
        have = parsed["deserved"].get(resource)
        if have is not None and wanted is not None and have < wanted:
            yield Refusal(f"spec.deserved[{resource}] {deserved[resource]} is less than guarantee {raw}: "
                          "Volcano's webhook needs deserved >= guarantee", pointer)
    for resource, have in parsed["deserved"].items():
        cap = parsed["capability"].get(resource)
        if cap is not None and have > cap:
            yield Refusal(f"spec.deserved[{resource}] {deserved[resource]} is more than capability "
                          f"{capability[resource]}: Volcano's webhook needs deserved <= capability",
                          join_pointer("/spec/deserved", resource))


def _counted(resource: str) -> bool:
    """Kubernetes' integer resources: the counted ones and extended resources (``vendor/name``
    outside ``kubernetes.io``, such as ``nvidia.com/gpu``)."""
    if resource in _INTEGER_RESOURCES:
        return True
    if "/" not in resource or "kubernetes.io/" in resource or resource.startswith("requests."):
        return False
    return _is_qualified_name("requests." + resource)


_GO_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_GO_SPECIAL = re.compile(r"[+-]?(inf|infinity|nan)", re.IGNORECASE)


def _hierarchy(doc: dict[str, Any]) -> Iterator[Refusal]:
    """The ``volcano.sh/hierarchy`` path and its ``hierarchy-weights``: as many weights as path
    parts, each a number above zero."""
    annotations = _dict(resolve(doc, "/metadata/annotations"))
    path = _text(annotations.get(_HIERARCHY))
    weights = _text(annotations.get(_HIERARCHY_WEIGHTS))
    if not path and not weights:
        return
    at = "/metadata/annotations/" + _HIERARCHY_WEIGHTS.replace("/", "~1")
    parts, numbers = path.split("/"), weights.split("/")
    if len(parts) != len(numbers):
        yield Refusal(f"metadata.annotations[{_HIERARCHY_WEIGHTS}] has {len(numbers)} weights for the "
                      f"{len(parts)} parts of {_HIERARCHY}: Volcano's webhook needs one per part", at)
        return
    for weight in numbers:
        value = _go_float(weight)
        if value is None:
            if weight.lstrip("+-")[:2].lower() == "0x":
                continue  # a hexadecimal float Go may read: not judged
            yield Refusal(f"metadata.annotations[{_HIERARCHY_WEIGHTS}] weight {weight!r} is not a number: "
                          "Volcano's webhook refuses it", at)
            return
        if value <= 0:
            yield Refusal(f"metadata.annotations[{_HIERARCHY_WEIGHTS}] weight {weight!r} is not above 0: "
                          "Volcano's webhook refuses it", at)
            return


def _go_float(text: str) -> float | None:
    """The number Go's ``strconv.ParseFloat`` reads from a decimal or special text, or ``None``
    when it would refuse it (out of range included)."""
    if _GO_SPECIAL.fullmatch(text):
        return float(text)
    if not _GO_DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return None if math.isinf(value) else value


# -- HyperNode --------------------------------------------------------------------------------

# Escapes and groups RE2 (Go's regexp) reads but Python's re does not: a pattern using them is
# not judged by compiling it here.
_RE2_ONLY = (r"\p", r"\P", r"\Q", r"\E", r"\z", r"\C", r"\x{", "(?")


def hypernode(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What Volcano refuses of a HyperNode: no members, a member selector that is not exactly
    one of exactMatch, regexMatch and labelMatch, or a regexMatch pattern that does not compile."""
    members = resolve(doc, "/spec/members")
    if members is MISSING or members is None or members == []:
        yield Refusal("spec.members is empty: a HyperNode needs at least one member", "/spec/members")
        return
    if resolve(doc, "/spec/tier") is MISSING:
        yield Refusal("spec.tier is not set: Volcano's CRD schema requires it", "/spec/tier")
    yield from _minimum(doc, "/spec/tier", 0, "spec.tier")
    for index, member in enumerate(_list(members)):
        if not isinstance(member, dict):
            continue
        at = f"/spec/members/{index}"
        if not _set(member.get("type", MISSING)):
            yield Refusal(
                f"spec.members[{index}].type is not set: Volcano's CRD schema requires it", at + "/type")
        yield from _one_of(doc, at + "/type", ("Node", "HyperNode"), f"spec.members[{index}].type")
        selector = member.get("selector")
        if not isinstance(selector, dict):
            continue
        chosen = [key for key in ("exactMatch", "regexMatch", "labelMatch")
                  if _set(selector.get(key, MISSING))]
        if len(chosen) != 1:
            yield Refusal(f"spec.members[{index}].selector sets {len(chosen)} of exactMatch, regexMatch and "
                          "labelMatch: Volcano's CRD schema needs exactly one", at + "/selector")
        exact = selector.get("exactMatch")
        if isinstance(exact, dict):
            name = exact.get("name")
            if not _set(exact.get("name", MISSING)) or name == "":
                yield Refusal(
                    f"spec.members[{index}].selector.exactMatch.name is not set: Volcano's CRD schema "
                    "requires it", at + "/selector/exactMatch/name")
            elif isinstance(name, str) and not _is_dns_subdomain(name):
                yield Refusal(
                    f"spec.members[{index}].selector.exactMatch.name {name!r} is not a DNS subdomain: "
                    "Volcano's CRD schema refuses it", at + "/selector/exactMatch/name")
        regex = selector.get("regexMatch")
        if isinstance(regex, dict):
            pattern = regex.get("pattern")
            if not _set(regex.get("pattern", MISSING)) or pattern == "":
                yield Refusal(f"spec.members[{index}].selector.regexMatch.pattern is not set: Volcano's CRD "
                              "schema requires it", at + "/selector/regexMatch/pattern")
            elif isinstance(pattern, str) and not _compiles(pattern):
                yield Refusal(
                    f"spec.members[{index}].selector.regexMatch.pattern {pattern!r} is not a valid "
                    "regular expression: Volcano's webhook refuses it", at + "/selector/regexMatch/pattern")


def _compiles(pattern: str) -> bool:
    """Whether Go's regexp would compile the pattern, as far as Python's re can tell: a pattern
    with RE2-only syntax counts as compiling (never refused on a guess)."""
    if any(token in pattern for token in _RE2_ONLY):
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Python warns of some RE2 syntax (``[[:alpha:]]``) it reads
        try:
            re.compile(pattern)
        except (re.error, OverflowError):
            return False
        except RecursionError:
            return True  # too deep for Python to tell; Go's own limit differs
    return True
