"""What an audit judges: the objects at the top of each ownership tree, and which of them wait.

Everything listed from a cluster (or read from a snapshot) is indexed by uid and each object
is walked up its owner references to the highest object gpugate models (a row of the kinds
table). That object is the *subject*: it is judged once, never its Jobs, pods or pod groups
(their controller made them from its templates). A subject is *pending* when its tree holds
a pod the scheduler has not bound, a Volcano or KAI pod group that is Pending or Inqueue, a
Kueue Workload without an admission, or when it is suspended under a Kueue queue (Kueue
holds a job suspended until its quota is reserved).

What the cluster's own components say about it (a pod's ``PodScheduled`` condition, a pod
group's or Kueue Workload's conditions) is kept beside it, word for word, so that a reader
can compare it with gpugate's verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.changes import identity_keys, made_by_controller
from policies.findings import ObjectRef
from policies.kinds import KUEUE_QUEUE_LABEL, KindSpec, kind_spec
from policies.workload import object_ref

__all__ = ["Subject", "find_subjects", "evaluable"]

# Objects whose pods are placed on their node by design (a DaemonSet's, a static pod's
# mirror): never a pending workload of gpugate's.
_NODE_BOUND_OWNERS = frozenset({"DaemonSet", "Node"})
# Pod groups (apiVersion group, kind) -> the scheduler that says why one is held back; the
# phases in which it is (Inqueue: admitted by its queue, its pods not all placed yet).
_GROUP_PENDING_PHASES = frozenset({"Pending", "Inqueue"})
_POD_GROUPS = {("scheduling.volcano.sh", "PodGroup"): "volcano", ("scheduling.run.ai", "PodGroup"): "kai"}
_KUEUE_WORKLOAD = ("kueue.x-k8s.io", "Workload")
_NOT_ADMITTED = "not admitted by Kueue"
# Where a suspended object says so (a batch Job, JobSet, RayJob; Kubeflow's runPolicy).
_SUSPEND_PATHS = (("spec", "suspend"), ("spec", "runPolicy", "suspend"))


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, (dict, Mapping)) else {}    # a dict first: no ABC check


def _group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    return group, kind if isinstance(kind, str) else ""


def _owner_refs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Its owner references, the controller's first."""
    refs = _meta(obj).get("ownerReferences")
    if type(refs) is not list or not refs:
        return []
    found = [r for r in refs if isinstance(r, (dict, Mapping))]
    return found if len(found) < 2 else sorted(found, key=lambda r: r.get("controller") is not True)


def _uid(obj: Mapping[str, Any]) -> str:
    uid = _meta(obj).get("uid")
    return uid if isinstance(uid, str) else ""


def _spec_of(obj: Mapping[str, Any]) -> KindSpec | None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return kind_spec(api_version, kind)


@dataclass
class Subject:
    """One object at the top of its ownership tree, and what its tree holds."""

    doc: dict[str, Any]
    ref: ObjectRef
    spec: KindSpec
    unscheduled: int = 0            # pods of its tree no node is bound to
    bound: int = 0                  # pods of its tree bound to a node
    # it and everything below it (its Jobs, pods, pod groups, Kueue Workloads)
    tree: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # why it counts as pending: the states found in its tree, in words
    held_by: list[str] = field(default_factory=list)
    # what the cluster's components say about it (scheduler, Volcano, Kueue), word for word
    system_says: list[str] = field(default_factory=list)
    since: str = ""                 # creationTimestamp of its oldest unscheduled pod, else its own
    holding_group: bool = False     # a pod group of its tree holds queue room (Inqueue/Running)
    kueue_admitted: bool = False    # a Kueue Workload of its tree has an admission

    @property
    def pending(self) -> bool:
        return bool(self.held_by)

    @property
    def kind_label(self) -> str:
        return self.spec.label

    @property
    def uid(self) -> str:
        return _uid(self.doc)

    def held_keys(self) -> frozenset[str]:
        """The keys its pods and pod groups are filed under in the topology
        (:func:`policies.changes.identity_keys` of its tree)."""
        keys: set[str] = set()
        for obj in self.tree:
            keys |= identity_keys(obj)
        return frozenset(keys)


