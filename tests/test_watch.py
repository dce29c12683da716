"""The live topology against a local API server double: list, watch, bookmarks, 410 Gone,
dropped connections, slow answers, CRDs that are not installed, an API server that is down.
Each time the topology must converge to the server's state, and be reported stale while it
cannot."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_apiserver import FakeApiServer
from kubernetes import client as k8s
from webhook_helpers import wait_for

from policies.config import Policy
from policies.topology import Topology
from webhook.kube import RESOURCES, WatchOptions, list_objects
from webhook.watch import LiveTopology, export_topology, snapshot_objects, watch_api_client

FAST = WatchOptions(page_size=3, connect_timeout=1.0, read_timeout=1.0, list_timeout=1.0,
                    watch_timeout_seconds=30, min_backoff=0.02, max_backoff=0.1, crd_retry_seconds=0.2,
                    heartbeat_seconds=0.02)


def node(name: str, cpu: str = "8", unschedulable: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": "a"}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}}}


def pod(name: str, on: str, cpu: str = "1", phase: str = "Running", namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def queue(name: str, cpu: str = "4", state: str = "Open") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"capability": {"cpu": cpu, "memory": "6Gi"}}, "status": {"state": state}}


def podgroup(name: str, queue_name: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minMember": 2, "queue": queue_name, "minResources": {"cpu": "2"}},
            "status": {"phase": "Running"}}


def hypernode(name: str, members: list[str]) -> dict[str, Any]:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": m}}}
                                            for m in members]}}


def view(topology: Topology) -> dict[str, Any]:
    """What the feasibility rules see, in comparable form."""
    cpu = topology.column("cpu")
    nodes = {name: (int(topology.alloc[slot, cpu]), int(topology.used[slot, cpu]),
                    bool(topology.unschedulable[slot]), topology.node_labels(slot))
             for name, slot in topology.node_index.items()}
    return {"counts": topology.counts(), "nodes": nodes,
            "queues": {n: (q.open, q.capability)
                       for n, q in topology.queues.items()}}


class Live:
    """A LiveTopology running on an event loop thread of its own, as in the server."""

    def __init__(self, server: FakeApiServer, options: WatchOptions = FAST) -> None:
        configuration = k8s.Configuration()
        configuration.host = server.url
        self.live = LiveTopology(watch_api_client(configuration), Policy(), name="fake", options=options)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Live:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.live.start(), self.loop).result(5)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.live.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        async def run() -> Any:
            return function(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)

    def view(self) -> dict[str, Any]:
        return dict(self.call(view, self.live.snapshot.topology))

    def stale(self, after: float) -> bool:
        return bool(self.call(lambda: self.live.snapshot.stale(time.monotonic(), after)))

    def restarts(self, reason: str) -> int:
        return sum(w.state.restarts.get(reason, 0) for w in self.live.watchers)


def expected(server: FakeApiServer) -> dict[str, Any]:
    return view(Topology.from_objects(server.objects(), Policy()))


def converged(live: Live, server: FakeApiServer) -> bool:
    return live.view() == expected(server)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        fake.add(*(node(f"n{i}") for i in range(5)), node("cordoned", unschedulable=True))
        fake.add(pod("a", "n0", "2"), pod("b", "n1", "3"), pod("done", "n2", "4", phase="Succeeded"))
        fake.add(queue("team-a"), queue("closed", state="Closed"), podgroup("pg", "team-a"))
        fake.add(hypernode("rack-1", ["n0", "n1"]))
        fake.uninstall("elasticquotatrees")
        yield fake


def test_initial_sync_converges_and_drops_finished_pods(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        assert wait_for(lambda: converged(live, server))
        assert wait_for(lambda: not live.stale(5.0))
        counts = live.view()["counts"]
        assert counts == {"Node": 6, "Pod": 2, "Namespace": 0, "Queue": 2, "PodGroup": 1, "HyperNode": 1,
                          "ElasticQuotaTree": 0, "LocalQueue": 0, "KAIQueue": 0, "ClusterQueue": 0,
                          "Cohort": 0, "ResourceFlavor": 0, "KueueTopology": 0, "AdmissionCheck": 0,
                          "TrainingRuntime": 0,
                          "ClusterTrainingRuntime": 0,
                          "Workload": 0, "WorkloadAPIPodGroup": 0, "DeviceClass": 0, "ResourceSlice": 0,
                          "ResourceClaim": 0, "ResourceClaimTemplate": 0}
        nodes = live.view()["nodes"]
        assert nodes["n1"][1] == 3000 and nodes["n2"][1] == 0  # millicores; the Succeeded pod is gone
        assert nodes["cordoned"][2] is True
        # pages of 3 items: the pod list (3 stored) took one page, the node list (6) two or three
        assert server.count("nodes", "list") >= 1


def test_events_converge(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        lists = server.count("nodes", "list")
        server.add(node("n9", cpu="16"), pod("c", "n9", "5"))
        server.modify(node("n0", cpu="4"))
        server.modify(pod("a", "n0", "2", phase="Succeeded"))   # finished: releases its CPU
        server.delete(node("n4"))
        server.modify(queue("closed", state="Open"))
        assert wait_for(lambda: converged(live, server))
        nodes = live.view()["nodes"]
        assert nodes["n9"][:2] == (16000, 5000) and nodes["n0"][:2] == (4000, 0) and "n4" not in nodes
        assert server.count("nodes", "list") == lists  # events alone, no relist


def test_bookmark_moves_the_resource_version_without_changes(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        before = live.view()
        server.silently_modify("MODIFIED", node("n3", cpu="2"))  # bumps the server's version
        target = str(server.rv)
        server.bookmark()
        watcher = next(w for w in live.live.watchers if w.resource.kind == "Node")
        assert wait_for(lambda: watcher.state.resource_version == target)
        assert live.view() == before


def test_gone_mid_stream_relists(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        # changes the watches never hear about (compacted away), then 410 on every stream
        server.silently_modify("ADDED", node("ghost", cpu="64"))
        server.silently_modify("DELETED", pod("b", "n1"))
        server.silently_modify("MODIFIED", queue("team-a", cpu="99"))
        lists_before = server.count("nodes", "list")
        server.expire()
        assert wait_for(lambda: converged(live, server))
        assert "ghost" in live.view()["nodes"] and live.view()["counts"]["Pod"] == 1
        assert live.restarts("gone") >= 3
        assert server.count("nodes", "list") > lists_before


def test_dropped_connection_rewatches_from_last_version(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        lists_before = server.count("pods", "list")
        server.drop_watches()
        server.add(pod("late", "n3", "1"))  # happens while the client reconnects
        server.delete(node("n2"))
        assert wait_for(lambda: converged(live, server))
        assert live.restarts("connection") >= 1
        assert server.count("pods", "list") == lists_before  # replayed from the version, no relist


def test_slow_list_times_out_then_converges(server: FakeApiServer) -> None:
    server.slow["nodes"] = 1.5  # longer than the client's list timeout (1 s)
    with Live(server) as live:
        assert wait_for(lambda: live.restarts("connection") >= 1)
        assert not live.live.ready()
        assert live.stale(1000.0)  # never synced: as stale as can be, nothing is judged
        server.slow["nodes"] = 0.2  # slow but within the timeout
        assert wait_for(lambda: converged(live, server) and live.live.ready())
        assert wait_for(lambda: not live.stale(5.0))


def test_missing_crd_is_skipped_then_picked_up(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)  # ElasticQuotaTree 404 does not hold readiness back
        server.install("elasticquotatrees")
        server.add({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                    "metadata": {"name": "tree", "namespace": "kube-system"},
                    "spec": {"root": {"name": "root", "max": {"cpu": "10"}, "min": {"cpu": "10"},
                                      "children": [{"name": "ml", "namespaces": ["ml"],
                                                    "max": {"cpu": "4"}, "min": {"cpu": "2"}}]}}})
        assert wait_for(lambda: live.view()["counts"]["ElasticQuotaTree"] == 1)
        server.uninstall("podgroups")
        server.expire()  # forces the podgroups watcher to list again, and find it gone
        assert wait_for(lambda: live.view()["counts"]["PodGroup"] == 0)
        assert wait_for(lambda: converged(live, server))


def test_staleness_while_the_api_server_is_down(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(lambda: live.live.ready() and not live.stale(0.3))
        server.set_down(True)
        assert wait_for(lambda: live.stale(0.3))
        server.add(node("while-down"))      # stored, announced to nobody (no watch is open)
        server.set_down(False)
        assert wait_for(lambda: converged(live, server))
        assert wait_for(lambda: not live.stale(0.3))


def test_quiet_watch_stays_fresh(server: FakeApiServer) -> None:
    options = WatchOptions(**{**FAST.__dict__, "read_timeout": 0.3})
    with Live(server, options) as live:
        assert wait_for(lambda: live.live.ready() and not live.stale(0.5))
        time.sleep(1.0)  # several read timeouts on silent streams: re-watched, not stale
        assert not live.stale(0.5)
        assert live.restarts("connection") == live.restarts("gone") == live.restarts("closed") == 0


def test_list_objects_pages_and_sets_kind(server: FakeApiServer) -> None:
    configuration = k8s.Configuration()
    configuration.host = server.url
    api = watch_api_client(configuration)
    managed = node("n4")
    managed["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    server.modify(managed)
    nodes_resource = next(r for r in RESOURCES if r.kind == "Node")
    items, version = list_objects(api, nodes_resource, WatchOptions(page_size=2))
    assert sorted(i["metadata"]["name"] for i in items) == ["cordoned", "n0", "n1", "n2", "n3", "n4"]
    assert all(i["kind"] == "Node" and i["apiVersion"] == "v1" for i in items)
    assert all("managedFields" not in i["metadata"] for i in items)
    assert version == str(server.rv)
    assert server.count("nodes", "list") == 3
    objects = snapshot_objects(api)
    assert sorted({o["kind"] for o in objects}) == ["HyperNode", "Node", "Pod", "PodGroup", "Queue"]


def test_snapshot_command_writes_the_list_the_linter_reads(server: FakeApiServer, tmp_path: Path) -> None:
    from webhook.cli import snapshot_main

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    out = tmp_path / "cluster.yaml"
    assert snapshot_main(["--kubeconfig", str(kubeconfig), "-o", str(out)]) == 0
    document = yaml.safe_load(out.read_text())
    assert document["kind"] == "List"
    assert view(Topology.from_objects(document["items"], Policy())) == expected(server)
    out_json = tmp_path / "cluster.json"
    assert snapshot_main(["--kubeconfig", str(kubeconfig), "-o", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["items"]
    try:
        from lint.cluster import load_clusters
    except ImportError:
        return
    loaded = load_clusters([str(out)], Policy())
    assert view(loaded[0].topology) == expected(server)


def test_snapshot_command_reports_an_unreachable_server(tmp_path: Path, capsys: Any) -> None:
    from webhook.cli import snapshot_main

    kubeconfig = tmp_path / "kubeconfig"
    config = FakeApiServer().kubeconfig()
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:1"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert snapshot_main(["--kubeconfig", str(kubeconfig), "-o", str(tmp_path / "x.yaml")]) == 2
    assert "cannot reach" in capsys.readouterr().err


def test_webhook_answers_while_the_topology_is_still_syncing(server: FakeApiServer) -> None:
    from webhook_helpers import ServedWebhook, post_review, review_for

    from webhook.app import Webhook

    configuration = k8s.Configuration()
    configuration.host = server.url
    live = LiveTopology(watch_api_client(configuration), Policy(), name="fake", options=FAST)
    server.slow["nodes"] = 0.8  # the first list hangs for a while
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": "ml"},
           "spec": {"template": {"spec": {"containers": [{
               "name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]}}}}
    with ServedWebhook(webhook=Webhook(topology=live)) as hook:
        assert hook.request("GET", "/readyz")[0] == 503
        status, answer = post_review(hook, "validate", review_for(job))
        assert status == 200 and answer["response"]["allowed"] is True  # not judged on no data
        assert wait_for(lambda: hook.request("GET", "/readyz")[0] == 200)
        assert wait_for(lambda: not live.snapshot.stale(time.monotonic(), 5.0))
        _, answer = post_review(hook, "validate", review_for(job))
        # synced: 500 CPUs fit no 8-CPU node, so the gang can never run
        assert answer["response"]["allowed"] is False and "GG403" in answer["response"]["status"]["message"]
        metrics = hook.request("GET", "/metrics")[1].decode()
        assert 'gpugate_topology_objects{cluster="fake",kind="Node"} 6.0' in metrics


def test_streams_that_end_at_once_are_retried_with_backoff(server: FakeApiServer) -> None:
    with Live(server) as live:
        assert wait_for(live.live.ready)
        server.empty_watches = True
        server.drop_watches()
        before = server.count("nodes", "watch")
        time.sleep(0.6)
        # min 0.02 s doubling to 0.1 s: a handful of retries, not a busy loop of hundreds
        assert 1 <= server.count("nodes", "watch") - before < 25
        assert live.restarts("closed") >= 1
        server.empty_watches = False
        server.add(node("after"))
        assert wait_for(lambda: converged(live, server))


def test_gpugate_serve_live_from_kubeconfig(server: FakeApiServer, tmp_path: Path) -> None:
    from webhook_helpers import ServeProcess, make_cert, post_review, review_for

    cert, key = make_cert(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    # a minute of feasibility budget: on a busy machine the first, cold check must not turn
    # the verdict this test is about into GG406 (unknown)
    config = tmp_path / "policy.yaml"
    config.write_text("apiVersion: gpugate.io/v1alpha1\nkind: Policy\n"
                      "feasibility: {budgetMilliseconds: 60000}\n")
    with ServeProcess(cert, key, "--kubeconfig", str(kubeconfig), "--config", str(config)) as served:
        client = served.client
        assert served.wait_until_answering("/readyz")
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": "ml"},
               "spec": {"template": {"spec": {"containers": [{
                   "name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]}}}}
        status, answer = post_review(client, "validate", review_for(job))
        assert status == 200 and answer["response"]["allowed"] is False
        assert "GG403" in answer["response"]["status"]["message"]
        metrics = client.request("GET", "/metrics")[1].decode()
        assert 'gpugate_topology_objects{cluster="fake",kind="Node"} 6.0' in metrics
        assert 'gpugate_topology_objects{cluster="fake",kind="ElasticQuotaTree"} 0.0' in metrics
        server.expire()
        assert wait_for(lambda: 'gpugate_watch_restarts_total{kind="Node",reason="gone"} 1.0'
                        in client.request("GET", "/metrics")[1].decode())
    assert served.returncode == 0, served.stderr[-2000:]


def test_expired_continue_token_restarts_the_list(server: FakeApiServer) -> None:
    server.expire_continue = 2  # the node list (6 nodes, pages of 3) loses its token twice
    with Live(server) as live:
        assert wait_for(lambda: live.live.ready() and converged(live, server))
        assert server.expire_continue == 0
        assert server.count("nodes", "list") >= 6  # 2 x (first page + expired) + a full list of 2 pages


def test_forbidden_optional_kind_is_skipped_not_fatal(server: FakeApiServer) -> None:
    server.forbidden.add("hypernodes")
    with Live(server) as live:
        assert wait_for(live.live.ready)
        assert live.view()["counts"]["HyperNode"] == 0 and live.view()["counts"]["Node"] == 6
        server.forbidden.discard("hypernodes")  # RBAC fixed: picked up on the next retry
        assert wait_for(lambda: live.view()["counts"]["HyperNode"] == 1)


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def test_namespace_labels_are_followed_and_an_old_rbac_is_no_outage(server: FakeApiServer) -> None:
    """Kueue's namespace selector reads the Namespaces' labels: listed, then followed by events. A
    ClusterRole from before they were read (namespaces not granted) leaves them out, nothing else."""
    server.add(namespace("ml", **{"managed-by-kueue": "true"}), namespace("web"))
    server.forbidden.add("namespaces")
    with Live(server) as live:
        assert wait_for(live.live.ready)
        assert live.view()["counts"]["Namespace"] == 0 and live.view()["counts"]["Node"] == 6
        server.forbidden.discard("namespaces")
        assert wait_for(lambda: live.view()["counts"]["Namespace"] == 2)
        labels = lambda: dict(live.call(lambda t: t.namespace_labels, live.live.snapshot.topology))  # noqa: E731
        assert labels()["ml"] == {"managed-by-kueue": "true"}
        server.modify(namespace("web", **{"managed-by-kueue": "true"}))
        server.delete(namespace("ml"))
        assert wait_for(lambda: labels() == {"web": {"managed-by-kueue": "true"}})


def test_forbidden_nodes_keep_the_webhook_unready(server: FakeApiServer) -> None:
    server.forbidden.add("nodes")
    with Live(server) as live:
        assert wait_for(lambda: live.restarts("api-error") >= 1)
        assert not live.live.ready() and live.stale(1000.0)
        server.forbidden.discard("nodes")
        assert wait_for(lambda: live.live.ready() and converged(live, server))


# -- freshness said aloud, and the watch under faults (issue 16) ---------------------------------------
#
# The real defaults where they matter (a 15 s read timeout, the probe every second, backoff to 1 s),
# short timeouts elsewhere. STALE is the policy's staleAfterSeconds in these tests.

STALE = 2.0
REAL = WatchOptions(page_size=500, read_timeout=15.0, list_timeout=5.0, crd_retry_seconds=0.2,
                    heartbeat_seconds=0.02)


def stale_policy(**feasibility: Any) -> Policy:
    from policies.config import policy_from_data

    return policy_from_data({"feasibility": {"staleAfterSeconds": STALE, **feasibility}})


def impossible_job() -> dict[str, Any]:
    """500 CPUs in one pod: no 8-CPU node of the fixture holds it (GG403 on a fresh view)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]}}}}


