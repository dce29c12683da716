"""Overload and hostile clients (issue 16): connection cap, per-connection memory, large
reviews off the event loop, shedding to the documented answer, request bytes never logged,
metrics on their own port, /livez.

Each test reproduces a failure of the code before the issue (noted per test); none asserts a
wall-clock time: ordering (what is answered while what else is in flight) and counts instead.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import (
    ServedWebhook,
    ServeProcess,
    WebhookClient,
    make_cert,
    post_review,
    review_for,
    wait_for,
)

from webhook import app as server_module
from webhook.app import OVERLOAD_WARNING, StaticTopology, Webhook


def pod(name: str = "p", filler: int = 0) -> dict[str, Any]:
    labels = {"filler": "x" * filler} if filler else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def big_review(uid: str, size: int = 200_000) -> dict[str, Any]:
    """A review over OFFLOAD_BYTES (128 KiB): judged off the event loop."""
    review = review_for(pod("big"), uid=uid)
    review["request"]["object"]["metadata"]["annotations"] = {f"a{i}": "v" * 90 for i in range(size // 100)}
    return review


def sample(hook: ServedWebhook, name: str, **labels: str) -> float:
    total = 0.0
    for metric in hook.webhook.metrics.registry.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def static_cluster(directory: Path) -> str:
    path = directory / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "labels": {}},
         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}]}))
    return str(path)


def tls_socket(hook: ServedWebhook, timeout: float = 10.0) -> ssl.SSLSocket:
    raw = socket.create_connection((hook.host, hook.port), timeout=timeout)
    return hook.ssl_context().wrap_socket(raw, server_hostname="localhost")


def slow_admit(monkeypatch: pytest.MonkeyPatch, seconds: float, only_big: bool = False) -> None:
    """``admit`` that first sleeps (blocking, as CPU-bound work would), for large reviews only
    when ``only_big``. A forked child inherits the patch."""
    real = server_module.admit

    def admit(request: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        meta = (request.get("object") or {}).get("metadata") or {}
        if not only_big or meta.get("name") == "big":
            time.sleep(seconds)
        return real(request, *args, **kwargs)

    monkeypatch.setattr(server_module, "admit", admit)


# -- connections -------------------------------------------------------------------------------

def test_connections_beyond_the_cap_are_reset_at_once_and_counted() -> None:
    """Before: no cap at all (2,000 idle connections took 621 MiB, past the 512 Mi limit)."""
    with ServedWebhook(max_connections=4) as hook:
        held = [tls_socket(hook) for _ in range(4)]
        assert wait_for(lambda: sample(hook, "gpugate_connections") == 4)
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            extra = tls_socket(hook, timeout=5)   # reset before the TLS handshake
            extra.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            assert extra.recv(100) == b""          # not served either way
            raise ConnectionResetError
        assert sample(hook, "gpugate_connections_refused_total") >= 1
        held.pop().close()
        assert wait_for(lambda: sample(hook, "gpugate_connections") == 3)
        status, _ = post_review(hook, "validate", review_for(pod()))   # a place is free again
        assert status == 200
        for sock in held:
            sock.close()


def test_idle_tls_connections_cost_tens_of_kib_not_hundreds(tmp_path: Path) -> None:
    """Before: ~285 KiB per idle TLS connection (asyncio's 256 KiB read buffer each)."""
    cert, key = make_cert(tmp_path)
    cluster = static_cluster(tmp_path)
    with ServeProcess(cert, key, "--max-connections", "2000", "--cluster", cluster) as served:
        assert served.wait_until_answering("/livez")

        def rss_kib() -> int:
            with open(f"/proc/{served.process.pid}/status") as fh:
                return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))

        before = rss_kib()
        context = served.client.ssl_context()
        held = []
        for _ in range(300):
            raw = socket.create_connection(("127.0.0.1", served.port), timeout=10)
            held.append(context.wrap_socket(raw, server_hostname="localhost"))
        time.sleep(1.0)
        grown = rss_kib() - before
        for sock in held:
            sock.close()
        print(f"300 idle TLS connections: RSS +{grown} KiB ({grown / 300:.0f} KiB each)")
        assert grown < 300 * 100, grown   # before: ~300 x 285 KiB


# -- large reviews off the loop; deadlines; shedding -------------------------------------------

