"""GPU facts about a workload that several rules share."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any, NamedTuple

from policies.config import Policy
from policies.kinds import KAI_SCHEDULER
from policies.options import Option
from policies.quantity import QuantityError, exact_sum, is_positive, parse_quantity
from policies.specfacts import BLIND_AMOUNTS, facts_token
from policies.workload import PodSet, Workload, spec_containers

GPU_RESOURCES = Option(
    "gpu.resources", {"type": "object", "additionalProperties": {"type": "string"}},
    {"nvidia.com/gpu": "nvidia.com/gpu.product", "metax-tech.com/gpu": "metax-tech.com/gpu.product"},
    "Extended resource -> node label carrying the GPU product. Entries you give are added to these.")
# Shares of one device, handed out by a sharing scheduler (HAMi, Volcano vGPU, Alibaba's GPU
# sharing): not node capacity, so never compared with a node's allocatable (a HAMi pod asking for
# nvidia.com/gpumem on nodes that do not advertise it is not "no node offers it"). Each is a share
# per device of a kind: memory (a device's memory; MiB for HAMi and Volcano, GiB for Alibaba),
# percent (of one device: at most 100) or count (devices or virtual devices).
SHARE_KINDS = ("memory", "percent", "count")
GPU_SHARES = Option(
    "gpu.shares", {"type": "object", "additionalProperties": {"enum": list(SHARE_KINDS)}},
    {"nvidia.com/gpumem": "memory", "nvidia.com/gpumem-percentage": "percent",    # HAMi
     "nvidia.com/gpucores": "percent",
     "volcano.sh/vgpu-number": "count", "volcano.sh/vgpu-memory": "memory",        # Volcano vGPU
     "volcano.sh/vgpu-cores": "percent", "volcano.sh/vgpu-memory-percentage": "percent",
     "aliyun.com/gpu-mem": "memory", "aliyun.com/gpu-core.percentage": "percent"},  # Alibaba
    "Per-device share resources (HAMi, Volcano vGPU, Alibaba GPU sharing) -> `memory`, `percent` or "
    "`count`: checked against the devices a node registers, never against its allocatable. Entries you "
    "give are added to these.")
OPTIONS = (GPU_RESOURCES, GPU_SHARES)


def gpu_requests(pod_set: PodSet, policy: Policy) -> dict[str, Fraction]:
    """Configured GPU resources this pod set's pods request (effective request).

    Remembered per policy in the pod set's shared facts: a dozen rules ask for it on every
    object (read only)."""
    key = ("gpu_requests", facts_token(policy.memo))
    found = pod_set.facts.get(key)
    if found is None:
        resources = policy.gpu_resources
        found = pod_set.facts[key] = {}
        for resource, amount in pod_set.requests.items():  # is_positive, inlined: per resource
            if resource in resources and amount.numerator > 0:
                found[resource] = amount
    return found  # type: ignore[no-any-return]


def gpus_per_pod(pod_set: PodSet, policy: Policy) -> Fraction:
    key = ("gpus_per_pod", facts_token(policy.memo))
    found: Fraction | None = pod_set.facts.get(key)
    if found is None:
        found = pod_set.facts[key] = exact_sum(gpu_requests(pod_set, policy).values())
    return found


# KAI's GPU sharing: a pod annotated with a fraction of a GPU ("0.5") or an amount of GPU
# memory (MiB) asks KAI for a share of one GPU and requests no GPU resource
# (NVIDIA/KAI-Scheduler pkg/common/resources RequestsGPUFraction: the key alone counts).
KAI_GPU_SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory")


def is_gpu_share(pod_set: PodSet) -> bool:
    """Whether the pod set's pods ask KAI for a share of a GPU (an annotation of
    :data:`KAI_GPU_SHARE_ANNOTATIONS` on the pod template, and KAI schedules them: no other
    scheduler reads these keys). Not a request: the resource rules (GG403, GG501-GG503)
    never see a share, only the usage steering does.

    Read from the template's metadata and scheduler, never kept in the shared facts of the
    pod spec (equal specs may differ there)."""
    if pod_set.scheduler != KAI_SCHEDULER:  # nearly always: one comparison
        return False
    annotations = pod_set.annotations
    for key in KAI_GPU_SHARE_ANNOTATIONS:
        if key in annotations:
            return True
    return False


def is_gpu_pod_set(pod_set: PodSet, policy: Policy) -> bool:
    """Whether the pod set's pods use GPUs: they request a GPU resource of the policy, or a
    KAI GPU share (:func:`is_gpu_share`)."""
    return is_positive(gpus_per_pod(pod_set, policy)) or is_gpu_share(pod_set)


def is_gpu_workload(workload: Workload, policy: Policy) -> bool:
    """Whether some pod set of the workload uses GPUs (:func:`is_gpu_pod_set`). Remembered
    on the workload: every object is asked."""
    key = ("is_gpu", id(policy))
    found = workload.memo.get(key)
    if found is None:
        found = workload.memo[key] = _uses_gpus(workload, policy)
    return found  # type: ignore[no-any-return]


def _uses_gpus(workload: Workload, policy: Policy) -> bool:
    for p in workload.pod_sets:  # loops, not any(<generator>): this runs on every object
        if is_positive(gpus_per_pod(p, policy)):
            return True
    for p in workload.pod_sets:  # only then the shares: a scheduler name, then the keys
        if is_gpu_share(p):
            return True
    return False


def gpu_facts_blind(policy: Policy) -> bool:
    """Whether facts that read only the policy's GPU resources of a pod spec belong in its
    blind facts (``PodSet.blind_facts``): unless a GPU resource is named ``cpu`` or ``memory``."""
    return BLIND_AMOUNTS.isdisjoint(policy.gpu_resources)


def gpu_pod_sets(workload: Workload, policy: Policy) -> list[PodSet]:
    """The pod sets that use GPUs (:func:`is_gpu_pod_set`): requested, or a KAI share."""
    if not is_gpu_workload(workload, policy):  # remembered: most objects stop here
        return []
    return [p for p in workload.pod_sets if is_gpu_pod_set(p, policy)]


class GpuResourceEntry(NamedTuple):
    """One container's GPU resources as written (not defaulted): for limit/request rules.
    (A named tuple: immutable, and cheaper to build than a frozen dataclass.)"""

    container: str              # container name
    path: str                   # JSON Pointer of the container's ``resources`` (see spec_gpu_resources)
    resource: str
    request: Any                # raw value, or None when not set
    limit: Any
    # Parsed once for GG502 and GG503; None when not set or not a quantity (GG504's).
    request_amount: Fraction | None = None
    limit_amount: Fraction | None = None


def raw_gpu_resources(pod_set: PodSet, policy: Policy) -> tuple[GpuResourceEntry, ...]:
    """Configured GPU resources named in each container's raw ``requests``/``limits``."""
    base = pod_set.spec_path
    return tuple([e._replace(path=base + e.path) for e in spec_gpu_resources(pod_set, policy)])


