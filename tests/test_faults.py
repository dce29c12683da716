"""Faults around the webhook: the API server unreachable, dying, answering 410 / 500 /
garbage, or slowly; TLS and policy files replaced with broken ones.

In every case admission goes on: the rules that need no topology still judge (a GG501
denial stays a denial), feasibility turns into GG406 (never a rejection) while the
topology is missing or stale, and the last good certificate and policy stay in force.
The API server is the webhook engineer's double (``fake_apiserver.FakeApiServer``),
with a few extra faults added by subclassing.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from fake_apiserver import FakeApiServer
from kubernetes import client as k8s
from webhook_helpers import (
    ServedWebhook,
    ServeProcess,
    WebhookClient,
    free_port,
    make_cert,
    post_review,
    review_for,
    wait_for,
)

from policies.config import Policy, policy_from_data
from webhook.app import PolicySource, Webhook
from webhook.kube import WatchOptions
from webhook.metrics import Metrics
from webhook.watch import LiveTopology, watch_api_client

GPU = "nvidia.com/gpu"
STALE_AFTER = 1.0
FAST = WatchOptions(page_size=50, connect_timeout=0.5, read_timeout=1.0, list_timeout=1.0,
                    watch_timeout_seconds=30, min_backoff=0.02, max_backoff=0.2, crd_retry_seconds=0.5,
                    heartbeat_seconds=0.02)
POLICY = policy_from_data({"feasibility": {"staleAfterSeconds": STALE_AFTER}})


# -- objects ----------------------------------------------------------------------------------------

def gpu_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"maip.mxsf.io/node.usage": "training"}},
            "spec": {"taints": [{"key": "maip.mxsf.io/node.usage", "value": "training",
                                 "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}}}


def gang(workers: int = 5, limits: bool = True) -> dict[str, Any]:
    """A Volcano gang of ``workers`` x 8 GPUs: 5 never fit on the 4 nodes the fake serves."""
    resources = {"limits": {GPU: "8"}} if limits else {"requests": {GPU: "8"}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "gang", "namespace": "ml", "labels": {"maip.mxsf.io/usage": "training"}},
            "spec": {"schedulerName": "volcano", "minAvailable": workers, "tasks": [{
                "name": "worker", "replicas": workers,
                "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1",
                                                      "resources": resources}]}}}]}}


def no_limit_job() -> dict[str, Any]:
    """GG501: a GPU request without a limit; needs no topology to be refused."""
    return gang(workers=1, limits=False)


# -- an API server with more faults -----------------------------------------------------------------

class FaultyApiServer(FakeApiServer):
    """The fake, plus answers a real API server (or a proxy in front of it) may give:
    ``fault = "500"`` (etcd trouble), ``"garbage"`` (an HTML error page from a proxy),
    ``"truncated"`` (a list cut off mid-body); :meth:`garbage_event` puts an event no
    client can read into every open watch."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: str | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.fault == "500":
            return self._status(500, "InternalError", "etcdserver: request timed out")
        if self.fault == "garbage":
            return web.Response(body=b"<html><body>502 Bad Gateway</body></html>\x00{",
                                content_type="application/json")
        if self.fault == "truncated":
            return web.Response(body=b'{"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": [',
                                content_type="application/json")
        return await super()._handle(request)

    def garbage_event(self) -> None:
        def send() -> None:
            for watch in list(self._watches):
                watch.queue.put_nowait((self.rv + 1, "NONSENSE", None))
        self.call(send)


@pytest.fixture
def api() -> Iterator[FaultyApiServer]:
    server = FaultyApiServer()
    with server:
        server.add(*(gpu_node(f"gpu-{i}") for i in range(4)))
        for plural in ("queues", "podgroups", "hypernodes", "elasticquotatrees"):
            server.uninstall(plural)
        yield server


# -- the webhook on a live topology -----------------------------------------------------------------

