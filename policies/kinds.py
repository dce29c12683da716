"""The one table of supported kinds: where each keeps its pod templates, gang minimum,
queue and scheduler. Adding a kind is adding a row here; nothing else branches on kind.

Paths are JSON Pointers (RFC 6901) from the object's root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RAY_SCHEDULER_LABEL = "ray.io/scheduler-name"
GROUP_MIN_MEMBER_ANNOTATION = "scheduling.volcano.sh/group-min-member"
DEFAULT_SCHEDULER = "default-scheduler"
VOLCANO_SCHEDULER = "volcano"


@dataclass(frozen=True)
class PodSetSource:
    """One family of pod templates inside a kind.

    ``layout`` says what sits at ``at``: ``single`` is one entry, ``list`` a list of
    entries named by ``name_key``, ``map`` a mapping whose keys name the entries.
    ``template`` is the key of the pod template inside an entry ("" when the entry
    *is* the pod, as for a bare Pod).
    """

    at: str
    layout: Literal["single", "list", "map"] = "single"
    name: str = ""                       # fixed name for ``single``
    name_key: str = "name"               # ``list`` entries
    template: str = "template"
    replicas: str | None = "replicas"    # key in the entry; None: always one pod
    hosts: str | None = None             # Ray multi-host groups: pods per replica
    min_replicas: str | None = None      # used instead of ``replicas`` when autoscaling
    max_replicas: str | None = None      # KubeRay clamps replicas into [min, max]
    default_replicas: int = 1            # when ``replicas`` is absent (KubeRay's CRD default: 0)
    min_available: str | None = None     # per-entry gang minimum (Volcano task minAvailable)
    counted: bool = True                 # counts towards the gang minimum
    optional: bool = True                # absent is fine (RayJob without submitter template)


@dataclass(frozen=True)
class QueueSource:
    """Where a queue name may be written. ``scope`` is ``object`` or ``template``."""

    at: str
    system: Literal["volcano", "kueue"]
    scope: Literal["object", "template"] = "object"


@dataclass(frozen=True)
class KindSpec:
    group: str
    kind: str
    pod_sets: tuple[PodSetSource, ...]
    gang_min: str | None = None               # explicit gang minimum
    gang_min_zero_unset: bool = False         # 0 there means "not set" (Volcano's webhook defaults it)
    queues: tuple[QueueSource, ...] = ()
    default_queue: str | None = None          # what the controller uses when none is named
    scheduler: str | None = None              # object-level schedulerName (template overrides)
    scheduler_override: str | None = None     # wins over the templates (Ray's legacy label)
    operator_scheduler: bool = False          # an operator flag may fill an empty schedulerName
    default_scheduler: str = DEFAULT_SCHEDULER
    autoscaling: str | None = None            # flag that switches Ray groups to minReplicas
    pytorch_style: bool = False               # gpu-podaffinity acts on these
    pytorch_if: str | None = None             # ... or on objects where this path exists
    # False: a batch scheduler places these pods one by one (Volcano gives each owner a
    # PodGroup of minMember 1), so only one pod, not the whole count, is ever required.
    gang: bool = True
    resource: str = ""                        # plural, for webhook rules and RBAC
    # The pod templates cannot change once created (a Pod's spec, a batch Job's template):
    # the API server refuses an UPDATE that patches them, so nothing is injected on UPDATE.
    templates_immutable: bool = False
    # The ``scale`` subresource: the JSON Pointer its ``spec.replicas`` writes to ("" when
    # the kind has none). ``kubectl scale`` is judged as the equivalent spec change.
    scale_replicas: str = ""
    # What the kind's own admission webhook or CRD validation refuses: "module.function" of
    # policies/validation/ (rule GG601 reports it); "" when gpugate knows no such checks.
    validate: str = ""
    # A cluster-scoped object (a Volcano Queue): judged by the validating webhook alone (it has
    # nothing to inject).
    cluster_scoped: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


_TEMPLATE_VOLCANO_QUEUE = QueueSource(
    "/metadata/annotations/" + VOLCANO_QUEUE_ANNOTATION.replace("/", "~1"), "volcano", "template")
_KUEUE = QueueSource("/metadata/labels/" + KUEUE_QUEUE_LABEL.replace("/", "~1"), "kueue")
_RAY_QUEUE = QueueSource("/metadata/labels/" + VOLCANO_QUEUE_LABEL.replace("/", "~1"), "volcano")


_KUBEFLOW_SCALED = frozenset({"PyTorchJob", "PaddleJob", "JAXJob"})


def _kubeflow(kind: str, specs_key: str, resource: str) -> KindSpec:
    return KindSpec(
        group="kubeflow.org", kind=kind, resource=resource,
        pod_sets=(PodSetSource(f"/spec/{specs_key}", layout="map"),),
        gang_min="/spec/runPolicy/schedulingPolicy/minAvailable",
        queues=(QueueSource("/spec/runPolicy/schedulingPolicy/queue", "volcano"), _KUEUE),
        default_queue="default",
        # training-operator with gang scheduling sets an empty schedulerName to its gang scheduler
        operator_scheduler=True,
        pytorch_style=kind == "PyTorchJob",
        validate=f"kubeflow.{kind.lower()}",
        # the training-operator CRDs declare a scale subresource on the Worker replicas
        scale_replicas=f"/spec/{specs_key}/Worker/replicas" if kind in _KUBEFLOW_SCALED else "",
    )


def _ray(kind: str, cluster: str, resource: str, extra: tuple[PodSetSource, ...] = ()) -> KindSpec:
    """RayJob and RayService embed a whole RayCluster spec at ``cluster``."""
    return KindSpec(
        group="ray.io", kind=kind, resource=resource,
        pod_sets=(
            PodSetSource(f"{cluster}/headGroupSpec", name="head", replicas=None),
            PodSetSource(f"{cluster}/workerGroupSpecs", layout="list", name_key="groupName",
                         hosts="numOfHosts", min_replicas="minReplicas", max_replicas="maxReplicas",
                         default_replicas=0),
            *extra,
        ),
        queues=(_RAY_QUEUE, _KUEUE),
        scheduler_override="/metadata/labels/" + RAY_SCHEDULER_LABEL.replace("/", "~1"),
        autoscaling=f"{cluster}/enableInTreeAutoscaling",
        validate=f"kuberay.{kind.lower()}",
    )


KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        group="", kind="Pod", resource="pods",
        pod_sets=(PodSetSource("", name="pod", template="", replicas=None, optional=False),),
        templates_immutable=True,
        gang_min="/metadata/annotations/" + GROUP_MIN_MEMBER_ANNOTATION.replace("/", "~1"),
        queues=(QueueSource("/metadata/annotations/" + VOLCANO_QUEUE_ANNOTATION.replace("/", "~1"),
                            "volcano"), _KUEUE),
    ),
    *(
        KindSpec(group="apps", kind=k, resource=r, pod_sets=(PodSetSource("/spec", name="pods"),), gang=False,
                 queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE), scale_replicas="/spec/replicas")
        for k, r in (("Deployment", "deployments"), ("StatefulSet", "statefulsets"),
                     ("ReplicaSet", "replicasets"))
    ),
    KindSpec(group="batch", kind="Job", resource="jobs", gang=False, templates_immutable=True,
             pod_sets=(PodSetSource("/spec", name="pods", replicas="parallelism"),),
             queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE)),
    KindSpec(group="batch", kind="CronJob", resource="cronjobs", gang=False,
             pod_sets=(PodSetSource("/spec/jobTemplate/spec", name="pods", replicas="parallelism"),),
             queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE)),
    KindSpec(
        group="batch.volcano.sh", kind="Job", resource="jobs",
        pod_sets=(PodSetSource("/spec/tasks", layout="list", min_available="minAvailable"),),
        gang_min="/spec/minAvailable",
        gang_min_zero_unset=True,
        queues=(QueueSource("/spec/queue", "volcano"), _KUEUE),
        default_queue="default",
        scheduler="/spec/schedulerName",
        default_scheduler="volcano",
        pytorch_if="/spec/plugins/pytorch",
        validate="volcano.job",
    ),
    KindSpec(group="scheduling.volcano.sh", kind="PodGroup", resource="podgroups", pod_sets=(),
             gang_min="/spec/minMember", queues=(QueueSource("/spec/queue", "volcano"),),
             default_queue="default", default_scheduler="volcano", validate="volcano.podgroup"),
    # Volcano's cluster objects: linted and judged on submission; their pods are nobody's
    KindSpec(group="scheduling.volcano.sh", kind="Queue", resource="queues", pod_sets=(), gang=False,
             validate="volcano.queue", cluster_scoped=True),
    KindSpec(group="topology.volcano.sh", kind="HyperNode", resource="hypernodes", pod_sets=(), gang=False,
             validate="volcano.hypernode", cluster_scoped=True),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs", "pytorchjobs"),
    _kubeflow("TFJob", "tfReplicaSpecs", "tfjobs"),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs", "xgboostjobs"),
    _kubeflow("PaddleJob", "paddleReplicaSpecs", "paddlejobs"),
    _kubeflow("JAXJob", "jaxReplicaSpecs", "jaxjobs"),
    _kubeflow("MPIJob", "mpiReplicaSpecs", "mpijobs"),
    _ray("RayCluster", "/spec", "rayclusters"),
    _ray("RayJob", "/spec/rayClusterSpec", "rayjobs",
         extra=(PodSetSource("/spec/submitterPodTemplate", name="submitter", template="", replicas=None,
                             counted=False),)),
    _ray("RayService", "/spec/rayClusterConfig", "rayservices"),
    KindSpec(group="elastic.iml.github.io", kind="ElasticJob", resource="elasticjobs", gang=False,
             pod_sets=(PodSetSource("/spec/replicaSpecs", layout="map"),),
             pytorch_style=True),
    # -- JobSet, LeaderWorkerSet, KAI, YuniKorn, HyperPod rows go here
    # -- Workload API (scheduling.k8s.io), Trainer v2 rows go here
)

_BY_GROUP_KIND: dict[tuple[str, str], KindSpec] = {(k.group, k.kind): k for k in KINDS}


def kind_spec(api_version: str, kind: str) -> KindSpec | None:
    """The row for an object, matched on API group and kind (any version)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return _BY_GROUP_KIND.get((group, kind))
