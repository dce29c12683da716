"""The admission webhook end to end: the real aiohttp server, TLS on loopback, real
AdmissionReview JSON, compared with what the linter decides for the same documents."""

from __future__ import annotations

import copy
import json
import os
import ssl
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_helpers import (
    ServedWebhook,
    ServeProcess,
    decode_patch,
    make_cert,
    post_review,
    review_for,
    wait_for,
)

from lint.documents import iter_documents
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.findings import Finding, Severity
from policies.topology import ClusterSnapshot, Topology
from webhook import admission
from webhook.admission import (
    MAX_WARNING_CHARS,
    MAX_WARNINGS_TOTAL_CHARS,
    admit,
    deny_message,
    parse_review,
    warning_text,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CLUSTER = ROOT / "examples" / "cluster" / "cluster.yaml"

GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int = 8, usage: str = "training") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"maip.mxsf.io/node.usage": usage,
                                                  "nvidia.com/gpu.product": "H100"}},
            "spec": {"taints": [{"key": "maip.mxsf.io/node.usage", "value": usage, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus), "pods": "110"}}}


def small_cluster() -> list[ClusterSnapshot]:
    nodes = [gpu_node(f"gpu-{i}") for i in range(4)] + [gpu_node("inf-0", usage="inference")]
    return [ClusterSnapshot("test", Topology.from_objects(nodes, Policy()))]


def bad_job(namespace: str = "ml", group_size: str = "12") -> dict[str, Any]:
    """A Volcano Job the validating webhook denies (GG202: 12 is not a multiple of 8)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"schedulerName": "volcano", "minAvailable": 2, "tasks": [{
                "name": "worker", "replicas": 2,
                "template": {"metadata": {"annotations": {"metax-tech.com/gpu-group-size": group_size}},
                             "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                                      "resources": {"limits": {GPU: "8"}}}]}}}]}}


def corpus_objects(limit_per_kind: int = 40) -> list[dict[str, Any]]:
    """Kubernetes objects from examples/ and the corpus, a bounded number per kind."""
    from conftest import CORPUS

    files = sorted(p for base in (ROOT / "examples", CORPUS) if base.is_dir() for p in base.rglob("*")
                   if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    per_kind: Counter[str] = Counter()
    found: list[dict[str, Any]] = []
    for path in files:
        for doc in iter_documents(path.read_bytes()):
            data = getattr(doc, "data", None)
            if not (isinstance(data, dict) and isinstance(data.get("kind"), str)
                    and isinstance(data.get("apiVersion"), str)):
                continue
            if per_kind[data["kind"]] >= limit_per_kind:
                continue
            per_kind[data["kind"]] += 1
            found.append(data)
    return found


@pytest.fixture(scope="module")
def hook() -> Any:
    with ServedWebhook(Policy(), small_cluster()) as served:
        yield served


@pytest.fixture(scope="module")
def example_hook() -> Any:
    """The webhook with the bundled example cluster (queues, supernodes, running pods)."""
    from lint.cluster import load_clusters

    with ServedWebhook(Policy(), load_clusters([str(EXAMPLE_CLUSTER)], Policy())) as served:
        yield served


# -- parity with the linter ------------------------------------------------------------

def _expected(obj: dict[str, Any], policy: Policy, clusters: Any) -> Any:
    """What the linter computes for the object the API server would send (namespace filled in)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and not meta.get("namespace"):
        obj = {**obj, "metadata": {**meta, "namespace": "default"}}
    return evaluate(obj, policy, clusters)


def _rule_ids(texts: list[str]) -> Counter[str]:
    return Counter(text.split(":", 1)[0].split(" ", 1)[0] for text in texts)


