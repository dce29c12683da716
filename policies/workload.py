"""The workload model: any supported object normalised into one :class:`Workload`.

Built from the kind table in :mod:`policies.kinds`; this module never branches on kind.
A field of the wrong type where the model needs it raises :class:`ShapeError`, which
the engine reports as GG002 (invalid-object).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from policies import references, specfacts
from policies.derived import derived_pods
from policies.findings import ObjectRef
from policies.kinds import COMMON_QUEUES, DEFAULT_SCHEDULER, KindSpec, PodSetSource, kind_spec
from policies.labelselectors import requirements, selects_namespace
from policies.memo import Scratch
from policies.pointers import escape_pointer, join_pointer, unescape_pointer
from policies.resources import pod_requests
from policies.shapes import MISSING, ShapeError, expect_count, expect_list, expect_mapping, resolve
from policies.shapes import type_name as _type_name

__all__ = ["ShapeError", "PodSet", "QueueRef", "Workload", "build_workload", "resolve", "MISSING"]


def _string_map(value: Any, path: str, what: str) -> dict[str, str]:
    """Labels or annotations: strings to strings. A null value is valid (the API server
    reads it as the empty string; ``kubectl apply`` as "remove"), so it is left out of
    the map the model reads."""
    mapping = expect_mapping(value, path, what)
    nulls = False
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise ShapeError(f"{what} keys must be strings, not {_type_name(key)} {key!r}", path)
        if item is None:
            nulls = True
        elif not isinstance(item, str):
            raise ShapeError(
                f"{what} values must be strings: {key} is {_type_name(item)} {item!r} (quote it)",
                join_pointer(path, key))
    return without_nulls(mapping) if nulls else mapping


def without_nulls(mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` without its null values (a copy only when it has some)."""
    for item in mapping.values():
        if item is None:
            return {k: v for k, v in mapping.items() if v is not None}
    return mapping


