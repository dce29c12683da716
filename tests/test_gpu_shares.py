"""Shared GPUs (``gpu.shares``): HAMi, Volcano vGPU and Alibaba GPU-sharing resources are shares of
one device, never node capacity; each container's share is held against the devices the snapshot
shows (policies/feasibility/shares.py, the device-register annotations in policies/topology/nodes.py)."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from feasibility_helpers import feasibility_findings, node, run, snapshot

from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.topology.nodes import registered_device_memory

Obj = dict[str, Any]
REGISTER = "hami.io/node-nvidia-register"


def hami_node(name: str = "gpu-0", memories: tuple[int, ...] | None = (40960, 40960), *,
              json_format: bool = False, alloc: Obj | None = None) -> Obj:
    """A GPU node whose devices HAMi registered (10 vGPUs each), or no annotation (``None``)."""
    vgpus = str(10 * len(memories or (0, 0)))
    found = node(name, alloc or {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": vgpus})
    if memories is not None:
        if json_format:
            text = json.dumps([{"id": f"GPU-{i}", "count": 10, "devmem": m, "devcore": 100,
                                 "type": "NVIDIA-A100", "health": True} for i, m in enumerate(memories)])
        else:
            text = "".join(f"GPU-{i},10,{m},100,NVIDIA-A100,0,true:" for i, m in enumerate(memories))
        found["metadata"]["annotations"] = {REGISTER: text, "hami.io/node-handshake": "Reported_2026.11.26"}
    return found


def pod(*containers: Obj, name: str = "p") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": f"c{i}", "image": "x", "resources": {"limits": limits}}
                                    for i, limits in enumerate(containers)]}}


def gg403(doc: Obj, nodes: list[Obj], policy: Policy | None = None) -> list[str]:
    # a minute, not the 200 ms budget: a verdict must not hang on a machine busy with other tests
    return feasibility_findings(run(doc, [snapshot(nodes, policy)], policy or Policy(),
                                    deadline=time.monotonic() + 60)).get("GG403", [])


def test_share_resources_are_not_node_capacity() -> None:
    """Before: "no node offers nvidia.com/gpumem, nvidia.com/gpucores", a false GG403 for every
    HAMi pod (no node advertises its shares)."""
    hami = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30})
    assert gg403(hami, [hami_node()]) == []
    assert gg403(hami, [hami_node(memories=None)]) == [], "no devices shown: nothing said of the shares"
    vgpu = pod({"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 2000, "volcano.sh/vgpu-cores": 50})
    assert gg403(vgpu, [hami_node()]) == []
    # ... and the rest of the pod is still placed: a GPU count no node has is still never
    assert gg403(pod({"nvidia.com/gpu": 30, "nvidia.com/gpumem": 3000}), [hami_node()]) != []


@pytest.mark.parametrize("json_format", [False, True])
def test_memory_share_above_every_registered_device_never_fits(json_format: bool) -> None:
    nodes = [hami_node("a", (24576, 24576), json_format=json_format),
             hami_node("b", (40960,), json_format=json_format)]
    assert gg403(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40960}), nodes) == []
    found = gg403(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40961}), nodes)
    assert found == ["error: 40961 nvidia.com/gpumem asked of one device, the largest device any node "
                     "registers has 40960 (pod set pod)"]


def test_pods_of_equal_sums_but_different_containers_are_judged_apart() -> None:
    """Questions are kept by the pods' sums: two containers of 25,000 MiB (each fits a 40,960 MiB
    device) must not get the answer of one container of 50,000 (which fits none), nor back."""
    policy = Policy()   # one policy: the same kept questions for both pods
    nodes = [hami_node()]
    one = pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 50000})
    half = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 25000}
    two = pod(half, dict(half))
    assert gg403(one, nodes, policy) != []
    assert gg403(two, nodes, policy) == []
    assert gg403(one, nodes, policy) != []


def test_volcano_vgpu_memory_against_its_registered_devices() -> None:
    vgpu = node("v", {"cpu": "64", "memory": "512Gi", "volcano.sh/vgpu-number": "20"})
    vgpu["metadata"]["annotations"] = {"volcano.sh/node-vgpu-register": json.dumps(
        [{"id": "GPU-a", "count": 10, "devmem": 49140, "devcore": 100, "type": "NVIDIA GeForce RTX 4090",
          "health": True}])}
    assert gg403(pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 49140}), [vgpu]) == []
    assert gg403(pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 49141}), [vgpu]) == [
        "error: 49141 volcano.sh/vgpu-memory asked of one device, the largest device any node registers "
        "has 49140 (pod set pod)"]


def test_a_share_is_per_container_not_per_pod() -> None:
    """Two containers of 30,000 MiB each: 60,000 in the pod, but each on a device of its own."""
    assert gg403(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000},
                     {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}), [hami_node()]) == []


@pytest.mark.parametrize("resource", ["nvidia.com/gpucores", "nvidia.com/gpumem-percentage",
                                      "volcano.sh/vgpu-cores", "aliyun.com/gpu-core.percentage"])
def test_percent_share_above_100_never_fits(resource: str) -> None:
    assert gg403(pod({resource: 100}), [hami_node(memories=None)]) == []
    assert gg403(pod({resource: 101}), [hami_node(memories=None)]) == [
        f"error: 101 {resource} asked of one device: a share is at most 100 (pod set pod)"]


def test_alibaba_device_memory_is_the_allocatable_per_device() -> None:
    """Alibaba's gpushare device plugin advertises aliyun.com/gpu-mem (GiB, all devices) and
    aliyun.com/gpu-count: 64 GiB on 4 devices is 16 GiB each; the pod's 20 GiB fits the node's
    total but no device."""
    share_node = node("ali", {"cpu": "32", "memory": "128Gi", "aliyun.com/gpu-mem": "64",
                              "aliyun.com/gpu-count": "4"})
    assert gg403(pod({"aliyun.com/gpu-mem": 16}), [share_node]) == []
    assert gg403(pod({"aliyun.com/gpu-mem": 20}), [share_node]) == [
        "error: 20 aliyun.com/gpu-mem asked of one device, the largest device any node registers has 16 "
        "(pod set pod)"]
    # not node capacity: a share the nodes do not advertise at all is not "no node offers it"
    assert gg403(pod({"aliyun.com/gpu-mem": 4}), [node("plain", {"cpu": "8", "memory": "16Gi"})]) == []


def test_policy_adds_share_resources() -> None:
    custom = pod({"example.com/vmem": 5000})
    assert gg403(custom, [hami_node()]) != [], "not a share by default: no node offers it"
    policy = policy_from_data({"gpu": {"shares": {"example.com/vmem": "memory"}}})
    assert gg403(custom, [hami_node()], policy) == []
    assert "nvidia.com/gpumem" in policy.gpu["shares"], "entries given are added to the defaults"


def test_device_registrations_move_the_answer() -> None:
    """A node registering larger devices changes the verdict (the memo must not keep the old one)."""
    policy = Policy()   # one policy: the topology's answer memo is per policy
    cluster = snapshot([hami_node(memories=(24576,))], policy)
    big = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40000})
    assert feasibility_findings(evaluate(big, policy, [cluster])).get("GG403")
    assert feasibility_findings(evaluate(big, policy, [cluster])).get("GG403")  # from the memo
    cluster.topology.apply("MODIFIED", hami_node(memories=(81920,)))
    assert not feasibility_findings(evaluate(big, policy, [cluster])).get("GG403")
    cluster.topology.apply("DELETED", hami_node(memories=(81920,)))
    cluster.topology.apply("ADDED", hami_node("plain", memories=None))
    found = feasibility_findings(evaluate(big, policy, [cluster]))
    assert not found.get("GG403"), "no node registers devices any more: nothing proven"


def test_with_autoscaling_a_device_too_small_waits() -> None:
    autoscaling = policy_from_data({"feasibility": {"autoscaling": True}})
    found = feasibility_findings(evaluate(pod({"nvidia.com/gpumem": 90000}), autoscaling,
                                          [snapshot([hami_node()], autoscaling)]))
    assert "GG403" not in found and any("waits for new nodes" in m for m in found.get("GG404", []))


@pytest.mark.parametrize("text, largest", [
    ("GPU-a,10,32768,100,NVIDIA-V100,0,true:GPU-b,10,16384,100,NVIDIA-V100,0,true:", 32768),
    ("GPU-a,10,32768,100,NVIDIA-V100,0,true", 32768),
    ("GPU-a,10,4914,NVIDIA-RTX4090,true,hami-core:GPU-b,10,4914,NVIDIA-RTX4090,true,hami-core",
     4914),  # Volcano vGPU's format
    ('[{"id": "GPU-a", "devmem": 81920}, {"id": "GPU-b", "devmem": 40960}]', 81920),
    ("", None), ("   ", None), (None, None), (42, None), ("[]", None),
    ("GPU-a,10,lots,100,NVIDIA,0,true:", None),      # one device unreadable: nothing, never a guess
    ("GPU-a,10:", None), ("GPU-a,10,-1,100,X,0,true:", None),
    ('[{"id": "GPU-a", "devmem": "81920"}]', None), ('{"devmem": 1}', None), ("[[", None),
])
def test_device_register_annotation(text: Any, largest: int | None) -> None:
    assert registered_device_memory(text) == largest


def test_memory_never_is_sound_against_brute_force() -> None:
    """A "never" for a memory share only when no registered device of any node has that much."""
    rng = random.Random(20261126)
    for _ in range(200):
        nodes = [hami_node(f"n{i}", tuple(rng.choice([8192, 16384, 24576, 40960, 81920])
                                          for _ in range(rng.randint(1, 4))) if rng.random() < 0.8 else None)
                 for i in range(rng.randint(1, 4))]
        ask = rng.choice([4096, 16384, 30000, 40960, 50000, 81920, 90000])
        devices = [m for n in nodes for m in _devices(n)]
        never = bool(gg403(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": ask}), nodes))
        fits_some_device = any(m >= ask for m in devices)
        assert never == (bool(devices) and not fits_some_device), (ask, devices)


def _devices(n: Obj) -> list[int]:
    text = (n["metadata"].get("annotations") or {}).get(REGISTER)
    return [int(d.split(",")[2]) for d in text.split(":") if d] if text else []