def _post_in_thread(hook: ServedWebhook, endpoint: str, review: Any, out: list[Any]) -> threading.Thread:
    def run() -> None:
        client = WebhookClient("127.0.0.1", hook.port, hook.cert)   # a connection of its own
        out.append(post_review(client, endpoint, review))
        client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_large_review_does_not_hold_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: reviews were evaluated on the event loop (a 3 MB one held it for 2.2 s): nothing
    else was answered meanwhile."""
    slow_admit(monkeypatch, 1.5, only_big=True)
    webhook = Webhook(topology=StaticTopology(None), deadline={"mutate": 10.0, "validate": 10.0})
    with ServedWebhook(webhook=webhook) as hook:
        out: list[Any] = []
        thread = _post_in_thread(hook, "validate", big_review("big"), out)
        assert wait_for(lambda: sample(hook, "gpugate_reviews_offloaded_total") == 1)
        # the loop answers others while the large review is being judged
        assert hook.request("GET", "/livez")[0] == 200
        status, answer = post_review(hook, "validate", review_for(pod(), uid="small"))
        assert status == 200 and answer["response"]["uid"] == "small"
        assert hook.webhook.in_flight == 1 and not out     # the large one is still in flight
        thread.join(20)
        status, answer = out[0]
        assert status == 200 and answer["response"]["uid"] == "big" and answer["response"]["allowed"]
        assert OVERLOAD_WARNING not in (answer["response"].get("warnings") or [])


def _job_of_tasks(tasks: int, name: str = "tasks") -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"tasks": [{"name": f"t{i}", "replicas": 1, "template": template} for i in range(tasks)]}}


def test_reviews_are_offloaded_by_pod_templates_as_well_as_bytes() -> None:
    """A review's work grows with its pod templates: more than OFFLOAD_POD_TEMPLATES go off the
    loop however small the body; a 78 KB JobSet of 64 one-pod jobs stays on it (before, every
    body over 64 KiB went to a forked child, one at a time: about 30 such reviews/s)."""
    from webhook.app import OFFLOAD_BYTES, OFFLOAD_POD_TEMPLATES

    many = review_for(_job_of_tasks(OFFLOAD_POD_TEMPLATES + 1), uid="many")
    assert len(json.dumps(many)) < OFFLOAD_BYTES // 4
    pod_template = {"spec": {"containers": [{"name": "c", "image": "busybox", "env": [
        {"name": f"E{i}", "value": "v" * 20} for i in range(30)]}]}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "slices", "namespace": "default"},
              "spec": {"replicatedJobs": [{"name": f"s{i}", "template": {"spec": {"template": pod_template}}}
                                          for i in range(OFFLOAD_POD_TEMPLATES)]}}
    wide = review_for(jobset, uid="wide")
    assert 64 * 1024 < len(json.dumps(wide)) < OFFLOAD_BYTES
    with ServedWebhook(webhook=Webhook(topology=StaticTopology(None))) as hook:
        status, answer = post_review(hook, "validate", wide)
        assert status == 200 and answer["response"]["uid"] == "wide"
        assert sample(hook, "gpugate_reviews_offloaded_total") == 0
        status, answer = post_review(hook, "validate", many)
        assert status == 200 and answer["response"]["uid"] == "many" and answer["response"]["allowed"]
        assert sample(hook, "gpugate_reviews_offloaded_total") == 1


@pytest.mark.parametrize("overload_answer", ["allow", "deny"])
def test_a_review_past_its_deadline_is_shed_to_the_documented_answer(monkeypatch: pytest.MonkeyPatch,
                                                                     overload_answer: str) -> None:
    """Before: no deadline of its own; the API server timed out and applied its failure policy."""
    slow_admit(monkeypatch, 5.0, only_big=True)
    webhook = Webhook(topology=StaticTopology(None), deadline={"mutate": 0.3, "validate": 0.3},
                      overload_answer=overload_answer)
    with ServedWebhook(webhook=webhook) as hook:
        for endpoint in ("mutate", "validate"):
            status, answer = post_review(hook, endpoint, big_review(f"late-{endpoint}"))
            assert status == 200, answer
            response = answer["response"]
            assert response["uid"] == f"late-{endpoint}"
            if endpoint == "validate" and overload_answer == "deny":
                assert response["allowed"] is False and response["status"]["code"] == 429
                assert OVERLOAD_WARNING in response["status"]["message"]
            else:
                assert response["allowed"] is True and response["warnings"] == [OVERLOAD_WARNING]
                assert "patch" not in response
            assert sample(hook, "gpugate_reviews_shed_total", endpoint=endpoint, reason="deadline") == 1
        # the server goes on: the next review is judged as usual
        status, answer = post_review(hook, "validate", review_for(pod(), uid="after"))
        assert status == 200 and answer["response"]["allowed"] and "warnings" not in answer["response"]


def test_reviews_that_waited_too_long_behind_others_are_shed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: no shedding: a burst queued behind slow reviews until the API server gave up."""
    slow_admit(monkeypatch, 0.4)   # each judged review holds the loop 0.4 s
    webhook = Webhook(topology=StaticTopology(None), shed_after={"mutate": 0.2, "validate": 0.2})
    with ServedWebhook(webhook=webhook) as hook:
        socks = [tls_socket(hook) for _ in range(4)]
        bodies = [json.dumps(review_for(pod(), uid=f"u{i}")).encode() for i in range(4)]
        for sock, body in zip(socks, bodies, strict=True):   # all four arrive at once
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
        answers = []
        for sock in socks:
            response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
            response.begin()
            answers.append(json.loads(response.read())["response"])
            sock.close()
        shed = [a for a in answers if a.get("warnings") == [OVERLOAD_WARNING]]
        assert [a["uid"] for a in answers] == [f"u{i}" for i in range(4)]
        assert 1 <= len(shed) <= 3 and all(a["allowed"] for a in answers)
        assert sample(hook, "gpugate_reviews_shed_total", reason="waited") == len(shed)