@pytest.mark.parametrize("served", ["hook", "example_hook"])
def test_parity_with_linter_over_corpus(served: str, corpus_dir: Path,
                                        request: pytest.FixtureRequest) -> None:
    hook: ServedWebhook = request.getfixturevalue(served)
    policy, clusters = Policy(), hook.webhook.topology.clusters()
    objects = corpus_objects()
    assert len(objects) > 200
    denied = patched = 0
    fired: Counter[str] = Counter()
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        expected = _expected(obj, policy, clusters)
        name = f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"

        status, answer = post_review(hook, "validate", review_for(obj, namespace=namespace))
        assert status == 200, (name, answer)
        response = answer["response"]
        judged = [f for f in expected.findings if not f.fixable]
        fired.update(f.rule for f in expected.findings)
        errors = [f for f in judged if f.severity == Severity.ERROR]
        warnings = [f for f in judged if f.severity == Severity.WARNING]
        assert response["allowed"] is (not errors), (name, response, errors)
        if errors:
            denied += 1
            assert response["status"]["code"] == 403
            message = response["status"]["message"]
            assert all(f.rule in message for f in errors), (name, message)
        sent = response.get("warnings", [])
        if not (sent and sent[-1].startswith("gpugate: ")):  # none left out
            assert _rule_ids(sent) == Counter(f.rule for f in warnings), name
        assert all(len(w) <= MAX_WARNING_CHARS for w in sent)
        assert sum(len(w) for w in sent) <= MAX_WARNINGS_TOTAL_CHARS

        status, answer = post_review(hook, "mutate", review_for(obj, namespace=namespace))
        assert status == 200
        response = answer["response"]
        assert response["allowed"] is True  # mutation never denies
        patch = decode_patch(response)
        assert patch == expected.patch, name
        if patch:
            patched += 1
            submitted = copy.deepcopy(obj)
            result = jsonpatch.apply_patch(submitted, patch)
            meta = result.get("metadata", {})
            expected_doc = copy.deepcopy(expected.mutated)
            if not (obj.get("metadata") or {}).get("namespace"):
                expected_doc["metadata"].pop("namespace", None)
                meta.pop("namespace", None)
            assert result == expected_doc, name
            # idempotent: the mutated object gets no further patch (the API server may reinvoke us)
            _, again = post_review(hook, "mutate", review_for(result, namespace=namespace))
            assert decode_patch(again["response"]) == [], name
    assert denied > 0 and patched > 0
    if served == "example_hook":  # the feasibility rules took part
        assert {"GG403", "GG306"} & set(fired), fired


def test_patch_applies_to_submitted_object_and_validation_then_passes(hook: ServedWebhook) -> None:
    job = bad_job(group_size="16")
    status, answer = post_review(hook, "mutate", review_for(job))
    assert status == 200
    patch = decode_patch(answer["response"])
    assert any("/tolerations" in op["path"] for op in patch)
    mutated = jsonpatch.apply_patch(job, patch)
    assert mutated["spec"]["tasks"][0]["template"]["spec"]["tolerations"]
    _, answer = post_review(hook, "validate", review_for(mutated))
    assert answer["response"]["allowed"] is True
    assert not any(w.startswith(("GG101", "GG102")) for w in answer["response"].get("warnings", []))


# -- semantics ----------------------------------------------------------------------------

def test_deny_names_rule_object_and_numbers(hook: ServedWebhook) -> None:
    review = review_for(bad_job(), uid="abc-123")
    status, answer = post_review(hook, "validate", review)
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "abc-123"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "GG202" in message and "Job ml/train" in message and "12" in message and "8" in message


def test_mutate_never_denies(hook: ServedWebhook) -> None:
    status, answer = post_review(hook, "mutate", review_for(bad_job()))
    assert status == 200 and answer["response"]["allowed"] is True


def test_dry_run_is_evaluated_normally(hook: ServedWebhook) -> None:
    _, answer = post_review(hook, "validate", review_for(bad_job(), dry_run=True))
    assert answer["response"]["allowed"] is False


