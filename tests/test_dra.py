"""DRA (resource.k8s.io): objects of every served version, CEL selectors in Kubernetes'
environment, and device counts in the feasibility check (a "never" only as a proof, checked
against a brute-force allocator; anything unreadable is "unknown")."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.config import Policy
from policies.dra.cel import Unknown, compile_selector, matches
from policies.dra.objects import Device, claim_spec, resource_slice
from policies.engine import Context
from policies.feasibility import Verdict
from policies.rules._feasibility import feasibility
from policies.topology import ClusterSnapshot, Topology
from policies.workload import build_workload

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "NVIDIA__k8s-dra-driver-gpu"


def node(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def gpu(index: int, product: str = "A100", memory: str = "80Gi") -> Obj:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "productName": {"string": product},
            "index": {"int": index},
            "driverVersion": {"version": "550.54.15"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def rslice(
    node_name: str,
    devices: list[Obj],
    generation: int = 1,
    count: int = 1,
    name: str = "",
    version: str = "v1",
) -> Obj:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-gpus-{generation}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def device_class(name: str = DRIVER, expression: str = f'device.driver == "{DRIVER}"', **spec: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
    }


def template(name: str, requests: list[Obj], constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": devices}},
    }


def exactly(
    name: str, count: int = 1, selectors: tuple[str, ...] = (), cls: str = DRIVER, **more: Any
) -> Obj:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": cls,
            "count": count,
            "selectors": [{"cel": {"expression": e}} for e in selectors],
            **more,
        },
    }


def job(pods: int, claims: list[Obj], resources: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": pods,
            "tasks": [
                {
                    "name": "w",
                    "replicas": pods,
                    "template": {
                        "spec": {
                            "resourceClaims": claims,
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x",
                                    "resources": {
                                        "requests": {"cpu": "1", **(resources or {})},
                                        "limits": dict(resources or {}),
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def per_pod(template_name: str) -> list[Obj]:
    return [{"name": "gpus", "resourceClaimTemplateName": template_name}]


def verdict(objects: list[Obj], workload: Obj) -> tuple[Verdict, str]:
    topo = Topology.from_objects(objects, Policy())
    result = feasibility(
        build_workload(workload), Context(policy=Policy(), clusters=[ClusterSnapshot("c", topo)])
    )
    assert result is not None
    messages = [p.message for problems in result.problems.values() for p in problems]
    return result.verdict, " | ".join(messages)


def cluster(per_node: list[int], **class_spec: Any) -> list[Obj]:
    objects: list[Obj] = [device_class(**class_spec)]
    for i, count in enumerate(per_node):
        objects += [node(f"n{i}"), rslice(f"n{i}", [gpu(j) for j in range(count)])]
    return objects


TWO = template("two", [exactly("gpu", 2)])


# -- CEL in Kubernetes' DRA environment ---------------------------------------------------------

DEVICE = Device(
    DRIVER,
    "pool",
    "gpu-0",
    (
        ("index", 3),
        ("other.example.com/flag", True),
        ("productName", "NVIDIA A100-SXM4-80GB"),
        ("driverVersion", ("version", "550.54.15")),
    ),
    (("memory", Fraction(80 * 2**30)),),
)

# (expression, expected: True/False, or "unknown"); upstream semantics of
# staging/src/k8s.io/dynamic-resource-allocation/cel (compile_test.go: runtime errors on missing
# attributes, versions compared with semver(), qualified attribute names).
CEL_CASES = [
    ("true", True),
    ("false", False),
    ("?!", "unknown"),  # syntax error
    ("1", "unknown"),  # not a bool
    ('device.driver == "gpu.nvidia.com"', True),
    ('device.attributes["gpu.nvidia.com"].index < 4', True),
    ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")', True),
    ('device.attributes["other.example.com"].flag', True),
    ('device.attributes["gpu.nvidia.com"].missing == 1', "unknown"),  # no such key: an error upstream
    ('device.attributes["no-such-domain"].x', "unknown"),
    ('"x" in device.attributes["no-such-domain"]', False),  # an empty map, as upstream
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("100Gi"))', False),
    ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("81Gi"))', True),
    ('device.capacity["gpu.nvidia.com"].memory == quantity("81920Mi")', True),
    ('device.capacity["gpu.nvidia.com"].memory.asInteger() == 85899345920', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("560.0.0")) < 0', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.major() == 550', True),
    ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    ('isSemver("1.2") || isQuantity("1Gi")', True),
    (
        'cel.bind(g, device.attributes["gpu.nvidia.com"], '
        'g.index == 3 && g.productName.lowerAscii().contains("a100"))',
        True,
    ),
    ("device.allowMultipleAllocations", False),
    ('quantity("x1")', "unknown"),
    ("noSuchFunction(device)", "unknown"),
]


@pytest.mark.parametrize(("expression", "expected"), CEL_CASES)
def test_cel_selectors(expression: str, expected: Any) -> None:
    found = matches(compile_selector(expression), DEVICE)
    if expected == "unknown":
        assert isinstance(found, Unknown), found
    else:
        assert found is expected


def test_devices_equal_in_what_a_selector_reads_share_one_answer() -> None:
    selector = compile_selector('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"')
    assert selector.reads is not None
    other = Device(DRIVER, "pool", "gpu-1", (("index", 5), ("productName", "NVIDIA A100-SXM4-80GB")), ())
    assert matches(selector, DEVICE) is True and matches(selector, other) is True
    assert len(selector.results) == 1
    # a selector that may read anything is evaluated per device
    assert compile_selector('device.attributes["gpu.nvidia.com"].exists(k, k == "index")').reads is None


# -- objects of every served version ------------------------------------------------------------


def test_v1beta1_and_v1_shapes_read_alike() -> None:
    beta = rslice(
        "n0",
        [
            {
                "name": "gpu-0",
                "basic": {"attributes": {"index": {"int": 0}}, "capacity": {"memory": {"value": "80Gi"}}},
            }
        ],
        version="v1beta1",
    )
    v1 = rslice(
        "n0", [{"name": "gpu-0", "attributes": {"index": {"int": 0}}, "capacity": {"memory": "80Gi"}}]
    )
    assert resource_slice(beta).devices == resource_slice(v1).devices
    old = claim_spec({"devices": {"requests": [{"name": "gpu", "deviceClassName": DRIVER, "count": 2}]}})
    new = claim_spec({"devices": {"requests": [exactly("gpu", 2)]}})
    assert old.requests == new.requests
    first = claim_spec(
        {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": DRIVER, "count": 1},
                            {"name": "small", "deviceClassName": DRIVER, "count": 2},
                        ],
                    }
                ]
            }
        }
    )
    assert [a.count for a in first.requests[0].alternatives] == [1, 2]


# -- feasibility -----------------------------------------------------------------------------


def test_claims_fit_wait_or_never_by_device_counts() -> None:
    objects = [*cluster([8, 4]), TWO]
    assert verdict(objects, job(6, per_pod("two")))[0] == Verdict.FITS
    found, message = verdict(objects, job(7, per_pod("two")))
    assert found == Verdict.NEVER and "serve at most 6" in message, message
    # a selector no device satisfies
    picky = template(
        "picky",
        [exactly("gpu", 1, ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("100Gi"))',))],
    )
    found, message = verdict([*objects, picky], job(1, per_pod("picky")))
    assert found == Verdict.NEVER and message.startswith("0 of 2 eligible nodes"), message


def test_a_dra_only_cluster_is_not_empty_of_gpus() -> None:
    """Before DRA support, a cluster whose GPUs are all DRA had none."""
    assert verdict([*cluster([8]), TWO], job(4, per_pod("two")))[0] == Verdict.FITS


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    objects = [
        device_class(),
        node("n0"),
        rslice("n0", [gpu(j) for j in range(8)], generation=1),
        rslice("n0", [gpu(0)], generation=2),
        TWO,
    ]
    assert verdict(objects, job(1, per_pod("two")))[0] == Verdict.NEVER
    # a pool whose newest generation is not all there yet: unknown, not never
    partial = [device_class(), node("n0"), rslice("n0", [gpu(0)], generation=2, count=2), TWO]
    assert verdict(partial, job(1, per_pod("two")))[0] == Verdict.UNKNOWN


def test_allocated_devices_make_it_wait() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": "o"},
        "spec": {"devices": {"requests": [exactly("gpu", 8)]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": f"gpu-{j}"}
                        for j in range(7)
                    ]
                }
            }
        },
    }
    found, message = verdict([*cluster([8]), TWO, claim], job(1, per_pod("two")))
    assert found == Verdict.WAITS, message


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        ([node("n0"), rslice("n0", [gpu(0)]), TWO], "DeviceClass gpu.nvidia.com is not in the cluster view"),
        ([device_class(), node("n0"), TWO], "no ResourceSlice"),
        ([*cluster([8])], "ResourceClaimTemplate two is not in the cluster view"),
        ([*cluster([8], expression="noSuchFunction(device)"), TWO], "does not compile"),
        ([*cluster([8], expression='device.attributes["gpu.nvidia.com"].missing'), TWO], "Key not found"),
        (
            [
                *cluster([8]),
                template("two", [exactly("gpu", 2)])
                | {
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [exactly("gpu", 2)],
                                "config": [{"opaque": {"driver": DRIVER, "parameters": {}}}],
                            }
                        }
                    }
                },
            ],
            "opaque config",
        ),
    ],
)
def test_what_cannot_be_counted_is_unknown_never_never(objects: list[Obj], reason: str) -> None:
    found, message = verdict(objects, job(1, per_pod("two")))
    assert found == Verdict.UNKNOWN and reason in message, message


def test_a_never_stands_when_other_parts_are_unknown() -> None:
    """The counts are upper bounds: a CEL error counts a device as matching, so 9 of 8 is still never."""
    objects = [
        *cluster([8], expression='device.attributes["gpu.nvidia.com"].missing'),
        template("nine", [exactly("gpu", 9)]),
    ]
    assert verdict(objects, job(1, per_pod("nine")))[0] == Verdict.NEVER


def test_a_shared_claim_is_allocated_once() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": "ml"},
        "spec": {"devices": {"requests": [exactly("gpu", 4)]}},
    }
    shared = [{"name": "gpus", "resourceClaimName": "shared"}]
    assert verdict([*cluster([4, 4]), claim], job(16, shared))[0] == Verdict.FITS  # not 16 x 4 devices
    big = claim | {"spec": {"devices": {"requests": [exactly("gpu", 5)]}}}
    assert verdict([*cluster([4, 4]), big], job(2, shared))[0] == Verdict.NEVER


def test_extended_resource_mapped_by_a_device_class() -> None:
    objects = cluster([8], extendedResourceName="example.com/gpu")
    assert verdict(objects, job(8, [], {"example.com/gpu": "1"}))[0] == Verdict.FITS
    assert verdict(objects, job(1, [], {"example.com/gpu": "9"}))[0] == Verdict.NEVER
    implicit = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"}
    assert verdict(cluster([8]), job(4, [], implicit))[0] == Verdict.FITS


def test_first_available_and_constraints_count_as_upper_bounds() -> None:
    first = template(
        "first",
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": DRIVER, "count": 4},
                    {"name": "small", "deviceClassName": DRIVER, "count": 2},
                ],
            }
        ],
    )
    assert verdict([*cluster([2]), first], job(1, per_pod("first")))[0] == Verdict.FITS
    assert verdict([*cluster([1]), first], job(1, per_pod("first")))[0] == Verdict.NEVER
    paired = template(
        "paired",
        [exactly("a", 1), exactly("b", 1)],
        [{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/productName"}],
    )
    assert verdict([*cluster([2]), paired], job(1, per_pod("paired")))[0] == Verdict.FITS
    assert verdict([*cluster([2]), paired], job(2, per_pod("paired")))[0] == Verdict.NEVER


def on_root(index: int, product: str, root: str | None, driver_local: bool = True) -> Obj:
    """A GPU whose ``pcieRoot`` is ``root`` (None: it has none); the standard attribute's domain
    is not the driver's, so it is written qualified."""
    device = gpu(index, product)
    if root is not None:
        device["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": root}
    if not driver_local:        # the product written qualified, as another domain would
        device["attributes"][f"{DRIVER}/productName"] = device["attributes"].pop("productName")
    return device