class LiveHook:
    """The webhook over TLS on a LiveTopology of the double, with ``policy``."""

    def __init__(self, server: FakeApiServer, policy: Policy, options: WatchOptions = REAL) -> None:
        from webhook_helpers import ServedWebhook

        from webhook.app import PolicySource, Webhook

        configuration = k8s.Configuration()
        configuration.host = server.url
        self.live = LiveTopology(watch_api_client(configuration), policy, name="fake", options=options)
        self.hook = ServedWebhook(webhook=Webhook(policy=PolicySource(policy=policy), topology=self.live))

    def __enter__(self) -> LiveHook:
        self.hook.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hook.__exit__(*exc)

    def answer(self, obj: dict[str, Any]) -> dict[str, Any]:
        from webhook_helpers import post_review, review_for

        status, answer = post_review(self.hook, "validate", review_for(obj))
        assert status == 200, answer
        return dict(answer["response"])

    def ready(self) -> bool:
        return self.hook.request("GET", "/readyz")[0] == 200

    def age(self) -> float:
        metrics = self.hook.request("GET", "/metrics")[1].decode()
        line = next(x for x in metrics.splitlines() if x.startswith("gpugate_topology_age_seconds{"))
        return float(line.rsplit(" ", 1)[1])


def judged_never(response: dict[str, Any]) -> bool:
    return response["allowed"] is False and "GG403" in response["status"]["message"]


