"""The checks of a Volcano ``batch.volcano.sh`` Job's parts that
:func:`policies.validation.volcano.job` runs (upstream: volcano-sh/volcano
``pkg/webhooks/admission/jobs/validate`` and the Job CRD schema): the schema's minimums, enums
and patterns, the mpi plugin's master task, lifecycle policies, a task's topology and
partition policies, volumes, and the tasks' ``dependsOn`` graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from policies.shapes import type_name
from policies.validation import Refusal
from policies.validation.volcano_fields import (
    _dict,
    _dotted,
    _int,
    _is_dns_label,
    _is_dns_subdomain,
    _list,
    _minimum,
    _network_topology,
    _one_of,
    _quantity,
    _set,
    _text,
)
from policies.workload import MISSING, resolve

# The lifecycle-policy events and actions a user may name (the others are Volcano's own).
_POLICY_EVENTS = ("*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed",
                  "JobUpdated")
_POLICY_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob",
                   "CompleteJob", "ResumeJob")
_TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


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
