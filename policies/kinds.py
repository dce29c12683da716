"""The one table of supported kinds: where each keeps its pod templates, gang minimum,
queue and scheduler. Adding a kind is adding a row here; nothing else branches on kind.

Paths are JSON Pointers (RFC 6901) from the object's root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from policies.pointers import join_pointer, unescape_pointer

VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's partial admission: the fewest pods of a batch Job it may admit
KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
RAY_SCHEDULER_LABEL = "ray.io/scheduler-name"
GROUP_MIN_MEMBER_ANNOTATION = "scheduling.volcano.sh/group-min-member"
DEFAULT_SCHEDULER = "default-scheduler"
VOLCANO_SCHEDULER = "volcano"
KAI_QUEUE_LABEL = "kai.scheduler/queue"          # KAI's podgrouper: the top owner's, else the pod's
KAI_SCHEDULER = "kai-scheduler"
KAI_DEFAULT_QUEUE = "default-queue"
KAI_GROUP = "scheduling.run.ai"                # KAI's PodGroups and Queues
YUNIKORN_QUEUE_LABEL = "queue"
YUNIKORN_QUEUE_ANNOTATION = "yunikorn.apache.org/queue"
YUNIKORN_SCHEDULER = "yunikorn"
YUNIKORN_TASK_GROUPS = "yunikorn.apache.org/task-groups"   # pod annotation: the gang's task groups


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
    # Key of a partition policy whose ``minPartitions`` x ``partitionSize`` stands for an unset
    # ``min_available`` (Volcano's webhook fills a task's minAvailable from it; minPartitions
    # defaults to 0).
    partitions: str | None = None
    counted: bool = True                 # counts towards the gang minimum
    optional: bool = True                # absent is fine (RayJob without submitter template)
    # ``template``, ``replicas``, ``hosts`` and ``hosts_max`` may be paths of several keys
    # ("template/spec/template": a JobSet's batch JobTemplateSpec holds the pod template).
    template_required: bool = False      # no pod set when ``template`` is absent (LWS leaderTemplate)
    replicas_offset: int = 0             # added to ``replicas`` (LWS workers: size - 1) ...
    replicas_offset_if: str | None = None  # ... only when the entry has this key (leaderTemplate)
    hosts_max: str | None = None         # caps ``hosts`` (a batch Job's completions caps parallelism)
    # an object-level count multiplying the pods (LWS spec.replicas), each group a gang of its
    # own: ``gang_count`` is one group's pods
    groups: str | None = None
    suspend: str | None = None           # key in the entry: true means no pods (KubeRay group suspend)
    # The templates are templates, not pods (a Trainer runtime's JobSet template: pods only
    # once a TrainJob uses it, with its own count and resources): their specs are judged,
    # no pods are placed.
    template_only: bool = False


@dataclass(frozen=True)
class QueueSource:
    """Where a queue name may be written. ``scope`` is ``object`` or ``template``."""

    at: str
    system: Literal["volcano", "kueue", "kai", "yunikorn"]
    scope: Literal["object", "template"] = "object"
    # ("labels" or "annotations", key) when ``at`` is a label or annotation of the metadata:
    # read from a pod set's own views of its template, not walked again.
    in_metadata: tuple[str, str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = self.at.split("/")
        found = None
        if len(parts) == 4 and parts[:2] == ["", "metadata"] and parts[2] in ("labels", "annotations"):
            found = (parts[2], unescape_pointer(parts[3]))
        object.__setattr__(self, "in_metadata", found)


@dataclass(frozen=True)
class GangRef:
    """Where a pod names the gang it belongs to when another object holds the gang (the
    Workload API). ``name`` points at the holder's name in the pod, ``group`` (when the
    holder has several groups) at the group's name; ``kind`` is the holder's
    ``group/Kind``. The holder is read from the linted files, else from the cluster the
    object is judged against (:mod:`policies.references`)."""

    name: str
    kind: str
    group: str = ""


@dataclass(frozen=True)
class RuntimeSource:
    """Where an object names another object that holds its pod template (a TrainJob's
    ``runtimeRef``), and how to read that template (a Trainer runtime's JobSet template).
    Resolved from the linted files, else from the cluster (:mod:`policies.references`)."""

    ref: str                                # {name, kind, apiGroup} in the referring object
    kinds: tuple[str, ...]                  # the kinds it may name
    default_kind: str                       # the kind when ``kind`` is unset
    default_group: str                      # the group when ``apiGroup`` is unset
    jobs: str                               # the runtime's list of replicated jobs
    template: str                           # the pod template in one job, keys joined by "/"
    step_label: tuple[str, str]             # (label, value) of the job template holding the pods
    step_name: str                          # ... or the job of this name, when none is labelled
    count: str                              # the pod count in the runtime, when the object sets none
    # Fields of the referring object that may rewrite the pods' placement (node selectors,
    # affinity, tolerations): when one is set, the runtime's placement is not trusted.
    patches: tuple[str, ...] = ()


@dataclass(frozen=True)
class DerivedPods:
    """Pods a kind asks for without a pod template of its own (a TrainJob's training nodes):
    ``count`` pods (key in the entry at ``at``; 1 when unset and nothing else says), whose
    container ``container`` has the resources at ``resources`` (a ResourceRequirements).
    Their pod spec is the runtime's (``runtime``) when the same file holds it; otherwise a
    pod of those resources alone that tolerates every taint and selects no node: never more
    than the real pod asks, so a sound basis for "never fits". Derived pods are for
    feasibility only: no rule patches them or points into them (they are no part of the
    object)."""

    at: str
    name: str
    count: str
    resources: str
    container: str
    runtime: RuntimeSource | None = None


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
    # False: the kind's own webhook runs those checks on CREATE only (an UPDATE is judged on
    # what it may change, by the kind's immutability rules): GG601 stays silent on UPDATEs.
    validate_on_update: bool = True
    # Where the object declares the gang's minimum resources when it has no pods of its own (a
    # Volcano PodGroup's minResources): judged against its queue alone.
    min_resources: str | None = None
    # A cluster-scoped object (a Volcano Queue, a ClusterTrainingRuntime): the mutating webhook
    # sees it only when it has pod templates to inject into.
    cluster_scoped: bool = False
    # Any owner reference, not only a controller's, marks it as made by a controller: KAI's
    # podgrouper makes a PodGroup per workload, its owner reference naming the top owner
    # without ``controller: true``, from pods that are judged themselves (not judged again).
    owner_made: bool = False
    # Where a pod names a gang held by another object (the Workload API's Workload or
    # PodGroup): the gang minimum is read from it (from the linted files or the cluster).
    gang_refs: tuple[GangRef, ...] = ()
    # Pods the object asks for without pod templates (a Kubeflow TrainJob's nodes).
    derived: DerivedPods | None = None
    # A Workload API scheduling policy the object carries for its pods (a batch Job's
    # spec.scheduling.schedulingPolicy, Kubernetes 1.37): its gang.minCount is the gang
    # minimum. Read, never refused: the alpha WorkloadWithJob gate clears it where it is off.
    gang_policy: str | None = None
    # Kueue admits all its pods at once, as one Workload whose pod set counts are the pod sets'
    # replicas (a batch Job's min(parallelism, completions)), not only the gang minimum; with
    # partial admission, as few as ``kueue_min_count`` says (kueue.x-k8s.io/job-min-parallelism).
    kueue_admits_all: bool = False
    kueue_min_count: str | None = None
    # Kueue's integration for the kind, as its configuration names it (``integrations.frameworks``,
    # or ``Kind.version.group`` of ``externalFrameworks``), and the API versions it handles (empty:
    # any). Kueue reads the queue label of the kinds it integrates only: a kind whose integration
    # is off in the policy's ``queues.kueueFrameworks`` is not judged against its Kueue queue.
    kueue_framework: str = ""
    kueue_versions: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


_TEMPLATE_VOLCANO_QUEUE = QueueSource(
    join_pointer("/metadata/annotations", VOLCANO_QUEUE_ANNOTATION), "volcano", "template")
_KUEUE = QueueSource(join_pointer("/metadata/labels", KUEUE_QUEUE_LABEL), "kueue")
_RAY_QUEUE = QueueSource(join_pointer("/metadata/labels", VOLCANO_QUEUE_LABEL), "volcano")


# Queues any kind's pods may name, whatever the kind: schedulers that read them off the pods
# (or the top owner) rather than from a field of the kind. Read for kinds that have pods.
COMMON_QUEUES: tuple[QueueSource, ...] = (
    QueueSource(join_pointer("/metadata/labels", KAI_QUEUE_LABEL), "kai"),
    QueueSource(join_pointer("/metadata/labels", KAI_QUEUE_LABEL), "kai", "template"),
    # YuniKorn's read order (k8shim): the label yunikorn.apache.org/queue, the annotation of that
    # key, the label queue. Its queue names are paths ("root.my_team"): GG304 judges them so.
    QueueSource(join_pointer("/metadata/labels", YUNIKORN_QUEUE_ANNOTATION), "yunikorn", "template"),
    QueueSource(join_pointer("/metadata/annotations", YUNIKORN_QUEUE_ANNOTATION), "yunikorn", "template"),
    QueueSource(join_pointer("/metadata/labels", YUNIKORN_QUEUE_LABEL), "yunikorn", "template"),
)

WORKLOAD_API_GROUP = "scheduling.k8s.io"
# Where a Pod names its Workload API gang: 1.35 a Workload's pod group (spec.workloadRef),
# 1.36 and 1.37 a PodGroup object (spec.schedulingGroup).
_WORKLOAD_API_POD_GANGS = (
    GangRef("/spec/workloadRef/name", f"{WORKLOAD_API_GROUP}/Workload", group="/spec/workloadRef/podGroup"),
    GangRef("/spec/schedulingGroup/podGroupName", f"{WORKLOAD_API_GROUP}/PodGroup"),
)

_TRAINER = "trainer.kubeflow.org"
_TRAINER_JOBS = "/spec/template/spec/replicatedJobs"   # a runtime's JobSet template
_TRAINER_RUNTIME = RuntimeSource(
    ref="/spec/runtimeRef", kinds=("ClusterTrainingRuntime", "TrainingRuntime"),
    default_kind="ClusterTrainingRuntime", default_group=_TRAINER,
    jobs=_TRAINER_JOBS, template="template/spec/template",
    step_label=("trainer.kubeflow.org/trainjob-ancestor-step", "trainer"), step_name="node",
    count="/spec/mlPolicy/numNodes",
    # runtimePatches (v2.2 on); podSpecOverrides, podTemplateOverrides (earlier releases); a
    # Kueue queue: Kueue writes a patch (its flavour's selectors and tolerations) on admission
    patches=("/spec/runtimePatches", "/spec/podSpecOverrides", "/spec/podTemplateOverrides",
             join_pointer("/metadata/labels", KUEUE_QUEUE_LABEL)),
)
_TRAINER_RUNTIME_TEMPLATES = PodSetSource(_TRAINER_JOBS, layout="list", template="template/spec/template",
                                          replicas=None, template_only=True)

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
        # Kueue's Workload: one pod set per replica type of its replicas (default 1), whatever
        # the gang minimum (kueue pkg/controller/jobs/kubeflow, mpijob: podsCount). Kueue
        # integrates the mpi-operator's MPIJob (v2beta1), not the training-operator's v1 of this row.
        kueue_admits_all=True,
        kueue_framework=f"kubeflow.org/{kind.lower()}",
        kueue_versions=("v2beta1",) if kind == "MPIJob" else (),
    )


def _ray(kind: str, cluster: str, resource: str, extra: tuple[PodSetSource, ...] = ()) -> KindSpec:
    """RayJob and RayService embed a whole RayCluster spec at ``cluster``."""
    return KindSpec(
        group="ray.io", kind=kind, resource=resource,
        pod_sets=(
            PodSetSource(f"{cluster}/headGroupSpec", name="head", replicas=None),
            PodSetSource(f"{cluster}/workerGroupSpecs", layout="list", name_key="groupName",
                         hosts="numOfHosts", min_replicas="minReplicas", max_replicas="maxReplicas",
                         default_replicas=0, suspend="suspend"),  # RayJob deletion strategy: no pods
            *extra,
        ),
        queues=(_RAY_QUEUE, _KUEUE),
        kueue_framework=f"ray.io/{kind.lower()}",
        scheduler_override=join_pointer("/metadata/labels", RAY_SCHEDULER_LABEL),
        autoscaling=f"{cluster}/enableInTreeAutoscaling",
        validate=f"kuberay.{kind.lower()}",
    )


KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        group="", kind="Pod", resource="pods",
        pod_sets=(PodSetSource("", name="pod", template="", replicas=None, optional=False),),
        templates_immutable=True,
        gang_min=join_pointer("/metadata/annotations", GROUP_MIN_MEMBER_ANNOTATION),
        queues=(QueueSource(join_pointer("/metadata/annotations", VOLCANO_QUEUE_ANNOTATION),
                            "volcano"), _KUEUE),
        kueue_framework="pod",
        gang_refs=_WORKLOAD_API_POD_GANGS,
    ),
    # Kueue admits a Deployment's pods one by one, a StatefulSet's all at once (one pod group of
    # ``replicas``); it has no ReplicaSet integration (its pod integration reads the pods' labels)
    *(
        KindSpec(group="apps", kind=k, resource=r, pod_sets=(PodSetSource("/spec", name="pods"),), gang=False,
                 queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE) if framework else (_TEMPLATE_VOLCANO_QUEUE,),
                 kueue_framework=framework, kueue_admits_all=framework == "statefulset",
                 scale_replicas="/spec/replicas")
        for k, r, framework in (("Deployment", "deployments", "deployment"),
                                ("StatefulSet", "statefulsets", "statefulset"),
                                ("ReplicaSet", "replicasets", ""))
    ),
    # A Job runs min(parallelism, completions) pods at once (each default 1).
    KindSpec(group="batch", kind="Job", resource="jobs", gang=False, templates_immutable=True,
             pod_sets=(PodSetSource("/spec", name="pods", replicas=None, hosts="parallelism",
                                    hosts_max="completions"),),
             queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE),
             gang_policy="/spec/scheduling/schedulingPolicy", kueue_admits_all=True,
             kueue_min_count=join_pointer("/metadata/annotations", KUEUE_MIN_PARALLELISM),
             kueue_framework="batch/job"),
    # Kueue admits the Jobs a CronJob makes: their queue label (and partial-admission minimum)
    # is the job template's, not the CronJob's own
    KindSpec(group="batch", kind="CronJob", resource="cronjobs", gang=False,
             pod_sets=(PodSetSource("/spec/jobTemplate/spec", name="pods", replicas=None, hosts="parallelism",
                                    hosts_max="completions"),),
             queues=(_TEMPLATE_VOLCANO_QUEUE, QueueSource(
                 join_pointer("/spec/jobTemplate/metadata/labels", KUEUE_QUEUE_LABEL), "kueue")),
             kueue_admits_all=True,
             kueue_min_count=join_pointer("/spec/jobTemplate/metadata/annotations", KUEUE_MIN_PARALLELISM),
             kueue_framework="batch/job"),
    KindSpec(
        group="batch.volcano.sh", kind="Job", resource="jobs",
        pod_sets=(PodSetSource("/spec/tasks", layout="list", min_available="minAvailable",
                               partitions="partitionPolicy"),),
        gang_min="/spec/minAvailable",
        gang_min_zero_unset=True,
        queues=(QueueSource("/spec/queue", "volcano"),),   # no Kueue integration
        default_queue="default",
        scheduler="/spec/schedulerName",
        default_scheduler="volcano",
        pytorch_if="/spec/plugins/pytorch",
        validate="volcano.job",
        validate_on_update=False,   # validateJobUpdate: replicas and minAvailable only
    ),
    KindSpec(group="scheduling.volcano.sh", kind="PodGroup", resource="podgroups", pod_sets=(),
             gang_min="/spec/minMember", queues=(QueueSource("/spec/queue", "volcano"),),
             default_queue="default", default_scheduler="volcano", validate="volcano.podgroup",
             min_resources="/spec/minResources"),
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
    KindSpec(
        group="jobset.x-k8s.io", kind="JobSet", resource="jobsets",
        # each replicated job is ``replicas`` (default 1) batch Jobs of ``parallelism`` pods
        # (default 1, capped by ``completions``): pods = replicas x min(parallelism, completions)
        pod_sets=(PodSetSource("/spec/replicatedJobs", layout="list", template="template/spec/template",
                               hosts="template/spec/parallelism", hosts_max="template/spec/completions"),),
        # No gang of its own, and judged pod by pod (gang=False): Volcano gives each of its batch
        # Jobs a PodGroup of minMember 1, YuniKorn without task groups and the default scheduler
        # place pods one by one, and replicated jobs joined by dependsOn never run together.
        # Only KAI's podgrouper makes one gang of every pod: a "never" missed there, never a
        # false one.
        gang=False,
        queues=(_TEMPLATE_VOLCANO_QUEUE, _KUEUE),
        # the JobSet webhook refuses any change to spec.replicatedJobs but a few fields of
        # a suspended JobSet's pod templates: nothing is injected on UPDATE
        templates_immutable=True,
        validate="jobset.jobset",
        validate_on_update=False,   # ValidateUpdate: immutability only
        # Kueue's Workload: replicas x min(parallelism, completions) pods per replicated job
        # (kueue pkg/controller/jobs/jobset: podsCount), admitted together
        kueue_admits_all=True,
        kueue_framework="jobset.x-k8s.io/jobset",
    ),
    KindSpec(
        group="leaderworkerset.x-k8s.io", kind="LeaderWorkerSet", resource="leaderworkersets",
        # ``spec.replicas`` groups (default 1) of one leader and ``size`` - 1 workers (size
        # default 1); without a leaderTemplate the leader is made from workerTemplate, so that
        # one pod set holds all ``size`` pods of a group
        pod_sets=(
            PodSetSource("/spec/leaderWorkerTemplate", name="leader", template="leaderTemplate",
                         template_required=True, replicas=None, groups="/spec/replicas"),
            PodSetSource("/spec/leaderWorkerTemplate", name="worker", template="workerTemplate",
                         replicas="size", replicas_offset=-1, replicas_offset_if="leaderTemplate",
                         groups="/spec/replicas"),
        ),
        # each group is a gang of ``size`` under Volcano (LWS's gang scheduling makes a PodGroup
        # per group, its queue from the LWS's annotation; without it Volcano reads the pods')
        # and KAI; a group of long-running servers that can never run whole never gets ready
        queues=(QueueSource(join_pointer("/metadata/annotations", VOLCANO_QUEUE_ANNOTATION), "volcano"),
                _TEMPLATE_VOLCANO_QUEUE, _KUEUE),
        kueue_framework="leaderworkerset.x-k8s.io/leaderworkerset",
        scale_replicas="/spec/replicas",
        validate="lws.leaderworkerset",
    ),
    # Amazon SageMaker HyperPod training jobs: a list of named replica specs (replicas default
    # 1). Admitted whole by Kueue (HyperPod task governance), then placed pod by pod by the
    # default scheduler; no batch scheduler gangs them (KAI's default podgrouper: minMember 1)
    KindSpec(
        group="sagemaker.amazonaws.com", kind="HyperPodPyTorchJob", resource="hyperpodpytorchjobs",
        gang=False,
        pod_sets=(PodSetSource("/spec/replicaSpecs", layout="list"),),
        queues=(_KUEUE,),
        kueue_framework="HyperPodPyTorchJob.v1.sagemaker.amazonaws.com",   # an external framework
    ),
    # KAI Scheduler's own objects (scheduling.run.ai; the versions its webhooks judge:
    # policies/validation/kai.py). A PodGroup holds a gang, not pods: ``minMember`` of them,
    # in the KAI queue ``spec.queue`` (judged as KAI's since KAI alone schedules it). Most are
    # made by KAI's podgrouper (owner_made); those written by hand are judged.
    KindSpec(group=KAI_GROUP, kind="PodGroup", resource="podgroups", pod_sets=(),
             gang_min="/spec/minMember", queues=(QueueSource("/spec/queue", "kai"),),
             default_scheduler=KAI_SCHEDULER, owner_made=True, validate="kai.podgroup"),
    # its Queues: validated on submission, never mutated (read from the cluster by the topology)
    KindSpec(group=KAI_GROUP, kind="Queue", resource="queues", pod_sets=(), gang=False,
             validate="kai.queue", cluster_scoped=True),
    # -- Workload API (scheduling.k8s.io), Trainer v2 rows go here
    # The Workload API's objects hold gangs, not pods (the versions understood:
    # policies/workload_api.py). Pods name them (the Pod row's gang_refs).
    KindSpec(group=WORKLOAD_API_GROUP, kind="Workload", resource="workloads", pod_sets=(), gang=False,
             validate="workload_api.workload"),
    KindSpec(group=WORKLOAD_API_GROUP, kind="PodGroup", resource="podgroups", pod_sets=(), gang=False,
             validate="workload_api.podgroup"),
    KindSpec(group=WORKLOAD_API_GROUP, kind="CompositePodGroup", resource="compositepodgroups", pod_sets=(),
             gang=False, validate="workload_api.composite_podgroup"),
    # Kubeflow Trainer v2. A TrainJob has no pod template: its numNodes training pods are
    # derived (from its runtime when the file holds it), and judged pod by pod, even when the
    # runtime asks for a gang (podGroupPolicy): weaker than a gang, never wrong.
    KindSpec(group=_TRAINER, kind="TrainJob", resource="trainjobs", pod_sets=(), gang=False,
             derived=DerivedPods("/spec/trainer", "node", count="numNodes", resources="resourcesPerNode",
                                 container="node", runtime=_TRAINER_RUNTIME),
             queues=(_KUEUE,), kueue_framework="trainer.kubeflow.org/trainjob", validate="trainer.trainjob"),
    # A runtime's JobSet template is a template, not pods: its pod specs are judged (requests,
    # limits), nothing is placed (a TrainJob sets the count and the node resources).
    KindSpec(group=_TRAINER, kind="TrainingRuntime", resource="trainingruntimes", gang=False,
             pod_sets=(_TRAINER_RUNTIME_TEMPLATES,), validate="trainer.training_runtime",
             validate_on_update=False),   # its update handler checks nothing
    KindSpec(group=_TRAINER, kind="ClusterTrainingRuntime", resource="clustertrainingruntimes", gang=False,
             pod_sets=(_TRAINER_RUNTIME_TEMPLATES,), validate="trainer.training_runtime",
             cluster_scoped=True),
)

_BY_GROUP_KIND: dict[tuple[str, str], KindSpec] = {(k.group, k.kind): k for k in KINDS}

# Every Kueue integration of the table, in its order: the default of queues.kueueFrameworks
# (Kueue's current manifests turn them all on).
KUEUE_FRAMEWORKS: tuple[str, ...] = tuple(
    dict.fromkeys(k.kueue_framework for k in KINDS if k.kueue_framework))


def kind_spec(api_version: str, kind: str) -> KindSpec | None:
    """The row for an object, matched on API group and kind (any version)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return _BY_GROUP_KIND.get((group, kind))