def matching(name: str, count: int, constraint: Obj, requests: int = 1) -> Obj:
    return template(name, [exactly(f"r{i}", count) for i in range(requests)], [constraint])


PRODUCT = {"matchAttribute": f"{DRIVER}/productName"}
ROOT = {"matchAttribute": "resource.kubernetes.io/pcieRoot"}
DISTINCT_ROOT = {"distinctAttribute": "resource.kubernetes.io/pcieRoot"}

# Upstream semantics (staging/src/k8s.io/dynamic-resource-allocation/structured, allocator
# matchAttributeConstraint / lookupAttribute, internal/incubating/constraint.go @45e50b1 for
# distinctAttribute): every device of the bound requests has the attribute, one value for all
# (match) or a different value each (distinct); a name of the driver's domain also reads the
# attribute written without it. (devices per node, the template, pods, verdict)
CONSTRAINT_CASES = [
    # 3 A100 + 3 H100: 2 GPUs of one product per pod, 1 pod per product; counted alone, 3
    ([[gpu(j, "A100") for j in range(3)] + [gpu(j + 3, "H100") for j in range(3)]],
     matching("t", 2, PRODUCT), 2, Verdict.FITS),
    ([[gpu(j, "A100") for j in range(3)] + [gpu(j + 3, "H100") for j in range(3)]],
     matching("t", 2, PRODUCT), 3, Verdict.NEVER),
    # 4 GPUs of one product: none has 4
    ([[gpu(j, "A100") for j in range(3)] + [gpu(j + 3, "H100") for j in range(3)]],
     matching("t", 4, PRODUCT), 1, Verdict.NEVER),
    # two requests bound together: 1 + 1 of one product; two products of 2: 2 pods
    ([[gpu(0, "A100"), gpu(1, "A100"), gpu(2, "H100"), gpu(3, "H100")]],
     matching("t", 1, PRODUCT, requests=2), 2, Verdict.FITS),
    ([[gpu(0, "A100"), gpu(1, "H100"), gpu(2, "V100")]], matching("t", 1, PRODUCT, requests=2), 1,
     Verdict.NEVER),
    # the same product on two nodes does not make a pod's pair
    ([[gpu(0, "A100")], [gpu(0, "A100")]], matching("t", 2, PRODUCT), 1, Verdict.NEVER),
    # the qualified name written on the device reads alike
    ([[on_root(j, "A100", None, driver_local=False) for j in range(2)]], matching("t", 2, PRODUCT), 1,
     Verdict.FITS),
    # a PCIe root (another domain than the driver's): 2 GPUs on one root
    ([[on_root(0, "A100", "pci0"), on_root(1, "A100", "pci1")]], matching("t", 2, ROOT), 1, Verdict.NEVER),
    ([[on_root(0, "A100", "pci0"), on_root(1, "A100", "pci1"), on_root(2, "A100", "pci1")]],
     matching("t", 2, ROOT), 1, Verdict.FITS),
    # devices without the attribute cannot be chosen
    ([[on_root(0, "A100", "pci0"), on_root(1, "A100", None), on_root(2, "A100", None)]],
     matching("t", 2, ROOT), 1, Verdict.NEVER),
    # distinct: 4 GPUs on 4 roots, not on 2
    ([[on_root(j, "A100", f"pci{j % 2}") for j in range(8)]], matching("t", 4, DISTINCT_ROOT), 1,
     Verdict.NEVER),
    ([[on_root(j, "A100", f"pci{j % 4}") for j in range(8)]], matching("t", 4, DISTINCT_ROOT), 2,
     Verdict.FITS),
    ([[on_root(j, "A100", None) for j in range(8)]], matching("t", 1, DISTINCT_ROOT), 1, Verdict.NEVER),
    # a constraint binding one request: the other takes any device
    ([[on_root(0, "A100", "pci0"), on_root(1, "A100", None)]],
     template("t", [exactly("gpu", 1), exactly("nic", 1)], [{"requests": ["gpu"], **ROOT}]), 1,
     Verdict.FITS),
    ([[on_root(0, "A100", None), on_root(1, "A100", None)]],
     template("t", [exactly("gpu", 1), exactly("nic", 1)], [{"requests": ["gpu"], **ROOT}]), 1,
     Verdict.NEVER),
]