@dataclass
class PodSet:
    """One family of identical pods the workload will create."""

    name: str
    replicas: int               # pods at full size
    gang_count: int             # pods of this set counted in the gang minimum
    counted: bool               # False: outside the gang (RayJob submitter)
    template: dict[str, Any]    # {metadata, spec}
    path: str                   # JSON Pointer of the template
    scheduler: str
    _requests: dict[str, Fraction] | None = field(default=None, repr=False)
    _request_errors: list[tuple[str, str]] = field(default_factory=list, repr=False)
    # Derived facts several rules ask for, computed once: ``memo`` for this pod set's own
    # (those that embed its JSON Pointer or depend on the workload), ``facts`` for those
    # that depend only on the pod spec's content: pod sets whose specs are exactly equal
    # share one ``facts`` (:func:`policies.specfacts.spec_facts`), within an object and across objects. So
    # facts hold no part of the document (it may be changed later), and keys of facts that
    # depend on a policy carry its :func:`policies.specfacts.facts_token`. Read only.
    memo: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    facts: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    # Views of the template every rule reads, worked out once: the template is not changed
    # while a PodSet exists (the engine builds a new workload from a patched object).
    spec: dict[str, Any] = field(init=False, repr=False, compare=False)
    spec_path: str = field(init=False, repr=False, compare=False)
    metadata: dict[str, Any] = field(init=False, repr=False, compare=False)
    annotations: dict[str, str] = field(init=False, repr=False, compare=False)
    labels: dict[str, str] = field(init=False, repr=False, compare=False)
    # (JSON Pointer, container), init containers first, and how many of them are init ones.
    _containers: tuple[tuple[str, dict[str, Any]], ...] | None = field(
        default=None, init=False, repr=False, compare=False)
    _init_containers: int = field(default=0, init=False, repr=False, compare=False)
    _blind: Scratch | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spec = self.template.get("spec")
        self.spec = spec if isinstance(spec, dict) else {}
        self.spec_path = self.path + "/spec"
        meta = self.template.get("metadata")
        self.metadata = meta if isinstance(meta, dict) else {}
        annotations = self.metadata.get("annotations")
        self.annotations = without_nulls(annotations) if isinstance(annotations, dict) else {}
        labels = self.metadata.get("labels")
        self.labels = without_nulls(labels) if isinstance(labels, dict) else {}

    def containers(self, init: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
        """(JSON Pointer, container) for every container, init containers first."""
        found = self._containers
        if found is None:
            in_spec, self._init_containers = spec_containers(self.spec)
            base = self.spec_path
            found = self._containers = tuple([(base + path, c) for path, c in in_spec])
        return iter(found if init else found[self._init_containers:])

    @property
    def blind_facts(self) -> Scratch:
        """Facts that read no ``cpu`` or ``memory`` amount of the pod spec's containers: shared
        by pod specs equal but for those amounts (a sweep of CPU requests, one template),
        within an object and across objects (:func:`policies.specfacts.blind_facts`). The same rules as for
        ``facts``: no part of the document, a policy's facts token in the keys of facts that
        depend on it. A fact that reads a requested amount (even through the policy: a GPU
        resource named ``cpu``) belongs in ``facts``. Read only."""
        found = self._blind
        if found is None:
            facts = self.facts
            found = facts.get(specfacts.BLIND_FACTS_KEY)
            if found is None:
                found = facts[specfacts.BLIND_FACTS_KEY] = specfacts.blind_facts(self.spec)
            self._blind = found
        return found

    @property
    def requests(self) -> dict[str, Fraction]:
        """The effective pod request the scheduler sees (see :mod:`policies.resources`)."""
        if self._requests is None:
            # worked out from the spec alone (errors relative to it), once per shared facts
            found = self.facts.get("pod_requests")
            if found is None:
                found = self.facts["pod_requests"] = pod_requests(self.spec, "")
            self._requests, errors = found
            if errors:
                base = self.spec_path
                self._request_errors = [(base + path, reason) for path, reason in errors]
        return self._requests  # type: ignore[return-value]

    @property
    def request_errors(self) -> list[tuple[str, str]]:
        """(JSON Pointer, reason) for every quantity that does not parse."""
        _ = self.requests
        return self._request_errors


def spec_containers(spec: dict[str, Any]) -> tuple[tuple[tuple[str, dict[str, Any]], ...], int]:
    """((JSON Pointer from the pod spec, container), ...) with init containers first, and
    how many of them are init containers."""
    found: list[tuple[str, dict[str, Any]]] = []
    items = spec.get("initContainers")
    if isinstance(items, list):
        for i, c in enumerate(items):  # a loop, not a generator: this runs per pod spec
            if isinstance(c, dict):
                found.append((f"/initContainers/{i}", c))
    inits = len(found)
    items = spec.get("containers")
    if isinstance(items, list):
        for i, c in enumerate(items):
            if isinstance(c, dict):
                found.append((f"/containers/{i}", c))
    return tuple(found), inits


@dataclass(frozen=True)
class QueueRef:
    name: str
    system: str                 # volcano | kueue | kai | yunikorn (policies.kinds.QueueSource.system)
    path: str                   # where it was written ("" when defaulted)
    explicit: bool


@dataclass
class Workload:
    doc: dict[str, Any]
    spec: KindSpec
    ref: ObjectRef
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_sets: list[PodSet]
    gang_min: int
    gang_min_path: str          # "" when derived from replicas
    queues: list[QueueRef]
    # Values derived from the object by several rules (gpu, groups, usage, custom checks).
    memo: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    # Pods asked for without templates of their own (policies.derived: a TrainJob's nodes):
    # in the gang, so feasibility places them, but not in ``pod_sets``, so that no rule
    # patches them or points into them.
    derived: list[PodSet] = field(default_factory=list, repr=False, compare=False)
    # The pod sets counted in the gang (read only: shared by every caller). An attribute,
    # not a property: rules ask for it about ten times per object.
    gang_pod_sets: list[PodSet] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.gang_pod_sets = [p for p in self.pod_sets if p.counted]
        if self.derived:
            self.gang_pod_sets += [p for p in self.derived if p.counted]

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def namespace(self) -> str | None:
        return self.ref.namespace

    @property
    def name(self) -> str:
        return self.ref.name or "<unnamed>"

    @property
    def queue(self) -> QueueRef | None:
        """The queue the gang is admitted through: an explicit one first."""
        for q in self.queues:
            if q.explicit:
                return q
        return self.queues[0] if self.queues else None

    @property
    def schedulers(self) -> set[str]:
        return {p.scheduler for p in self.pod_sets}

    @property
    def total_replicas(self) -> int:
        return sum(p.replicas for p in self.gang_pod_sets)

    @property
    def pytorch_style(self) -> bool:
        if self.spec.pytorch_style:
            return True
        return self.spec.pytorch_if is not None and resolve(self.doc, self.spec.pytorch_if) is not MISSING

    def kueue_reads_queue(self, queues: Mapping[str, Any]) -> bool | None:
        """Whether Kueue reads this object's queue label, under the policy's ``queues`` section:
        its kind's integration (:attr:`KindSpec.kueue_framework`) is among
        ``kueueFrameworks`` (Kueue's ``integrations.frameworks``), its API version one the
        integration handles, and its namespace one ``kueueManagedJobsNamespaceSelector`` selects
        (Kueue's ``managedJobsNamespaceSelector``). Kueue ignores the label of any other object.

        None: it depends on labels of the namespace other than its name, which the object does
        not say (a cluster snapshot may). An object without a namespace is taken to be bound for
        one Kueue manages, as ``exclude.namespaces`` takes it to be bound for one not excluded."""
        spec = self.spec
        if not spec.kueue_framework or spec.kueue_framework not in queues["kueueFrameworks"]:
            return False
        if spec.kueue_versions:
            api_version = self.doc.get("apiVersion")
            if not isinstance(api_version, str) or api_version.rpartition("/")[2] not in spec.kueue_versions:
                return False
        namespace = self.namespace
        selector = queues["kueueManagedJobsNamespaceSelector"]
        if not selector or namespace is None:
            return True
        return selects_namespace(requirements(selector), namespace, None)

    def __str__(self) -> str:
        return str(self.ref)


def object_ref(doc: Mapping[str, Any]) -> ObjectRef:
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    ns, name = meta.get("namespace"), meta.get("name") or meta.get("generateName")
    return ObjectRef(str(doc.get("apiVersion", "")), str(doc.get("kind", "")),
                     ns if isinstance(ns, str) else None, name if isinstance(name, str) else None)


def is_kubernetes_object(doc: Any) -> bool:
    """A mapping with string apiVersion and kind: anything else is skipped, not judged."""
    return (isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str)
            and isinstance(doc.get("kind"), str))