def says_stale(response: dict[str, Any]) -> bool:
    """Allowed, with a kubectl warning that names the view's age and what was not checked."""
    import re

    warnings = response.get("warnings") or []
    return response["allowed"] is True and any(
        re.match(r"GG406 feasibility-unknown: topology is \d+s old .*not applied", w) for w in warnings)


def test_a_hung_api_server_is_noticed_within_the_bound(server: FakeApiServer) -> None:
    """The silent outage: the API server stops answering but keeps every connection open
    (a stopped process, a frozen node). Streams that have delivered stay "open": before
    the probe, the view counted as fresh until the 15 s read timeout, and again after
    each re-watch; now it is stale staleAfterSeconds after the last answered probe,
    /readyz goes 503, /metrics' age climbs, and the answers say so."""
    with LiveHook(server, stale_policy()) as gate:
        assert wait_for(lambda: gate.ready() and judged_never(gate.answer(impossible_job())))
        server.bookmark()        # every stream has delivered something: "streaming"
        assert wait_for(lambda: all(w.streaming for w in gate.live.watchers if not w.state.skipped))
        server.set_hung(True)
        try:
            # within the bound (plus the probe's second): stale, said aloud, not ready
            assert wait_for(lambda: says_stale(gate.answer(impossible_job())), timeout=STALE + 3.0)
            assert not gate.ready()
            assert gate.age() > STALE
            assert gate.hook.request("GET", "/healthz")[0] == 200
        finally:
            server.set_hung(False)
        assert wait_for(lambda: gate.ready() and judged_never(gate.answer(impossible_job())), timeout=5.0)


