"""Hostile input to the real webhook: the aiohttp server with TLS on loopback receives
random and mutated AdmissionReviews, handcrafted malformed ones, oversized and trickled
bodies, wrong content types, odd HTTP, and many connections at once.

Every answer must be either a correct AdmissionReview that echoes the uid, or a 4xx
(400 malformed, 408 body too slow, 413 too large, 429 too many large bodies at once,
404/405 wrong path or method) with a reason; never a 5xx, never an internal error, and the
server keeps serving with bounded memory.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import gc
import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_helpers import ServedWebhook, post_review, review_for

from policies.config import Policy
from policies.kinds import KINDS
from policies.topology import ClusterSnapshot, Topology
from webhook import admission
from webhook.admission import MAX_BODY_BYTES, MAX_JSON_DEPTH, MAX_UID_CHARS
from webhook.app import PolicySource, StaticTopology, Webhook

GPU = "nvidia.com/gpu"
BODY_TIMEOUT = 1.0
HOSTILE = settings(max_examples=int(os.environ.get("GPUGATE_FUZZ_EXAMPLES", "120")), deadline=None,
                   derandomize="GPUGATE_FUZZ_EXAMPLES" not in os.environ,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def gpu_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"maip.mxsf.io/node.usage": "training",
                                                  "nvidia.com/gpu.product": "H100",
                                                  "nvidia.com/gpu.clique": "c1"}},
            "spec": {"taints": [{"key": "maip.mxsf.io/node.usage", "value": "training",
                                 "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}}}


def volcano_job() -> dict[str, Any]:
    """A GPU Volcano Job touching most of what the rules read (and mutate)."""
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml",
                         "labels": {"maip.mxsf.io/usage": "training", "nvidia.com/gpu.product": "H100"},
                         "annotations": {"gpugate.io/ignore": "GG305"}},
            "spec": {"schedulerName": "volcano", "minAvailable": 2, "queue": "default",
                     "plugins": {"pytorch": ["--port=23456"]},
                     "tasks": [{"name": "worker", "replicas": 2, "minAvailable": 2, "template": {
                         "metadata": {"annotations": {"metax-tech.com/gpu-group-size": "16"}},
                         "spec": {"nodeSelector": {"nvidia.com/gpu.product": "H100"},
                                  "tolerations": [{"key": "a", "operator": "Exists"}],
                                  "affinity": {"nodeAffinity": {
                                      "requiredDuringSchedulingIgnoredDuringExecution": {
                                          "nodeSelectorTerms": [term]},
                                      "preferredDuringSchedulingIgnoredDuringExecution": [
                                          {"weight": 1, "preference": term}]}},
                                  "overhead": {"cpu": "100m"},
                                  "initContainers": [{"name": "init", "image": "x", "restartPolicy": "Always",
                                                      "resources": {"requests": {"cpu": "1"}}}],
                                  "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                      "limits": {GPU: "8", "cpu": "4"}, "requests": {"memory": "1Gi"}}}]}}}]}}


def ray_job() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "ray", "namespace": "ml",
                         "labels": {"ray.io/scheduler-name": "volcano", "volcano.sh/queue-name": "q"}},
            "spec": {"submitterPodTemplate": {"spec": {"containers": [{"name": "s", "image": "x"}]}},
                     "rayClusterSpec": {
                         "enableInTreeAutoscaling": True,
                         "headGroupSpec": {"template": {"spec": {"containers": [
                             {"name": "h", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}}},
                         "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 1,
                                               "maxReplicas": 4, "numOfHosts": 2,
                                               "template": {"spec": {"containers": [
                                                   {"name": "w", "image": "x",
                                                    "resources": {"limits": {GPU: "8"}}}]}}}]}}}


def pytorch_job() -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ml"},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2, "queue": "q"}},
                     "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}}}


def gpu_pod(name: str = "pod") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}}


# -- the server ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hook() -> Iterator[ServedWebhook]:
    clusters = [ClusterSnapshot("test", Topology.from_objects([gpu_node(f"gpu-{i}") for i in range(4)],
                                                               Policy()))]
    webhook = Webhook(policy=PolicySource(policy=Policy()), topology=StaticTopology(clusters),
                      body_timeout=BODY_TIMEOUT)
    with ServedWebhook(webhook=webhook) as served:
        yield served
        # The whole module must not have hit one internal error (a fail-open with a warning).
        assert internal_errors(served) == 0


def internal_errors(hook: ServedWebhook) -> float:
    registry = hook.webhook.metrics.registry
    return sum(registry.get_sample_value("gpugate_internal_errors_total", {"endpoint": e}) or 0.0
               for e in ("mutate", "validate"))


def check_answer(status: int, answer: Any, uid: Any = None) -> None:
    """A correct AdmissionReview for ``uid``, or a 4xx with a reason; nothing else."""
    assert status < 500, (status, answer)
    if status != 200:
        assert status in (400, 408, 413, 429), (status, answer)
        assert isinstance(answer, dict) and answer.get("code") == status, answer
        assert isinstance(answer.get("error"), str) and answer["error"], answer
        return
    assert isinstance(answer, dict), answer
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    if uid is not None:
        assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] == 403 and isinstance(response["status"]["message"], str)
        assert len(response["status"]["message"]) <= admission.MAX_DENY_MESSAGE_CHARS
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= admission.MAX_WARNING_CHARS
    assert "internal error" not in json.dumps(answer), answer


def post(hook: ServedWebhook, endpoint: str, body: Any, content_type: str = "application/json") -> Any:
    status, answer = post_review(hook, endpoint, body, content_type=content_type)
    return status, answer


# -- wrong types at every level -------------------------------------------------------------------

WRONG = [None, -1, 1.5, 10**30, "x", "", "1e400", [], [None], {}, {"a": None}, True, "x" * 3000]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("make", [volcano_job, ray_job, pytorch_job], ids=lambda f: f.__name__)
def test_wrong_types_at_every_level(hook: ServedWebhook, make: Any) -> None:
    base = review_for(make(), uid="fixed-uid")
    answered = {200: 0, 400: 0}
    for n, path in enumerate(_paths(base)):
        for m, value in enumerate(WRONG):
            review = _replaced(base, path, value)
            endpoint = ("mutate", "validate")[(n + m) % 2]
            status, answer = post(hook, endpoint, review)
            uid = review["request"]["uid"] if status == 200 else None
            check_answer(status, answer, uid)
            answered[status] = answered.get(status, 0) + 1
    # both kinds of answer happened: the envelope was refused, the object was judged
    assert answered[200] > 100 and answered[400] > 20, answered


# -- handcrafted malformed reviews ------------------------------------------------------------------

def _review(**request_changes: Any) -> dict[str, Any]:
    review = review_for(volcano_job(), uid="u-1")
    for key, value in request_changes.items():
        if value is _DELETE:
            del review["request"][key]
        else:
            review["request"][key] = value
    return review


_DELETE = object()


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


def _with_label(value: Any) -> dict[str, Any]:
    review = _review()
    review["request"]["object"]["metadata"]["labels"]["extra"] = value
    return review


def _bytes(review: Any) -> bytes:
    return json.dumps(review).encode()


MALFORMED: dict[str, tuple[bytes, int, str]] = {
    # name: (body, expected status, text the reason or answer must contain)
    "empty body": (b"", 400, "not valid JSON"),
    "whitespace": (b"  \n ", 400, "not valid JSON"),
    "empty object": (b"{}", 400, "apiVersion"),
    "truncated": (_bytes(_review())[:-7], 400, "not valid JSON"),
    "trailing garbage": (_bytes(_review()) + b"}", 400, "not valid JSON"),
    "invalid utf-8": (b'{"apiVersion": "\xff"}', 400, "not valid JSON"),
    "NUL bytes": (b"\x00" * 100, 400, "not valid JSON"),
    "top-level number": (b"42", 400, "JSON object"),
    "review is a list": (_bytes([_review()]), 400, "JSON object"),
    "apiVersion a number": (_bytes({**_review(), "apiVersion": 1}), 400, "apiVersion"),
    "huge apiVersion": (_bytes({**_review(), "apiVersion": "v" * 1_000_000}), 400, "chars"),
    "request null": (_bytes({**_review(), "request": None}), 400, "no request"),
    "request a list": (_bytes({**_review(), "request": [1]}), 400, "no request"),
    "request a string": (_bytes({**_review(), "request": "r"}), 400, "no request"),
    "uid missing": (_bytes(_review(uid=_DELETE)), 400, "uid"),
    "uid a number": (_bytes(_review(uid=7)), 400, "uid"),
    "uid empty": (_bytes(_review(uid="")), 400, "uid"),
    "uid a list": (_bytes(_review(uid=["u"])), 400, "uid"),
    "uid huge": (_bytes(_review(uid="u" * 1_000_000)), 400, str(MAX_UID_CHARS)),
    "operation missing": (_bytes(_review(operation=_DELETE)), 400, "operation"),
    "operation a number": (_bytes(_review(operation=1)), 400, "operation"),
    "object a list": (_bytes(_review(object=[volcano_job()])), 400, "request.object"),
    "object a string": (_bytes(_review(object="{}")), 400, "request.object"),
    "object null on UPDATE": (_bytes(_review(operation="UPDATE", object=None)), 400, "request.object"),
    "deep JSON, parser limit": (b"[" * 200_000 + b"]" * 200_000, 400, "nested"),
    "deep JSON in the object": (_bytes(_with_label(_deep(MAX_JSON_DEPTH + 10))), 400, str(MAX_JSON_DEPTH)),
    "integer of 10,000 digits": (_bytes(_review()).replace(b'"replicas": 2', b'"replicas": ' + b"9" * 10_000),
                                 400, "not valid JSON"),
    # what a well-formed envelope carries is judged: an AdmissionReview comes back
    "object null on DELETE": (_bytes(_review(operation="DELETE", object=None)), 200, '"allowed": true'),
    "unknown operation": (_bytes(_review(operation="EXPLODE")), 200, '"allowed": true'),
    "deep JSON under the limit": (_bytes(_with_label(_deep(MAX_JSON_DEPTH - 20))), 200, "u-1"),
    "3 MiB label value": (_bytes(_with_label("v" * (3 * 2**20))), 200, "u-1"),
    "100,000 labels": (_bytes(_review(object={**volcano_job(), "metadata": {
        "name": "many", "namespace": "ml", "labels": {f"l{i}": "v" for i in range(100_000)}}})), 200, "u-1"),
    "NaN and Infinity": (_bytes(_review()).replace(b'"replicas": 2', b'"replicas": NaN')
                         .replace(b'"minAvailable": 2', b'"minAvailable": Infinity'), 200, "u-1"),
    "duplicate keys": (_bytes(_review())[:-1] + b', "request": ' + _bytes(_review()["request"]) + b"}",
                       200, "u-1"),
    "lone surrogate in names": (_bytes(_review(object={**volcano_job(), "metadata": {
        "name": "\ud800x", "namespace": "ml\udfff"}})), 200, "u-1"),
    "utf-8 BOM": (b"\xef\xbb\xbf" + _bytes(_review()), 200, "u-1"),  # json.loads(bytes) skips a BOM
    "unicode uid": (_bytes(_review(uid="ü\u2028\u0000uid")), 200, "allowed"),
    "kind and object disagree": (_bytes(_review(kind={"group": "", "version": "v1", "kind": "Pod"})),
                                 200, "u-1"),
    "subresource status": (_bytes(_review(subResource="status", operation="UPDATE")), 200, '"allowed": true'),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_handcrafted_malformed_reviews(hook: ServedWebhook, name: str) -> None:
    body, expected, text = MALFORMED[name]
    for endpoint in ("mutate", "validate"):
        status, answer = post(hook, endpoint, body)
        assert status == expected, (name, endpoint, str(answer)[:300])
        check_answer(status, answer)
        shown = json.dumps(answer, ensure_ascii=False)
        assert text in shown or text in str(answer), (name, shown[:300])
    if expected == 200:
        request = json.loads(body)["request"]
        assert answer["response"]["uid"] == request["uid"]


def test_reasons_quote_attacker_values_briefly(hook: ServedWebhook) -> None:
    status, answer = post(hook, "validate", MALFORMED["huge apiVersion"][0])
    assert status == 400 and len(answer["error"]) < 300
    status, answer = post(hook, "validate", b'{"x":1}', content_type="text/" + "p" * 5000)
    assert status == 400 and len(answer["error"]) < 300


# -- random and mutated reviews (hypothesis) --------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=20)
    | st.sampled_from(["CREATE", "UPDATE", "DELETE", "v1", "Pod", "8", "500m", "volcano", "ml"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["apiVersion", "kind", "request", "uid", "operation", "object", "metadata", "spec",
                         "name", "namespace", "labels", "containers", "resources", "limits", "tasks"])
        | st.text(max_size=6), children, max_size=5),
    max_leaves=25,
)
ENVELOPE = st.fixed_dictionaries(
    {"apiVersion": st.just("admission.k8s.io/v1") | JSON_VALUES,
     "kind": st.just("AdmissionReview") | JSON_VALUES,
     "request": st.fixed_dictionaries(
         {"uid": st.text(min_size=1, max_size=40) | JSON_VALUES,
          "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]) | JSON_VALUES,
          "object": JSON_VALUES,
          "namespace": st.text(max_size=10) | JSON_VALUES},
         optional={"kind": JSON_VALUES, "subResource": JSON_VALUES, "oldObject": JSON_VALUES,
                   "dryRun": JSON_VALUES}) | JSON_VALUES})


@HOSTILE
@given(review=ENVELOPE, validate=st.booleans())
def test_random_reviews(hook: ServedWebhook, review: Any, validate: bool) -> None:
    status, answer = post(hook, "validate" if validate else "mutate", review)
    request = review.get("request") if isinstance(review, dict) else None
    check_answer(status, answer, request.get("uid") if status == 200 and isinstance(request, dict) else None)


BASES = [volcano_job(), ray_job(), pytorch_job(), gpu_pod()]


@HOSTILE
@given(data=st.data(), base=st.sampled_from(range(len(BASES))), validate=st.booleans())
def test_mutated_reviews(hook: ServedWebhook, data: st.DataObject, base: int, validate: bool) -> None:
    """A valid review of a real workload, with random sub-trees replaced by random JSON."""
    review = review_for(BASES[base], uid=str(uuid.uuid4()))
    paths = list(_paths(review["request"]["object"]))
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(paths))
        try:
            review["request"]["object"] = _replaced(review["request"]["object"], path, data.draw(JSON_VALUES))
        except (KeyError, IndexError, TypeError):  # an earlier replacement removed the path
            continue
    status, answer = post(hook, "validate" if validate else "mutate", review)
    check_answer(status, answer, review["request"]["uid"] if status == 200 else None)
    if isinstance(review["request"]["object"], dict):
        assert status == 200


@HOSTILE
@given(data=st.data(), validate=st.booleans())
def test_byte_level_mutations(hook: ServedWebhook, data: st.DataObject, validate: bool) -> None:
    """Flipped, cut and inserted bytes in a valid body: 400 or a judged review, nothing else."""
    body = bytearray(_bytes(review_for(volcano_job(), uid="b-1")))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            body[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del body[at: at + data.draw(st.integers(1, 50))]
        else:
            body[at:at] = data.draw(st.sampled_from([b"{", b"[", b"]", b"}", b'"', b"\\", b",", b"\x00",
                                                     b"\xff", b"1e999", b"null"]))
        if not body:
            body = bytearray(b"{")
    status, answer = post(hook, "validate" if validate else "mutate", bytes(body))
    check_answer(status, answer)


# -- sizes ----------------------------------------------------------------------------------------

def test_oversized_body_is_413_and_the_server_goes_on(hook: ServedWebhook) -> None:
    big = _bytes(_with_label("x" * (MAX_BODY_BYTES + 1)))
    for endpoint in ("mutate", "validate"):
        status, answer = post(hook, endpoint, big)
        assert status == 413, answer
        assert str(MAX_BODY_BYTES) in answer["error"]
    # chunked, with no Content-Length to refuse up front: the limit holds while reading
    connection = hook.connect()
    try:
        chunks = (b"x" * 65536 for _ in range(MAX_BODY_BYTES // 65536 + 2))
        connection.request("POST", "/validate", body=chunks,
                           headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                           encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 413
    except (ConnectionResetError, BrokenPipeError):  # the server may cut the upload short
        pass
    finally:
        connection.close()
    status, answer = post(hook, "validate", review_for(volcano_job(), uid="after"))
    check_answer(status, answer, "after")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_bounded_under_large_bodies(hook: ServedWebhook) -> None:
    """Near-limit bodies, one after another: the first round may grow the heap, the
    second must not grow it further (nothing is kept per request)."""
    many_objects = _bytes(_with_label([{"k": i, "v": [i, str(i)]} for i in range(60_000)]))
    assert len(many_objects) < MAX_BODY_BYTES
    too_big = _bytes(_with_label("x" * MAX_BODY_BYTES))
    labels = _bytes(_review(object={**volcano_job(), "metadata": {
        "name": "many", "namespace": "ml", "labels": {f"l{i}": "v" * 20 for i in range(80_000)}}}))

    def round_trip() -> None:
        for body in (many_objects, too_big, labels) * 3:
            status, answer = post(hook, "validate", body)
            check_answer(status, answer)
        gc.collect()

    round_trip()
    after_first = _rss_bytes()
    round_trip()
    round_trip()
    grown = (_rss_bytes() - after_first) / 2**20
    assert grown < 64, f"RSS grew by {grown:.0f} MiB over two more rounds of large bodies"


def test_too_many_pod_sets_are_refused_before_any_rule_runs(hook: ServedWebhook) -> None:
    """27,000 one-line tasks fit in 4 MiB and would hold the event loop for seconds."""
    from policies.workload import MAX_POD_SETS

    job = volcano_job()
    task = job["spec"]["tasks"][0]
    job["spec"]["tasks"] = [{**task, "name": f"t{i}"} for i in range(MAX_POD_SETS + 1)]
    status, answer = post(hook, "validate", review_for(job, uid="many"))
    check_answer(status, answer, "many")
    message = answer["response"]["status"]["message"]
    assert "GG002" in message and f"at most {MAX_POD_SETS} pod sets" in message
    job["spec"]["tasks"] = job["spec"]["tasks"][:MAX_POD_SETS]  # at the bound: judged as usual
    job["spec"]["minAvailable"] = MAX_POD_SETS * 2
    status, answer = post(hook, "validate", review_for(job, uid="bound"))
    check_answer(status, answer, "bound")
    assert "GG002" not in json.dumps(answer)


def test_metric_labels_stay_bounded(hook: ServedWebhook) -> None:
    """A client that reaches the port directly must not mint one time series per kind it invents."""
    for i in range(50):
        obj = {**gpu_pod(), "kind": f"Invented{i}"}
        review = review_for(obj)
        review["request"]["kind"]["kind"] = f"Invented{i}"
        check_answer(*post(hook, "validate", review))
    text = hook.request("GET", "/metrics")[1].decode()
    kinds = {line.split('kind="', 1)[1].split('"', 1)[0] for line in text.splitlines()
             if line.startswith("gpugate_reviews_total{")}
    assert "Invented0" not in kinds and "other" in kinds
    assert kinds <= {k.kind for k in KINDS} | {"other", ""}


# -- slow clients ------------------------------------------------------------------------------------

def _tls_socket(hook: ServedWebhook, timeout: float = 10.0) -> ssl.SSLSocket:
    raw = socket.create_connection((hook.host, hook.port), timeout=timeout)
    return hook.ssl_context().wrap_socket(raw, server_hostname="localhost")


def _read_response(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
    response.begin()
    return response.status, response.read()


def test_slow_body_times_out_without_holding_up_others(hook: ServedWebhook) -> None:
    slow = _tls_socket(hook)
    try:
        body = _bytes(review_for(volcano_job()))
        slow.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
        started = time.monotonic()
        # trickle a byte now and then while others are served at full speed
        for i in range(3):
            slow.sendall(body[10 + i: 11 + i])
            status, answer = post(hook, "validate", review_for(volcano_job(), uid=f"fast-{i}"))
            check_answer(status, answer, f"fast-{i}")
            assert time.monotonic() - started < BODY_TIMEOUT
            time.sleep(BODY_TIMEOUT / 5)
        status, data = _read_response(slow)
        waited = time.monotonic() - started
    finally:
        slow.close()
    assert status == 408, data
    assert b"not received within" in data
    assert waited < 10 * BODY_TIMEOUT  # a generous bound: catches a hang, not a slow machine


def test_slow_headers_and_idle_connections_do_not_block_reviews(hook: ServedWebhook) -> None:
    idle = [socket.create_connection((hook.host, hook.port), timeout=10) for _ in range(30)]  # no TLS hello
    partial: list[socket.socket] = []
    try:
        for _ in range(30):
            tls = _tls_socket(hook)
            tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
            partial.append(tls)
        for i in range(10):
            status, answer = post(hook, "mutate", review_for(volcano_job(), uid=f"during-{i}"))
            check_answer(status, answer, f"during-{i}")
    finally:
        for sock in [*idle, *partial]:
            sock.close()


# -- HTTP oddities ----------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [None, "text/plain", "application/yaml", "application/jsonx",
                                          "application/json-patch+json", "multipart/form-data; boundary=x",
                                          "application/x-www-form-urlencoded", ";", "application/json/x"])
def test_wrong_content_types_are_400(hook: ServedWebhook, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    status, data, _ = hook.request("POST", "/validate", _bytes(review_for(volcano_job())), headers)
    assert status == 400, data
    assert b"content type" in data


@pytest.mark.parametrize("content_type", ["APPLICATION/JSON", "application/json; charset=utf-8",
                                          " application/json ; q=1"])
def test_json_content_type_variants_are_accepted(hook: ServedWebhook, content_type: str) -> None:
    status, answer = post(hook, "validate", review_for(volcano_job(), uid="ct"), content_type=content_type)
    assert status == 200
    check_answer(status, answer, "ct")


@pytest.mark.parametrize("method,path", [("GET", "/validate"), ("PUT", "/mutate"), ("DELETE", "/validate"),
                                         ("PATCH", "/mutate"), ("POST", "/nope"), ("POST", "/healthz"),
                                         ("GET", "/../../etc/passwd"), ("OPTIONS", "/validate")])
def test_wrong_methods_and_paths_are_4xx(hook: ServedWebhook, method: str, path: str) -> None:
    status, _, _ = hook.request(method, path, b"{}", {"Content-Type": "application/json"})
    assert 400 <= status < 500


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"POST /validate HTTP/9.9\r\nHost: x\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"POST /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n",
    b"POST /validate HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(1000)) + b"\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
])
def test_malformed_http_is_4xx(hook: ServedWebhook, raw: bytes) -> None:
    sock = _tls_socket(hook)
    try:
        sock.sendall(raw)
        status, _ = _read_response(sock)
    except (http.client.HTTPException, OSError):
        status = 400  # the server closed the connection: refused without an answer
    finally:
        sock.close()
    assert 400 <= status < 500
    status, answer = post(hook, "validate", review_for(volcano_job(), uid="still"))
    check_answer(status, answer, "still")


def test_http_1_0_is_answered_and_closed(hook: ServedWebhook) -> None:
    body = _bytes(review_for(volcano_job(), uid="old-http"))
    sock = _tls_socket(hook)
    try:
        sock.sendall(b"POST /validate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        status, data = _read_response(sock)
        assert sock.recv(1) == b""  # HTTP/1.0 without keep-alive: the server closes
    finally:
        sock.close()
    assert status == 200
    check_answer(status, json.loads(data), "old-http")


# -- many connections at once -------------------------------------------------------------------------

def test_many_concurrent_connections(hook: ServedWebhook) -> None:
    import aiohttp

    makers = (volcano_job, ray_job, pytorch_job, gpu_pod)
    bodies = {f"c-{i}": _bytes(review_for(makers[i % 4](), uid=f"c-{i}")) for i in range(300)}

    async def run() -> list[tuple[str, int, Any]]:
        connector = aiohttp.TCPConnector(limit=0, ssl=hook.ssl_context(), force_close=True)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=60)) as session:
            async def one(uid: str, body: bytes) -> tuple[str, int, Any]:
                endpoint = "validate" if int(uid[2:]) % 2 else "mutate"
                async with session.post(f"{hook.url}/{endpoint}", data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    return uid, response.status, await response.json(content_type=None)
            return await asyncio.gather(*(one(u, b) for u, b in bodies.items()))

    results = asyncio.run(run())
    assert len(results) == len(bodies)
    for uid, status, answer in results:
        assert status == 200
        check_answer(status, answer, uid)


# -- what gets logged -----------------------------------------------------------------------------------

def test_object_contents_are_not_logged_and_lines_cannot_be_forged(hook: ServedWebhook,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    job = volcano_job()
    job["metadata"]["name"] = "evil\nINFO gpugate.webhook: forged line"
    job["metadata"]["annotations"]["secret-token"] = "s3cr3t-value"
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [{"name": "PASSWORD",
                                                                          "value": "hunter2-pw"}]
    job["spec"]["tasks"][0]["template"]["metadata"]["annotations"]["metax-tech.com/gpu-group-size"] = "12"
    with caplog.at_level(logging.INFO):
        status, answer = post(hook, "validate", review_for(job, uid="log-1"))
        time.sleep(0.05)
    assert status == 200 and answer["response"]["allowed"] is False  # GG202: 12 is not a multiple of 8
    records = [r for r in caplog.records if r.name.startswith("gpugate")]
    assert any("log-1" in r.getMessage() for r in records)
    for record in records:
        text = record.getMessage()
        assert "hunter2" not in text and "s3cr3t" not in text, text
        assert "\n" not in text, text


# -- the threads the helper started are still fine ----------------------------------------------------

def test_server_thread_alive(hook: ServedWebhook) -> None:
    assert any(t.name == "webhook-test-server" and t.is_alive() for t in threading.enumerate())
    assert hook.request("GET", "/healthz")[0] == 200


# -- TLS ------------------------------------------------------------------------------------------------

def _handshake(hook: ServedWebhook, version: ssl.TLSVersion, ciphers: str | None = None) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    try:
        with socket.create_connection((hook.host, hook.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="localhost"):
                return True
    except (ssl.SSLError, OSError):
        return False


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_floor_and_suites(hook: ServedWebhook) -> None:
    assert _handshake(hook, ssl.TLSVersion.TLSv1_3)
    assert _handshake(hook, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert not _handshake(hook, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-SHA256")  # CBC: refused
    assert not _handshake(hook, ssl.TLSVersion.TLSv1_1, "DEFAULT:@SECLEVEL=0")


# -- connections that never finish their headers -------------------------------------------------------

def test_unfinished_headers_are_closed_after_the_keepalive_timeout(tmp_path: Any) -> None:
    """aiohttp closes a connection whose request never completes once ``keepalive_timeout``
    passes; ``gpugate serve`` sets it (below), here it is shortened to see it happen."""
    from aiohttp import web
    from webhook_helpers import make_cert

    from webhook.tls import ReloadingContext

    cert, key = make_cert(tmp_path)

    async def run() -> tuple[float, bytes]:
        tls = ReloadingContext(str(cert), str(key))
        runner = web.AppRunner(Webhook().app(), access_log=None, keepalive_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        port = runner.addresses[0][1]
        try:
            client = ssl.create_default_context(cafile=str(cert))
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                           server_hostname="localhost")
            writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
            started = time.monotonic()
            try:
                data = await asyncio.wait_for(reader.read(), 10)  # b"" once the server closes
            except (ConnectionError, ssl.SSLError):
                data = b""
            elapsed = time.monotonic() - started
            writer.close()
            return elapsed, data
        finally:
            await runner.cleanup()

    elapsed, data = asyncio.run(run())
    assert data == b"" and elapsed < 5


def test_serve_sets_the_keepalive_timeout(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml
    from webhook_helpers import make_cert

    from webhook.app import BODY_TIMEOUT_SECONDS, KEEPALIVE_TIMEOUT_SECONDS
    from webhook.cli import serve_main
    from webhook.lifecycle import MAX_CONNECTIONS, Serving

    seen: dict[str, Any] = {}

    async def capture(self: Serving, drain_seconds: float = 0.0) -> None:
        seen.update(serving=self, drain=drain_seconds)

    monkeypatch.setattr(Serving, "run_until_signalled", capture)
    cert, key = make_cert(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [gpu_node("n0")]}))
    assert serve_main(["--tls-cert", str(cert), "--tls-key", str(key), "--cluster", str(cluster)]) == 0
    serving = seen["serving"]
    assert serving.keepalive_timeout == KEEPALIVE_TIMEOUT_SECONDS
    assert serving.gate.limit == MAX_CONNECTIONS and serving.metrics_port == 9090
    # longer than Go's 90 s IdleConnTimeout (the API server closes idle connections first),
    # shorter than the 120 s it was
    assert 90 < KEEPALIVE_TIMEOUT_SECONDS < 120 and BODY_TIMEOUT_SECONDS <= 10


# -- many large uploads at once ---------------------------------------------------------------------------

def _large_review(uid: str, size: int) -> bytes:
    body = _bytes(_with_label("v" * size))
    return body.replace(b'"u-1"', json.dumps(uid).encode(), 1)


def _start_upload(hook: ServedWebhook, body: bytes, complete: bool) -> ssl.SSLSocket:
    sock = _tls_socket(hook)
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + (body if complete else body[:-1]))
    return sock


def _answered(webhook: Webhook) -> float:
    return sum(sample.value for metric in webhook.metrics.registry.collect()
               if metric.name == "gpugate_reviews" for sample in metric.samples
               if sample.name == "gpugate_reviews_total")


def test_large_uploads_take_turns_and_small_reviews_never_wait() -> None:
    from webhook.app import SMALL_BODY_BYTES

    size = 2 * SMALL_BODY_BYTES
    webhook = Webhook(body_budget_bytes=3 * SMALL_BODY_BYTES, body_timeout=5.0)  # room for one upload
    with ServedWebhook(webhook=webhook) as served:
        first = _start_upload(served, _large_review("first", size), complete=False)
        time.sleep(0.2)
        second = _start_upload(served, _large_review("second", size), complete=True)
        try:
            time.sleep(0.3)
            assert _answered(webhook) == 0  # the complete second upload waits for the first's turn
            status, answer = post(served, "validate", review_for(volcano_job(), uid="small"))
            check_answer(status, answer, "small")  # a few kilobytes: never waits
            assert _answered(webhook) == 1
            first.sendall(b"}")                   # the first upload completes ...
            for sock, uid in ((first, "first"), (second, "second")):
                status, data = _read_response(sock)  # ... and both are answered
                check_answer(status, json.loads(data), uid)
        finally:
            first.close()
            second.close()
        assert webhook.bodies.used == 0


def test_a_held_budget_is_429_for_large_uploads_only() -> None:
    """While the budget is taken (here by the test itself, as by a stream of hostile uploads),
    a large upload is told to retry after the body timeout; ordinary reviews go through."""
    from webhook.app import SMALL_BODY_BYTES

    webhook = Webhook(body_budget_bytes=3 * SMALL_BODY_BYTES, body_timeout=BODY_TIMEOUT)
    with ServedWebhook(webhook=webhook) as served:
        assert served.loop is not None
        release = asyncio.Event()

        async def hold() -> None:
            async with webhook.bodies.reserve(webhook.bodies.limit):
                await release.wait()

        holder = asyncio.run_coroutine_threadsafe(hold(), served.loop)
        assert wait_until(lambda: webhook.bodies.used == webhook.bodies.limit)
        large = _start_upload(served, _large_review("large", 2 * SMALL_BODY_BYTES), complete=True)
        try:
            status, answer = post(served, "validate", review_for(volcano_job(), uid="small"))
            check_answer(status, answer, "small")
            status, data = _read_response(large)
            assert status == 429, data
            check_answer(status, json.loads(data))
            assert b"server busy" in data
        finally:
            large.close()
            served.loop.call_soon_threadsafe(release.set)
            holder.result(5)
        status, answer = post(served, "validate", _large_review("after", 2 * SMALL_BODY_BYTES))
        check_answer(status, answer, "after")


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


_JSON_VALUES = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4),
                                                                inner, max_size=3),
    max_leaves=30)


@settings(max_examples=500, deadline=None)
@given(_JSON_VALUES, st.integers(1, 12))
def test_the_fast_depth_check_never_calls_a_deep_body_shallow(value: Any, limit: int) -> None:
    """The byte-level check (strings dropped, innermost brackets peeled) says "shallow" only
    when the values really nest no deeper than the limit (brackets and quotes in strings,
    escaped ones included), and the level walk agrees with a plain recursive count."""
    from webhook.admission import _nested_deeper_than, _shallow

    def depth(v: Any) -> int:
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max((depth(c) for c in children), default=0)

    body = json.dumps(value).encode()
    assert _nested_deeper_than(value, limit) == (depth(value) > limit)
    if _shallow(body, limit):
        assert depth(value) <= limit
