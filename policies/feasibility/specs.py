"""What eligibility reads of a pod spec (tolerations, nodeSelector, required node
affinity, nodeName, and the extended resources the ExtendedResourceToleration plugin
tolerates), and its signature: equal text, equal inputs, so equal eligibility."""

from __future__ import annotations

import json
import marshal
from collections.abc import Mapping, Sequence
from typing import Any

from policies import memo
from policies.config import Policy
from policies.names import is_extended_resource

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _required_affinity(spec: Mapping[str, Any]) -> Any:
    affinity = spec.get("affinity")
    if affinity is None:
        return None
    # dict first: the ABC check costs several times more, and parsed documents hold dicts.
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) or \
        isinstance(affinity, Mapping) else None
    return node_affinity.get(_REQUIRED) if isinstance(node_affinity, dict) or \
        isinstance(node_affinity, Mapping) else None


def _placement_parts(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """(tolerations, nodeSelector, required node affinity, nodeName) of a pod spec, as
    written: everything eligibility reads, in :func:`_signature`'s order; then, only for a
    pod that requests extended resources, their names (:func:`extended_resources`), which
    the ExtendedResourceToleration plugin turns into tolerations where it runs."""
    parts = (spec.get("tolerations"), spec.get("nodeSelector"), _required_affinity(spec),
             spec.get("nodeName"))
    extended = spec.get(_EXTENDED)  # a placement (a pod spec of its own) keeps them
    extended = tuple(extended) if isinstance(extended, (list, tuple)) else extended_resources(spec)
    return (*parts, extended) if extended else parts


def _placement_of(tolerations: Any, selector: Any, required: Any, node_name: Any,
                  extended: Any = None) -> dict[str, Any]:
    """The parts of a pod spec that decide which nodes it may use (what
    :func:`eligible_mask` reads, from :func:`_placement_parts`), as a pod spec of its own."""
    placement = {"tolerations": tolerations, "nodeSelector": selector, "nodeName": node_name}
    if required is not None:
        placement["affinity"] = {"nodeAffinity": {_REQUIRED: required}}
    if extended:
        placement[_EXTENDED] = tuple(extended)
    return placement


# -- the ExtendedResourceToleration admission plugin ---------------------------------------
#
# Upstream (plugin/pkg/admission/extendedresourcetoleration): on CREATE and UPDATE of a Pod,
# every resource name in the requests of its containers and init containers that is an
# extended resource (it has a domain, the domain is not *kubernetes.io, and it does not
# start with `requests.`) gets the toleration {key: <name>, operator: Exists, effect:
# NoSchedule}. Requests are defaulted from limits before admission, so limits count too;
# the amount does not matter (0 counts); pod overhead does not. GKE runs the plugin.

_EXTENDED = "gpugate.io/extendedResources"   # placement key: not a pod spec field
# Node labels every GKE node carries: a snapshot with them is a GKE cluster.
GKE_NODE_LABELS = ("cloud.google.com/gke-nodepool", "cloud.google.com/gke-os-distribution",
                   "cloud.google.com/gke-boot-disk")


def extended_resources(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The extended resources a pod spec's containers and init containers request (or
    limit: requests default from limits), sorted, each once: what the plugin tolerates."""
    names: set[str] = set()
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for container in containers:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("requests", "limits"):
                values = resources.get(part)
                if isinstance(values, Mapping):
                    for name in values:
                        if isinstance(name, str) and is_extended_resource(name):
                            names.add(name)
    return tuple(sorted(names))


def implied_tolerations(names: Sequence[str]) -> list[dict[str, str]]:
    """The tolerations the plugin adds for the extended resources ``names``."""
    return [{"key": name, "operator": "Exists", "effect": "NoSchedule"} for name in names]


def extended_toleration_mode(policy: Policy) -> str:
    """``platform.extendedResourceToleration`` as "on", "off" or "auto"."""
    value = (policy.data.get("platform") or {}).get("extendedResourceToleration", "auto")
    return "on" if value is True else "off" if value is False else "auto"


def _signature(spec: Mapping[str, Any]) -> str:
    """The eligibility inputs of a pod spec (tolerations, nodeSelector, required node
    affinity, nodeName) as text: equal text means equal inputs, so equal eligibility."""
    return _parts_signature(list(_placement_parts(spec)))


def _parts_signature(parts: list[Any]) -> str:
    """:func:`_signature` of the eligibility inputs ``parts``.

    Usually ``marshal`` format 2, several times cheaper than sorted JSON, and sound: format
    2 writes no back-references, so its bytes are a function of the value alone; every
    type has a code of its own (``True``, ``1``, ``1.0`` and ``"1"`` all differ, as keys
    too) and strings are written losslessly (UTF-8, lone surrogates kept), so equal bytes
    load back to equal values of equal types. Equal mappings with their keys in another
    order give other bytes: a cache miss, never a wrong hit. Anything but plain built-in
    values (subclasses included), and nesting deeper than marshal allows, raise ValueError
    and get the sorted JSON text instead, which starts with ``[``: never equal to an ``m``
    signature.
    """
    try:
        return "m" + marshal.dumps(parts, 2).decode("latin-1")
    except ValueError:
        pass
    try:
        return json.dumps(parts, sort_keys=True, default=str)
    except TypeError:  # YAML allows non-string keys ({1: a}), which do not sort among strings
        return json.dumps(_tagged_keys(parts), sort_keys=True, default=str)


def _tagged_keys(value: Any) -> Any:
    """``value`` with every non-string mapping key spelled with its type, so that it sorts
    among strings and stays apart from the string of the same text (``1`` vs ``"1"``)."""
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else f"{type(k).__name__}:{k!r}": _tagged_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged_keys(v) for v in value]
    return value


def _label_keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The node label keys a pod spec's selector and required affinity look at."""
    keys: set[str] = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        keys.update(str(k) for k in selector)
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_affinity, Mapping) else None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for e in exprs if isinstance(exprs, list) else []:
            if isinstance(e, Mapping) and isinstance(e.get("key"), str):
                keys.add(e["key"])
    return tuple(sorted(keys))


# The label keys of each placement signature: every check asks them again.
_KEYS_BY_SIGNATURE = memo.ContentMemo("feasibility.label-keys", 4096)


def _signature_label_keys(signature: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """:func:`_label_keys` of ``spec``, whose :func:`_signature` is ``signature`` (it holds
    everything the keys are read from), remembered: every check asks it again."""
    keys: tuple[str, ...] | None = _KEYS_BY_SIGNATURE.get(signature)
    if keys is None:
        keys = _KEYS_BY_SIGNATURE.put(signature, _label_keys(spec))
    return keys