def test_stale_view_denies_with_when_stale_deny(server: FakeApiServer) -> None:
    with LiveHook(server, stale_policy(whenStale="deny")) as gate:
        assert wait_for(lambda: gate.ready() and judged_never(gate.answer(impossible_job())))
        server.set_hung(True)
        try:
            def denied_stale() -> bool:
                response = gate.answer(impossible_job())
                message = response.get("status", {}).get("message", "")
                return response["allowed"] is False and "GG406" in message and "s old" in message
            assert wait_for(denied_stale, timeout=STALE + 3.0)
        finally:
            server.set_hung(False)
        assert wait_for(lambda: judged_never(gate.answer(impossible_job())), timeout=5.0)


def test_before_the_first_sync_the_answer_says_so(server: FakeApiServer) -> None:
    server.set_hung(True)   # nothing is ever listed
    try:
        with LiveHook(server, stale_policy()) as gate:
            response = gate.answer(impossible_job())
            assert response["allowed"] is True
            assert any(w.startswith("GG406 feasibility-unknown: topology not synced yet")
                       for w in response.get("warnings") or []), response
            assert not gate.ready() and gate.age() == float("inf")
            server.set_hung(False)
            assert wait_for(lambda: gate.ready() and judged_never(gate.answer(impossible_job())))
    finally:
        server.set_hung(False)


