"""GPU facts about a workload that several rules share."""

from __future__ import annotations

from fractions import Fraction

from policies.config import Policy
from policies.workload import PodSet, Workload


def gpu_requests(pod_set: PodSet, policy: Policy) -> dict[str, Fraction]:
    """Configured GPU resources this pod set's pods request (effective request)."""
    return {r: q for r, q in pod_set.requests.items() if r in policy.gpu_resources and q > 0}


def gpus_per_pod(pod_set: PodSet, policy: Policy) -> Fraction:
    return sum(gpu_requests(pod_set, policy).values(), Fraction(0))


def is_gpu_workload(workload: Workload, policy: Policy) -> bool:
    return any(gpus_per_pod(p, policy) > 0 for p in workload.pod_sets)


def gpu_pod_sets(workload: Workload, policy: Policy) -> list[PodSet]:
    return [p for p in workload.pod_sets if gpus_per_pod(p, policy) > 0]
