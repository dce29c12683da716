"""A pod set's Kueue Topology Aware Scheduling request, from its pod template's annotations
(kubernetes-sigs/kueue ``apis/kueue/v1beta2/topology_types.go``, read as
``pkg/controller/jobframework/tas.go`` reads them): what :mod:`policies.feasibility.kueue` judges
of the domains of a Topology level."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["PodSetTopology", "podset_topology", "REQUIRED_TOPOLOGY", "SLICE_REQUIRED_TOPOLOGY", "SLICE_SIZE"]

# The pod template annotations Kueue reads a pod set's topology request from
# (kubernetes-sigs/kueue apis/kueue/v1beta2/topology_types.go, pkg/controller/jobframework/tas.go).
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


class PodSetTopology(NamedTuple):
    """A pod set's required topology: all its pods on nodes sharing a value of ``required``
    (a Topology level's node label), and with a slice level, each ``slice_size`` pods on nodes
    sharing a value of ``slice_level`` too."""

    required: str
    slice_level: str | None = None
    slice_size: int = 0


def podset_topology(annotations: Mapping[str, Any]) -> PodSetTopology | None:
    """The required topology of a pod template's annotations, as Kueue's jobframework reads it
    (required first; a slice only with both its level and a size that parses); None without one
    (preferred and unconstrained requests constrain nothing for sure)."""
    required = annotations.get(REQUIRED_TOPOLOGY)
    if not isinstance(required, str) or not required:
        return None
    level, size = annotations.get(SLICE_REQUIRED_TOPOLOGY), annotations.get(SLICE_SIZE)
    try:
        count = int(size) if isinstance(size, str) else 0
    except ValueError:
        count = 0
    if isinstance(level, str) and level and count > 0:
        return PodSetTopology(required, level, count)
    return PodSetTopology(required)
