"""GPU group sizes (seed 000): what the gpu-podaffinity scheduler plugin reads.

G is ``gpu-group-size`` (GPUs of one model-parallel unit, placed inside one supernode),
A is ``atomic-gpu-group-size`` (default G; each A-sized part must sit in one supernode),
g the GPUs per pod of a GPU pod set, T the GPUs of the whole job. The annotation keys
come from the policy (``gpu.groupSizeAnnotation``, ``gpu.atomicGroupSizeAnnotation``).

The scheduler reads the annotations on pods, so values on pod templates count first;
a value only on the workload's own metadata is used as a fallback (GG205 warns).
Rules GG201-GG205 and the feasibility check GG405 all read groups through here.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, NamedTuple

from policies.config import Policy
from policies.gpu import gpus_per_pod
from policies.memo import process_cache
from policies.options import Option
from policies.pointers import join_pointer
from policies.quantity import is_positive
from policies.workload import PodSet, Workload

__all__ = ["GroupValue", "GroupAnnotations", "GpuPodSet", "GroupSpec", "parse_group_size",
           "group_annotations", "group_sizes", "format_gpus", "is_multiple", "GROUP_SIZE_ANNOTATION",
           "ATOMIC_GROUP_SIZE_ANNOTATION"]

# Read by GG201-GG205 and the feasibility check (GG405): declared here, where they are read.
GROUP_SIZE_ANNOTATION = Option(
    "gpu.groupSizeAnnotation", {"type": "string", "minLength": 1}, "metax-tech.com/gpu-group-size",
    "Annotation giving G, the number of GPUs that must be placed together as one group.")
ATOMIC_GROUP_SIZE_ANNOTATION = Option(
    "gpu.atomicGroupSizeAnnotation", {"type": "string", "minLength": 1},
    "metax-tech.com/atomic-gpu-group-size",
    "Annotation giving A, the part of a group that must sit on one node or supernode (default: G).")
OPTIONS = (GROUP_SIZE_ANNOTATION, ATOMIC_GROUP_SIZE_ANNOTATION)

# strconv.Atoi accepts an optional sign; zero and negatives are refused below.
_INTEGER = re.compile(r"[+]?[0-9]{1,18}")


def parse_group_size(raw: Any) -> int | None:
    """A positive integer given as int or numeric string, else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw > 0 else None
    if isinstance(raw, str) and _INTEGER.fullmatch(raw):
        value = int(raw)
        return value if value > 0 else None
    return None


class GroupValue(NamedTuple):
    """One place a group-size annotation is written. (A named tuple: immutable, and built
    several times cheaper than a frozen dataclass, on every object with a group size.)"""

    key: str                    # the annotation key
    raw: Any                    # as written
    value: int | None           # parsed; None when malformed (GG201)
    path: str                   # JSON Pointer of the annotation value
    pod_set: PodSet | None      # None: the workload's own metadata

    @property
    def where(self) -> str:
        return f"pod set {self.pod_set.name}" if self.pod_set is not None else "workload metadata"


class GroupAnnotations(NamedTuple):
    """Every place G and A are written on a workload."""

    size: list[GroupValue]      # G on pod templates first, then on workload metadata
    atomic: list[GroupValue]


def _values(workload: Workload, key: str) -> list[GroupValue]:
    found: list[GroupValue] = []
    for pod_set in workload.gang_pod_sets:
        if key in pod_set.annotations:
            raw = pod_set.annotations[key]
            found.append(GroupValue(key, raw, parse_group_size(raw), pod_set.path + _annotation_path(key),
                                    pod_set))
    # A bare Pod is its own template: its metadata was read above, as the pod's.
    if key in workload.annotations and not any(p.template is workload.doc for p in workload.pod_sets):
        raw = workload.annotations[key]
        found.append(GroupValue(key, raw, parse_group_size(raw), _annotation_path(key), None))
    return found


@process_cache(64)
def _annotation_path(key: str) -> str:
    """``/metadata/annotations/<key>``, escaped: the same few policy keys on every object."""
    return join_pointer("/metadata/annotations", key)


def group_annotations(workload: Workload, policy: Policy) -> GroupAnnotations:
    """Remembered on the workload: GG201-GG205 and the feasibility check all ask."""
    key = ("group_annotations", id(policy))
    found: GroupAnnotations | None = workload.memo.get(key)
    if found is None:
        found = workload.memo[key] = GroupAnnotations(
            size=_values(workload, GROUP_SIZE_ANNOTATION.value(policy)),
            atomic=_values(workload, ATOMIC_GROUP_SIZE_ANNOTATION.value(policy)))
    return found


