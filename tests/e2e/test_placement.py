"""README Lifecycle: "Placement as the scheduler sees it"."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Session
from .objects import pod, pytorch_job
from .steps import bound_pods, cordon, denied_for, eventually, rules

pytestmark = pytest.mark.e2e


def test_pod_with_node_name_ignores_noschedule_taints_and_cordons(e2e: Session, namespace: str) -> None:
    ns = group = namespace
    tainted, cordoned = f"{group}-tainted", f"{group}-cordoned"
    e2e.cluster.gpu_node(tainted, group, extra_taints=["e2e.gpugate.io/dedicated=other-team:NoSchedule"])
    e2e.cluster.gpu_node(cordoned, group)
    cordon(e2e, cordoned)
    e2e.wait_nodes_synced()
    # without nodeName the scheduler could place it nowhere: gpugate refuses it (the control)
    loose = pod(ns, "loose", group, gpus=1)
    refused = eventually(lambda: e2e.api.create(loose, dry_run=True), lambda r: denied_for(r, "GG403"))
    assert denied_for(refused, "GG403"), refused
    for node in (tainted, cordoned):
        pinned = pod(ns, f"on-{node}"[:63], group, gpus=1, nodeName=node)
        created = e2e.api.create(pinned)
        assert created.status == 201, (node, created)
        assert not {"GG403", "GG404"} & rules(created), (node, created)
        assert e2e.api.read(pinned)["spec"]["nodeName"] == node


def test_cordoned_nodes_offer_no_room_but_their_pods_count(crds: Session, namespace: str) -> None:
    e2e, ns, group = crds, namespace, namespace
    node = f"{group}-0"
    e2e.cluster.gpu_node(node, group, gpus=8)
    e2e.wait_nodes_synced()
    running = pod(ns, "running", group, gpus=8)
    assert e2e.api.create(running).status == 201
    bound_pods(e2e, ns, 1)
    cordon(e2e, node)
    gang = pytorch_job(ns, "gang", group, gpus=4)          # 2 pods x 4 GPUs: fits the empty node
    never = eventually(lambda: e2e.api.create(gang, dry_run=True), lambda r: denied_for(r, "GG403", "GG405"))
    assert denied_for(never, "GG403", "GG405"), f"a gang that only a cordoned node could hold: {never}"

    cordon(e2e, node, on=False)
    waits = eventually(lambda: e2e.api.create(gang, dry_run=True), lambda r: r.status != 403)
    # uncordoned, the node would hold the gang empty, but the pod bound to it still counts
    assert waits.status == 201 and "GG404" in rules(waits), waits


def test_shared_gpu_shares_are_held_against_the_registered_devices(e2e: Session, namespace: str) -> None:
    """HAMi's shares are no node capacity: a pod asking for nvidia.com/gpumem on nodes that do not
    advertise it is admitted (before: GG403 "no node offers"), and one asking one device for more
    memory than HAMi registers on any node is refused (GG403), read from the live view."""
    ns = group = namespace
    node = f"{group}-hami"
    e2e.cluster.gpu_node(node, group, gpus=20)     # HAMi advertises 2 devices x 10 vGPUs
    register = "GPU-0,10,40960,100,NVIDIA-A100,0,true:GPU-1,10,40960,100,NVIDIA-A100,0,true:"
    patched = e2e.api.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
                            {"metadata": {"annotations": {"hami.io/node-nvidia-register": register}}})
    assert patched.ok, patched
    e2e.wait_nodes_synced()

    def hami(name: str, memory: int) -> dict[str, Any]:
        made = pod(ns, name, group, gpus=1)
        for key in ("requests", "limits"):
            made["spec"]["containers"][0]["resources"][key].update(
                {"nvidia.com/gpumem": str(memory), "nvidia.com/gpucores": "30"})
        return made

    too_big = hami("too-big", 50000)
    refused = eventually(lambda: e2e.api.create(too_big, dry_run=True), lambda r: denied_for(r, "GG403"))
    assert denied_for(refused, "GG403") and "nvidia.com/gpumem" in refused.message, refused
    within = e2e.api.create(hami("within", 3000), dry_run=True)
    assert within.status == 201 and not {"GG403", "GG404"} & rules(within), within
