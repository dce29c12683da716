"""The Kubernetes Workload API (``scheduling.k8s.io``, KEP-4671 and its follow-ups) as each
published version defines it: where a Workload keeps its pod groups, where a group or a
PodGroup keeps its scheduling policy, and the gang minimum in it.

- ``v1alpha1`` (Kubernetes 1.35): a Workload's groups in ``spec.podGroups``, each with a
  ``policy``; a pod names its gang in ``spec.workloadRef`` (a Workload and a group).
- ``v1alpha2`` (1.36): ``spec.podGroupTemplates``, each with a ``schedulingPolicy``; a pod
  names a PodGroup object in ``spec.schedulingGroup.podGroupName``.
- ``v1alpha3`` (1.37): as 1.36, plus composite groups (``compositePodGroupTemplates``,
  CompositePodGroup) and a PodGroup's ``spec.workloadRef``.

From 1.36 a PodGroup is an object of its own (``spec.schedulingPolicy``), and pods name it
(``spec.schedulingGroup.podGroupName``) instead of a Workload's group. A policy is a union:
``basic: {}`` (pod by pod) or ``gang: {minCount}`` (all or nothing). Versions not listed
here are not understood: nothing is read from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.kinds import WORKLOAD_API_GROUP

__all__ = ["GROUP", "VERSIONS", "WorkloadVersion", "version_of", "gang_minimum", "group_minimum",
           "podgroup_minimum"]

GROUP = WORKLOAD_API_GROUP


@dataclass(frozen=True)
class WorkloadVersion:
    """Field names of one version of the API."""

    version: str
    kubernetes: str
    groups: str                      # key of ``spec`` listing a Workload's pod groups
    policy: str                      # key of a group holding its scheduling policy
    podgroup: bool                   # PodGroup is an object of its own
    # Topology constraints (read by nothing yet: they sit behind an alpha gate, see
    # policies/validation/workload_api.py): the list under ``schedulingConstraints`` and the
    # key naming the node label.
    constraints: str = ""
    topology_key: str = ""
    podgroup_ref: tuple[str, ...] = ()   # a PodGroup's reference to its Workload template
    composite: bool = False          # compositePodGroupTemplates and CompositePodGroup exist


VERSIONS: dict[str, WorkloadVersion] = {v.version: v for v in (
    WorkloadVersion("v1alpha1", "1.35", "podGroups", "policy", podgroup=False),
    WorkloadVersion("v1alpha2", "1.36", "podGroupTemplates", "schedulingPolicy", podgroup=True,
                    constraints="topologyConstraints", topology_key="topologyKey",
                    podgroup_ref=("podGroupTemplateRef", "workload")),
    WorkloadVersion("v1alpha3", "1.37", "podGroupTemplates", "schedulingPolicy", podgroup=True,
                    constraints="topology", topology_key="key", podgroup_ref=("workloadRef",),
                    composite=True),
)}

# The most pod group templates a Workload may have (every version).
MAX_GROUPS = 8


def version_of(doc: dict[str, Any]) -> WorkloadVersion | None:
    """The version an object of the API is written in, or None for one not understood."""
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str):
        return None
    group, _, version = api_version.rpartition("/")
    return VERSIONS.get(version) if group == GROUP else None


def gang_minimum(policy: Any) -> int | None:
    """``gang.minCount`` of a scheduling policy when it is a usable gang minimum (an integer of
    at least 1); None for ``basic``, a missing policy, or a value the API refuses."""
    if not isinstance(policy, dict):
        return None
    gang = policy.get("gang")
    if not isinstance(gang, dict):
        return None
    count = gang.get("minCount")
    return count if type(count) is int and count >= 1 else None


def _groups(doc: dict[str, Any], version: WorkloadVersion) -> list[Any]:
    spec = doc.get("spec")
    groups = spec.get(version.groups) if isinstance(spec, dict) else None
    return groups if isinstance(groups, list) else []


def group_minimum(workload: dict[str, Any], name: str) -> int | None:
    """The gang minimum of the Workload's pod group (1.35) or pod group template (1.36, 1.37)
    ``name``; None when it has no such group, the group is ``basic``, or the version is not
    understood."""
    version = version_of(workload)
    if version is None:
        return None
    for group in _groups(workload, version):
        if isinstance(group, dict) and group.get("name") == name:
            return gang_minimum(group.get(version.policy))
    return None


def podgroup_minimum(podgroup: dict[str, Any]) -> int | None:
    """The gang minimum of a PodGroup object (1.36, 1.37), or None."""
    version = version_of(podgroup)
    if version is None or not version.podgroup:
        return None
    spec = podgroup.get("spec")
    return gang_minimum(spec.get("schedulingPolicy")) if isinstance(spec, dict) else None