def build_workload(doc: dict[str, Any], ref: ObjectRef | None = None) -> Workload | None:
    """The workload for a Kubernetes object, or None for kinds gpugate does not model.

    Raises :class:`ShapeError` when a field the model needs has the wrong type.
    ``ref`` is ``object_ref(doc)`` when the caller has it already.
    """
    spec = kind_spec(doc["apiVersion"], doc["kind"])
    if spec is None:
        return None
    meta = expect_mapping(doc.get("metadata", MISSING), "/metadata", "metadata")
    labels = _string_map(meta.get("labels", MISSING), "/metadata/labels", "metadata.labels")
    annotations = _string_map(meta.get("annotations", MISSING), "/metadata/annotations",
                              "metadata.annotations")
    expect_mapping(doc.get("spec", MISSING), "/spec", "spec")

    override = _scheduler_at(doc, spec.scheduler_override)
    object_default = _scheduler_at(doc, spec.scheduler) or spec.default_scheduler
    autoscaling = spec.autoscaling is not None and resolve(doc, spec.autoscaling) is True
    pod_sets: list[PodSet] = []
    for source in spec.pod_sets:
        pod_sets.extend(_pod_sets(doc, source, override, object_default, autoscaling))

    derived = list(_derived_pod_sets(doc, spec, object_default)) if spec.derived is not None else []
    gang_min, gang_min_path = _gang_min(doc, spec, pod_sets + derived if derived else pod_sets)
    if (spec.gang_refs or spec.gang_policy) and not gang_min_path:
        gang_min = references.workload_api_gang_min(doc, spec, gang_min)
    return Workload(doc, spec, ref or object_ref(doc), labels, annotations, pod_sets, gang_min, gang_min_path,
                    _queues(doc, spec, pod_sets), derived=derived)