def test_update_evaluates_the_new_object(hook: ServedWebhook) -> None:
    good, bad = bad_job(group_size="16"), bad_job()
    _, answer = post_review(hook, "validate", review_for(bad, operation="UPDATE", old_object=good))
    assert answer["response"]["allowed"] is False
    _, answer = post_review(hook, "validate", review_for(good, operation="UPDATE", old_object=bad))
    assert answer["response"]["allowed"] is True


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_allowed_untouched(hook: ServedWebhook, operation: str) -> None:
    review = review_for(bad_job(), operation=operation)
    if operation == "CONNECT":
        review["request"]["object"] = {"apiVersion": "v1", "kind": "PodExecOptions"}
    for endpoint in ("mutate", "validate"):
        status, answer = post_review(hook, endpoint, review)
        assert status == 200
        assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}


def test_excluded_namespace_allowed_untouched(hook: ServedWebhook) -> None:
    for endpoint in ("mutate", "validate"):
        _, answer = post_review(hook, endpoint, review_for(bad_job(namespace="kube-system")))
        assert set(answer["response"]) == {"uid", "allowed"} and answer["response"]["allowed"] is True


def test_namespace_comes_from_the_request_when_the_object_has_none(hook: ServedWebhook) -> None:
    job = bad_job()
    del job["metadata"]["namespace"]
    _, answer = post_review(hook, "validate", review_for(job, namespace="kube-system"))
    assert answer["response"]["allowed"] is True  # excluded namespace, taken from the request
    _, answer = post_review(hook, "validate", review_for(job, namespace="team-a"))
    assert "Job team-a/train" in answer["response"]["status"]["message"]


def test_unknown_kind_and_subresources_allowed_untouched(hook: ServedWebhook) -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "a"},
              "spec": {"replicas": "two"}}
    for endpoint in ("mutate", "validate"):
        _, answer = post_review(hook, endpoint, review_for(widget))
        assert set(answer["response"]) == {"uid", "allowed"} and answer["response"]["allowed"]
    status_update = review_for(bad_job(), operation="UPDATE", old_object=bad_job())
    status_update["request"]["subResource"] = "status"
    _, answer = post_review(hook, "validate", status_update)
    assert answer["response"]["allowed"] is True


def test_warnings_are_short_and_keep_the_rule_id(hook: ServedWebhook) -> None:
    job = bad_job(group_size="16")
    job["metadata"]["name"] = "a-very-long-job-name-" + "x" * 150
    _, answer = post_review(hook, "validate", review_for(job))
    warnings = answer["response"]["warnings"]
    assert warnings
    for text in warnings:
        assert len(text) <= MAX_WARNING_CHARS and text.startswith("GG")
        assert "x" * 20 not in text  # the object is named by the request, not again by each warning


def test_warning_and_deny_text_bounds() -> None:
    long = Finding("GG404", "gang-waits", Severity.WARNING, "word " * 100)
    assert warning_text(long) == "GG404 gang-waits: " + "word " * 100  # whole: warning_lines bounds
    assert admission.warning_lines([long]) == [
        "GG404 gang-waits: message too long (500 characters); run gpugate lint"]
    short = Finding("GG104", "gpu-product-declared", Severity.WARNING, "pod set main pins no product")
    assert warning_text(short) == "GG104 gpu-product-declared: pod set main pins no product"
    many = [Finding(f"GG{200 + i}", "slug", Severity.ERROR, "m" * 300) for i in range(30)]
    message = deny_message(many, "Job a/b")
    assert len(message) <= admission.MAX_DENY_MESSAGE_CHARS
    assert message.startswith("gpugate denied Job a/b: GG200") and message.endswith("more)")
    huge = [Finding("GG403", "gang-never-fits", Severity.ERROR, "x" * 5000)]
    assert "GG403" in deny_message(huge, "Job a/b") and len(deny_message(huge, "Job a/b")) <= 2000


def test_budget_becomes_the_evaluation_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    real = admission.evaluate

    def spy(doc: Any, policy: Policy, clusters: Any = None, *, deadline: float | None = None,
            **options: Any) -> Any:
        seen["deadline"] = deadline
        return real(doc, policy, clusters, deadline=deadline, **options)

    monkeypatch.setattr(admission, "evaluate", spy)
    policy = policy_from_data({"feasibility": {"budgetMilliseconds": 50}})
    request = parse_review(json.dumps(review_for(bad_job())).encode(), "application/json")
    outcome = admit(request, "validate", policy, None, now=1000.0)
    assert seen["deadline"] == pytest.approx(1000.05)
    assert outcome.verdict == "denied"


