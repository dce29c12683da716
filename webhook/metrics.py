"""Prometheus metrics of the webhook, in a registry of its own (never the global one, so
that several servers in one process, as in the tests, do not collide).

Counters and histograms export no ``*_created`` series: nobody reads them (rates and
quantiles do not need them), and each would double the series of its metric."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Reviews take a few milliseconds; the budget is ~200 ms; the API server gives up at 10 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 10.0)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class TopologyCollector(Collector):
    """Topology age and object counts, read at scrape time from the live snapshots."""

    def __init__(self, clusters: Callable[[], Sequence[Any] | None]) -> None:
        self._clusters = clusters

    def collect(self) -> Iterable[Metric]:
        age = GaugeMetricFamily("gpugate_topology_age_seconds",
                                "Seconds since the live topology was last confirmed in full by the API "
                                "server (list, watch event, bookmark, or a probe answered while every "
                                "watch stream stayed open); +Inf before the first sync; 0 for a static "
                                "snapshot file", labels=["cluster"])
        objects = GaugeMetricFamily("gpugate_topology_objects", "Objects in the topology snapshot",
                                    labels=["cluster", "kind"])
        memo = CounterMetricFamily("gpugate_feasibility_memo_lookups",
                                   "Feasibility checks answered from the memo of recent answers (hit) "
                                   "or computed (miss), since the snapshot was loaded",
                                   labels=["cluster", "result"])
        now = time.monotonic()
        for snapshot in self._clusters() or ():
            kept = getattr(snapshot.topology, "outcome_memo", None)
            if kept is not None:
                memo.add_metric([snapshot.name, "hit"], float(kept.hits))
                memo.add_metric([snapshot.name, "miss"], float(kept.misses))
            updated = getattr(snapshot, "updated_at", None)
            age.add_metric([snapshot.name], 0.0 if updated is None else max(0.0, now - updated))
            try:
                counts = snapshot.topology.counts()
            except Exception:  # noqa: BLE001 - a scrape must not fail on a half-built snapshot
                counts = {}
            for kind, count in sorted(counts.items()):
                objects.add_metric([snapshot.name, kind], float(count))
        yield age
        yield objects
        yield memo


class Metrics:
    """Every metric the webhook exports."""

    def __init__(self, clusters: Callable[[], Sequence[Any] | None] = lambda: None) -> None:
        # No *_created series. prometheus_client's switch (0.18+; pyproject asks for 0.20+; the
        # environment variable PROMETHEUS_DISABLE_CREATED_SERIES=true does the same) is read at
        # every scrape and holds for the whole process: gpugate's own, whose only registry is this.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reviews = Counter("gpugate_reviews_total", "Admission reviews answered",
                               ["endpoint", "kind", "verdict"], registry=r)
        self.findings = Counter("gpugate_review_findings_total", "Findings reported in admission reviews",
                                ["endpoint", "kind", "rule", "severity"], registry=r)
        self.malformed = Counter("gpugate_malformed_reviews_total",
                                 "Requests rejected as malformed (HTTP 4xx)", ["endpoint", "status"],
                                 registry=r)
        self.latency = Histogram("gpugate_review_duration_seconds", "Time to answer one review",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.internal_errors = Counter("gpugate_internal_errors_total",
                                       "Reviews that hit an internal error (answered allowed)",
                                       ["endpoint"], registry=r)
        self.watch_restarts = Counter("gpugate_watch_restarts_total",
                                      "Topology watch restarts by kind and reason", ["kind", "reason"],
                                      registry=r)
        self.reloads = Counter("gpugate_reloads_total",
                               "Reloads of the policy file, the TLS certificate and static cluster snapshots",
                               ["what", "result"], registry=r)
        # Overload and shutdown (webhook/lifecycle.py, webhook/app.py)
        self.shed = Counter("gpugate_reviews_shed_total",
                            "Reviews answered without being checked because gpugate could not judge "
                            "them within its deadline (reason: waited, in-flight, deadline)",
                            ["endpoint", "reason"], registry=r)
        self.offloaded = Counter("gpugate_reviews_offloaded_total",
                                 "Large reviews evaluated in the worker thread, off the event loop",
                                 ["endpoint"], registry=r)
        self.connections_refused = Counter("gpugate_connections_refused_total",
                                           "Connections closed at once because the connection cap was "
                                           "reached", registry=r)
        self.connections = Gauge("gpugate_connections", "Open connections to the webhook port",
                                 registry=r)
        self.in_flight = Gauge("gpugate_reviews_in_flight", "Reviews being read, queued or evaluated",
                               registry=r)
        self.draining = Gauge("gpugate_draining", "1 from SIGTERM on: not ready, finishing what is in flight",
                              registry=r)
        # The periodic audit (webhook/periodic_audit.py, ``gpugate serve --audit-interval``)
        self.audit_pending = Gauge("gpugate_audit_pending_gangs",
                                   "Pending workloads (each counted once, at the top of its ownership tree) "
                                   "by the last audit's verdict (never, unknown, waits, fits) and cause",
                                   ["verdict", "cause"], registry=r)
        self.audit_runs = Counter("gpugate_audit_runs_total",
                                  "Periodic audits by result: ok, error, skipped_stale (the live topology "
                                  "not synced or stale), skipped_busy (the previous run still going)",
                                  ["result"], registry=r)
        self.audit_last_success = Gauge("gpugate_audit_last_success_timestamp_seconds",
                                        "Unix time the last audit without errors ended (0: none yet)",
                                        registry=r)
        self.audit_duration = Gauge("gpugate_audit_duration_seconds", "How long the last audit took",
                                    registry=r)
        self.audit_events = Counter("gpugate_audit_events_total",
                                    "Kubernetes Events on workloads that will never run: created, updated "
                                    "(count + 1 on the Event of an earlier run) or failed",
                                    ["result"], registry=r)
        r.register(TopologyCollector(clusters))
        self._children: dict[Any, Any] = {}

    def set_audit_pending(self, by_cause: Mapping[tuple[str, str], int]) -> None:
        """The last audit's pending workloads by (verdict, cause), replacing the previous run's
        whole: a cause gone since then has no series any more."""
        self.audit_pending.clear()
        for (verdict, cause), count in sorted(by_cause.items()):
            self.audit_pending.labels(verdict, cause).set(count)

    def count_review(self, endpoint: str, kind: str, verdict: str, findings: Iterable[Any],
                     seconds: float) -> None:
        """One answered review: its verdict, its findings and how long it took."""
        # labels() takes a lock and builds its key each time: remember the children instead
        # (label values are bounded: endpoints, the table's kinds, verdicts, rule ids).
        children = self._children
        key = (endpoint, kind, verdict)
        reviews = children.get(key)
        if reviews is None:
            reviews = children[key] = self.reviews.labels(endpoint, kind, verdict)
        reviews.inc()
        for finding in findings:
            labels = (endpoint, kind, finding.rule, str(finding.severity))
            child = children.get(labels)
            if child is None:
                child = children[labels] = self.findings.labels(*labels)
            child.inc()
        latency = children.get(endpoint)
        if latency is None:
            latency = children[endpoint] = self.latency.labels(endpoint)
        latency.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