def _derived_pod_sets(doc: dict[str, Any], spec: KindSpec, object_default: str) -> Iterator[PodSet]:
    """The pod sets of :func:`policies.derived.derived_pods`, counted in the gang."""
    assert spec.derived is not None
    for name, path, count, template in derived_pods(doc, spec.derived):
        scheduler = _template_scheduler(template) or object_default
        yield PodSet(name, count, count, True, template, path, scheduler or DEFAULT_SCHEDULER)


def _scheduler_at(doc: dict[str, Any], pointer: str | None) -> str | None:
    if pointer is None:
        return None
    value = resolve(doc, pointer)
    if value is MISSING or value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ShapeError(f"scheduler name must be a string, not {_type_name(value)}", pointer)
    return value


def _template_scheduler(template: dict[str, Any]) -> str | None:
    """``_scheduler_at(template, "/spec/schedulerName")``, without parsing the pointer."""
    spec = template.get("spec")
    if not (isinstance(spec, dict) or isinstance(spec, Mapping)) or "schedulerName" not in spec:
        return None
    value = spec["schedulerName"]
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ShapeError(f"scheduler name must be a string, not {_type_name(value)}", "/spec/schedulerName")
    return value


# Real workloads have a handful of pod sets (tasks, replica types, worker groups). Every
# rule is linear in them and a review is judged on the webhook's event loop, so a 4 MiB
# body of 27,000 one-line tasks would hold it for seconds: beyond this, the object is
# refused as out of shape (GG002) before any rule runs.
MAX_POD_SETS = 256


def _bounded(entries: Any, path: str, what: str) -> Any:
    if len(entries) > MAX_POD_SETS:
        raise ShapeError(f"{what} has {len(entries)} entries; gpugate judges workloads of at most "
                         f"{MAX_POD_SETS} pod sets", path)
    return entries


def _entries(doc: dict[str, Any], source: PodSetSource) -> Iterator[tuple[str, str, Any]]:
    """(name, JSON Pointer, entry) for each entry of a pod-set source."""
    value = resolve(doc, source.at)
    what = source.at.rsplit("/", 1)[-1] or "object"
    if source.layout == "single":
        if value is MISSING or value is None:
            return
        yield source.name, source.at, expect_mapping(value, source.at, what)
    elif source.layout == "list":
        for i, entry in enumerate(_bounded(expect_list(value, source.at, what), source.at, what)):
            path = f"{source.at}/{i}"
            if not isinstance(entry, dict):
                entry = expect_mapping(entry, path, f"{what}[{i}]")
            name = entry.get(source.name_key)
            yield (name if isinstance(name, str) and name else f"{what}[{i}]"), path, entry
    else:
        for key, entry in _bounded(expect_mapping(value, source.at, what), source.at, what).items():
            path = source.at + "/" + escape_pointer(str(key))
            if not isinstance(entry, dict):
                entry = expect_mapping(entry, path, f"{what}.{key}")
            yield str(key), path, entry