# -- malformed input ------------------------------------------------------------------------

def _review_with(**changes: Any) -> dict[str, Any]:
    review = review_for(bad_job())
    for key, value in changes.items():
        if key.startswith("request_"):
            review["request"][key[len("request_"):]] = value
        else:
            review[key] = value
    return review


@pytest.mark.parametrize("body,reason", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe\x00", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'"review"', "JSON object"),
    (b"null", "JSON object"),
    (json.dumps(_review_with(apiVersion="admission.k8s.io/v1beta1")).encode(), "apiVersion"),
    (json.dumps(_review_with(kind="Pod")).encode(), "kind"),
    (json.dumps(_review_with(request=None)).encode(), "no request"),
    (json.dumps(_review_with(request_uid=None)).encode(), "uid"),
    (json.dumps(_review_with(request_uid=42)).encode(), "uid"),
    (json.dumps(_review_with(request_object=None)).encode(), "request.object"),
    (json.dumps(_review_with(request_object=[1])).encode(), "request.object"),
    (json.dumps(_review_with(request_operation=None)).encode(), "operation"),
    (b"[" * 100000 + b"]" * 100000, "JSON"),
])
def test_malformed_reviews_get_400_with_a_reason(hook: ServedWebhook, body: bytes, reason: str) -> None:
    for endpoint in ("mutate", "validate"):
        status, answer = post_review(hook, endpoint, body)
        assert status == 400, answer
        assert reason in answer["error"]


def test_wrong_content_type_is_400(hook: ServedWebhook) -> None:
    status, answer = post_review(hook, "validate", review_for(bad_job()), content_type="text/plain")
    assert status == 400 and "content type" in answer["error"]
    status, answer = post_review(hook, "validate", review_for(bad_job()),
                                 content_type="application/json; charset=utf-8")
    assert status == 200


def test_too_large_body_is_413(hook: ServedWebhook) -> None:
    job = bad_job()
    job["metadata"]["annotations"] = {"filler": "x" * (admission.MAX_BODY_BYTES + 10)}
    status, _ = post_review(hook, "validate", review_for(job))
    assert status == 413
    status, answer = post_review(hook, "validate", review_for(bad_job()))  # still serving
    assert status == 200 and answer["response"]["allowed"] is False


def test_internal_error_fails_open_not_500(hook: ServedWebhook, monkeypatch: pytest.MonkeyPatch) -> None:
    import webhook.app as server

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(server, "admit", broken)
    status, answer = post_review(hook, "validate", review_for(bad_job(), uid="u1"))
    assert status == 200
    assert answer["response"]["uid"] == "u1" and answer["response"]["allowed"] is True
    assert "internal error" in answer["response"]["warnings"][0]


# -- probes and metrics -----------------------------------------------------------------------

def test_probes_and_metrics(hook: ServedWebhook) -> None:
    assert hook.request("GET", "/healthz")[0] == 200
    assert hook.request("GET", "/readyz")[0] == 200
    post_review(hook, "validate", review_for(bad_job()))
    post_review(hook, "validate", b"{")
    status, body, headers = hook.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert 'gpugate_reviews_total{endpoint="validate",kind="Job",verdict="denied"}' in text
    assert 'gpugate_review_findings_total{endpoint="validate",kind="Job",rule="GG202",severity="error"}' \
        in text
    assert 'gpugate_malformed_reviews_total{endpoint="validate",status="400"}' in text
    assert "gpugate_review_duration_seconds_bucket" in text
    assert 'gpugate_topology_objects{cluster="test",kind="Node"} 5.0' in text
    assert 'gpugate_topology_age_seconds{cluster="test"} 0.0' in text


