"""What a pod asks of DRA: its ``spec.resourceClaims``, each a ResourceClaimTemplate (one
claim per pod, made by the ResourceClaim controller) or a ResourceClaim (one claim shared by
every pod naming it, allocated once). The claim's spec is read from the objects in scope
(:mod:`policies.references`: the linted files, or the one member cluster's named objects);
what is not found there is looked up in the cluster by the feasibility check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from policies import references
from policies.workload import PodSet

from .objects import GROUP, TEMPLATE_MAKERS, ClaimSpec, claim_spec

__all__ = ["PodClaim", "PodDevices", "pod_devices", "CLAIM_KINDS"]

CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``."""

    name: str
    path: str                   # JSON Pointer of the entry
    shared: bool                # resourceClaimName: one claim for every pod naming it
    ref: str                    # the ResourceClaim's or the template's name ("": names neither)
    spec: ClaimSpec | None      # found in scope; None: to be looked up in the cluster
    made_by: str = ""           # the kind of object in scope that makes its template (a ComputeDomain)


@dataclass(frozen=True)
class PodDevices:
    """A pod set's claims, in the namespace they are looked up in."""

    namespace: str
    claims: tuple[PodClaim, ...]


def _claim(entry: Any, path: str, namespace: str, refs: references.References | None) -> PodClaim:
    entry = entry if isinstance(entry, dict) else {}
    name = entry.get("name") if isinstance(entry.get("name"), str) else ""
    # 1.26-1.27 nested the reference under ``source``
    names = entry.get("source") if isinstance(entry.get("source"), dict) else entry
    shared_name, template = names.get("resourceClaimName"), names.get("resourceClaimTemplateName")
    shared = isinstance(shared_name, str) and bool(shared_name)
    ref = shared_name if shared else template if isinstance(template, str) else ""
    spec = None
    if ref and refs is not None:
        kind = "ResourceClaim" if shared else "ResourceClaimTemplate"
        found = refs.find(GROUP, kind, namespace or None, ref)
        if found is not None:
            inner = found.get("spec")
            if not shared:
                inner = inner.get("spec") if isinstance(inner, dict) else None
            spec = claim_spec(inner)
    made_by = _template_maker(refs, namespace, ref) if ref and not shared and spec is None else ""
    return PodClaim(name, path, shared, ref, spec, made_by)


def _template_maker(refs: references.References | None, namespace: str, template: str) -> str:
    """The kind of the object in scope that makes the template ``template`` (:data:`TEMPLATE_MAKERS`)."""
    if refs is None:
        return ""
    for (group, kind, ns, _), obj in refs.objects.items():
        for maker_group, maker_kind, pointer in TEMPLATE_MAKERS:
            if (group, kind) != (maker_group, maker_kind) or ns not in (namespace or None, None):
                continue
            node: Any = obj
            for key in pointer:
                node = node.get(key) if isinstance(node, dict) else None
            if node == template:
                return kind
    return ""


def pod_devices(pod_sets: Iterable[PodSet], namespace: str | None) -> tuple[PodDevices | None, ...] | None:
    """Per pod set, its claims (None for a pod set without any); None when no pod set has any."""
    out: list[PodDevices | None] = []
    refs = references.current()
    for pod_set in pod_sets:
        entries = pod_set.spec.get("resourceClaims")
        if not isinstance(entries, list) or not entries:
            out.append(None)
            continue
        base = pod_set.spec_path + "/resourceClaims/"
        out.append(PodDevices(namespace or "", tuple(_claim(entry, f"{base}{i}", namespace or "", refs)
                                                     for i, entry in enumerate(entries))))
    return tuple(out) if any(d is not None for d in out) else None