def test_a_quiet_cluster_stays_fresh_between_bookmarks(server: FakeApiServer) -> None:
    """No event, no bookmark for several times the bound: the probe keeps the open streams
    confirmed, nothing is re-listed or re-watched."""
    with LiveHook(server, stale_policy()) as gate:
        assert wait_for(gate.ready)
        watches = server.count("nodes", "watch")
        lists = server.count("nodes", "list")
        time.sleep(3 * STALE)
        assert gate.ready() and gate.age() < STALE and judged_never(gate.answer(impossible_job()))
        assert server.count("nodes", "watch") == watches and server.count("nodes", "list") == lists
        assert server.probes >= 3


def test_reconnects_within_seconds_of_the_api_servers_return() -> None:
    """Down long enough for the old backoff to reach 6.4 s; compacted meanwhile (as the real
    API server's watch cache after a restart: old versions are gone) with changes the
    watches never heard of, and a few thousand objects: back within about a second, and
    judging on the new state within a few."""
    with FakeApiServer() as server:
        server.add(*(node(f"n{i}") for i in range(400)))
        server.add(*(pod(f"p{i}", f"n{i % 400}", "100m") for i in range(3000)))
        with LiveHook(server, stale_policy()) as gate:
            assert wait_for(lambda: gate.ready() and judged_never(gate.answer(impossible_job())), timeout=20)
            server.set_down(True)
            assert wait_for(lambda: gate.age() > STALE, timeout=STALE + 3.0)
            assert says_stale(gate.answer(impossible_job()))
            time.sleep(6.5)
            server.silently_modify("ADDED", node("huge", cpu="512"))   # now the job fits there
            server.expire()
            requests = len(server.requests)
            server.set_down(False)
            # reconnected: the next list or watch arrives within the (1 s) backoff, not 6 s later
            assert wait_for(lambda: len(server.requests) > requests, timeout=3.0)
            assert wait_for(lambda: gate.ready() and gate.answer(impossible_job())["allowed"] is True
                            and not gate.answer(impossible_job()).get("warnings"), timeout=6.0)
            assert "huge" in gate.live.snapshot.topology.node_index