def test_memo_hits_and_misses_are_exported() -> None:
    """Two jobs of one shape: the second is answered from the feasibility memo."""
    with ServedWebhook(policy=Policy(), clusters=small_cluster()) as served:
        for name in ("sweep-1", "sweep-2"):
            job = bad_job(group_size="16")
            job["metadata"]["name"] = name
            _, answer = post_review(served, "validate", review_for(job))
            assert answer["response"]["allowed"] is True, answer
        text = served.request("GET", "/metrics")[1].decode()
    assert 'gpugate_feasibility_memo_lookups_total{cluster="test",result="hit"} 1.0' in text
    assert 'gpugate_feasibility_memo_lookups_total{cluster="test",result="miss"} 1.0' in text


def test_readyz_waits_for_the_topology() -> None:
    from webhook.app import Webhook

    class NotYet:
        synced = False

        def clusters(self) -> None:
            return None

        def ready(self) -> bool:
            return self.synced

        async def start(self, app: Any) -> None:
            return None

        async def stop(self) -> None:
            return None

    source = NotYet()
    with ServedWebhook(webhook=Webhook(topology=source)) as served:
        assert served.request("GET", "/readyz")[0] == 503
        assert served.request("GET", "/healthz")[0] == 200
        source.synced = True
        assert served.request("GET", "/readyz")[0] == 200


# -- reloads ------------------------------------------------------------------------------

