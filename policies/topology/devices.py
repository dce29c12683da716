"""Dynamic Resource Allocation objects of a cluster (resource.k8s.io, any served version):
DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates, read into
:mod:`policies.dra.objects` values, with every slice's devices in the rows of a
:class:`policies.dra.rows.DeviceRows` (written when its event is applied) and what the claims'
allocations hold marked there. Each kind moves a version counter of its own (what a device
count reads is keyed by exactly those), and any change moves ``dra_version`` too (the
topology's :meth:`state_versions`). The devices each node reaches are worked out from them by
:mod:`policies.feasibility.devices`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.dra.objects import (
    ClaimSpec,
    DeviceClass,
    Slice,
    allocated_devices,
    claim_spec,
    device_class,
    resource_slice,
)
from policies.dra.rows import DeviceRows
from policies.topology.nodes import _key, _mapping

__all__ = ["DEVICE_KINDS", "ClaimRecord", "DeviceObjects"]

# The names (policies.topology.WATCHED) of the kinds held here.
DEVICE_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


@dataclass(frozen=True)
class ClaimRecord:
    """A ResourceClaim: what it asks for, and the devices and nodes its allocation holds."""

    spec: ClaimSpec
    allocated: tuple[tuple[str, str, str], ...]     # (driver, pool, device)
    allocation_nodes: Any                           # status.allocation.nodeSelector, or None
    is_allocated: bool


class DeviceObjects:
    """The DRA objects of a cluster, by name (classes, slices) or (namespace, name)."""

    def _init_devices(self) -> None:
        self.device_classes: dict[str, DeviceClass] = {}
        self.resource_slices: dict[str, Slice] = {}
        self.resource_claims: dict[tuple[str, str], ClaimRecord] = {}
        self.claim_templates: dict[tuple[str, str], ClaimSpec] = {}
        self.device_rows = DeviceRows()
        self.dra_version = 0                # any of the four below moved
        self.slice_version = 0              # a ResourceSlice came, went or changed
        self.class_version = 0              # ... a DeviceClass
        self.claim_version = 0              # ... a ResourceClaim (its spec or its allocation)
        self.template_version = 0           # ... a ResourceClaimTemplate
        # moves when a device column of the feasibility check is given to another claim set
        self.dra_columns_epoch = 0

    def _device_stores(self) -> dict[str, Mapping[Any, Any]]:
        return {"DeviceClass": self.device_classes, "ResourceSlice": self.resource_slices,
                "ResourceClaim": self.resource_claims, "ResourceClaimTemplate": self.claim_templates}

    def _put(self, store: dict[Any, Any], key: Any, deleted: bool, value: Any, counter: str) -> Any:
        """Keep ``value`` under ``key`` (drop it when ``deleted``); when that changes anything,
        move ``counter`` and ``dra_version`` and return what was there (``_UNCHANGED`` else)."""
        old = store.get(key)
        if deleted:
            if key not in store:
                return _UNCHANGED
            del store[key]
        elif key in store and old == value:
            return _UNCHANGED
        else:
            store[key] = value
        setattr(self, counter, getattr(self, counter) + 1)
        self.dra_version += 1
        return old

    def _apply_device_class(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if name:
            self._put(self.device_classes, name, deleted, None if deleted else device_class(obj),
                      "class_version")

    def _apply_resource_slice(self, obj: Mapping[str, Any], deleted: bool) -> None:
        _, name = _key(obj)
        if not name:
            return
        found = None if deleted else resource_slice(obj)
        if self._put(self.resource_slices, name, deleted, found, "slice_version") is not _UNCHANGED:
            self.device_rows.put_slice(name, found)

    def _apply_resource_claim(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        if not key[1]:
            return
        value = None
        if not deleted:
            allocation = _mapping(obj.get("status")).get("allocation")
            value = ClaimRecord(claim_spec(obj.get("spec")), allocated_devices(obj),
                                _mapping(allocation).get("nodeSelector"), isinstance(allocation, Mapping))
        old = self._put(self.resource_claims, key, deleted, value, "claim_version")
        if old is _UNCHANGED:
            return
        held_before = old.allocated if isinstance(old, ClaimRecord) else ()
        held_now = value.allocated if value is not None else ()
        if held_before != held_now:
            self.device_rows.hold(held_before, -1)
            self.device_rows.hold(held_now, 1)

    def _apply_claim_template(self, obj: Mapping[str, Any], deleted: bool) -> None:
        key = _key(obj)
        if key[1]:
            value = None if deleted else claim_spec(_mapping(obj.get("spec")).get("spec"))
            self._put(self.claim_templates, key, deleted, value, "template_version")


_UNCHANGED: Any = object()
