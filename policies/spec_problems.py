"""Verdicts on the content of pod specs, shared by pod specs of equal content.

A rule whose problems depend only on a pod spec (and the policy) reports them through
:func:`pod_set_problems`, so that a repeated pod template (a sweep, a Master/Worker pair)
is judged once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from policies.config import Policy
from policies.findings import Problem, SpecProblem, quoted
from policies.workload import PodSet, Workload

__all__ = ["SpecProblem", "pod_set_problems"]


def pod_set_problems(workload: Workload, policy: Policy, key: Any,
                     find: Callable[[PodSet, Policy], Iterable[SpecProblem]],
                     blind: bool = False) -> list[Problem]:
    """The problems of every pod set of ``workload`` that ``find(pod_set, policy)`` sees in
    its pod spec.

    ``find`` reads only the pod spec's content and the policy; what it finds is kept in
    the pod set's shared facts under ``key``, which names the rule and, when ``find``
    reads the policy, carries the policy's facts token. ``blind``: ``find`` reads no
    ``cpu`` or ``memory`` amount of the containers (see ``PodSet.blind_facts``), so its
    problems are shared by specs that differ only there."""
    problems: list[Problem] = []
    for pod_set in workload.pod_sets:
        facts = pod_set.blind_facts if blind else pod_set.facts
        found: tuple[SpecProblem, ...] | None = facts.get(key)
        if found is None:
            found = facts[key] = tuple(find(pod_set, policy))
        if found:  # rare: messages and paths are built only here
            base = pod_set.spec_path
            for detail, path in found:
                problems.append(Problem(f"pod set {quoted(pod_set.name)}{detail}", base + path))
    return problems