class Live:
    """The webhook over TLS with a live topology watching ``url``."""

    def __init__(self, url: str, policy: Policy = POLICY) -> None:
        configuration = k8s.Configuration()
        configuration.host = url
        self.topology = LiveTopology(watch_api_client(configuration), policy, name="fake", options=FAST)
        self.metrics = Metrics(self.topology.clusters)
        self.topology.metrics = self.metrics  # watch restarts are counted there (read at start())
        self.webhook = Webhook(policy=PolicySource(policy=policy), topology=self.topology,
                               metrics=self.metrics)
        self.hook = ServedWebhook(webhook=self.webhook)

    def judge(self, obj: dict[str, Any], uid: str = "u") -> tuple[bool, str, float]:
        """(allowed, deny message, seconds) of a /validate review, checked for shape."""
        started = time.monotonic()
        status, answer = post_review(self.hook, "validate", review_for(obj, uid=uid))
        seconds = time.monotonic() - started
        assert status == 200, answer
        response = answer["response"]
        assert response["uid"] == uid
        return response["allowed"], response.get("status", {}).get("message", ""), seconds

    def unknown_count(self) -> float:
        # GG406 at whatever severity it has (info for a spent budget; a warning, or an error
        # with whenStale: deny, for a stale or unsynced view)
        return sum(self.metrics.registry.get_sample_value(
            "gpugate_review_findings_total",
            {"endpoint": "validate", "kind": "Job", "rule": "GG406", "severity": severity}) or 0.0
            for severity in ("info", "warning", "error"))

    def restarts(self) -> float:
        return sum(sample.value for metric in self.metrics.registry.collect()
                   if metric.name == "gpugate_watch_restarts"
                   for sample in metric.samples if sample.name == "gpugate_watch_restarts_total")

    def ready(self) -> bool:
        return self.hook.request("GET", "/readyz")[0] == 200


@contextmanager
def live_webhook(url: str, policy: Policy = POLICY) -> Iterator[Live]:
    live = Live(url, policy)
    with live.hook:
        yield live


def assert_degraded(live: Live) -> None:
    """What must hold while the topology is missing or stale."""
    before = live.unknown_count()
    allowed, message, seconds = live.judge(gang(), uid="gang")
    assert allowed, message                 # an impossible gang is NOT rejected on old data ...
    assert live.unknown_count() == before + 1  # ... it is GG406 instead
    allowed, message, _ = live.judge(no_limit_job(), uid="static")
    assert not allowed and "GG501" in message  # rules without topology still deny
    assert seconds < 2.0                    # answered, not waiting on the API server


def assert_judging(live: Live) -> None:
    """What must hold with a fresh topology: the impossible gang is refused (GG403)."""
    allowed, message, _ = live.judge(gang(), uid="gang")
    assert not allowed and "GG403" in message, message


def judging(live: Live) -> bool:
    return not live.judge(gang(), uid="probe")[0]


# -- API server unreachable, dead, down -----------------------------------------------------------------

