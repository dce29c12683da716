"""Volcano's admission webhook (``pkg/webhooks/admission``) and CRD schemas: what they refuse
of a Job, PodGroup, Queue and HyperNode, judged on the object alone.

Upstream: volcano-sh/volcano ``pkg/webhooks/admission/{jobs,podgroups,queues,hypernodes}/validate``
and the CRDs of ``config/crd/volcano``. Volcano's mutating webhook runs first, so its defaults
are applied here before judging: a task without a name is ``default<index>``, a job or task
``minAvailable`` of 0 or unset is filled in, a queue ``weight`` of 0 becomes 1. Checks that are
already other rules' are not repeated: a gang minimum above the replicas (GG401), the queue's
name (GG304) and state (GG306), unparseable quantities (GG504).

This module holds the four validators and the Queue and HyperNode checks; a Job's parts are
checked in :mod:`policies.validation.volcano_jobs`, and the field readers and schema checks
they all use are in :mod:`policies.validation.volcano_fields`.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from policies.names import is_qualified_name
from policies.pointers import join_pointer
from policies.validation import Refusal
from policies.validation.volcano_fields import (
    _dict,
    _int,
    _is_dns_subdomain,
    _list,
    _minimum,
    _network_topology,
    _one_of,
    _quantity,
    _set,
    _text,
)
from policies.validation.volcano_jobs import (
    _is_dag,
    _job_schema,
    _mpi_master,
    _partition_policy,
    _policies,
    _task_name,
    _topology_policy,
    _volumes,
)
from policies.workload import MISSING, resolve

# -- Job --------------------------------------------------------------------------------------

_JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")


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
        if job_name and not is_qualified_name(pod):
            yield Refusal(
                f"spec.tasks[{index}]: pod name {pod!r} ({len(pod)} characters) is not a valid "
                "qualified name of at most 63 characters: Volcano's webhook refuses it", at + "/name")
        yield from _topology_policy(task, index)
        yield from _partition_policy(doc, task, index)
    if job_name and not is_qualified_name(job_name):
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
    return is_qualified_name("requests." + resource)


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
    at = join_pointer("/metadata/annotations", _HIERARCHY_WEIGHTS)
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
