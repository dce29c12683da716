"""The Kubernetes API server's validation of the Workload API (``scheduling.k8s.io``): what it
refuses of a Workload, a PodGroup and a CompositePodGroup on CREATE, judged on the object alone,
for each version it has published (:mod:`policies.workload_api`: v1alpha1 of 1.35, v1alpha2 of
1.36, v1alpha3 of 1.37). An object of another version is not judged.

Upstream: kubernetes/kubernetes ``pkg/apis/scheduling/validation`` (hand-written) and the
declarative ``+k8s:`` tags of ``staging/src/k8s.io/api/scheduling/<version>/types.go``. Left
out, because gpugate cannot decide them before admission: UPDATE checks (immutability: they
compare with the stored object), the status subresource, a namespace left to the request,
and fields behind alpha feature gates that the API server may drop rather than judge where
the gate is off (topology constraints, resource claims, preemption policy, a PodGroup's
parent composite group).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.names import DNS1123_LABEL as _DNS_LABEL
from policies.names import DNS1123_SUBDOMAIN as _DNS_SUBDOMAIN
from policies.shapes import MISSING, resolve
from policies.validation import Refusal
from policies.workload_api import MAX_GROUPS, WorkloadVersion, version_of

_HIGHEST_USER_PRIORITY = 1_000_000_000
_REFUSES = "the API server refuses it"


def _is_dns_label(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None


def _is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


def _is_path_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def _dotted(pointer: str) -> str:
    """``/spec/podGroups/0/name`` as ``spec.podGroups[0].name``."""
    out = ""
    for part in pointer.strip("/").split("/"):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def _set(value: Any) -> bool:
    """Set as Go sees it: present, not null, and not an empty list (``basic: {}`` is set)."""
    return value is not MISSING and value is not None and value != []


# -- metadata -------------------------------------------------------------------------------------

def _metadata(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A name (or generateName) that is a DNS subdomain; a namespace, when the object names one,
    that is a DNS label. (An object without a namespace gets the request's.)"""
    name, generate = resolve(doc, "/metadata/name"), resolve(doc, "/metadata/generateName")
    if isinstance(name, str) and name:
        if not _is_dns_subdomain(name):
            yield Refusal(f"metadata.name {name!r} ({len(name)} characters) is not a lowercase RFC 1123 "
                          f"subdomain of at most 253 characters: {_REFUSES}", "/metadata/name")
    elif (name is MISSING or name is None or name == "") and not (isinstance(generate, str) and generate):
        yield Refusal(f"metadata.name is not set (nor generateName): {_REFUSES}", "/metadata")
    namespace = resolve(doc, "/metadata/namespace")
    if isinstance(namespace, str) and namespace and not _is_dns_label(namespace):
        yield Refusal(f"metadata.namespace {namespace!r} ({len(namespace)} characters) is not a lowercase "
                      f"RFC 1123 label of at most 63 characters: {_REFUSES}", "/metadata/namespace")


# -- shared parts ---------------------------------------------------------------------------------

def _required_name(doc: dict[str, Any], at: str, check: str) -> Iterator[Refusal]:
    """A required name field: a DNS label (``check`` "label") or subdomain ("subdomain")."""
    value = resolve(doc, at)
    if value is MISSING or value is None or value == "":
        yield Refusal(f"{_dotted(at)} is not set: {_REFUSES}", at)
    elif isinstance(value, str):
        ok = _is_dns_label(value) if check == "label" else _is_dns_subdomain(value)
        if not ok:
            what = "an RFC 1123 label (at most 63 lowercase" if check == "label" else \
                "an RFC 1123 subdomain (at most 253 lowercase"
            yield Refusal(f"{_dotted(at)} {value!r} is not {what} alphanumerics, '-'"
                          f"{'' if check == 'label' else ' and .'}): {_REFUSES}", at)


def _controller_ref(doc: dict[str, Any]) -> Iterator[Refusal]:
    ref = resolve(doc, "/spec/controllerRef")
    if not isinstance(ref, dict):
        return
    group = ref.get("apiGroup")
    if isinstance(group, str) and group and not _is_dns_subdomain(group):
        yield Refusal(f"spec.controllerRef.apiGroup {group!r} is not a DNS subdomain: {_REFUSES}",
                      "/spec/controllerRef/apiGroup")
    for key in ("kind", "name"):
        value = ref.get(key)
        at = f"/spec/controllerRef/{key}"
        if value is None or value == "":
            yield Refusal(f"spec.controllerRef.{key} is not set: {_REFUSES}", at)
        elif isinstance(value, str) and not _is_path_segment(value):
            yield Refusal(f"spec.controllerRef.{key} {value!r} is not a path segment name (it may not be "
                          f"'.' or '..' nor hold '/' or '%'): {_REFUSES}", at)


