"""resource.k8s.io objects read into frozen values, whatever their API version.

``v1`` (1.34 GA) and ``v1beta2`` nest a request's fields under ``exactly``; ``v1beta1`` keeps
them on the request itself and a device's attributes and capacity under ``basic``; capacities
are ``{value: "80Gi"}`` from ``v1beta1`` on. Everything here reads one shape that covers them
all (the upstream types: staging/src/k8s.io/api/resource/{v1,v1beta1,v1beta2}/types.go).
Malformed parts never raise: a value that cannot be read is left out and said in ``problems``
(the feasibility check turns those into "unknown", never into "never").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies.quantity import QuantityError, parse_quantity

__all__ = ["GROUP", "ALL", "EXACT", "Device", "DeviceClass", "Slice", "SubRequest", "Request", "Constraint",
           "ClaimSpec", "ON_DEMAND_CLASSES", "TEMPLATE_MAKERS", "device_class", "resource_slice",
           "claim_spec", "allocated_devices", "IMPLICIT_EXTENDED_PREFIX"]

GROUP = "resource.k8s.io"
EXACT = "ExactCount"
ALL = "All"
# Every DeviceClass also answers to this extended resource name (KEP-5004).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"

# Classes whose devices a driver publishes only once the pods' domain forms: NVIDIA's
# ComputeDomain IMEX channels and daemons (a ComputeDomain's channel.resourceClaimTemplate).
# Not GPUs, and absent from the slices before the domain exists: never counted.
ON_DEMAND_CLASSES = frozenset({"compute-domain-default-channel.nvidia.com",
                               "compute-domain-daemon.nvidia.com"})
# (group, kind, pointer to the ResourceClaimTemplate name) of objects that make a template.
TEMPLATE_MAKERS = (
    ("resource.nvidia.com", "ComputeDomain", ("spec", "channel", "resourceClaimTemplate", "name")),
)

# An attribute value: int, bool, str, or ("version", text) for a semantic version.
AttrValue = int | bool | str | tuple[str, str]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Device:
    """One device of a slice: what its selectors read, and where it is reachable from when it
    says so itself (``perDeviceNodeSelection``)."""

    driver: str
    pool: str
    name: str
    attributes: tuple[tuple[str, AttrValue], ...]     # qualified name -> value, sorted
    capacity: tuple[tuple[str, Fraction], ...]        # qualified name -> quantity, sorted
    multiple: bool = False                            # allowMultipleAllocations
    node_name: str = ""
    node_selector: Any = None
    all_nodes: bool = False


@dataclass(frozen=True)
class Slice:
    """A ResourceSlice: the devices of one part of a pool and the nodes that reach them."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    node_selector: Any              # a NodeSelector (nodeSelectorTerms), or None
    all_nodes: bool
    per_device: bool                # perDeviceNodeSelection: each device says where it is
    devices: tuple[Device, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]      # CEL expressions
    extended_resource: str          # spec.extendedResourceName ("" when none)
    configured: bool                # carries a driver's opaque config
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubRequest:
    """One way to satisfy a request: a class, selectors and how many devices."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str                       # EXACT or ALL
    count: int
    admin: bool = False             # adminAccess: devices are not consumed


@dataclass(frozen=True)
class Request:
    """A claim's request: one alternative (``exactly``) or several (``firstAvailable``, in
    order of preference)."""

    name: str
    alternatives: tuple[SubRequest, ...]


@dataclass(frozen=True)
class Constraint:
    """A claim's ``constraints`` entry: the devices of ``requests`` share ``match_attribute``'s
    value, or (``distinct_attribute``, alpha) have pairwise different values of it."""

    requests: tuple[str, ...]       # () means every request of the claim; "req/sub" a subrequest
    match_attribute: str
    other: str = ""                 # a constraint kind not modelled
    distinct_attribute: str = ""


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()
    configured: bool = False        # carries a driver's opaque config
    problems: tuple[str, ...] = ()


def _quantity(value: Any) -> Fraction | None:
    if isinstance(value, Mapping):              # v1beta1 and later: {value: "80Gi"}
        value = value.get("value")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _attribute(value: Any) -> AttrValue | None:
    if not isinstance(value, Mapping) or len(value) != 1:
        return None
    (kind, raw), = value.items()
    if kind == "int" and type(raw) is int:
        return raw
    if kind == "bool" and isinstance(raw, bool):
        return raw
    if kind == "string" and isinstance(raw, str):
        return raw
    if kind == "version" and isinstance(raw, str):
        return ("version", raw)
    return None


def _device(raw: Mapping[str, Any], driver: str, pool: str, problems: list[str]) -> Device | None:
    name = _text(raw.get("name"))
    if not name:
        problems.append("a device without a name")
        return None
    body = _mapping(raw.get("basic")) if "basic" in raw else raw    # v1beta1
    attributes: dict[str, AttrValue] = {}
    for key, value in _mapping(body.get("attributes")).items():
        found = _attribute(value)
        if found is None:
            problems.append(f"device {name}: attribute {key} has no value gpugate reads")
            continue
        attributes[str(key)] = found
    capacity: dict[str, Fraction] = {}
    for key, value in _mapping(body.get("capacity")).items():
        amount = _quantity(value)
        if amount is None:
            problems.append(f"device {name}: capacity {key} is not a quantity")
            continue
        capacity[str(key)] = amount
    return Device(driver, pool, name, tuple(sorted(attributes.items())), tuple(sorted(capacity.items())),
                  body.get("allowMultipleAllocations") is True, _text(body.get("nodeName")),
                  body.get("nodeSelector"), body.get("allNodes") is True)


def resource_slice(obj: Mapping[str, Any]) -> Slice:
    spec = _mapping(obj.get("spec"))
    meta = _mapping(obj.get("metadata"))
    pool = _mapping(spec.get("pool"))
    driver = _text(spec.get("driver"))
    pool_name = _text(pool.get("name"))
    problems: list[str] = []
    generation, count = pool.get("generation"), pool.get("resourceSliceCount")
    if type(generation) is not int:
        generation = 0
    if type(count) is not int or count < 1:
        count = 1
    devices = []
    for raw in _list(spec.get("devices")):
        found = _device(_mapping(raw), driver, pool_name, problems)
        if found is not None:
            devices.append(found)
    return Slice(_text(meta.get("name")), driver, pool_name, generation, count, _text(spec.get("nodeName")),
                 spec.get("nodeSelector"), spec.get("allNodes") is True,
                 spec.get("perDeviceNodeSelection") is True, tuple(devices), tuple(problems))


def _selectors(value: Any, problems: list[str], where: str) -> tuple[str, ...]:
    out = []
    for selector in _list(value):
        expression = _mapping(_mapping(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            out.append(expression)
        else:
            problems.append(f"{where}: a selector that is not a CEL expression")
    return tuple(out)


def device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = _mapping(obj.get("spec"))
    problems: list[str] = []
    return DeviceClass(_text(_mapping(obj.get("metadata")).get("name")),
                       _selectors(spec.get("selectors"), problems, "class"),
                       _text(spec.get("extendedResourceName")), bool(_list(spec.get("config"))),
                       tuple(problems))


def _sub_request(raw: Mapping[str, Any], name: str, problems: list[str]) -> SubRequest:
    mode = raw.get("allocationMode") or EXACT
    count = raw.get("count", 1)
    if mode not in (EXACT, ALL):
        problems.append(f"request {name}: allocationMode {mode} is not known")
    if type(count) is not int or count < 1:
        problems.append(f"request {name}: count {count!r} is not a positive integer")
        count = 1
    if raw.get("capacity") is not None:
        problems.append(f"request {name}: capacity requests (consumable capacity) are not modelled")
    return SubRequest(name, _text(raw.get("deviceClassName")),
                      _selectors(raw.get("selectors"), problems, f"request {name}"),
                      mode if mode in (EXACT, ALL) else EXACT, count, raw.get("adminAccess") is True)


def claim_spec(spec: Any) -> ClaimSpec:
    """A ResourceClaim's ``spec`` (a template's ``spec.spec``)."""
    devices = _mapping(_mapping(spec).get("devices"))
    problems: list[str] = []
    requests = []
    for raw in _list(devices.get("requests")):
        raw = _mapping(raw)
        name = _text(raw.get("name"))
        alternatives: list[SubRequest] = []
        first = raw.get("firstAvailable")
        if isinstance(first, list) and first:
            for sub in first:
                sub = _mapping(sub)
                alternatives.append(_sub_request(sub, f"{name}/{_text(sub.get('name'))}", problems))
        elif isinstance(raw.get("exactly"), Mapping):          # v1, v1beta2
            alternatives.append(_sub_request(raw["exactly"], name, problems))
        elif "deviceClassName" in raw:                          # v1beta1
            alternatives.append(_sub_request(raw, name, problems))
        else:
            problems.append(f"request {name or '?'}: no device class")
            continue
        requests.append(Request(name, tuple(alternatives)))
    constraints = []
    for raw in _list(devices.get("constraints")):
        raw = _mapping(raw)
        names = tuple(str(r) for r in _list(raw.get("requests")))
        match = _text(raw.get("matchAttribute"))
        distinct = "" if match else _text(raw.get("distinctAttribute"))
        other = "" if match or distinct else ", ".join(sorted(str(k) for k in raw if k != "requests"))
        constraints.append(Constraint(names, match, other, distinct))
    return ClaimSpec(tuple(requests), tuple(constraints), bool(_list(devices.get("config"))), tuple(problems))


def allocated_devices(claim: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """(driver, pool, device) of every device a ResourceClaim's status says it holds (admin
    access holds nothing)."""
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    out = []
    for result in _list(_mapping(allocation.get("devices")).get("results")):
        result = _mapping(result)
        if result.get("adminAccess") is True:
            continue
        driver, pool = _text(result.get("driver")), _text(result.get("pool"))
        device = _text(result.get("device"))
        if driver and device:
            out.append((driver, pool, device))
    return tuple(out)