def test_beyond_the_in_flight_bound_reviews_get_429_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    slow_admit(monkeypatch, 2.0, only_big=True)
    webhook = Webhook(topology=StaticTopology(None), max_in_flight=1)
    with ServedWebhook(webhook=webhook) as hook:
        out: list[Any] = []
        thread = _post_in_thread(hook, "validate", big_review("big"), out)
        assert wait_for(lambda: hook.webhook.in_flight == 1)
        status, answer = post_review(hook, "validate", review_for(pod()))
        assert status == 429 and "in flight" in answer["error"]
        thread.join(20)
        assert out[0][0] == 200


# -- request bytes never logged -------------------------------------------------------------------

SECRET = "password=hunter2-do-not-log"


@pytest.mark.parametrize("raw", [
    # a valid request, then bytes that are no request (the body of a broken client's next one)
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    + (SECRET.encode() + b" ") * 30 + b"\r\n\r\n",
    # a header line that is not one
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n" + SECRET.encode() + b"\r\n\r\n",
    # a method that is not one
    SECRET.encode() + b" /validate HTTP/1.1\r\nHost: x\r\n\r\n",
    # a chunked body with a broken chunk
    b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + SECRET.encode()
    + b"\r\nzz\r\n\r\n",
], ids=["after-a-request", "bad-header", "bad-method", "bad-chunk"])
def test_no_request_bytes_in_any_log_record(raw: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """Before: aiohttp's error log for broken framing quoted up to ~740 bytes of the request."""
    caplog.set_level(logging.DEBUG)
    with ServedWebhook() as hook:
        sock = tls_socket(hook)
        sock.sendall(raw)
        sock.settimeout(5)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, OSError):
            pass
        sock.close()
        assert b" 400 " in received or received.startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: any("bad request" in r.getMessage() or "Error handling" in r.getMessage()
                                    for r in caplog.records), timeout=5)
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "")
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        assert "hunter2" not in text, (record.name, record.levelname, text[:300])


# -- ports and probes --------------------------------------------------------------------------------

def test_metrics_only_on_their_own_port_and_livez_on_https() -> None:
    """Before: /metrics was served on the webhook's HTTPS port to anyone who reached it."""
    with ServedWebhook() as hook:
        assert hook.request("GET", "/livez")[0] == 200
        assert hook.request("GET", "/healthz")[0] == 200
        conn = hook.connect()
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 404      # not on the HTTPS port
        conn.close()
        status, body, headers = hook.plain_request("GET", "/metrics")
        assert status == 200 and b"gpugate_reviews_shed_total" in body
        assert hook.plain_request("POST", "/metrics", b"x")[0] == 405
        assert hook.plain_request("GET", "/validate")[0] == 404
        assert hook.plain_request("GET", "/readyz")[0] == 404


def test_serve_flags_put_metrics_on_their_own_port(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    with ServeProcess(cert, key, "--cluster", static_cluster(tmp_path)) as served:
        assert served.wait_until_answering("/livez")
        assert "gpugate_connections " in served.client.metrics()
        assert served.client.request("GET", "/metrics", keep_alive=False)[0] == 200   # routed by the helper
        conn = served.client.connect()
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 404
        conn.close()


def test_uid_of_every_shed_answer_is_echoed() -> None:
    """The shed answer is a complete AdmissionReview: uid echoed, allowed, the warning."""
    answer = json.loads(Webhook(topology=StaticTopology(None))._shed("validate", "u-1", "waited", 2.0).body)
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "u-1", "allowed": True, "warnings": [OVERLOAD_WARNING]}}


# -- graceful stop ---------------------------------------------------------------------------------

def test_sigterm_turns_readiness_off_first_and_serves_through_the_drain(tmp_path: Path) -> None:
    """Before: on SIGTERM the listener closed at once, while the Service still routed reviews
    to the pod until its endpoint was removed."""
    import signal

    cert, key = make_cert(tmp_path)
    cluster = static_cluster(tmp_path)
    with ServeProcess(cert, key, "--cluster", cluster, "--drain-seconds", "3") as served:
        assert served.wait_until_answering("/readyz")
        client = served.client
        assert post_review(client, "validate", review_for(pod(), uid="before"))[0] == 200
        served.process.send_signal(signal.SIGTERM)
        assert wait_for(lambda: client.request("GET", "/readyz", keep_alive=False)[0] == 503, timeout=5)
        # not ready, but still serving reviews, each answer closing its connection
        body = json.dumps(review_for(pod(), uid="d")).encode()
        status, body, headers = client.request("POST", "/validate", body,
                                               {"Content-Type": "application/json"})
        assert status == 200 and json.loads(body)["response"]["uid"] == "d"
        assert headers.get("Connection", "").lower() == "close"
        assert client.request("GET", "/livez", keep_alive=False)[0] == 200
        assert served.process.wait(20) == 0            # then it stops by itself
    log = served.stderr
    assert "/readyz answers 503" in log and "closing the listener" in log
    assert "answered 2 review(s) (validate 2)" in log