def test_relist_applies_in_slices_and_never_loses_a_node() -> None:
    """A relist after 410 Gone is applied on the loop in slices of a few milliseconds (the
    loop stays free for reviews), and no intermediate state holds fewer nodes than exist
    (a half-applied relist must not turn into a false "never fits")."""
    with FakeApiServer() as server:
        server.add(*(node(f"n{i}") for i in range(1500)))
        server.add(*(pod(f"p{i}", f"n{i % 1500}", "100m") for i in range(6000)))
        # a slice budget of 0.1 ms: the loop gets a turn after every few objects
        with Live(server, WatchOptions(**{**REAL.__dict__, "apply_slice_seconds": 0.0001})) as live:
            assert wait_for(lambda: live.live.synced() and converged(live, server), timeout=30)
            fewest: list[int] = []
            applied = [0]
            between: list[int] = []   # objects applied between two turns of the sampler

            async def sampler() -> None:
                seen = 0
                while True:
                    fewest.append(len(live.live.snapshot.topology.node_index))
                    between.append(applied[0] - seen)
                    seen = applied[0]
                    await asyncio.sleep(0)

            def counting(apply: Callable[..., None]) -> Callable[..., None]:
                def run(event: str, obj: dict[str, Any]) -> None:
                    applied[0] += 1
                    apply(event, obj)
                return run

            for watcher in live.live.watchers:
                watcher._apply = counting(watcher._apply)  # type: ignore[method-assign]
            task = asyncio.run_coroutine_threadsafe(sampler(), live.loop)
            server.expire()
            assert wait_for(lambda: applied[0] >= 7500 and converged(live, server), timeout=30)
            task.cancel()
            assert min(fewest) == 1500
            assert max(between) < 100   # pages of 500 went in as slices