@pytest.mark.parametrize(("per_node", "claim", "pods", "expected"), CONSTRAINT_CASES)
def test_constraints_bind_the_devices_of_a_pod(
    per_node: list[list[Obj]], claim: Obj, pods: int, expected: Verdict
) -> None:
    objects: list[Obj] = [device_class(), claim]
    for i, devices in enumerate(per_node):
        objects += [node(f"n{i}"), rslice(f"n{i}", devices)]
    found, message = verdict(objects, job(pods, per_pod("t")))
    assert found == expected, message
    assert found != Verdict.NEVER or not _brute_force(
        per_node, pods, [(r["exactly"]["count"], []) for r in claim["spec"]["spec"]["devices"]["requests"]],
        _brute_constraints(claim),
    )


def _brute_constraints(claim: Obj) -> list[tuple[str, str, set[int]]]:
    devices = claim["spec"]["spec"]["devices"]
    names = [r["name"] for r in devices["requests"]]
    out = []
    for constraint in devices.get("constraints", []):
        kind = "match" if "matchAttribute" in constraint else "distinct"
        attribute = constraint.get("matchAttribute") or constraint["distinctAttribute"]
        short = attribute.removeprefix(f"{DRIVER}/")
        bound = {names.index(n) for n in constraint.get("requests", names)}
        out.append((kind, short, bound))
    return out