def _pod_sets(doc: dict[str, Any], source: PodSetSource, override: str | None, object_default: str,
              autoscaling: bool) -> Iterator[PodSet]:
    for name, path, entry in _entries(doc, source):
        if source.template:
            key = source.template
            template = _nested(entry, key, path) if "/" in key else entry.get(key)
            if source.template_required and (template is None or template is MISSING):
                continue
            template_path = f"{path}/{key}"
            if not isinstance(template, dict):
                template = expect_mapping(template, template_path, f"{name}.{key}")
        else:
            template_path, template = path, entry
        facts = specfacts.spec_facts(template.get("spec"))
        if facts is None or "shape checked" not in facts:
            _check_template(template, template_path)
            if facts is not None:
                facts["shape checked"] = True
        else:  # the same spec passed before: the metadata is this template's own
            _check_template(template, template_path, check_spec=False)

        replicas = 1
        if source.replicas is not None:
            replicas = _entry_count(entry, source.replicas, path, source.default_replicas) or 0
            if source.replicas_offset_if is None or entry.get(source.replicas_offset_if) is not None:
                replicas = max(replicas + source.replicas_offset, 0)
            if source.min_replicas is not None:
                replicas = _bounded_replicas(entry, path, source, replicas, autoscaling)
        if source.hosts is not None:
            hosts = _entry_count(entry, source.hosts, path, 1) or 0
            if source.hosts_max is not None:
                most = _entry_count(entry, source.hosts_max, path, None)
                hosts = hosts if most is None else min(hosts, most)
            replicas *= hosts
        if source.suspend is not None and entry.get(source.suspend) is True:
            replicas = 0  # a suspended group has no pods (KubeRay deletes them)
        if source.template_only:
            replicas = 0  # a template for other objects' pods: judged, never placed
        gang_count = replicas
        if source.groups is not None:  # each group is a gang of its own: the gang is one group
            replicas *= expect_count(resolve(doc, source.groups), source.groups,
                                     source.groups.rsplit("/", 1)[-1], 1) or 0
            gang_count = min(gang_count, replicas)
        if source.min_available is not None:
            own = _entry_count(entry, source.min_available, path, None)
            if own is None and source.partitions is not None:
                own = _partition_minimum(entry.get(source.partitions))
            gang_count = replicas if own is None else own

        scheduler = override or _template_scheduler(template) or object_default
        # positional: measurably cheaper than keywords for a dataclass this wide
        pod_set = PodSet(name, replicas, gang_count, source.counted, template, template_path,
                         scheduler or DEFAULT_SCHEDULER)
        if facts is not None:
            pod_set.facts = facts
        yield pod_set


def _partition_minimum(policy: Any) -> int | None:
    """``minPartitions`` x ``partitionSize`` of a partition policy, or None without a usable
    one (then the replicas count: never less than this, so never a harder gang)."""
    if not isinstance(policy, dict):
        return None
    size, least = policy.get("partitionSize"), policy.get("minPartitions", 0)
    if type(size) is int and type(least) is int and size >= 0 and least >= 0:
        return size * least
    return None


def _nested(entry: dict[str, Any], key: str, path: str) -> Any:
    """``entry``'s value at a path of keys ("template/spec/parallelism"), or MISSING; a step
    that is not a mapping is a :class:`ShapeError`."""
    node: Any = entry
    done = path
    for part in key.split("/"):
        if node is MISSING or node is None:
            return MISSING
        if not isinstance(node, dict):
            expect_mapping(node, done, done.rsplit("/", 1)[-1])
        node = node.get(part, MISSING)
        done = f"{done}/{part}"
    return node


def _entry_count(entry: dict[str, Any], key: str, path: str, default: int | None) -> int | None:
    """``expect_count`` of ``entry[key]`` (``path`` is the entry's; ``key`` may be a path of
    keys); the pointer is built only for an error."""
    value = _nested(entry, key, path) if "/" in key else entry.get(key, MISSING)
    if type(value) is int and value >= 0:  # not bool: type(True) is bool
        return value
    return expect_count(value, f"{path}/{key}", key, default)


def _check_template(template: dict[str, Any], path: str, check_spec: bool = True) -> None:
    """Raise :class:`ShapeError` where a pod template's metadata, spec, containers or their
    resources have the wrong type. The checks run on every object and pass on nearly all,
    so the paths and names for the messages are built only when one fails. (``get`` gives
    None for a missing key, which the model treats as it treats null: as unset.)
    ``check_spec=False``: the metadata only (the spec is known to pass)."""
    meta = template.get("metadata")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        expect_mapping(meta, path + "/metadata", "template metadata")
    for key, what in (("labels", "template labels"), ("annotations", "template annotations")):
        value = meta.get(key)
        if value is not None and not _is_string_map(value):
            _string_map(value, f"{path}/metadata/{key}", what)
    pod_spec = template.get("spec")
    if pod_spec is None or not check_spec:
        return
    if not isinstance(pod_spec, dict):
        expect_mapping(pod_spec, path + "/spec", "pod spec")
    for key in ("containers", "initContainers"):
        containers = pod_spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list):
            expect_list(containers, f"{path}/spec/{key}", key)
        for i, container in enumerate(containers):
            if container is None:
                continue
            if not isinstance(container, dict):
                expect_mapping(container, f"{path}/spec/{key}/{i}", f"{key}[{i}]")
            resources = container.get("resources")
            if resources is None:
                continue
            if not isinstance(resources, dict):
                expect_mapping(resources, f"{path}/spec/{key}/{i}/resources", "resources")
            for part in ("requests", "limits"):
                value = resources.get(part)
                if value is not None and not isinstance(value, dict):
                    expect_mapping(value, f"{path}/spec/{key}/{i}/resources/{part}", f"resources.{part}")


