"""``gpugate serve --cluster FILE`` re-reads its snapshot files when they change: the real
server over TLS on loopback, real files replaced on disk, real fork-child loads."""

from __future__ import annotations

import gc
import json
import logging
import os
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from webhook_helpers import (
    ServedWebhook,
    ServeProcess,
    WebhookClient,
    make_cert,
    post_review,
    review_for,
    wait_for,
)

from policies.config import Policy
from webhook import static as server
from webhook.app import PolicySource, StaticTopology, Webhook
from webhook.cli import reload_counter
from webhook.metrics import Metrics

GPU = "nvidia.com/gpu"
INTERVAL = 0.05  # reload tick of the in-process servers


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Reloads freeze the heap (``gc.freeze``), as the server does; in the test process,
    put it back in the collector's sight afterwards."""
    yield
    gc.unfreeze()


def gpu_node(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"maip.mxsf.io/node.usage": "training"}},
            "spec": {"taints": [{"key": "maip.mxsf.io/node.usage", "value": "training",
                                 "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus), "pods": "110"}}}


def snapshot_text(*gpus_per_node: int) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {},
                           "items": [gpu_node(f"gpu-{i}", g) for i, g in enumerate(gpus_per_node)]})


def replace_file(path: Path, text: str) -> None:
    """What an operator does after ``gpugate snapshot -o NEW``: an atomic rename."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def eight_gpu_job() -> dict[str, Any]:
    """One pod of 8 GPUs: fits an 8-GPU node, never a 4-GPU one (GG403)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [{
                "name": "worker", "replicas": 1,
                "template": {"spec": {"containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {GPU: "8", "cpu": "8", "memory": "64Gi"}}}]}}}]}}


def verdict(served: WebhookClient) -> tuple[bool, str]:
    status, answer = post_review(served, "validate", review_for(eight_gpu_job()))
    assert status == 200, answer
    response = answer["response"]
    return bool(response["allowed"]), str(response.get("status", {}).get("message", ""))


def reloads(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value("gpugate_reloads_total", {"what": "cluster", "result": result})
    return value or 0.0


def serve(paths: list[Path], policy: PolicySource | None = None) -> tuple[ServedWebhook, Metrics]:
    """The webhook wired as ``gpugate serve --cluster`` wires it, ticking every INTERVAL."""
    source = policy or PolicySource(policy=Policy())
    holder: dict[str, StaticTopology] = {}
    metrics = Metrics(lambda: holder["topology"].clusters() if holder else None)
    topology = StaticTopology.from_files([str(p) for p in paths], lambda: source.policy,
                                         on_reload=reload_counter(metrics, "cluster"))
    holder["topology"] = topology
    webhook = Webhook(policy=source, topology=topology, metrics=metrics, reload_interval=INTERVAL)
    return ServedWebhook(webhook=webhook), metrics


def test_replaced_snapshot_changes_the_verdict_and_back(tmp_path: Path) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    served, metrics = serve([cluster])
    with served:
        assert verdict(served) == (True, "")
        replace_file(cluster, snapshot_text(4))
        assert wait_for(lambda: not verdict(served)[0]), "not denied after the swap to 4-GPU nodes"
        allowed, message = verdict(served)
        assert "GG403" in message and "nvidia.com/gpu 8" in message, message
        assert reloads(metrics, "ok") == 1 and reloads(metrics, "rejected") == 0
        replace_file(cluster, snapshot_text(8))
        assert wait_for(lambda: verdict(served)[0]), "not allowed again after the second swap"
        assert reloads(metrics, "ok") == 2
        time.sleep(5 * INTERVAL)
        assert reloads(metrics, "ok") == 2  # unchanged files are not read again
        _, body, _ = served.request("GET", "/metrics")
        assert 'gpugate_reloads_total{result="ok",what="cluster"} 2.0' in body.decode()
        assert 'gpugate_topology_objects{cluster="prod",kind="Node"} 1.0' in body.decode()


def test_corrupt_replacement_keeps_the_old_snapshot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(4))
    served, metrics = serve([cluster])
    with served, caplog.at_level(logging.INFO, logger="gpugate.webhook"):
        before = served.webhook.topology.clusters()
        assert verdict(served)[0] is False
        replace_file(cluster, "apiVersion: v1\nkind: List\nitems: [\n")
        assert wait_for(lambda: reloads(metrics, "rejected") == 1)
        assert served.webhook.topology.clusters() is before
        assert verdict(served)[0] is False  # still judged against the old 4-GPU node
        time.sleep(5 * INTERVAL)
        assert reloads(metrics, "rejected") == 1  # retried only when the file changes again
        assert "keeping the previous one" in caplog.text and "prod.yaml" in caplog.text
        replace_file(cluster, snapshot_text(8))
        assert wait_for(lambda: verdict(served)[0])
        assert (reloads(metrics, "ok"), reloads(metrics, "rejected")) == (1, 1)


def test_replacement_without_objects_is_rejected(tmp_path: Path) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    served, metrics = serve([cluster])
    with served:
        before = served.webhook.topology.clusters()
        replace_file(cluster, "")  # what a truncating copy leaves while it writes
        assert wait_for(lambda: reloads(metrics, "rejected") == 1)
        assert served.webhook.topology.clusters() is before and verdict(served)[0] is True


def test_missing_file_keeps_the_old_snapshot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(4))
    served, metrics = serve([cluster])
    with served, caplog.at_level(logging.INFO, logger="gpugate.webhook"):
        before = served.webhook.topology.clusters()
        cluster.unlink()
        assert wait_for(lambda: reloads(metrics, "rejected") == 1)
        assert served.webhook.topology.clusters() is before
        assert verdict(served)[0] is False
        time.sleep(5 * INTERVAL)
        assert reloads(metrics, "rejected") == 1  # not on every tick
        assert "cannot read cluster snapshot" in caplog.text and str(cluster) in caplog.text
        cluster.write_text(snapshot_text(8))
        assert wait_for(lambda: verdict(served)[0])
        assert reloads(metrics, "ok") == 1


def test_fleet_is_swapped_as_a_whole_with_the_policy_of_the_moment(tmp_path: Path) -> None:
    east, west = tmp_path / "east.yaml", tmp_path / "west.yaml"
    east.write_text(snapshot_text(4))
    west.write_text(snapshot_text(8))
    config = tmp_path / "policy.yaml"
    config.write_text("rules: {}\n")
    source = PolicySource(str(config))
    served, metrics = serve([east, west], source)
    with served:
        first = served.webhook.topology.clusters()
        assert [s.name for s in first] == ["east", "west"]
        assert verdict(served)[0] is True  # west can hold it
        config.write_text("rules: {GG104: off}\n")
        os.utime(config, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert wait_for(lambda: source.policy.rule_setting("GG104").enabled is False)
        replace_file(west, snapshot_text(4, 4))
        assert wait_for(lambda: reloads(metrics, "ok") == 1)
        fleet = served.webhook.topology.clusters()
        assert fleet is not first and [s.name for s in fleet] == ["east", "west"]
        assert not any(new is old for new in fleet for old in first)  # every member is new
        assert [s.topology.counts()["Node"] for s in fleet] == [1, 2]
        assert all(s.topology.policy is source.policy for s in fleet)
        assert verdict(served)[0] is False


def test_replaced_fleet_is_freed_without_a_full_collection(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    served, metrics = serve([cluster])
    with served, caplog.at_level(logging.INFO, logger="gpugate.webhook"):
        assert verdict(served)[0] is True  # the feasibility check has run on it, caches and all
        old = weakref.ref(served.webhook.topology.clusters()[0].topology)
        replace_file(cluster, snapshot_text(4))
        assert wait_for(lambda: reloads(metrics, "ok") == 1)
        assert old() is None
        assert "collecting the whole heap" not in caplog.text  # no reference cycle kept it


def test_file_written_during_the_load_is_loaded_again(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    served, metrics = serve([cluster])
    real = server.load_static_clusters
    loads: list[int] = []

    def load_while_written(paths: list[str], policy: Policy, **options: Any) -> list[Any]:
        result = real(paths, policy, **options)
        loads.append(len(result))
        if len(loads) == 1:  # a non-atomic copy still writing while the first version is read
            with open(cluster, "a", encoding="utf-8") as fh:
                fh.write("\n")
        return result

    monkeypatch.setattr(server, "load_static_clusters", load_while_written)
    with served:
        replace_file(cluster, snapshot_text(4))
        assert wait_for(lambda: reloads(metrics, "ok") == 1)
        assert len(loads) == 2  # the first read was discarded, not counted, and done again
        assert reloads(metrics, "rejected") == 0
        assert verdict(served)[0] is False


def test_parsing_child_that_dies_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from policies.snapshots import SnapshotError

    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))

    def killed(*args: Any) -> None:  # what the kernel's OOM killer does to a large parse
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(server, "_load_in_child", killed)
    with pytest.raises(SnapshotError, match=r"prod\.yaml failed: .* exit code -9 \(killed: out of memory"):
        server.load_static_clusters([str(cluster)], Policy())


def test_cancelled_load_ends_its_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from policies.snapshots import SnapshotError

    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    monkeypatch.setattr(server, "_load_in_child", lambda *args: time.sleep(60))
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(SnapshotError, match="cancelled"):
        server.load_static_clusters([str(cluster)], Policy(), cancel=cancel)
    assert time.monotonic() - started < 30  # not the child's 60 s


def test_bad_file_in_the_child_is_rejected_not_raised(tmp_path: Path) -> None:
    from policies.snapshots import SnapshotError

    cluster = tmp_path / "prod.yaml"
    cluster.write_text("apiVersion: v1\nkind: List\nitems: [\n")
    with pytest.raises(SnapshotError, match="prod.yaml"):
        server.load_static_clusters([str(cluster)], Policy())
    cluster.write_text(snapshot_text(8, 8))
    fleet = server.load_static_clusters([str(cluster)], policy := Policy())
    assert [s.topology.counts()["Node"] for s in fleet] == [2] and fleet[0].topology.policy is policy


def test_stepwise_unpickling_round_trips() -> None:
    value: dict[str, Any] = {"text": "a\nb", "blob": bytes(range(256)) * 1000,
                             "nested": [(1, 2.5, None), {"k": [True]}], "big": list(range(100_000))}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        if protocol >= 5:  # a large buffer, read with readinto
            value["buffer"] = pickle.PickleBuffer(bytearray(b"x" * 200_000))
        data = pickle.dumps(value, protocol=protocol)
        assert server._unpickle_stepwise(data) == pickle.loads(data), protocol
    assert gc.isenabled()


def test_gpugate_serve_reloads_cluster_file(tmp_path: Path) -> None:
    """The command line itself: ``--cluster`` is watched, reloads counted in /metrics."""
    cert, key = make_cert(tmp_path)
    cluster = tmp_path / "prod.yaml"
    cluster.write_text(snapshot_text(8))
    with ServeProcess(cert, key, "--cluster", str(cluster), "--log-format", "json") as served:
        probe = served.client
        assert served.wait_until_answering("/readyz"), "server did not become ready"
        assert verdict(probe)[0] is True
        replace_file(cluster, snapshot_text(4))
        assert wait_for(lambda: not verdict(probe)[0], timeout=15)
        _, body, _ = probe.request("GET", "/metrics")
        assert 'gpugate_reloads_total{result="ok",what="cluster"} 1.0' in body.decode()
    assert served.returncode == 0, served.stderr
    messages = [json.loads(line)["message"] for line in served.stderr.splitlines() if line.startswith("{")]
    assert any(m.startswith("cluster snapshot reloaded from") for m in messages), messages