def test_a_pcie_root_binds_gpus_and_nics_of_two_drivers() -> None:
    """A GPU and a NIC of another driver on one PCIe root (the standard attribute)."""
    nic_driver = "nic.example.com"

    def nic(index: int, root: str) -> Obj:
        return {"name": f"nic-{index}", "attributes": {"resource.kubernetes.io/pcieRoot": {"string": root}}}

    def cluster_of(nic_roots: list[str]) -> list[Obj]:
        nics = rslice("n0", [nic(j, r) for j, r in enumerate(nic_roots)], name="n0-nics")
        nics["spec"]["driver"] = nic_driver
        nics["spec"]["pool"]["name"] = "n0-nics"
        claim = template("t", [exactly("gpu", 1), exactly("nic", 1, cls=nic_driver)], [ROOT])
        return [device_class(), device_class(nic_driver, f'device.driver == "{nic_driver}"'), node("n0"),
                rslice("n0", [on_root(0, "A100", "pci0"), on_root(1, "A100", "pci1")]), nics, claim]

    assert verdict(cluster_of(["pci2", "pci3"]), job(1, per_pod("t")))[0] == Verdict.NEVER
    assert verdict(cluster_of(["pci1", "pci2"]), job(1, per_pod("t")))[0] == Verdict.FITS
    assert verdict(cluster_of(["pci1", "pci2"]), job(2, per_pod("t")))[0] == Verdict.NEVER
    assert verdict(cluster_of(["pci0", "pci1"]), job(2, per_pod("t")))[0] == Verdict.FITS