def _is_string_map(value: Any) -> bool:
    """Labels or annotations as they should be: string keys, string (or null) values."""
    if not isinstance(value, dict):
        return False
    for key, item in value.items():
        if not isinstance(key, str) or not (isinstance(item, str) or item is None):
            return False
    return True


def _bounded_replicas(entry: dict[str, Any], path: str, source: PodSetSource, desired: int,
                      autoscaling: bool) -> int:
    """KubeRay's desired replicas: ``clamp(replicas, minReplicas, maxReplicas)`` (``maxReplicas``
    wins when min > max); with autoscaling the gang is ``minReplicas`` (seed 001)."""
    if source.min_replicas is None:
        return desired
    low = expect_count(entry.get(source.min_replicas, MISSING), f"{path}/{source.min_replicas}",
                       source.min_replicas, 0) or 0
    high = None
    if source.max_replicas is not None:
        high = expect_count(entry.get(source.max_replicas, MISSING), f"{path}/{source.max_replicas}",
                            source.max_replicas, None)
    if high is not None and low > high:
        return high
    if autoscaling or desired < low:
        return low
    return desired if high is None else min(desired, high)


def _gang_min(doc: dict[str, Any], spec: KindSpec, pod_sets: list[PodSet]) -> tuple[int, str]:
    derived = sum(p.gang_count for p in pod_sets if p.counted)
    if spec.gang_min is None:
        return derived, ""
    value = resolve(doc, spec.gang_min)
    if isinstance(value, str) and value.strip().isdigit():  # annotations are strings
        value = int(value)
    if type(value) is int and value >= 0:  # the usual case (not bool: type(True) is bool)
        explicit: int | None = value
    else:
        explicit = None if value is MISSING or value is None else expect_count(
            value, spec.gang_min, unescape_pointer(spec.gang_min.rsplit("/", 1)[-1]), None)
    if explicit is None or (explicit == 0 and spec.gang_min_zero_unset):
        return (derived if pod_sets else 0), ""
    return explicit, spec.gang_min


def _queues(doc: dict[str, Any], spec: KindSpec, pod_sets: list[PodSet]) -> list[QueueRef]:
    found: list[QueueRef] = []
    # the schedulers' own queue keys, on kinds that make pods (a TrainJob's are derived)
    has_pods = bool(spec.pod_sets) or spec.derived is not None
    for source in (*spec.queues, *COMMON_QUEUES) if has_pods else spec.queues:
        if source.scope != "template":
            places = [(resolve(doc, source.at), "")]
        elif source.in_metadata is not None:  # the pod sets' own views of their metadata
            section, key = source.in_metadata
            places = [((p.labels if section == "labels" else p.annotations).get(key), p.path)
                      for p in pod_sets]
        else:
            places = [(resolve(p.template, source.at), p.path) for p in pod_sets]
        for value, base in places:
            if value is MISSING or value is None or value == "":
                continue  # an empty queue name is no name: the controller's default applies
            path = base + source.at
            if not isinstance(value, str):
                raise ShapeError(f"queue name must be a string, not {_type_name(value)}", path)
            for q in found:  # loops, not any(<generator>): this runs on every object
                if q.name == value and q.system == source.system:
                    break
            else:
                found.append(QueueRef(value, source.system, path, explicit=True))
    if spec.default_queue:
        for q in found:
            if q.system == "volcano":
                break
        else:
            found.append(QueueRef(spec.default_queue, "volcano", "", explicit=False))
    return found