def test_config_reloaded_on_change_and_bad_config_ignored(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text("rules: {}\n")
    with ServedWebhook(config_path=str(config), reload_interval=0.05) as served:
        def allowed() -> bool:
            return bool(post_review(served, "validate", review_for(bad_job()))[1]["response"]["allowed"])

        assert not allowed()
        config.write_text("rules: {GG202: off}\n")
        os.utime(config, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert wait_for(allowed, timeout=5)
        config.write_text("rules: {GG202: off}\nnot-a-key: 1\n")
        os.utime(config, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
        time.sleep(0.3)
        assert allowed()  # the invalid file was rejected, the previous policy kept
        assert served.webhook.policy.policy.rule_setting("GG202").enabled is False


def _served_serial(served: ServedWebhook) -> int:
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    import socket

    with socket.create_connection((served.host, served.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_tls_reload_keeps_connections_and_rejects_bad_pairs(tmp_path: Path) -> None:
    from cryptography import x509

    with ServedWebhook(cert_dir=tmp_path / "live", reload_interval=0.05) as served:
        first = _served_serial(served)
        kept = served.connect()
        kept.request("GET", "/healthz")
        assert kept.getresponse().read() == b"ok\n"

        new_cert, new_key = make_cert(tmp_path / "next")
        served.cert.write_bytes(new_cert.read_bytes())
        served.key.write_bytes(new_key.read_bytes())
        second = int(x509.load_pem_x509_certificate(new_cert.read_bytes()).serial_number)
        assert wait_for(lambda: _served_serial(served) == second, timeout=5)
        assert first != second
        kept.request("GET", "/healthz")  # the connection opened before the reload still works
        assert kept.getresponse().read() == b"ok\n"
        kept.close()

        other_cert, _ = make_cert(tmp_path / "other")  # a certificate whose key we do not install
        served.cert.write_bytes(other_cert.read_bytes())
        os.utime(served.cert, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert wait_for(lambda: served.tls.maybe_reload() is None, timeout=5)  # attempted and settled
        assert _served_serial(served) == second
        assert served.tls.context.minimum_version == ssl.TLSVersion.TLSv1_2


# -- the command line ---------------------------------------------------------------------

def test_serve_rejects_missing_certificate(tmp_path: Path) -> None:
    from webhook.cli import serve_main

    assert serve_main(["--tls-cert", str(tmp_path / "no.crt"), "--tls-key", str(tmp_path / "no.key"),
                       "--cluster", "x"]) == 2


def test_gpugate_serve_subprocess_with_static_cluster(tmp_path: Path) -> None:
    pytest.importorskip("lint.cluster")
    cert, key = make_cert(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                       "items": [gpu_node(f"gpu-{i}") for i in range(2)]}))
    with ServeProcess(cert, key, "--cluster", str(cluster), "--log-format", "json") as served:
        probe = served.client
        assert served.wait_until_answering("/readyz"), "server did not become ready"
        status, answer = post_review(probe, "validate", review_for(bad_job()))
        assert status == 200 and answer["response"]["allowed"] is False
        status, body, _ = probe.request("GET", "/metrics")
        assert 'gpugate_topology_objects{cluster=' in body.decode()
    assert served.returncode == 0, served.stderr
    assert all(json.loads(line) for line in served.stderr.splitlines() if line.startswith("{"))


def test_serve_rejects_unreadable_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import serve_main

    cert, key = make_cert(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("items: [\n")
    for cluster in (tmp_path / "missing.yaml", bad):
        assert serve_main(["--tls-cert", str(cert), "--tls-key", str(key), "--cluster", str(cluster)]) == 2
        assert str(cluster.name) in capsys.readouterr().err


# -- fuzzed reviews: a clear answer, never an exception ----------------------------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_json = st.recursive(_scalars,
                     lambda children: st.lists(children, max_size=4)
                     | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from(["uid", "operation", "object", "namespace", "kind", "subResource", "request",
                              "apiVersion", "metadata", "spec", "tasks"]),
       value=_json)
def test_fuzzed_reviews_answer_or_400(field: str, value: Any) -> None:
    review = review_for(bad_job())
    request = review["request"]
    if field in ("request", "apiVersion"):
        review[field] = value
    elif field in ("metadata", "spec"):
        request["object"][field] = value
    elif field == "tasks":
        request["object"]["spec"]["tasks"][0] = value
    else:
        request[field] = value
    body = json.dumps(review).encode()
    for endpoint in ("mutate", "validate"):
        try:
            parsed = parse_review(body, "application/json")
        except admission.ReviewError as exc:
            assert exc.status == 400 and exc.reason
            continue
        outcome = admit(parsed, endpoint, Policy(), small_cluster())
        response = outcome.response
        assert response["uid"] == parsed["uid"] and isinstance(response["allowed"], bool)
        assert endpoint == "validate" or response["allowed"] is True
        json.dumps(outcome.review)  # serialisable as it stands


# -- feasibility through the webhook: rejection, budget, staleness --------------------------------

def _feasibility_example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "examples" / "feasibility" / f"{name}.yaml").read_text()))


def test_gang_rejected_waits_and_degrades_with_budget_or_staleness(example_hook: ServedWebhook) -> None:
    from lint.cluster import load_clusters

    _, answer = post_review(example_hook, "validate", review_for(_feasibility_example("rejected")))
    assert answer["response"]["allowed"] is False and "GG405" in answer["response"]["status"]["message"]
    _, answer = post_review(example_hook, "validate", review_for(_feasibility_example("waits")))
    assert answer["response"]["allowed"] is True
    assert any(w.startswith("GG404") for w in answer["response"]["warnings"])

    # a budget too small to finish: feasibility unknown (GG406, info), never a rejection
    tiny = policy_from_data({"feasibility": {"budgetMilliseconds": 0.000001}})
    clusters = list(load_clusters([str(EXAMPLE_CLUSTER)], tiny))
    with ServedWebhook(tiny, clusters) as served:
        _, answer = post_review(served, "validate", review_for(_feasibility_example("rejected")))
        assert answer["response"]["allowed"] is True

    # a live snapshot last confirmed long ago: stale, so not judged either
    stale = list(load_clusters([str(EXAMPLE_CLUSTER)], Policy()))
    for snapshot in stale:
        snapshot.updated_at = time.monotonic() - 3600
    with ServedWebhook(Policy(), stale) as served:
        _, answer = post_review(served, "validate", review_for(_feasibility_example("rejected")))
        assert answer["response"]["allowed"] is True
        snapshot_age = served.request("GET", "/metrics")[1].decode()
        assert 'gpugate_topology_age_seconds{cluster="cluster"} 36' in snapshot_age
