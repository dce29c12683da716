"""Graceful stop (issue 16): reviews sent through the real API server while one of two replicas
terminates all succeed, and every one of them was judged by a replica.

Two ``gpugate serve`` processes (sharing one certificate) stand behind a small TCP proxy that
plays the Service: it sends each new connection to a backend whose ``/readyz`` answered 200 at
its last check, made every second: like endpoint removal, which reaches the API server and
kube-proxy some time after the pod turned unready (the reason for the drain). The webhooks are
registered with the proxy's URL. Mid-stream one backend gets SIGTERM: its ``/readyz`` turns 503
at once (the proxy stops sending it new connections), it keeps serving for its drain
(``--drain-seconds``; its answers close their connections, so the API server reconnects,
through the proxy, to the other one), then closes its listener and finishes what is in flight.

With ``failurePolicy: Ignore`` an unreachable webhook admits silently, so success alone proves
nothing: the reviews the two replicas counted must add up to the creates.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import POLICY, PROBE_NAMESPACE, Session
from .kube import Gpugate, free_port, register, wait_until, webhook_configurations

pytestmark = pytest.mark.e2e

DRAIN_SECONDS = float(__import__("os").environ.get("GPUGATE_E2E_DRAIN", "2"))
CREATES = 160
WORKERS = 8           # concurrent creates: the API server keeps several connections open
CHECK_SECONDS = 1.0   # how late the proxy learns that a backend is no longer ready


class ReadyProxy:
    """A TCP proxy on 127.0.0.1 that sends new connections to ready backends only."""

    def __init__(self, backends: list[int], ca: Path) -> None:
        self.backends = backends
        self.ready = {port: False for port in backends}
        self.routed = {port: 0 for port in backends}
        self._context = ssl.create_default_context(cafile=str(ca))
        self._listener = socket.create_server(("127.0.0.1", free_port()))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._next = 0
        self._threads = [threading.Thread(target=self._check, daemon=True),
                         threading.Thread(target=self._accept, daemon=True)]
        for thread in self._threads:
            thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _check(self) -> None:
        while not self._stop.is_set():
            for port in self.backends:
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=self._context,
                                                timeout=1) as response:
                        self.ready[port] = response.status == 200
                except OSError:
                    self.ready[port] = False
            self._stop.wait(CHECK_SECONDS)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            ready = [p for p in self.backends if self.ready[p]]
            if not ready:
                client.close()
                continue
            port = ready[self._next % len(ready)]
            self._next += 1
            try:
                backend = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                client.close()
                continue
            self.routed[port] += 1
            for src, dst in ((client, backend), (backend, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            src.settimeout(None)
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def _validated(gate: Gpugate) -> float:
    """Validating reviews answered (judged or shed) so far, from its metrics."""
    counters = gate.counters()
    return (counters.reviews(endpoint="validate")
            + counters.sum("gpugate_reviews_shed_total", endpoint="validate"))


def _answered_in_log(gate: Gpugate, endpoint: str) -> int:
    """From the last log line of a stopped replica: ``answered N review(s) (mutate A, validate B)``."""
    match = re.search(r"answered \d+ review\(s\) \(([^)]*)\)", gate.log(100_000))
    assert match, gate.log()
    counts = dict(part.split(" ") for part in match.group(1).split(", ") if " " in part)
    return int(counts.get(endpoint, 0))


def _review_directly(gate: Gpugate) -> int:
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "direct", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
        "operation": "CREATE", "userInfo": {"username": "e2e"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "direct", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}).encode()
    request = urllib.request.Request(f"{gate.url}/validate", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(gate.ca_path)),
                                timeout=5) as response:
        return int(response.status)


@pytest.fixture
def replicas(e2e: Session, tmp_path: Path) -> Iterator[tuple[Gpugate, Gpugate, ReadyProxy]]:
    certs = (e2e.gate.cert, e2e.gate.key, e2e.gate.ca_bundle)
    gates = [Gpugate(tmp_path / f"replica-{i}", e2e.cluster.kubeconfig, POLICY,
                     "--drain-seconds", str(DRAIN_SECONDS), "--shutdown-seconds", "5", certs=certs)
             for i in (1, 2)]
    proxy: ReadyProxy | None = None
    try:
        for gate in gates:
            gate.wait_ready()
        proxy = ReadyProxy([g.port for g in gates], e2e.gate.ca_path)
        assert wait_until(lambda: all(proxy.ready.values()), 10)
        yield gates[0], gates[1], proxy
    finally:
        e2e.register()     # the session's own gpugate again, for the tests after this one
        if proxy is not None:
            proxy.close()
        for gate in gates:
            gate.stop()


def test_no_review_fails_while_a_replica_terminates(e2e: Session, namespace: str,
                                                    replicas: tuple[Gpugate, Gpugate, ReadyProxy]) -> None:
    leaving, staying, proxy = replicas
    register(e2e.api_client, webhook_configurations(e2e.gate.ca_bundle, f"{proxy.url}/mutate",
                                                    f"{proxy.url}/validate"))
    # in force once the replicas (not the session's gpugate) count the probe's reviews
    before_probe = _validated(leaving) + _validated(staying)
    assert wait_until(lambda: e2e.probe(PROBE_NAMESPACE) == (True, True)
                      and _validated(leaving) + _validated(staying) > before_probe, 20)
    time.sleep(0.5)   # the API server's other webhook clients pick the new URL up too
    baseline = {"leaving": _validated(leaving), "staying": _validated(staying)}

    results: list[tuple[int, str]] = []
    signalled = threading.Event()

    def create(worker: int) -> None:
        for i in range(worker, CREATES, WORKERS):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}", "namespace": namespace},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            response = e2e.api.create(pod)
            results.append((response.status, response.message))
            if len(results) == CREATES // 4 and not signalled.is_set():
                signalled.set()
                leaving.process.send_signal(signal.SIGTERM)   # mid-stream
            time.sleep(0.1)

    started = time.monotonic()
    workers = [threading.Thread(target=create, args=(w,)) for w in range(WORKERS)]
    for worker in workers:
        worker.start()
    # readiness goes first: 503 while the replica still answers reviews (before: the listener
    # closed at once, so both failed with "connection refused")
    assert signalled.wait(60)
    assert wait_until(lambda: leaving.get("/readyz", timeout=2)[0] == 503, 5), leaving.log()
    assert _review_directly(leaving) == 200
    for worker in workers:
        worker.join(120)
    elapsed = time.monotonic() - started
    assert signalled.is_set()
    assert leaving.process.wait(30) == 0, leaving.log()

    failed = [r for r in results if r[0] != 201]
    assert len(results) == CREATES and not failed, failed[:5]
    judged_by_leaving = _answered_in_log(leaving, "validate") - baseline["leaving"] - 1  # the direct one
    judged_by_staying = _validated(staying) - baseline["staying"]
    print(f"\n{CREATES} creates in {elapsed:.1f} s while a replica stopped: validated by the leaving "
          f"replica {judged_by_leaving:.0f}, by the staying one {judged_by_staying:.0f}; connections "
          f"routed {proxy.routed}")
    assert judged_by_leaving > 0 and judged_by_staying > 0
    # every create was judged by one of the two (none slipped through unchecked)
    assert judged_by_leaving + judged_by_staying == CREATES
    log = leaving.log(100_000)
    assert "/readyz answers 503" in log and "closing the listener" in log