def test_a_constraint_on_some_firstavailable_alternatives_is_not_applied() -> None:
    first = {"name": "gpu", "firstAvailable": [{"name": "two", "deviceClassName": DRIVER, "count": 2},
                                               {"name": "one", "deviceClassName": DRIVER, "count": 1}]}
    claim = template("t", [first], [{"requests": ["gpu/two"], **PRODUCT}])
    objects = [device_class(), claim, node("n0"), rslice("n0", [gpu(0, "A100"), gpu(1, "H100")])]
    found, message = verdict(objects, job(2, per_pod("t")))
    assert found == Verdict.FITS and "counted without it" in message, message


def test_compute_domain_channels_are_not_gpus() -> None:
    domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "ml"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "channel"}}},
    }
    channel = template("channel", [exactly("channel", 1, cls="compute-domain-default-channel.nvidia.com")])
    claims = [
        {"name": "channel", "resourceClaimTemplateName": "channel"},
        {"name": "gpus", "resourceClaimTemplateName": "two"},
    ]
    # the channel devices appear once the domain forms: neither counted nor a never
    assert verdict([*cluster([8, 8]), TWO, channel, domain], job(8, claims))[0] == Verdict.FITS
    assert verdict([*cluster([8, 8]), TWO, channel], job(9, claims))[0] == Verdict.NEVER


def test_memo_follows_slices() -> None:
    topo = Topology.from_objects([*cluster([8]), TWO], Policy())
    snapshot = ClusterSnapshot("c", topo)
    workload = build_workload(job(4, per_pod("two")))

    def ask() -> Verdict:
        result = feasibility(workload, Context(policy=Policy(), clusters=[snapshot]))
        assert result is not None
        return result.verdict

    assert ask() == Verdict.FITS
    topo.apply("MODIFIED", rslice("n0", [gpu(0)], generation=2))
    assert ask() == Verdict.NEVER
    topo.apply("MODIFIED", rslice("n0", [gpu(j) for j in range(8)], generation=3))
    assert ask() == Verdict.FITS


# -- never => no allocation exists (brute force) ---------------------------------------------------

SELECTORS = [
    'device.attributes["gpu.nvidia.com"].productName == "A100"',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) > 0',
    'device.attributes["gpu.nvidia.com"].index % 2 == 0',
]
PRODUCTS = [("A100", "80Gi"), ("H100", "80Gi"), ("A100", "40Gi")]


def _ok(device: Obj, selectors: list[str]) -> bool:
    attrs = device["attributes"]
    for e in selectors:
        if e == SELECTORS[0] and attrs["productName"]["string"] != "A100":
            return False
        if e == SELECTORS[1] and device["capacity"]["memory"]["value"] != "80Gi":
            return False
        if e == SELECTORS[2] and attrs["index"]["int"] % 2:
            return False
    return True


# (constraint as a claim writes it, without requests; the attribute as devices write it)
CONSTRAINTS = [
    ({"matchAttribute": f"{DRIVER}/productName"}, "productName"),
    ({"matchAttribute": f"{DRIVER}/pcieRoot"}, "pcieRoot"),
    ({"distinctAttribute": f"{DRIVER}/pcieRoot"}, "pcieRoot"),
]


def _value(device: Obj, attribute: str) -> Any:
    found = device["attributes"].get(attribute)
    return None if found is None else next(iter(found.values()))


def _brute_force(
    nodes: list[list[Obj]],
    pods: int,
    requests: list[tuple[int, list[str]]],
    constraints: list[tuple[str, str, set[int]]] = (),  # type: ignore[assignment]
) -> bool:
    """Whether ``pods`` pods, each with every request (count, selectors) met by distinct devices
    of the node it runs on, can all be placed; ``constraints`` (match or distinct, attribute, the
    requests bound): per pod, the bound requests' devices have the attribute, all one value
    (match) or pairwise different values (distinct)."""

    def fits(taken: list[tuple[int, Obj]]) -> bool:
        for kind, attribute, bound in constraints:
            values = [_value(device, attribute) for r, device in taken if r in bound]
            if None in values:
                return False
            if kind == "match" and len(set(values)) > 1:
                return False
            if kind == "distinct" and len(set(values)) < len(values):
                return False
        return True

    def place(node_devices: list[Obj], k: int) -> bool:
        # k pods on one node: assign each (pod, request) its devices
        slots = [(pod, r, count, sel) for pod in range(k) for r, (count, sel) in enumerate(requests)]
        free = set(range(len(node_devices)))
        taken: list[list[tuple[int, Obj]]] = [[] for _ in range(k)]

        def go(i: int) -> bool:
            if i == len(slots):
                return True
            pod, r, count, sel = slots[i]
            usable = [d for d in sorted(free) if _ok(node_devices[d], sel)]
            for chosen in itertools.combinations(usable, count):
                mine = [(r, node_devices[d]) for d in chosen]
                if not fits(taken[pod] + mine):
                    continue
                free.difference_update(chosen)
                taken[pod].extend(mine)
                if go(i + 1):
                    return True
                del taken[pod][-count:]
                free.update(chosen)
            return False

        return go(0)

    most = [max((k for k in range(pods + 1) if place(devices, k)), default=0) for devices in nodes]
    return sum(most) >= pods