def _union(doc: dict[str, Any], at: str, members: tuple[str, ...]) -> str | None:
    """The one member of a union that is set; None when none or several are (refused by
    :func:`_union_refusals`)."""
    value = resolve(doc, at)
    if not isinstance(value, dict):
        return None
    chosen = [m for m in members if _set(value.get(m, MISSING))]
    return chosen[0] if len(chosen) == 1 else None


def _union_refusals(doc: dict[str, Any], at: str, members: tuple[str, ...]) -> Iterator[Refusal]:
    value = resolve(doc, at)
    if value is not MISSING and value is not None and not isinstance(value, dict):
        return  # a field of the wrong type: GG002's
    chosen = [m for m in members if isinstance(value, dict) and _set(value.get(m, MISSING))]
    names = " or ".join(f"`{m}`" for m in members)
    if not chosen:
        yield Refusal(f"{_dotted(at)} sets none of {names}: exactly one is required, {_REFUSES}", at)
    elif len(chosen) > 1:
        yield Refusal(f"{_dotted(at)} sets {len(chosen)} of {names}: exactly one is allowed, {_REFUSES}", at)


def _at_least_one(doc: dict[str, Any], at: str) -> Iterator[Refusal]:
    value = resolve(doc, at)
    if isinstance(value, bool):
        return  # a field of the wrong type: GG002's
    if isinstance(value, int) and value < 1:
        yield Refusal(f"{_dotted(at)} {value} is less than 1: {_REFUSES}", at)
    elif value is MISSING or value is None:
        yield Refusal(f"{_dotted(at)} is not set: {_REFUSES}", at)


def _policy(doc: dict[str, Any], at: str, count: str = "minCount") -> Iterator[Refusal]:
    """A scheduling policy: exactly one of ``basic`` and ``gang``; a gang's count at least 1."""
    yield from _union_refusals(doc, at, ("basic", "gang"))
    if _union(doc, at, ("basic", "gang")) == "gang":
        yield from _at_least_one(doc, f"{at}/gang/{count}")


