"""/metrics: what gpugate exports, and what it does not (no ``*_created`` series)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import enable_created_metrics
from webhook_helpers import ServedWebhook, ServeProcess, make_cert, post_review, review_for

from policies.config import Policy
from webhook.metrics import Metrics

JOB = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}},
}
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})? ", re.MULTILINE)
DECLARED = re.compile(r"^# (?:HELP|TYPE) ([A-Za-z_:][A-Za-z0-9_:]*) ", re.MULTILINE)


def series_names(text: str) -> set[str]:
    """Every metric name in a text exposition: sample lines and HELP/TYPE declarations."""
    return set(SAMPLE.findall(text)) | set(DECLARED.findall(text))


def check_no_created(text: str) -> set[str]:
    names = series_names(text)
    assert names, text
    created = {n for n in names if n.endswith("_created")}
    assert not created, f"*_created series exported: {sorted(created)}"
    return names


def test_rendered_metrics_have_no_created_series() -> None:
    enable_created_metrics()   # prometheus_client's default: gpugate's Metrics switches it off
    metrics = Metrics()
    metrics.count_review("validate", "Job", "denied", [], 0.001)
    metrics.malformed.labels("validate", "400").inc()
    metrics.internal_errors.labels("validate").inc()
    metrics.watch_restarts.labels("Node", "gone").inc()
    metrics.reloads.labels("config", "ok").inc()
    names = check_no_created(metrics.render().decode())
    # every counter and the histogram are there, only without their _created twins
    assert {"gpugate_reviews_total", "gpugate_malformed_reviews_total", "gpugate_internal_errors_total",
            "gpugate_watch_restarts_total", "gpugate_reloads_total", "gpugate_review_duration_seconds_bucket",
            "gpugate_review_duration_seconds_count", "gpugate_review_duration_seconds_sum"} <= names


def test_scraped_metrics_have_no_created_series() -> None:
    """Scraped over HTTPS from the served app after real reviews."""
    enable_created_metrics()
    with ServedWebhook(policy=Policy(), clusters=None) as hook:
        post_review(hook, "validate", review_for(JOB))
        post_review(hook, "mutate", review_for(JOB))
        post_review(hook, "validate", b"{")
        status, body, _ = hook.request("GET", "/metrics")
    assert status == 200
    names = check_no_created(body.decode())
    assert {"gpugate_reviews_total", "gpugate_review_findings_total",
            "gpugate_review_duration_seconds_bucket"} <= names


def test_gpugate_serve_process_exports_no_created_series(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `gpugate serve` process, without the environment variable that would do it."""
    monkeypatch.delenv("PROMETHEUS_DISABLE_CREATED_SERIES", raising=False)
    cert, key = make_cert(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    with ServeProcess(cert, key, "--cluster", str(cluster)) as served:
        assert served.wait_until_answering("/readyz"), served.stderr
        post_review(served.client, "validate", review_for(JOB))
        status, body, _ = served.client.request("GET", "/metrics")
    assert status == 200
    check_no_created(body.decode())