def spec_gpu_resources(pod_set: PodSet, policy: Policy) -> tuple[GpuResourceEntry, ...]:
    """:func:`raw_gpu_resources` with paths from the pod spec (``pod_set.spec_path`` +
    ``path`` is the JSON Pointer). Remembered in the shared facts: GG501-GG503 each walk
    them, and build a pointer only for a finding."""
    key = ("raw_gpu_resources", facts_token(policy.memo))
    facts = pod_set.blind_facts if gpu_facts_blind(policy) else pod_set.facts
    found: tuple[GpuResourceEntry, ...] | None = facts.get(key)
    if found is None:
        containers, _ = spec_containers(pod_set.spec)
        found = facts[key] = _raw_gpu_resources(containers, policy.gpu_resources)
    return found


def _raw_gpu_resources(containers: tuple[tuple[str, dict[str, Any]], ...],
                       gpu_resources: dict[str, str]) -> tuple[GpuResourceEntry, ...]:
    """The entries of ``containers`` ((JSON Pointer, container) pairs); paths follow theirs.
    Raw values that are not scalars are copies: the entries are kept in shared facts."""
    found: list[GpuResourceEntry] = []
    for path, container in containers:
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        requests = resources.get("requests")
        limits = resources.get("limits")
        requests = requests if isinstance(requests, dict) else {}
        limits = limits if isinstance(limits, dict) else {}
        named: dict[str, None] = {}  # ordered, each once: requests first, then limits
        for resource in requests:
            if resource in gpu_resources:
                named[resource] = None
        for resource in limits:
            if resource in gpu_resources:
                named[resource] = None
        if not named:
            continue
        name = container.get("name")
        name = name if isinstance(name, str) else "?"
        for resource in named:
            request, limit = _detached(requests.get(resource)), _detached(limits.get(resource))
            found.append(GpuResourceEntry(name, path + "/resources", resource, request, limit,
                                          _amount(request), _amount(limit)))
    return tuple(found)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _detached(raw: Any) -> Any:
    """``raw``, or a deep copy when it is mutable (a malformed quantity: a list, a mapping)."""
    return raw if type(raw) in _SCALARS else copy.deepcopy(raw)


def _amount(raw: Any) -> Fraction | None:
    """The quantity ``raw``; None when unset (None) or not a quantity."""
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None