@pytest.mark.parametrize("seed", range(120))
def test_never_means_no_allocation_exists(seed: int) -> None:
    rng = random.Random(seed)
    nodes = []
    for _ in range(rng.randint(1, 3)):
        devices = []
        for j in range(rng.randint(0, 4)):
            product, memory = rng.choice(PRODUCTS)
            device = gpu(j, product, memory)
            if rng.random() < 0.8:          # some devices lack the attribute a constraint reads
                device["attributes"]["pcieRoot"] = {"int": rng.randint(0, 1)}
            devices.append(device)
        nodes.append(devices)
    requests = [
        (rng.randint(1, 2), rng.sample(SELECTORS, rng.randint(0, 2))) for _ in range(rng.randint(1, 2))
    ]
    constraints: list[tuple[str, str, set[int]]] = []
    written: list[Obj] = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        constraint, attribute = rng.choice(CONSTRAINTS)
        bound = set(rng.sample(range(len(requests)), rng.randint(1, len(requests))))
        every = len(bound) == len(requests) and rng.random() < 0.5    # no list: every request
        written.append({**constraint, **({} if every else {"requests": [f"r{i}" for i in sorted(bound)]})})
        constraints.append(("match" if "matchAttribute" in constraint else "distinct", attribute, bound))
    pods = rng.randint(1, 4)
    objects: list[Obj] = [device_class()]
    for i, devices in enumerate(nodes):
        objects += [node(f"n{i}"), rslice(f"n{i}", devices)]
    asked = [exactly(f"r{i}", count, tuple(sel)) for i, (count, sel) in enumerate(requests)]
    objects.append(template("t", asked, written))
    found, message = verdict(objects, job(pods, per_pod("t")))
    possible = _brute_force(nodes, pods, requests, constraints)
    if found == Verdict.NEVER:
        assert not possible, message
    # exact without constraints and with one matchAttribute binding every request
    exact = not constraints or (
        len(constraints) == 1 and constraints[0][0] == "match" and len(constraints[0][2]) == len(requests)
    )
    if not possible and exact:  # every impossible gang is proven
        assert found == Verdict.NEVER, (found, message)
    if possible:
        assert found == Verdict.FITS, message


# -- the NVIDIA DRA driver's manifests ------------------------------------------------------------


def nvidia_cluster() -> list[Obj]:
    objects: list[Obj] = [
        device_class(
            "gpu.nvidia.com",
            'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',
        ),
        device_class(
            "mig.nvidia.com",
            'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"',
        ),
        device_class(
            "compute-domain-default-channel.nvidia.com", 'device.driver == "compute-domain.nvidia.com"'
        ),
    ]
    for i in range(4):
        devices = [
            {
                "name": f"gpu-{j}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": j},
                    "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                    "architecture": {"string": "Ampere"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for j in range(8)
        ]
        if i == 3:  # MIG devices on one node: profile, memory, multiprocessors
            devices += [
                {
                    "name": f"mig-{k}",
                    "attributes": {
                        "type": {"string": "mig"},
                        "index": {"int": 0},
                        "profile": {"string": profile},
                        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                    },
                    "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": str(sms)}},
                }
                for k, (profile, memory, sms) in enumerate(
                    [
                        ("1g.5gb", "5Gi", 14),
                        ("1g.5gb", "5Gi", 14),
                        ("2g.10gb", "10Gi", 28),
                        ("3g.20gb", "20Gi", 42),
                        ("7g.80gb", "80Gi", 98),
                    ]
                )
            ]
        objects += [node(f"n{i}"), rslice(f"n{i}", devices)]
    return objects


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared) is absent")
def test_nvidia_dra_corpus_lints_without_a_false_never(tmp_path: Path) -> None:
    from lint.cli import lint_main

    snapshot = tmp_path / "dra.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nvidia_cluster()}))
    out = tmp_path / "out.json"
    args = [str(CORPUS), "--format", "json", "--no-progress", "--output", str(out)]
    lint_main([*args, "--cluster", str(snapshot)])
    with_cluster = yaml.safe_load(out.read_text())
    lint_main(args)
    without = yaml.safe_load(out.read_text())
    # the snapshot has DRA GPUs only: device-plugin pods and node selectors get their own nevers
    never = [
        f
        for f in with_cluster["findings"]
        if f["rule"] in ("GG402", "GG403", "GG405")
        and ("resourceClaims" in f.get("path", "") or "dra:" in f["message"] or "devices" in f["message"])
    ]
    # the one manifest written to match no device (the driver's own test of a selector)
    assert [Path(f["file"]).name for f in never] == ["tests__bats__specs__gpu-cel-nomatch.yaml"], never
    # nothing else changes but feasibility's informational answers
    feasibility = ("GG402", "GG403", "GG404", "GG405", "GG406")
    others = sorted((f["file"], f["rule"]) for f in with_cluster["findings"] if f["rule"] not in feasibility)
    assert others == sorted((f["file"], f["rule"]) for f in without["findings"])