def test_serve_starts_with_the_api_server_unreachable(tmp_path: Path) -> None:
    """``gpugate serve --kubeconfig`` against a port nobody listens on: it serves, is not
    ready, denies by the static rules, and reports feasibility as GG406."""
    cert, key = make_cert(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    config = FakeApiServer().kubeconfig()
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{free_port()}"
    kubeconfig.write_text(yaml.safe_dump(config))
    policy = tmp_path / "policy.yaml"
    policy.write_text("feasibility: {staleAfterSeconds: 1}\n")
    with ServeProcess(cert, key, "--kubeconfig", str(kubeconfig), "--config", str(policy),
                      "--log-format", "json") as served:
        client = served.client
        assert served.wait_until_answering("/healthz")
        assert client.request("GET", "/readyz")[0] == 503
        status, answer = post_review(client, "validate", review_for(no_limit_job(), uid="s1"))
        assert status == 200 and answer["response"]["allowed"] is False
        assert "GG501" in answer["response"]["status"]["message"]
        status, answer = post_review(client, "validate", review_for(gang(), uid="s2"))
        assert status == 200 and answer["response"]["allowed"] is True
        metrics = client.request("GET", "/metrics")[1].decode()
        unknown = [line for line in metrics.splitlines()
                   if line.startswith("gpugate_review_findings_total{") and 'rule="GG406"' in line]
        assert unknown and float(unknown[0].rsplit(" ", 1)[1]) >= 1
        assert "gpugate_watch_restarts_total" in metrics
        assert client.request("GET", "/readyz")[0] == 503  # still not ready: never synced
    assert served.returncode == 0, served.stderr[-2000:]


def test_api_server_down_at_start_then_back(api: FaultyApiServer) -> None:
    api.set_down(True)  # every request answered 503
    with live_webhook(api.url) as live:
        assert not live.ready()
        assert_degraded(live)
        assert wait_for(lambda: live.restarts() >= 2)
        api.set_down(False)
        assert wait_for(live.ready)
        assert wait_for(lambda: judging(live))
        assert_judging(live)


def test_api_server_dies_mid_watch() -> None:
    server = FaultyApiServer()
    server.__enter__()
    alive = True
    try:
        server.add(*(gpu_node(f"gpu-{i}") for i in range(4)))
        with live_webhook(server.url) as live:
            assert wait_for(live.ready)
            assert wait_for(lambda: judging(live))
            assert_judging(live)
            server.__exit__(None, None, None)   # the API server process is gone: connection refused
            alive = False
            started = time.monotonic()
            assert_degraded_eventually(live)
            assert time.monotonic() - started < 10 * STALE_AFTER
            # stale: no longer a usable view, so not ready (it keeps answering, saying so)
            assert not live.ready()
    finally:
        if alive:
            server.__exit__(None, None, None)


def assert_degraded_eventually(live: Live) -> None:
    """Until stale: judged on the last snapshot (still GG403); afterwards: GG406."""
    assert wait_for(lambda: not judging(live), timeout=10 * STALE_AFTER)
    assert_degraded(live)


# -- 410 Gone, 500, garbage, slowness -------------------------------------------------------------------

def test_410_gone_relists_and_picks_up_missed_changes(api: FaultyApiServer) -> None:
    with live_webhook(api.url) as live:
        assert wait_for(live.ready) and wait_for(lambda: judging(live))
        api.silently_modify("ADDED", gpu_node("gpu-4"))  # a change the watches never hear of
        api.expire()                                      # ERROR 410 on every stream
        assert wait_for(lambda: live.judge(gang())[0])   # relisted: 5 x 8 GPUs fit now
        assert live.restarts() >= 1
        allowed, message, _ = live.judge(no_limit_job())
        assert not allowed and "GG501" in message


@pytest.mark.parametrize("fault", ["500", "garbage", "truncated"])
def test_bad_answers_keep_the_last_snapshot_then_go_stale(api: FaultyApiServer, fault: str) -> None:
    with live_webhook(api.url) as live:
        assert wait_for(live.ready) and wait_for(lambda: judging(live))
        api.fault = fault
        api.drop_watches()  # every reconnect and relist now meets the fault
        assert_judging(live)  # within staleAfterSeconds the last snapshot still counts
        assert_degraded_eventually(live)
        restarts = live.restarts()
        assert restarts >= 2
        api.fault = None
        assert wait_for(lambda: judging(live))
        assert_judging(live)


def test_garbage_watch_event_restarts_the_watch(api: FaultyApiServer) -> None:
    with live_webhook(api.url) as live:
        assert wait_for(live.ready) and wait_for(lambda: judging(live))
        before = live.restarts()
        api.garbage_event()
        assert wait_for(lambda: live.restarts() > before)
        api.add(gpu_node("gpu-4"))  # the re-opened watch still delivers
        assert wait_for(lambda: live.judge(gang())[0])


def test_slow_api_server_does_not_slow_admission(api: FaultyApiServer) -> None:
    api.slow["nodes"] = 0.8   # lists answer late (within the client's 1 s timeout)
    api.slow_watch = 0.5      # and watches take a while to start streaming
    with live_webhook(api.url) as live:
        assert not live.ready()
        for i in range(5):     # while the first list hangs: answered at once
            allowed, message, seconds = live.judge(no_limit_job(), uid=f"slow-{i}")
            assert not allowed and "GG501" in message and seconds < 0.5
        assert wait_for(live.ready)
        assert wait_for(lambda: judging(live))


# -- TLS and policy files replaced with broken ones ------------------------------------------------------

def _served_serial(hook: ServedWebhook) -> int:
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((hook.host, hook.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def _touch_later(*paths: Path, seconds: int = 1) -> None:
    """Bump mtimes past what the poller has seen (coarse file system clocks)."""
    stamp = time.time_ns() + seconds * 10**9
    for path in paths:
        os.utime(path, ns=(stamp, stamp))


def test_broken_tls_files_keep_the_old_certificate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from cryptography import x509

    with ServedWebhook(cert_dir=tmp_path / "live", reload_interval=0.05) as hook:
        serial = _served_serial(hook)
        good_cert, good_key = hook.cert.read_bytes(), hook.key.read_bytes()
        trusted = tmp_path / "trusted.crt"  # the client keeps trusting the pair in force
        trusted.write_bytes(good_cert)
        client = WebhookClient(hook.host, hook.port, trusted)
        _, other_key = make_cert(tmp_path / "other")
        broken = {
            "garbage certificate": (b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
                                    good_key),
            "empty files": (b"", b""),
            "key of another certificate": (good_cert, other_key.read_bytes()),
            "binary noise": (os.urandom(2048), os.urandom(512)),
        }
        for step, (name, (cert, key)) in enumerate(broken.items(), start=1):
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="gpugate.tls"):
                hook.cert.write_bytes(cert)
                hook.key.write_bytes(key)
                _touch_later(hook.cert, hook.key, seconds=step)
                assert wait_for(lambda: any("rejected" in r.getMessage() for r in caplog.records)), name
            assert _served_serial(hook) == serial, name      # new handshakes: the old pair
            status, answer = post_review(client, "validate", review_for(no_limit_job(), uid=f"t{step}"))
            assert status == 200 and answer["response"]["uid"] == f"t{step}", name
        hook.cert.unlink()                                      # files gone (a Secret being swapped)
        hook.key.unlink()
        time.sleep(0.2)
        assert _served_serial(hook) == serial
        new_cert, new_key = make_cert(tmp_path / "next")       # and a good pair is taken again
        hook.cert.write_bytes(new_cert.read_bytes())
        hook.key.write_bytes(new_key.read_bytes())
        _touch_later(hook.cert, hook.key, seconds=len(broken) + 1)
        expected = int(x509.load_pem_x509_certificate(new_cert.read_bytes()).serial_number)
        assert wait_for(lambda: _served_serial(hook) == expected)


def _bomb() -> str:
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return ("custom:\n  - {id: C1, slug: bomb, severity: warning, message: m, target: Workload,\n"
            f"     schema: {{enum: [{', '.join(levels)}]}}}}\n")


BROKEN_POLICIES: dict[str, str | bytes] = {
    "not YAML": "rules: {GG501: off\n",
    "unknown key": "rules: {GG501: off}\nfeasibilty: {}\n",
    "wrong type": "feasibility: {budgetMilliseconds: fast}\n",
    "a list": "- rules\n",
    "binary": bytes(range(256)),
    "alias bomb": _bomb(),
    "deep nesting": "custom: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "python tag": "rules: !!python/object/apply:os.system ['true']\n",
}


def test_broken_policy_keeps_the_old_one(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text("rules: {GG501: off}\n")
    results: list[bool] = []
    source = PolicySource(str(config), on_reload=results.append)
    with ServedWebhook(webhook=Webhook(policy=source, reload_interval=0.05)) as hook:
        def allowed(uid: str) -> bool:
            status, answer = post_review(hook, "validate", review_for(no_limit_job(), uid=uid))
            assert status == 200 and answer["response"]["uid"] == uid
            return bool(answer["response"]["allowed"])

        assert allowed("start")  # GG501 is off
        for step, (name, content) in enumerate(BROKEN_POLICIES.items(), start=1):
            if isinstance(content, bytes):
                config.write_bytes(content)
            else:
                config.write_text(content)
            _touch_later(config, seconds=step)
            assert wait_for(lambda step=step: len(results) == step, timeout=10), name  # type: ignore[misc]
            assert results[-1] is False, name
            assert allowed(name), name  # the previous policy is still in force
        config.unlink()                 # the ConfigMap's file vanishes for a moment
        time.sleep(0.2)
        assert allowed("gone")
        config.write_text("rules: {}\n")
        _touch_later(config, seconds=len(BROKEN_POLICIES) + 1)
        assert wait_for(lambda: results[-1] is True)
        assert not allowed("back")  # a good file applies again: GG501 denies
