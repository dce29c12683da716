"""Objects that other objects name: the Workload API's Workloads and PodGroups (the gang a
Pod belongs to), Kubeflow Trainer's runtimes (a TrainJob's pod template) and DRA's
ResourceClaims and ResourceClaimTemplates (a pod's ``spec.resourceClaims``).

gpugate judges one object at a time. When the linted files also hold the objects an object
names, the front end indexes them (:meth:`References.of`) and judges the objects inside
:func:`scope`; :func:`policies.workload.build_workload` then reads what they say. Outside a
scope, the engine scopes the objects the one member cluster holds
(``Topology.named_references``: the webhook's live view, a ``--cluster`` snapshot); with
neither, nothing is resolved, and each object is judged on what it says itself. Document
order does not matter.

What the kinds table says a kind names (:class:`policies.kinds.GangRef`,
:class:`policies.kinds.RuntimeSource`) is data; this module only looks things up. An
ambiguous name (two objects of one kind, namespace and name) resolves to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from policies import workload_api
from policies.kinds import KINDS, GangRef, KindSpec, RuntimeSource, kind_spec
from policies.shapes import MISSING, resolve

__all__ = ["REFERABLE", "may_hold_referable", "References", "scope", "current", "gang_minimum",
           "runtime_template",
           "workload_api_gang_min"]

# (group, kind, namespace or None, name)
_Key = tuple[str, str, str | None, str]
_AMBIGUOUS: Any = object()

# (group, kind) of every object another kind may name: all a front end needs to index.
def _referable() -> frozenset[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for spec in KINDS:
        for ref in spec.gang_refs:
            group, _, kind = ref.kind.rpartition("/")
            found.add((group, kind))
        runtime = spec.derived.runtime if spec.derived is not None else None
        if runtime is not None:
            found |= {(runtime.default_group, kind) for kind in runtime.kinds}
    return frozenset(found)


# Besides what the kinds table names: the ResourceClaims and ResourceClaimTemplates a pod's
# spec.resourceClaims names, and ComputeDomains, which make such templates (policies.dra.claims).
REFERABLE = _referable() | {("resource.k8s.io", "ResourceClaim"),
                            ("resource.k8s.io", "ResourceClaimTemplate"),
                            ("resource.nvidia.com", "ComputeDomain")}
# Text that any file holding a referable object contains: its apiVersion's group and slash
# ("scheduling.k8s.io/", not the group an RBAC rule or a CRD names) and its kind's name.
# Files without both, nearly all (a Volcano PodGroup names no scheduling.k8s.io group), are
# judged as a stream, document after document, and read once per run.
_MARKERS = tuple((group + "/", kind) for group, kind in sorted(REFERABLE))
_BYTE_MARKERS = tuple((group.encode(), kind.encode()) for group, kind in _MARKERS)


def may_hold_referable(text: str | bytes) -> bool:
    """False when ``text`` certainly holds no object another may name (no ``group/`` of an
    apiVersion and kind of :data:`REFERABLE` both occur in it)."""
    if isinstance(text, bytes):
        return any(kind in text and group in text for group, kind in _BYTE_MARKERS)
    return any(kind in text and group in text for group, kind in _MARKERS)


@dataclass
class References:
    """The named objects of one file, by group, kind, namespace and name."""

    objects: dict[_Key, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, docs: Iterable[Any]) -> References:
        """Index ``docs`` (built documents; anything not a named Kubernetes object is left out)."""
        found = cls()
        for doc in docs:
            key = _key_of(doc)
            if key is not None and key[:2] in REFERABLE:
                found.objects[key] = _AMBIGUOUS if key in found.objects else doc
        return found

    def find(self, group: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object of that group, kind and name (in ``namespace`` unless the kind is
        cluster-scoped); None when the file holds none, or more than one."""
        spec = kind_spec(f"{group}/v" if group else "v1", kind)
        if spec is not None and spec.cluster_scoped:
            namespace = None
        found = self.objects.get((group, kind, namespace, name))
        return None if found is None or found is _AMBIGUOUS else found  # type: ignore[no-any-return]


def _key_of(doc: Any) -> _Key | None:
    if not isinstance(doc, dict):
        return None
    api_version, kind, meta = doc.get("apiVersion"), doc.get("kind"), doc.get("metadata")
    if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(meta, dict)):
        return None
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return None
    group = api_version.rpartition("/")[0]
    spec = kind_spec(api_version, kind)
    if (spec is not None and spec.cluster_scoped) or not isinstance(namespace, str) or not namespace:
        namespace = None
    return group, kind, namespace, name