def _suspended(obj: Mapping[str, Any]) -> bool:
    for path in _SUSPEND_PATHS:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is True:
            return True
    return False


def _condition_words(obj: Mapping[str, Any], types: Iterable[str]) -> list[str]:
    """The messages of the conditions of ``types`` that hold an object back."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    words: list[str] = []
    wanted = set(types)
    for c in conditions if isinstance(conditions, list) else []:
        if not isinstance(c, Mapping) or c.get("type") not in wanted:
            continue
        message, reason = c.get("message"), c.get("reason")
        text = message if isinstance(message, str) and message else reason
        if isinstance(text, str) and text:
            words.append(text.strip())
    return words


def _condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else []))


def _pod_state(pod: Mapping[str, Any]) -> str:
    """``bound``, ``unscheduled`` or ``done`` (finished, or being deleted)."""
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, (dict, Mapping)) else None
    if phase in ("Succeeded", "Failed") or _meta(pod).get("deletionTimestamp"):
        return "done"
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, (dict, Mapping)) else None
    return "bound" if isinstance(node, str) and node else "unscheduled"


def _note(found: list[str], text: str) -> None:
    if text not in found:
        found.append(text)


class _Trees:
    """The objects of a cluster by uid, with each object's children and its top."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self.by_uid: dict[str, dict[str, Any]] = {}
        self.objects: list[dict[str, Any]] = []
        with_owners: list[dict[str, Any]] = []
        for obj in objects:     # (one pass reading each object's metadata once: 100,000s of them)
            if not isinstance(obj, dict):
                continue
            self.objects.append(obj)
            meta = _meta(obj)
            uid = meta.get("uid")
            if uid and isinstance(uid, str):
                self.by_uid[uid] = obj
            if meta.get("ownerReferences"):
                with_owners.append(obj)
        self.children: dict[int, list[dict[str, Any]]] = {}     # by id() of the owner
        self.parent: dict[int, dict[str, Any]] = {}
        self.owned: set[int] = set()        # objects with owner references, seen or not
        self.node_bound: set[int] = set()   # pods of a DaemonSet or a node
        for obj in with_owners:
            refs = _owner_refs(obj)
            if not refs:
                continue
            self.owned.add(id(obj))
            if any(r.get("kind") in _NODE_BOUND_OWNERS for r in refs):
                self.node_bound.add(id(obj))
            for ref in refs:
                owner = self.by_uid.get(ref.get("uid") or "")
                if owner is not None and owner is not obj:
                    self.children.setdefault(id(owner), []).append(obj)
                    self.parent[id(obj)] = owner
                    break
        # id -> the highest modeled object at or above it (None: none); the pods of one owner
        # share their walk up
        self._highest: dict[int, dict[str, Any] | None] = {}

    def top(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The highest modeled object above ``obj`` (``obj`` itself when nothing above is);
        None when a DaemonSet or a node owns it."""
        if id(obj) in self.node_bound:
            return None
        chain: list[dict[str, Any]] = []
        on_chain: set[int] = set()
        found: dict[str, Any] | None = None
        current: dict[str, Any] | None = obj
        while current is not None and id(current) not in on_chain:   # (an owner cycle ends the walk)
            if id(current) in self._highest:
                found = self._highest[id(current)]
                break
            on_chain.add(id(current))
            chain.append(current)
            current = self.parent.get(id(current))
        for above in reversed(chain):
            if found is None and _spec_of(above) is not None:
                found = above
            self._highest[id(above)] = found
        return self._highest[id(obj)]

    def tree(self, top: dict[str, Any]) -> list[dict[str, Any]]:
        """``top`` and everything below it."""
        out, stack, seen = [], [top], {id(top)}
        while stack:
            obj = stack.pop()
            out.append(obj)
            for child in self.children.get(id(obj), ()):
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append(child)
        return out


def find_subjects(objects: Iterable[dict[str, Any]]) -> list[Subject]:
    """Every subject of the objects (pending or not), in the order first met: the top of
    each ownership tree that gpugate models. Objects no pod runs under (queues, nodes,
    runtimes) are subjects too: the background scan judges them with the lint rules."""
    trees = _Trees(objects)
    subjects: dict[int, Subject] = {}
    seen: set[int] = set()
    for obj in trees.objects:
        top = trees.top(obj)
        if top is None or id(top) in seen:
            continue
        seen.add(id(top))
        spec = _spec_of(top)
        if spec is None or _meta(top).get("deletionTimestamp"):
            continue    # not modeled, or going away: nothing of it is to run
        subject = _subject(top, spec, trees.tree(top))
        if id(top) in trees.owned and not subject.pending:
            # made by a controller the objects do not show (a ReplicaSet's pods in a snapshot of
            # pods alone): its template is that controller's, judged there, not pod by pod
            continue
        subjects[id(top)] = subject
    return list(subjects.values())


def _subject(top: dict[str, Any], spec: KindSpec, tree: list[dict[str, Any]]) -> Subject:
    subject = Subject(top, object_ref(top), spec, tree=tree)
    oldest = ""
    group_phases: list[str] = []
    for obj in tree:
        group_kind = _group_kind(obj)
        if group_kind == ("", "Pod"):
            state = _pod_state(obj)
            if state == "bound":
                subject.bound += 1
            elif state == "unscheduled":
                subject.unscheduled += 1
                created = _meta(obj).get("creationTimestamp")
                if isinstance(created, str) and (not oldest or created < oldest):
                    oldest = created
                for words in _condition_words(obj, ("PodScheduled",)):
                    _note(subject.system_says, f"scheduler: {words}")
        elif group_kind in _POD_GROUPS:
            status = obj.get("status")
            phase = status.get("phase") if isinstance(status, Mapping) else None
            if phase in _GROUP_PENDING_PHASES:
                group_phases.append(phase)
                for words in _condition_words(obj, ("Unschedulable",)):
                    _note(subject.system_says, f"{_POD_GROUPS[group_kind]}: {words}")
            if phase in ("Inqueue", "Running"):
                subject.holding_group = True
        elif group_kind == _KUEUE_WORKLOAD:
            status = obj.get("status")
            admitted = isinstance(status, Mapping) and bool(status.get("admission"))
            subject.kueue_admitted |= admitted
            if not admitted and not _condition_true(obj, "Finished"):
                _note(subject.held_by, _NOT_ADMITTED)
                for words in _condition_words(obj, ("QuotaReserved", "Admitted")):
                    _note(subject.system_says, f"kueue: {words}")
    for phase in group_phases:
        # Inqueue with pods made: they are being placed or started (any unscheduled one is counted)
        if phase == "Pending" or not (subject.unscheduled or subject.bound):
            _note(subject.held_by, f"pod group {phase}")
    if subject.unscheduled:
        plural = "s" * (subject.unscheduled != 1)
        subject.held_by.insert(0, f"{subject.unscheduled} pod{plural} not scheduled")
    labels = _meta(top).get("labels")
    if _suspended(top) and isinstance(labels, Mapping) and labels.get(KUEUE_QUEUE_LABEL) \
            and _NOT_ADMITTED not in subject.held_by:    # (its Workload says so already)
        subject.held_by.append("suspended under a Kueue queue")
    created = _meta(top).get("creationTimestamp")
    subject.since = oldest or (created if isinstance(created, str) else "")
    return subject


def evaluable(subject: Subject) -> dict[str, Any]:
    """The subject's object as the engine judges it: an object whose controller gpugate does
    not see (an Argo Workflow's Job) is judged as if made by hand, because nothing above it
    was judged; anything else as it is."""
    doc = subject.doc
    if not made_by_controller(doc):
        return doc
    meta = {k: v for k, v in _meta(doc).items() if k != "ownerReferences"}
    return {**doc, "metadata": meta}
