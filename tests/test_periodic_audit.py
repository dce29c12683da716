"""The periodic audit of ``gpugate serve --audit-interval`` against the API server double: a
Warning Event on each pending workload that will never run (one Event, counted again on later
runs), none on the ones that wait or fit, the counts in the metrics, runs skipped while the
topology is stale, and the event loop left alone while a run goes on (a forked child)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_apiserver import FakeApiServer
from kubernetes import client as k8s
from webhook_helpers import ServedWebhook, ServeProcess, make_cert, post_review, review_for, wait_for

import webhook.periodic_audit as periodic
from policies.audit import audit
from policies.config import Policy, policy_from_data
from policies.kinds import KINDS
from policies.topology import ClusterSnapshot, Topology
from webhook.app import PolicySource, Webhook
from webhook.cli import serve_main
from webhook.kube import KUEUE_WORKLOADS, RESOURCES, Resource, WatchOptions
from webhook.offload import CAN_FORK
from webhook.periodic_audit import EVENT_REASON, MESSAGE_LIMIT, EventWriter, PeriodicAudit, event_for
from webhook.watch import LiveTopology, watch_api_client

ROOT = Path(__file__).resolve().parent.parent
JOBS = Resource("Job", "batch", "v1", "jobs", optional=True, name="Job.batch")
SERVED = (*RESOURCES, JOBS, KUEUE_WORKLOADS)
OPTIONS = WatchOptions(page_size=500, read_timeout=15.0, list_timeout=5.0, crd_retry_seconds=0.2,
                       heartbeat_seconds=0.02)
# a minute of feasibility budget: on a busy machine a cold check must not turn a verdict into "unknown"
POLICY = policy_from_data({"feasibility": {"budgetMilliseconds": 60000}})


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def busy_pod(name: str, on: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]},
            "status": {"phase": "Running"}}


def job_and_pod(name: str, cpu: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Job and its one pod, not scheduled: a pending workload."""
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-x7k2p", "namespace": "ml", "uid": f"uid-{name}-pod",
                        "creationTimestamp": "2026-01-01T00:00:01Z",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                             "uid": f"uid-{name}", "controller": True}]},
           "spec": {"restartPolicy": "Never", "containers": [container]}, "status": {"phase": "Pending"}}
    return job, pod


# huge: 500 CPUs, no 8-CPU node ever holds it; roomy: 6, free on an empty node, not now (4 used
# on each); small: 1, fits now
NEVER, WAITS, FITS = job_and_pod("huge", "500"), job_and_pod("roomy", "6"), job_and_pod("small", "1")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(SERVED) as fake:
        fake.add(node("n0"), node("n1"), busy_pod("busy-0", "n0"), busy_pod("busy-1", "n1"))
        fake.add(*NEVER, *WAITS, *FITS)
        yield fake


class AuditedHook:
    """The webhook over TLS on a LiveTopology of the double, and a PeriodicAudit of it whose
    runs the test starts (:meth:`run`)."""

    def __init__(self, server: FakeApiServer, policy: Policy = POLICY, **audit_options: Any) -> None:
        configuration = k8s.Configuration()
        configuration.host = server.url
        self.live = LiveTopology(watch_api_client(configuration), policy, name="fake", options=OPTIONS)
        self.hook = ServedWebhook(webhook=Webhook(policy=PolicySource(policy=policy), topology=self.live))
        audit_options.setdefault("refresh_after", 0.0)
        self.audit = PeriodicAudit(self.live, lambda: policy, self.hook.webhook.metrics, 3600.0,
                                   instance="gpugate-test-0", **audit_options)

    def __enter__(self) -> AuditedHook:
        self.hook.__enter__()
        assert wait_for(self.ready, 20)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hook.__exit__(*exc)

    def ready(self) -> bool:
        return self.hook.request("GET", "/readyz")[0] == 200

    def start_run(self) -> Any:
        assert self.hook.loop is not None
        return asyncio.run_coroutine_threadsafe(self.audit.run_once(), self.hook.loop)

    def run(self) -> str:
        return str(self.start_run().result(120))

    def metrics(self) -> str:
        return self.hook.metrics()