_SCOPE: ContextVar[References | None] = ContextVar("gpugate_references", default=None)


@contextmanager
def scope(references: References | None) -> Iterator[None]:
    """Judge the objects of one file with ``references`` resolvable (``None``: nothing is)."""
    token = _SCOPE.set(references)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current() -> References | None:
    """The references of the file being judged, or None."""
    return _SCOPE.get()


def _namespace(doc: dict[str, Any]) -> str | None:
    namespace = resolve(doc, "/metadata/namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def _text(doc: dict[str, Any], pointer: str) -> str | None:
    value = resolve(doc, pointer) if pointer else MISSING
    return value if isinstance(value, str) and value else None


def workload_api_gang_min(doc: dict[str, Any], spec: KindSpec, derived: int) -> int:
    """The gang minimum the Workload API gives ``doc``: held by another object of the file
    being judged (a Pod's Workload group or PodGroup), or carried by ``doc`` itself (a Job's
    gang policy, whose unset minCount means all its pods); else ``derived``.

    The caller keeps it without a path, so GG401 does not compare it with the pods: another
    object's count is for the whole gang, and a Job's is cleared where its gate is off."""
    held = gang_minimum(doc, spec, current())
    if held is not None:
        return held[0]
    if spec.gang_policy is not None:
        policy = resolve(doc, spec.gang_policy)
        if isinstance(policy, dict) and isinstance(policy.get("gang"), dict):
            return workload_api.gang_minimum(policy) or derived
    return derived


def gang_minimum(doc: dict[str, Any], spec: KindSpec, refs: References | None) -> tuple[int, str] | None:
    """(gang minimum, JSON Pointer of the reference) of a pod whose gang another object of the
    file holds; None when the pod names none, or the file does not hold it."""
    if refs is None:
        return None
    for ref in spec.gang_refs:
        found = _gang_of(doc, ref, refs)
        if found is not None:
            return found, ref.name
    return None


def _gang_of(doc: dict[str, Any], ref: GangRef, refs: References) -> int | None:
    name = _text(doc, ref.name)
    if name is None:
        return None
    group, _, kind = ref.kind.rpartition("/")
    holder = refs.find(group, kind, _namespace(doc), name)
    if holder is None:
        return None
    if ref.group:
        member = _text(doc, ref.group)
        return None if member is None else workload_api.group_minimum(holder, member)
    return workload_api.podgroup_minimum(holder)


@dataclass(frozen=True)
class RuntimePods:
    """What a runtime says of the pods an object asks for: the pod template of its step and
    its pod count (None when it sets none)."""

    template: dict[str, Any]
    count: int | None


def runtime_template(doc: dict[str, Any], source: RuntimeSource,
                     refs: References | None) -> RuntimePods | None:
    """The pod template and count the runtime ``doc`` names gives its pods, when the file
    holds that runtime and it has the step; None otherwise."""
    if refs is None:
        return None
    ref = resolve(doc, source.ref)
    if not isinstance(ref, dict):
        return None
    name = ref.get("name")
    kind = ref.get("kind") or source.default_kind
    group = ref.get("apiGroup") or source.default_group
    if not (isinstance(name, str) and name and isinstance(kind, str) and isinstance(group, str)):
        return None
    runtime = refs.find(group, kind, _namespace(doc), name)
    if runtime is None:
        return None
    jobs = resolve(runtime, source.jobs)
    if not isinstance(jobs, list):
        return None
    job = _step(jobs, source)
    if job is None:
        return None
    template = _nested(job, source.template)
    if not isinstance(template, dict):
        return None
    count = resolve(runtime, source.count)
    return RuntimePods(template, count if type(count) is int and count >= 0 else None)


def _step(jobs: list[Any], source: RuntimeSource) -> dict[str, Any] | None:
    """The job carrying the step label, else the one named ``step_name``."""
    label, value = source.step_label
    named = None
    for job in jobs:
        if not isinstance(job, dict):
            continue
        labels = _nested(job, "template/metadata/labels")
        if isinstance(labels, dict) and labels.get(label) == value:
            return job
        if named is None and job.get("name") == source.step_name:
            named = job
    return named


def _nested(entry: dict[str, Any], keys: str) -> Any:
    node: Any = entry
    for key in keys.split("/"):
        if not isinstance(node, dict):
            return MISSING
        node = node.get(key, MISSING)
    return node