class GpuPodSet(NamedTuple):
    pod_set: PodSet
    gpus: Fraction              # g: GPUs per pod (effective request)

    @property
    def total(self) -> Fraction:
        return self.gpus * self.pod_set.replicas


class GroupSpec(NamedTuple):
    """The group sizes of one workload, resolved. ``atomic`` is ``size`` when A is not set.
    (Named tuples, here and above: immutable, and cheaper to build than frozen dataclasses.)"""

    size: int                   # G
    atomic: int                 # A
    size_path: str
    atomic_path: str            # "" when A defaults to G
    pod_sets: tuple[GpuPodSet, ...]   # the GPU pod sets of the gang

    @property
    def atomic_explicit(self) -> bool:
        return bool(self.atomic_path)

    @property
    def total_gpus(self) -> Fraction:
        """T: GPUs of the whole job at full size."""
        whole, rest = 0, None
        for part in self.pod_sets:  # exact either way; whole GPU counts skip Fraction arithmetic
            if part.gpus.denominator == 1:
                whole += part.gpus.numerator * part.pod_set.replicas
            else:
                rest = part.total if rest is None else rest + part.total
        return Fraction(whole) if rest is None else rest + whole

    @property
    def groups(self) -> Fraction:
        """T / G: how many groups the job forms."""
        return self.total_gpus / self.size

    def breakdown(self) -> str:
        """``1x8 Master + 6x8 Worker``: how T is made up."""
        return " + ".join(f"{p.pod_set.replicas}x{format_gpus(p.gpus)} {p.pod_set.name}"
                          for p in self.pod_sets)


def is_multiple(amount: Fraction | int, of: Fraction | int) -> bool:
    """``amount % of == 0``, exactly; ``of`` is not zero. Whole numbers skip Fraction arithmetic."""
    if of.denominator == 1 and amount.denominator == 1:
        return amount.numerator % of.numerator == 0
    return Fraction(amount) % of == 0


def format_gpus(amount: Fraction | int) -> str:
    amount = Fraction(amount)
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):g}"


def _in_force(values: list[GroupValue]) -> tuple[bool, GroupValue | None]:
    """(usable, the value in force or None when unset). Unusable: a value is malformed
    (GG201) or pod templates disagree (GG205)."""
    if not values:
        return True, None
    if len(values) == 1:  # the usual case: one place sets it
        return (True, values[0]) if values[0].value is not None else (False, None)
    if any(v.value is None for v in values):
        return False, None
    chosen = [v for v in values if v.pod_set is not None] or values  # pods carry the templates' value
    if len({v.value for v in chosen}) > 1:
        return False, None
    return True, chosen[0]


def group_sizes(workload: Workload, policy: Policy) -> GroupSpec | None:
    """G, A and the GPU pod sets of a workload that sets G, or None.

    None also when G or A is malformed (GG201) or pod templates disagree (GG205):
    those rules report it, and nothing sensible can be derived from it.
    Remembered on the workload.
    """
    key = ("group_sizes", id(policy))
    if key in workload.memo:
        return workload.memo[key]  # type: ignore[no-any-return]
    found = workload.memo[key] = _group_sizes(workload, policy)
    return found


def _group_sizes(workload: Workload, policy: Policy) -> GroupSpec | None:
    found = group_annotations(workload, policy)
    if not found.size:  # most workloads: no group size anywhere
        return None
    size_ok, size = _in_force(found.size)
    atomic_ok, atomic = _in_force(found.atomic)
    if not (size_ok and atomic_ok) or size is None or size.value is None:
        return None
    gpu_pod_sets: list[GpuPodSet] = []
    for pod_set in workload.gang_pod_sets:  # a loop, not a generator: on every object with G
        gpus = gpus_per_pod(pod_set, policy)
        if is_positive(gpus):
            gpu_pod_sets.append(GpuPodSet(pod_set, gpus))
    pod_sets = tuple(gpu_pod_sets)
    if atomic is not None and atomic.value is not None:
        return GroupSpec(size.value, atomic.value, size.path, atomic.path, pod_sets)
    return GroupSpec(size.value, size.value, size.path, "", pod_sets)