def sample(metrics: str, name: str, **labels: str) -> float | None:
    """The value of one series of a text exposition (None when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        series, _, value = line.rpartition(" ")
        if series == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    return None


def test_a_job_that_will_never_run_gets_one_event_counted_again_later(server: FakeApiServer) -> None:
    with AuditedHook(server) as hooked:
        assert hooked.run() == "ok"
        (event,) = server.stored_events()
        assert event["involvedObject"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "huge",
                                           "namespace": "ml", "uid": "uid-huge"}
        assert (event["type"], event["reason"], event["count"]) == ("Warning", EVENT_REASON, 1)
        assert event["metadata"]["namespace"] == "ml"
        assert re.fullmatch(r"huge\.gpugate\.[0-9a-f]{10}", event["metadata"]["name"])
        assert event["message"].endswith("(GG403)") and "500" in event["message"]
        assert event["source"] == {"component": "gpugate"}
        assert (event["reportingComponent"], event["reportingInstance"]) == ("gpugate", "gpugate-test-0")
        assert event["firstTimestamp"] == event["lastTimestamp"]
        summary = hooked.audit.last
        assert summary is not None and summary.events["created"] == 1
        if CAN_FORK:
            assert summary.pid != os.getpid()   # judged in a forked child, not in the server
        time.sleep(1.1)                         # lastTimestamp has whole seconds
        assert hooked.run() == "ok"
        (again,) = server.stored_events()       # the same Event, counted again: no second one
        assert again["metadata"]["name"] == event["metadata"]["name"]
        assert again["count"] == 2 and again["lastTimestamp"] > event["lastTimestamp"]
        assert again["firstTimestamp"] == event["firstTimestamp"]
        assert server.count("events", "create") == 2 and server.count("events", "patch") == 1
        metrics = hooked.metrics()
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="never", cause="nodes-never-hold") == 1
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="waits", cause="waits-for-room") == 1
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="fits", cause="fits") == 1
    assert len([ln for ln in metrics.splitlines() if ln.startswith("gpugate_audit_pending_gangs{")]) == 3
    assert sample(metrics, "gpugate_audit_runs_total", result="ok") == 2
    assert sample(metrics, "gpugate_audit_events_total", result="created") == 1
    assert sample(metrics, "gpugate_audit_events_total", result="updated") == 1
    assert (sample(metrics, "gpugate_audit_last_success_timestamp_seconds") or 0) > time.time() - 60
    assert (sample(metrics, "gpugate_audit_duration_seconds") or 0) > 0


def test_counts_are_replaced_whole_and_a_recent_event_is_not_counted_twice(server: FakeApiServer) -> None:
    """A cause gone since the last run drops out of the gauge; an Event another replica
    counted less than ``refresh_after`` ago is left as it is."""
    with AuditedHook(server, refresh_after=3600.0) as hooked:
        assert hooked.run() == "ok"
        assert hooked.run() == "ok"                     # within refresh_after: not counted again
        (event,) = server.stored_events()
        assert event["count"] == 1 and server.count("events", "patch") == 0
        assert hooked.audit.last is not None and hooked.audit.last.events["unchanged"] == 1
        for obj in WAITS:
            server.delete(obj)
        assert hooked.run() == "ok"
        metrics = hooked.metrics()
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="waits", cause="waits-for-room") is None
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="never", cause="nodes-never-hold") == 1


def test_a_stale_topology_skips_the_run(server: FakeApiServer) -> None:
    policy = policy_from_data({"feasibility": {"staleAfterSeconds": 1}})
    with AuditedHook(server, policy) as hooked:
        server.set_hung(True)    # the API server stops answering: the view gets older
        try:
            assert wait_for(lambda: not hooked.live.ready(), 10)
            listed = server.count("jobs", "list")
            assert hooked.run() == "skipped_stale"
            assert server.count("jobs", "list") == listed and not server.stored_events()
        finally:
            server.set_hung(False)
        metrics = hooked.metrics()
    assert sample(metrics, "gpugate_audit_runs_total", result="skipped_stale") == 1
    assert sample(metrics, "gpugate_audit_runs_total", result="ok") is None


def hold_the_interpreter(seconds: float) -> int:
    """CPU work that holds the interpreter lock the whole time: ``sum`` over a range is one C
    call that never lets another thread run (sized to take about ``seconds``)."""
    began = time.perf_counter()
    sum(range(2_000_000))
    rate = 2_000_000 / max(time.perf_counter() - began, 1e-6)
    return sum(range(int(rate * seconds)))


async def _loop_lag(seconds: float) -> float:
    """The longest the loop came back late from a 10 ms sleep during ``seconds``."""
    loop = asyncio.get_running_loop()
    worst, end = 0.0, loop.time() + seconds
    while loop.time() < end:
        before = loop.time()
        await asyncio.sleep(0.01)
        worst = max(worst, loop.time() - before - 0.01)
    return worst


@pytest.mark.skipif(not CAN_FORK, reason="the audit runs in a forked child only where os.fork exists")
def test_the_event_loop_is_not_held_while_an_audit_runs(server: FakeApiServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    burn = 1.5

    def slow_audit(*args: Any, **kwargs: Any) -> Any:
        end = time.monotonic() + burn
        while time.monotonic() < end:
            sum(range(1_000_000))
        return audit(*args, **kwargs)

    monkeypatch.setattr(periodic, "audit", slow_audit)   # the fork inherits it
    with AuditedHook(server) as hooked:
        assert hooked.hook.loop is not None
        # the control: the same work in a thread of the server holds its loop
        lag = asyncio.run_coroutine_threadsafe(_loop_lag(burn / 2), hooked.hook.loop)
        hooked.hook.call(lambda: asyncio.get_running_loop().run_in_executor(None, hold_the_interpreter, burn))
        assert lag.result(30) > burn / 4
        time.sleep(burn)        # the thread's work is done
        post_review(hooked.hook, "validate", review_for(NEVER[0]))   # warm: a first check is cold
        running = hooked.start_run()
        assert wait_for(lambda: server.count("jobs", "list") >= 1, 10)   # the child is listing
        lag = asyncio.run_coroutine_threadsafe(_loop_lag(burn / 2), hooked.hook.loop)
        lag.result(30)
        began = time.monotonic()
        status, answer = post_review(hooked.hook, "validate", review_for(NEVER[0]))
        answered = time.monotonic() - began
        assert not running.done()      # all of it while the audit was still going
        assert running.result(60) == "ok"
    assert status == 200 and answer["response"]["allowed"] is False   # judged, GG403
    assert lag.result(1) < 0.25, "the loop was held while the audit ran"
    assert answered < 1.0
    assert hooked.audit.last is not None and hooked.audit.last.seconds >= burn
    assert hooked.audit.last.pid != os.getpid()


@pytest.mark.skipif(not CAN_FORK, reason="the audit runs in a forked child only where os.fork exists")
def test_a_run_past_its_timeout_is_killed_and_beats_are_skipped_meanwhile(
        server: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck_audit(*args: Any, **kwargs: Any) -> Any:
        time.sleep(60)
        raise AssertionError("not killed")

    monkeypatch.setattr(periodic, "audit", stuck_audit)   # the fork inherits it
    with AuditedHook(server, timeout=1.0) as hooked:
        began = time.monotonic()
        assert hooked.run() == "error"
        assert time.monotonic() - began < 10
        # on the beat: a run that is still going when the next beat comes is not doubled
        beating = PeriodicAudit(hooked.live, lambda: POLICY, hooked.hook.webhook.metrics, 0.3, timeout=30.0)
        hooked.hook.call(lambda: asyncio.get_running_loop().create_task(beating.start()))
        assert wait_for(lambda: (sample(hooked.metrics(), "gpugate_audit_runs_total", result="skipped_busy")
                                 or 0) >= 2, 10)
        assert hooked.hook.loop is not None
        began = time.monotonic()
        asyncio.run_coroutine_threadsafe(beating.stop(), hooked.hook.loop).result(10)
        assert time.monotonic() - began < 5     # its child killed, not waited for
        metrics = hooked.metrics()
    assert sample(metrics, "gpugate_audit_runs_total", result="error") == 1
    assert sample(metrics, "gpugate_audit_runs_total", result="ok") is None
    assert not server.stored_events()


def test_without_fork_the_audit_runs_in_a_thread(server: FakeApiServer, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(periodic, "CAN_FORK", False)
    with caplog.at_level(logging.WARNING, "gpugate.audit"), AuditedHook(server) as hooked:
        assert hooked.run() == "ok"
    assert hooked.audit.last is not None and hooked.audit.last.pid == os.getpid()
    (event,) = server.stored_events()
    assert event["involvedObject"]["name"] == "huge"
    assert "os.fork is not available" in caplog.text


def test_events_not_granted_are_counted_and_said(server: FakeApiServer,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    server.forbidden.add("events")
    with caplog.at_level(logging.WARNING, "gpugate.audit"), AuditedHook(server) as hooked:
        assert hooked.run() == "error"
        metrics = hooked.metrics()
    assert sample(metrics, "gpugate_audit_events_total", result="failed") == 1
    assert sample(metrics, "gpugate_audit_runs_total", result="error") == 1
    assert sample(metrics, "gpugate_audit_pending_gangs", verdict="never", cause="nodes-never-hold") == 1
    assert "deploy/components/audit" in caplog.text


def test_a_namespace_being_deleted_costs_its_own_event_only(server: FakeApiServer) -> None:
    """NamespaceLifecycle refuses new Events in a namespace being deleted (403): that Event
    fails, and the others of the run are still written (it is not a missing permission)."""
    doomed, doomed_pod = job_and_pod("doomed", "600")
    for obj in (doomed, doomed_pod):
        obj["metadata"]["namespace"] = "leaving"
    doomed_pod["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"    # judged first: older
    server.add(doomed, doomed_pod)
    server.terminating.add("leaving")
    with AuditedHook(server) as hooked:
        assert hooked.run() == "error"
        metrics = hooked.metrics()
    assert [e["involvedObject"]["name"] for e in server.stored_events()] == ["huge"]
    assert sample(metrics, "gpugate_audit_events_total", result="created") == 1
    assert sample(metrics, "gpugate_audit_events_total", result="failed") == 1
    assert hooked.audit.last is not None
    assert any("being deleted" in error for error in hooked.audit.last.errors), hooked.audit.last.errors


# -- the Event itself, without a server ------------------------------------------------------------

def _entries(*objects: dict[str, Any]) -> list[Any]:
    nodes = [node("n0")]
    snapshot = ClusterSnapshot("static", Topology.from_objects(nodes, POLICY))
    return audit(list(objects), snapshot, POLICY, scan=False).pending


def test_event_names_are_dns_subdomains_and_messages_are_bounded() -> None:
    job, pod = job_and_pod("x" * 250, "500")
    (entry,) = _entries(job, pod)
    assert entry.gang is not None
    entry.gang.reason = "why " * 400
    event = event_for(entry, dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC), "replica-1")
    name = event["metadata"]["name"]
    assert len(name) <= 253 and re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", name)
    assert name.startswith("x" * 200) and ".gpugate." in name
    assert len(event["message"]) <= MESSAGE_LIMIT and event["message"].endswith("… (GG403)")
    assert event["firstTimestamp"] == "2026-05-01T12:00:00Z"
    entry.gang.cause = "queue-closed"          # another cause: another Event
    assert event_for(entry, dt.datetime.now(dt.UTC), "replica-1")["metadata"]["name"] != name


def test_a_cluster_scoped_subject_has_its_event_in_default() -> None:
    job, pod = job_and_pod("huge", "500")
    (entry,) = _entries(job, pod)
    entry.subject.ref = dataclasses.replace(entry.subject.ref, namespace=None)
    event = event_for(entry, dt.datetime.now(dt.UTC), "replica-1")
    assert event["metadata"]["namespace"] == "default" and "namespace" not in event["involvedObject"]


def test_two_replicas_count_an_observation_once(server: FakeApiServer) -> None:
    """Two replicas audit on their own beats: the second finds the Event fresh and leaves it."""
    (entry,) = _entries(*NEVER)
    configuration = k8s.Configuration()
    configuration.host = server.url
    first = EventWriter(k8s.ApiClient(configuration), "replica-1", refresh_after=150.0)
    second = EventWriter(k8s.ApiClient(configuration), "replica-2", refresh_after=150.0)
    first.write(entry)
    second.write(entry)
    assert (first.counts["created"], second.counts["unchanged"]) == (1, 1)
    later = EventWriter(k8s.ApiClient(configuration), "replica-2", refresh_after=150.0,
                        clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=200))
    later.write(entry)
    (event,) = server.stored_events()
    assert later.counts["updated"] == 1 and event["count"] == 2 and event["reportingInstance"] == "replica-2"


# -- the command line and the manifests ------------------------------------------------------------

def test_serve_refuses_an_audit_without_the_live_topology(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    cert, key = make_cert(tmp_path)
    common = ["--tls-cert", str(cert), "--tls-key", str(key)]
    assert serve_main([*common, "--cluster", str(tmp_path / "c.yaml"), "--audit-interval", "300"]) == 2
    assert "--audit-interval needs the live topology" in capsys.readouterr().err
    assert serve_main([*common, "--audit-interval", "-1"]) == 2
    assert "--audit-interval must be 0 (off)" in capsys.readouterr().err


def test_gpugate_serve_audits_every_interval(server: FakeApiServer, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    config = tmp_path / "policy.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "gpugate.io/v1alpha1", "kind": "Policy", **POLICY.data}))
    with ServeProcess(cert, key, "--kubeconfig", str(kubeconfig), "--config", str(config),
                      "--audit-interval", "1") as served:
        assert served.wait_until_answering("/readyz")
        assert wait_for(lambda: (sample(served.client.metrics(), "gpugate_audit_runs_total", result="ok")
                                 or 0) >= 2, 60)
        (event,) = server.stored_events()
    assert event["involvedObject"]["name"] == "huge" and event["count"] >= 1
    assert served.returncode == 0, served.stderr[-2000:]
    assert "audit every 1 s" in served.stderr


def test_the_audit_component_grants_exactly_the_workload_kinds_and_events() -> None:
    """deploy/components/audit follows the kinds table as the audit lists it (what the base's
    topology reader does not grant already, and Kueue's Workloads), and writes Events."""
    documents = list(yaml.safe_load_all((ROOT / "deploy/components/audit/rbac.yaml").read_text()))
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    granted: dict[str, set[tuple[str, str]]] = {}
    for rule in role["rules"]:
        pairs = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
        for verb in rule["verbs"]:
            granted.setdefault(verb, set()).update(pairs)
    topology = {(r.group, r.plural) for r in RESOURCES}
    workloads = {(k.group, k.resource) for k in KINDS} - topology
    workloads.add((KUEUE_WORKLOADS.group, KUEUE_WORKLOADS.plural))
    assert granted == {"list": workloads, "create": {("", "events")}, "get": {("", "events")},
                       "patch": {("", "events")}}
    assert {(r.group, r.plural) for r in RESOURCES if (r.group, r.plural) in periodic.TREE_KINDS} \
        == set(periodic.TREE_KINDS)   # what an audit lists of the topology's kinds, granted by the base