# -- churn: what each cached part reads ---------------------------------------------------------


def claim_on(name: str, node_name: str, devices: range, namespace: str = "o") -> Obj:
    """A ResourceClaim allocated ``devices`` of ``node_name``'s pool (as the scheduler writes it)."""
    results = [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{j}"} for j in devices]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [exactly("gpu", max(len(devices), 1))]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


class Counted:
    """Counts the device-table builds and the CEL evaluations of the feasibility check."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, topo: Topology) -> None:
        from policies.dra import cel

        self.builds = self.evaluations = 0
        rows, real_value = topo.device_rows, cel.device_value
        real_current = rows.current

        def current() -> Any:
            self.builds += 1
            return real_current()

        def value_counted(*args: Any) -> Any:   # made for each evaluation, and only then
            self.evaluations += 1
            return real_value(*args)

        monkeypatch.setattr(rows, "current", current)
        monkeypatch.setattr(cel, "device_value", value_counted)
        # every selector answer is worked out afresh here, not from an earlier test's
        compile_selector.cache_clear()  # type: ignore[attr-defined]


def ask(topo: Topology, workload: Obj, deadline: float | None = None) -> tuple[Verdict, str]:
    context = Context(policy=Policy(), clusters=[ClusterSnapshot("c", topo)], deadline=deadline)
    result = feasibility(build_workload(workload), context)
    assert result is not None
    return result.verdict, " | ".join(p.message for problems in result.problems.values() for p in problems)


def test_claim_churn_and_labels_do_not_rebuild_the_device_table(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = Topology.from_objects([*cluster([8, 8]), TWO], Policy())
    counted = Counted(monkeypatch, topo)
    workload = job(8, per_pod("two"))
    assert ask(topo, workload)[0] == Verdict.FITS
    assert counted.builds == 1 and counted.evaluations == 1   # 16 alike devices: one evaluation
    for i in range(2):     # every device held: the gang waits, with no rebuild and no CEL
        topo.apply("ADDED", claim_on(f"c{i}", f"n{i}", range(8)))
        topo.apply("MODIFIED", node(f"n{i}", {"nvidia.com/gfd.timestamp": str(i)}))
    assert ask(topo, workload)[0] == Verdict.WAITS
    topo.apply("DELETED", claim_on("c0", "n0", range(8)))
    assert ask(topo, workload)[0] == Verdict.WAITS   # 4 pods' devices free, 8 asked
    topo.apply("MODIFIED", claim_on("c1", "n1", range(0)))
    assert ask(topo, workload)[0] == Verdict.FITS
    assert counted.builds == 1 and counted.evaluations == 1


def test_one_slice_changing_evaluates_only_its_new_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = Topology.from_objects([*cluster([8, 8, 8]), TWO], Policy())
    counted = Counted(monkeypatch, topo)
    assert ask(topo, job(12, per_pod("two")))[0] == Verdict.FITS
    topo.apply("MODIFIED", rslice("n1", [gpu(j) for j in range(8)], generation=2, name="n1-gpus-1"))
    assert ask(topo, job(12, per_pod("two")))[0] == Verdict.FITS
    assert (counted.builds, counted.evaluations) == (2, 1)     # the same kind of device: no CEL
    topo.apply("MODIFIED", rslice("n1", [gpu(j, "H100") for j in range(2)], generation=3, name="n1-gpus-1"))
    assert ask(topo, job(10, per_pod("two")))[0] == Verdict.NEVER     # 4 + 1 + 4 pods' devices
    assert (counted.builds, counted.evaluations) == (3, 1)     # the class selector reads the driver only


def test_a_spent_budget_is_unknown_and_the_work_done_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    topo = Topology.from_objects([*cluster([8, 8]), TWO], Policy())
    counted = Counted(monkeypatch, topo)
    found, message = ask(topo, job(4, per_pod("two")), deadline=time.monotonic() - 1)
    assert found == Verdict.UNKNOWN and "budget" in message, message
    assert counted.builds == 0    # not even the device table: the budget was spent before it
    assert ask(topo, job(4, per_pod("two")))[0] == Verdict.FITS


def test_a_slice_node_selector_reads_only_its_label_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    attached = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "fabric"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "rack", "operator": "In", "values": ["r1"]}]}]},
            "devices": [gpu(j) for j in range(4)],
        },
    }
    objects = [device_class(), node("n0", {"rack": "r1"}), node("n1", {"rack": "r2"}), attached, TWO]
    topo = Topology.from_objects(objects, Policy())
    counted = Counted(monkeypatch, topo)
    assert ask(topo, job(2, per_pod("two")))[0] == Verdict.FITS
    topo.apply("MODIFIED", node("n1", {"rack": "r2", "other": "x"}))
    assert ask(topo, job(2, per_pod("two")))[0] == Verdict.FITS
    assert counted.builds == 1       # a label the selector does not read
    topo.apply("MODIFIED", node("n0", {"rack": "r2"}))
    found, message = ask(topo, job(1, per_pod("two")))
    assert found == Verdict.NEVER and counted.builds == 2, message


CHURN_SLICE_SELECTOR = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "rack", "operator": "In", "values": ["r0"]}]}]}


def _churn_step(rng: random.Random, objects: dict[tuple[str, str], Obj], step: int) -> Obj:
    """One random change of the DRA cluster: a claim allocated or released, a slice rewritten,
    a new generation, a network-attached slice, a node relabelled, added or removed."""
    nodes = [k[1].rpartition("/")[2] for k in objects if k[0] == "Node"]
    choice = rng.randrange(9)
    name = rng.choice(nodes) if nodes else "n0"
    if choice <= 3:                                   # a claim allocated (or re-allocated)
        first = rng.randrange(4)
        return claim_on(f"c{rng.randrange(6)}", name, range(first, first + rng.randint(0, 4)), "ml")
    if choice == 4:                                   # a claim released
        return {**claim_on(f"c{rng.randrange(6)}", name, range(0), "ml"), "deleted": True}
    if choice == 5:                                   # a slice rewritten, maybe a new generation
        devices = [gpu(j, *rng.choice(PRODUCTS)) for j in range(rng.randint(0, 4))]
        return rslice(name, devices, generation=rng.randint(1, 2), count=rng.choice([1] * 7 + [2]),
                      name=f"{name}-gpus-{rng.randint(1, 2)}")
    if choice == 6:                                   # network-attached devices behind a label
        shared = rslice("fabric", [gpu(j) for j in range(rng.randint(0, 3))], name="fabric")
        del shared["spec"]["nodeName"]
        shared["spec"]["nodeSelector"] = CHURN_SLICE_SELECTOR
        return shared
    if choice == 7:                                   # relabelled: the selector's key or GFD's
        return node(name, {"rack": rng.choice(["r0", "r1"]), "nvidia.com/gfd.timestamp": str(step)})
    if rng.random() < 0.5 and len(nodes) > 1:         # a node gone, or a new one
        return {**node(name), "deleted": True}
    return node(f"n{rng.randrange(5)}", {"rack": "r0"})


@pytest.mark.parametrize("seed", range(6))
def test_answers_after_churn_equal_a_fresh_topology_memo_on_and_off(seed: int) -> None:
    from policies import memo

    rng = random.Random(seed)
    objects: dict[tuple[str, str], Obj] = {}

    def key(obj: Obj) -> tuple[str, str]:
        return obj["kind"], f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"

    paired = template("paired", [exactly("gpu", 2)], [PRODUCT])
    for obj in [*cluster([4, 4, 2]), TWO, template("one", [exactly("gpu", 1, (SELECTORS[0],))]), paired]:
        objects[key(obj)] = obj
    topo = Topology.from_objects(list(objects.values()), Policy())
    workloads = [job(5, per_pod("two")), job(5, per_pod("one")), job(12, per_pod("two")),
                 job(1, [{"name": "g", "resourceClaimName": "c1"}]), job(4, per_pod("paired"))]
    for step in range(40):
        change = _churn_step(rng, objects, step)
        deleted = change.pop("deleted", False)
        topo.apply("DELETED" if deleted else "MODIFIED", change)
        if deleted:
            objects.pop(key(change), None)
        else:
            objects[key(change)] = change
        workload = workloads[step % len(workloads)]
        churned = ask(topo, workload)
        fresh = ask(Topology.from_objects(list(objects.values()), Policy()), workload)
        with memo.disabled():
            off = ask(Topology.from_objects(list(objects.values()), Policy()), workload)
        assert churned == fresh == off, (step, change)
