"""An object's place in its life: who made it, what an UPDATE changes, whose pods are its own.

The webhook sees every CREATE and UPDATE of the kinds it is registered for, controllers'
edits included. What is judged, and when (README "Lifecycle"):

- an object made by a controller of the kinds table from a template already judged
  (:func:`controller_owner`), or by one that groups pods judged themselves (a KAI PodGroup
  naming any owner: :func:`made_by_controller`), is not judged again;
- an UPDATE is judged on what it changes (:func:`changed_pointers`): nothing outside
  ``metadata`` and ``status``, nothing to judge; otherwise only findings about the parts
  that changed (:func:`touches`);
- the object's own pods and pod groups are free for it (:func:`identity_keys`, matched
  against :func:`owner_keys` of what the topology holds).

Pure functions over parsed objects; no I/O.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from policies.kinds import KindSpec, kind_spec
from policies.pointers import escape_pointer

__all__ = ["controller_owner", "made_by_controller", "changed_pointers", "touches", "inside", "identity_keys",
           "owner_keys", "IGNORED_TOP_LEVEL"]

# What an UPDATE may change without being judged: who the object is and what was observed.
IGNORED_TOP_LEVEL = frozenset({"metadata", "status", "apiVersion", "kind"})

# Labels KubeRay puts on what it makes for a RayJob or RayService (the RayCluster, its pods,
# the submitter Job): the root custom resource's kind and name.
RAY_ORIGIN_KIND_LABEL = "ray.io/originated-from-crd"
RAY_ORIGIN_NAME_LABEL = "ray.io/originated-from-cr-name"
# The Deployment controller names a ReplicaSet <deployment>-<pod-template-hash>.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # a dict first: parsed objects are, and the Mapping ABC check costs ten times more (a
    # cluster's 100,000 pods pass here when a topology is built)
    return isinstance(value, (dict, Mapping))


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if _is_mapping(obj) else None
    return meta if _is_mapping(meta) else {}


def _controller_reference(obj: Any) -> Mapping[str, Any] | None:
    refs = _meta(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if _is_mapping(ref) and ref.get("controller") is True:
            return ref
    return None


def controller_owner(obj: Any) -> KindSpec | None:
    """The row of the kinds table whose controller made ``obj`` (its owner reference with
    ``controller: true``), or None: made by hand, or by a controller gpugate does not model."""
    ref = _controller_reference(obj)
    if ref is None:
        return None
    api_version, kind = ref.get("apiVersion"), ref.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return kind_spec(api_version, kind)


def made_by_controller(obj: Any) -> bool:
    """Whether a controller made ``obj`` from what gpugate judges already: its controller is a
    kind of the table (:func:`controller_owner`), or ``obj`` names any owner and its own row
    says that is enough (``KindSpec.owner_made``: KAI's podgrouper names a PodGroup's top owner
    without ``controller: true``, and the pods it groups are judged themselves)."""
    if controller_owner(obj) is not None:
        return True
    refs = _meta(obj).get("ownerReferences")
    if not isinstance(refs, list) or not any(isinstance(ref, Mapping) for ref in refs):
        return False
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    spec = kind_spec(api_version, kind) if isinstance(api_version, str) and isinstance(kind, str) else None
    return spec is not None and spec.owner_made


def changed_pointers(old: Any, new: Any, ignored: frozenset[str] = IGNORED_TOP_LEVEL) -> list[str]:
    """The JSON Pointers of the smallest parts that differ between ``old`` and ``new``
    (mappings are compared key by key, lists of equal length item by item; anything else
    as a whole), leaving out the top-level keys in ``ignored``. Empty: nothing changed."""
    out: list[str] = []
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return [""] if old != new else []
    for key in old.keys() | new.keys():
        if key in ignored:
            continue
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if _same_bytes(before, after):
            continue  # the usual case for most of an object: one C-level comparison
        _diff(before, after, "/" + escape_pointer(str(key)), out)
    return sorted(out)


def _same_bytes(old: Any, new: Any) -> bool:
    """Whether both serialise to the same ``marshal`` bytes: equal values of equal types in
    the same key order (``==`` would take ``1`` for ``true``). False when unsure."""
    try:
        return marshal.dumps(old) == marshal.dumps(new)
    except ValueError:  # not marshallable (a YAML date, a sentinel): compare item by item
        return False


class _Absent:
    pass


_ABSENT: Any = _Absent()


def _diff(old: Any, new: Any, at: str, out: list[str]) -> None:
    if old is new:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in old.keys() | new.keys():
            _diff(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{at}/{escape_pointer(str(key))}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{at}/{i}", out)
    elif type(old) is not type(new) or old != new:
        out.append(at)


def touches(path: str, changed: Iterable[str]) -> bool:
    """Whether a finding at ``path`` is about a changed part: one of the two lies inside the other."""
    for c in changed:
        if inside(path, c) or inside(c, path):
            return True
    return False


def inside(inner: str, outer: str) -> bool:
    """Whether the JSON Pointer ``inner`` is ``outer`` or lies within it."""
    return inner == outer or outer == "" or inner.startswith(outer + "/")


def identity_keys(obj: Any) -> frozenset[str]:
    """The keys under which the topology files what ``obj`` owns (see :func:`owner_keys`):
    its uid, and its kind and name for what is linked to it by name rather than by uid
    (a Deployment's ReplicaSets, the RayCluster and pods KubeRay makes for a RayJob)."""
    meta = _meta(obj)
    keys: set[str] = set()
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        keys.add(uid)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    name, namespace = meta.get("name"), meta.get("namespace")
    if isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str) and name:
        group = api_version.rpartition("/")[0]
        keys.add(_name_key(group, kind, namespace if isinstance(namespace, str) else "", name))
    return frozenset(keys)


def _name_key(group: str, kind: str, namespace: str, name: str) -> str:
    return f"{group}/{kind}:{namespace}/{name}"


def owner_keys(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of whoever owns a pod or pod group: its controller's uid, and the name key of
    the object a name links it to (a ReplicaSet's Deployment, a KubeRay root resource)."""
    meta = _meta(obj)
    keys: list[str] = []
    ref = _controller_reference(obj)
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    labels = meta.get("labels")
    labels = labels if _is_mapping(labels) else {}
    if ref is not None:
        uid = ref.get("uid")
        if isinstance(uid, str) and uid:
            keys.append(uid)
        owner = ref.get("name")
        pod_hash = labels.get(POD_TEMPLATE_HASH_LABEL)
        if (ref.get("kind") == "ReplicaSet" and isinstance(owner, str) and isinstance(pod_hash, str)
                and pod_hash and owner.endswith("-" + pod_hash)):
            keys.append(_name_key("apps", "Deployment", namespace, owner[: -len(pod_hash) - 1]))
    origin_kind, origin_name = labels.get(RAY_ORIGIN_KIND_LABEL), labels.get(RAY_ORIGIN_NAME_LABEL)
    if isinstance(origin_kind, str) and isinstance(origin_name, str) and origin_kind and origin_name:
        keys.append(_name_key("ray.io", origin_kind, namespace, origin_name))
    return tuple(keys)