def test_an_alpha_api_is_read_at_the_version_the_server_serves() -> None:
    """The Workload API's PodGroup is v1alpha3 in Kubernetes 1.37 and v1alpha2 in 1.36: the
    watch and the snapshot read whichever version the server serves (the first served of
    ``Resource.older_versions``), and a server with neither skips it like a missing CRD."""
    def workload_podgroup(name: str) -> dict[str, Any]:
        return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}

    served_136 = tuple(dataclasses.replace(r, version="v1alpha2", older_versions=())
                       if (r.group, r.plural) == ("scheduling.k8s.io", "podgroups") else r for r in RESOURCES)
    with FakeApiServer(served_136) as fake:
        fake.add(node("n0"), workload_podgroup("workers-0"))
        with Live(fake) as live:
            assert wait_for(live.live.ready)
            assert wait_for(lambda: live.view()["counts"]["WorkloadAPIPodGroup"] == 1)
            fake.add(workload_podgroup("workers-1"))      # events come on the served version's watch
            assert wait_for(lambda: live.view()["counts"]["WorkloadAPIPodGroup"] == 2)
            assert wait_for(lambda: converged(live, fake))
        configuration = k8s.Configuration()
        configuration.host = fake.url
        objects = snapshot_objects(watch_api_client(configuration))
        read = sorted(o["metadata"]["name"] for o in objects
                      if o["apiVersion"] == "scheduling.k8s.io/v1alpha2")
        assert read == ["workers-0", "workers-1"]
        fake.uninstall("podgroups.scheduling.k8s.io")
        export = export_topology(watch_api_client(configuration))
        assert "WorkloadAPIPodGroup" not in export.counts
        absent = export.absent["WorkloadAPIPodGroup"]
        assert "podgroups.scheduling.k8s.io/v1alpha3|v1alpha2 is not served" in absent
