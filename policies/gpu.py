"""GPU facts about a workload that several rules share."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies.config import Policy
from policies.workload import PodSet, Workload


def gpu_requests(pod_set: PodSet, policy: Policy) -> dict[str, Fraction]:
    """Configured GPU resources this pod set's pods request (effective request).

    Remembered on the pod set per policy: a dozen rules ask for it on every object."""
    key = ("gpu_requests", id(policy))
    found = pod_set.memo.get(key)
    if found is None:
        found = pod_set.memo[key] = {r: q for r, q in pod_set.requests.items()
                                     if r in policy.gpu_resources and q > 0}
    return found  # type: ignore[no-any-return]


def gpus_per_pod(pod_set: PodSet, policy: Policy) -> Fraction:
    return sum(gpu_requests(pod_set, policy).values(), Fraction(0))


def is_gpu_workload(workload: Workload, policy: Policy) -> bool:
    key = ("is_gpu", id(policy))
    found = workload.memo.get(key)
    if found is None:
        found = workload.memo[key] = any(gpus_per_pod(p, policy) > 0 for p in workload.pod_sets)
    return found  # type: ignore[no-any-return]


def gpu_pod_sets(workload: Workload, policy: Policy) -> list[PodSet]:
    return [p for p in workload.pod_sets if gpus_per_pod(p, policy) > 0]


@dataclass(frozen=True)
class GpuResourceEntry:
    """One container's GPU resources as written (not defaulted): for limit/request rules."""

    container: str              # container name
    path: str                   # JSON Pointer of the container's ``resources``
    resource: str
    request: Any                # raw value, or None when not set
    limit: Any


def raw_gpu_resources(pod_set: PodSet, policy: Policy) -> Iterator[GpuResourceEntry]:
    """Configured GPU resources named in each container's raw ``requests``/``limits``."""
    for path, container in pod_set.containers():
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        requests = resources.get("requests")
        limits = resources.get("limits")
        requests = requests if isinstance(requests, dict) else {}
        limits = limits if isinstance(limits, dict) else {}
        name = container.get("name")
        for resource in dict.fromkeys([*requests, *limits]):
            if resource in policy.gpu_resources:
                yield GpuResourceEntry(name if isinstance(name, str) else "?", path + "/resources", resource,
                                       requests.get(resource), limits.get(resource))