def _priority(doc: dict[str, Any], at: str) -> Iterator[Refusal]:
    """``priority`` at most the highest user-definable one; ``priorityClassName`` a DNS subdomain;
    ``disruptionMode`` exactly one of ``single`` and ``all`` (1.37)."""
    priority = resolve(doc, f"{at}/priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and priority > _HIGHEST_USER_PRIORITY:
        yield Refusal(f"{_dotted(at + '/priority')} {priority} is above {_HIGHEST_USER_PRIORITY}, the "
                      f"highest user-definable priority: {_REFUSES}", f"{at}/priority")
    name = resolve(doc, f"{at}/priorityClassName")
    if isinstance(name, str) and name and not _is_dns_subdomain(name):
        yield Refusal(f"{_dotted(at + '/priorityClassName')} {name!r} is not a DNS subdomain: {_REFUSES}",
                      f"{at}/priorityClassName")
    if _set(resolve(doc, f"{at}/disruptionMode")):
        yield from _union_refusals(doc, f"{at}/disruptionMode", ("single", "all"))


def _list_of(doc: dict[str, Any], at: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(index, JSON Pointer, entry) of a list of mappings; refusals are :func:`_list_refusals`'."""
    value = resolve(doc, at)
    if isinstance(value, list):
        for index, entry in enumerate(value):
            if isinstance(entry, dict):
                yield index, f"{at}/{index}", entry


def _list_refusals(doc: dict[str, Any], at: str, required: bool) -> Iterator[Refusal]:
    """Required and non-empty (when ``required``), at most :data:`MAX_GROUPS`, names unique."""
    value = resolve(doc, at)
    if value is MISSING or value is None or value == []:
        if required:
            yield Refusal(f"{_dotted(at)} is empty: at least one is required, {_REFUSES}", at)
        return
    if not isinstance(value, list):
        return
    if len(value) > MAX_GROUPS:
        yield Refusal(f"{_dotted(at)} has {len(value)} entries, more than {MAX_GROUPS}: {_REFUSES}", at)
        return
    seen: set[str] = set()
    for index, entry in enumerate(value):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            if name in seen:
                yield Refusal(f"{_dotted(at)}[{index}].name {name!r} is a duplicate: {_REFUSES}",
                              f"{at}/{index}/name")
            seen.add(name)


# -- Workload -------------------------------------------------------------------------------------

def workload(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A Workload on CREATE: its metadata, controllerRef and pod groups (1.35) or pod group
    templates (1.36, 1.37) with their scheduling policies."""
    version = version_of(doc)
    if version is None:
        return
    yield from _metadata(doc)
    yield from _controller_ref(doc)
    groups = f"/spec/{version.groups}"
    if version.composite:
        composite = "/spec/compositePodGroupTemplates"
        yield from _union_refusals(doc, "/spec", (version.groups, "compositePodGroupTemplates"))
        yield from _list_refusals(doc, groups, required=False)
        yield from _composite_templates(doc, composite, version, depth=1)
    else:
        yield from _list_refusals(doc, groups, required=True)
    yield from _templates(doc, groups, version)


def _templates(doc: dict[str, Any], at: str, version: WorkloadVersion) -> Iterator[Refusal]:
    for _, here, _entry in _list_of(doc, at):
        yield from _required_name(doc, f"{here}/name", "label")
        yield from _policy(doc, f"{here}/{version.policy}")
        if version.composite:
            yield from _priority(doc, here)


# The deepest tree of composite pod group templates a Workload may have (1.37).
_MAX_DEPTH = 4


def _composite_templates(doc: dict[str, Any], at: str, version: WorkloadVersion,
                         depth: int) -> Iterator[Refusal]:
    yield from _list_refusals(doc, at, required=False)
    for _, here, entry in _list_of(doc, at):
        if depth > _MAX_DEPTH:
            yield Refusal(f"{_dotted(here)} is at depth {depth} of composite pod group templates, deeper "
                          f"than {_MAX_DEPTH}: {_REFUSES}", here)
            return
        yield from _required_name(doc, f"{here}/name", "label")
        yield from _policy(doc, f"{here}/schedulingPolicy", count="minGroupCount")
        yield from _priority(doc, here)
        children = [key for key in ("podGroupTemplates", "compositePodGroupTemplates")
                    if isinstance(entry.get(key), list) and entry.get(key)]
        if not children:
            yield Refusal(f"{_dotted(here)} has neither podGroupTemplates nor compositePodGroupTemplates: at "
                          f"least one is required, {_REFUSES}", here)
        yield from _list_refusals(doc, f"{here}/podGroupTemplates", required=False)
        yield from _templates(doc, f"{here}/podGroupTemplates", version)
        yield from _composite_templates(doc, f"{here}/compositePodGroupTemplates", version, depth + 1)


# -- PodGroup, CompositePodGroup ------------------------------------------------------------------

def podgroup(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A PodGroup on CREATE (1.36, 1.37): its metadata, the reference to its Workload template
    and its scheduling policy."""
    version = version_of(doc)
    if version is None or not version.podgroup:
        return
    yield from _metadata(doc)
    if version.podgroup_ref == ("podGroupTemplateRef", "workload"):
        ref = resolve(doc, "/spec/podGroupTemplateRef")
        if _set(ref):
            yield from _union_refusals(doc, "/spec/podGroupTemplateRef", ("workload",))
            if isinstance(ref, dict) and isinstance(ref.get("workload"), dict):
                at = "/spec/podGroupTemplateRef/workload"
                yield from _required_name(doc, f"{at}/workloadName", "label")
                yield from _required_name(doc, f"{at}/podGroupTemplateName", "label")
    elif _set(resolve(doc, "/spec/workloadRef")):
        yield from _workload_ref(doc)
    yield from _policy(doc, "/spec/schedulingPolicy")
    if version.composite:
        yield from _priority(doc, "/spec")


def _workload_ref(doc: dict[str, Any]) -> Iterator[Refusal]:
    """1.37's ``spec.workloadRef``: a Workload name (DNS subdomain) and a template name (DNS label)."""
    if not isinstance(resolve(doc, "/spec/workloadRef"), dict):
        return
    yield from _required_name(doc, "/spec/workloadRef/workloadName", "subdomain")
    yield from _required_name(doc, "/spec/workloadRef/templateName", "label")


def composite_podgroup(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A CompositePodGroup on CREATE (1.37): metadata, a required workloadRef, a scheduling
    policy whose gang counts child groups (minGroupCount), priority."""
    version = version_of(doc)
    if version is None or not version.composite:
        return
    yield from _metadata(doc)
    if not _set(resolve(doc, "/spec/workloadRef")):
        yield Refusal(f"spec.workloadRef is not set: {_REFUSES}", "/spec/workloadRef")
    yield from _workload_ref(doc)
    parent = resolve(doc, "/spec/parentCompositePodGroupName")
    if isinstance(parent, str) and parent and not _is_dns_subdomain(parent):
        yield Refusal(f"spec.parentCompositePodGroupName {parent!r} is not a DNS subdomain: {_REFUSES}",
                      "/spec/parentCompositePodGroupName")
    yield from _policy(doc, "/spec/schedulingPolicy", count="minGroupCount")
    yield from _priority(doc, "/spec")
