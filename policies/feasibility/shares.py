"""Shares of one device (``gpu.shares``, :data:`policies.gpu.GPU_SHARES`): what a sharing
scheduler (HAMi, Volcano vGPU, Alibaba's GPU sharing) hands out per device, not node capacity.

The question leaves them out of what is placed on nodes (:func:`without_shares`), so a pod
asking for ``nvidia.com/gpumem`` is never "no node offers it" because no node advertises it.
Instead each container's share is held against one device (:func:`shares_never`):

- ``percent`` (of one device's memory or compute): never more than 100;
- ``memory``: never more than the largest device a node registers, where the snapshot shows
  the devices (:data:`DEVICE_MEMORY`); with no node showing them nothing is said;
- ``count``: nothing said (how many devices a node has is the sharing scheduler's own view).

A share is per container and per device: a container asking ``nvidia.com/gpu: 2`` and
``nvidia.com/gpumem: 3000`` gets 3000 MiB on each of two devices, so the check reads each
container's amount, never a pod's sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from policies.config import Policy
from policies.quantity import QuantityError, parse_quantity
from policies.topology import Topology
from policies.workload import PodSet

from .outcomes import Cause, Outcome, Verdict

__all__ = ["ShareAsk", "DEVICE_MEMORY", "share_asks", "without_shares", "shares_never"]

# Where the largest device of a node is shown, per memory share: ("annotation", key) of a
# device-register annotation the topology reads (policies.topology.nodes.DEVICE_REGISTERS), or
# ("per-device", count resource): the node's allocatable of the share divided by its count of
# devices (Alibaba's gpushare device plugin advertises aliyun.com/gpu-mem for all devices and
# aliyun.com/gpu-count).
DEVICE_MEMORY: Mapping[str, tuple[str, str]] = {
    "nvidia.com/gpumem": ("annotation", "hami.io/node-nvidia-register"),
    "volcano.sh/vgpu-memory": ("annotation", "volcano.sh/node-vgpu-register"),
    "aliyun.com/gpu-mem": ("per-device", "aliyun.com/gpu-count"),
}
PERCENT = 100


@dataclass(frozen=True)
class ShareAsk:
    """The largest share of one resource a container of a pod set asks for."""

    pod_set: str
    path: str           # JSON Pointer of that container's resources
    resource: str
    kind: str           # memory | percent | count (policies.gpu.SHARE_KINDS)
    amount: Fraction


def _shares(policy: Policy) -> Mapping[str, str]:
    found = policy.gpu.get("shares")
    return found if isinstance(found, Mapping) else {}


def share_asks(sets: Iterable[PodSet], policy: Policy) -> tuple[ShareAsk, ...]:
    """Per pod set and share resource, the largest amount one container asks for (its limit,
    else its request: extended resources have them equal). Amounts that do not parse are left
    out: a smaller ask never makes a false "never"."""
    shares = _shares(policy)
    if not shares:
        return ()
    asks: dict[tuple[str, str], ShareAsk] = {}
    for pod_set in sets:
        for path, container in pod_set.containers():
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            limits = limits if isinstance(limits, dict) else {}
            requests = resources.get("requests")
            requests = requests if isinstance(requests, dict) else {}
            for resource, raw in [*limits.items(), *((r, v) for r, v in requests.items() if r not in limits)]:
                kind = shares.get(resource)
                if kind is None:
                    continue
                try:
                    amount = parse_quantity(raw)
                except QuantityError:
                    continue
                key = (pod_set.name, resource)
                known = asks.get(key)
                if known is None or amount > known.amount:
                    asks[key] = ShareAsk(pod_set.name, f"{path}/resources", resource, kind, amount)
    return tuple(asks.values())


def without_shares(units: tuple[tuple[str, int], ...], policy: Policy) -> tuple[tuple[str, int], ...]:
    """``units`` (a pod's scheduler units) without the share resources: not node capacity."""
    shares = _shares(policy)
    if not shares or not any(r in shares for r, _ in units):
        return units
    return tuple((r, v) for r, v in units if r not in shares)


def _largest_device(topo: Topology, resource: str) -> int | None:
    """The largest device memory any live node shows for ``resource``; None when none does."""
    source = DEVICE_MEMORY.get(resource)
    if source is None:
        return None
    how, what = source
    if how == "annotation":
        return topo.largest_registered_device(what)
    memory, count = topo.res_index.get(resource), topo.res_index.get(what)
    if memory is None or count is None:
        return None
    n = topo.slots
    devices = topo.alloc[:n, count]
    rows = topo.live[:n] & (devices > 0)
    if not rows.any():
        return None
    return int((topo.alloc[:n, memory][rows] // devices[rows]).max())


def shares_never(asks: tuple[ShareAsk, ...], topo: Topology) -> Outcome | None:
    """A "never" when some container asks one device for more than any device has."""
    for ask in asks:
        if ask.kind == "percent" and ask.amount > PERCENT:
            return Outcome("", Verdict.NEVER, Cause.SHARE_NEVER_FITS,
                           f"{_plain(ask.amount)} {ask.resource} asked of one device: a share is at most "
                           f"{PERCENT} (pod set {ask.pod_set})", ask.path,
                           facts={"resource": ask.resource, "kind": ask.kind, "asked": ask.amount,
                                  "limit": PERCENT, "pod_set": ask.pod_set})
        if ask.kind == "memory":
            largest = _largest_device(topo, ask.resource)
            if largest is not None and ask.amount > largest:
                return Outcome("", Verdict.NEVER, Cause.SHARE_NEVER_FITS,
                               f"{_plain(ask.amount)} {ask.resource} asked of one device, the largest device "
                               f"any node registers has {largest} (pod set {ask.pod_set})", ask.path,
                               facts={"resource": ask.resource, "kind": ask.kind, "asked": ask.amount,
                                      "limit": largest, "pod_set": ask.pod_set})
    return None


def _plain(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):.6g}"
