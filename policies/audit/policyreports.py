"""An audit as ``wgpolicyk8s.io/v1alpha2`` PolicyReports (one per namespace, named
``gpugate``) and one ClusterPolicyReport (``gpugate``) for cluster-scoped objects, the shape
Policy Reporter and other dashboards read.

Each pending subject gives one result of policy ``gpugate-feasibility`` whose rule is the
verdict's cause (``nodes-never-hold``, ``waits-for-room``, ``fits``, ...); each finding of
the other rules one result of policy ``<rule ID>`` whose rule is the rule's slug. The
feasibility rules' own findings are not repeated: the verdict says it.
"""

from __future__ import annotations

from typing import Any

from policies.findings import Finding, Severity

from .judge import FEASIBILITY_RULES, Audit, Entry

__all__ = ["API_VERSION", "REPORT_NAME", "MANAGED_BY", "FEASIBILITY_POLICY", "MAX_RESULTS", "build_reports",
           "report_key"]

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "gpugate"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpugate"}
FEASIBILITY_POLICY = "gpugate-feasibility"
# A report is one object in etcd (1.5 MiB at most): past this many results the least
# severe are left out, and the report says how many.
MAX_RESULTS = 1000
TRUNCATED_ANNOTATION = "gpugate.io/results-left-out"

_VERDICT_RESULT = {"never": ("fail", "high"), "waits": ("warn", "medium"), "unknown": ("skip", "info"),
                   "fits": ("pass", "info")}
_FINDING_RESULT = {Severity.ERROR: ("fail", "high"), Severity.WARNING: ("warn", "medium"),
                   Severity.INFO: ("warn", "info")}
_RESULT_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}


def report_key(namespace: str | None) -> tuple[str, str]:
    """``(kind, namespace)`` of the report a namespace's results go to ("" for the cluster's)."""
    return ("PolicyReport", namespace) if namespace else ("ClusterPolicyReport", "")


def _resource(entry: Entry) -> dict[str, Any]:
    ref = entry.subject.ref
    out = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name or ""}
    if ref.namespace:
        out["namespace"] = ref.namespace
    if entry.subject.uid:
        out["uid"] = entry.subject.uid
    return out


def _verdict_result(entry: Entry, stamp: dict[str, int]) -> dict[str, Any] | None:
    gang = entry.gang
    if gang is None:
        return None
    result, severity = _VERDICT_RESULT[gang.verdict]
    if gang.partial:   # the rest of the workload runs
        severity = "medium"
    properties = {"verdict": gang.verdict, "heldBy": "; ".join(entry.subject.held_by),
                  "podsUnscheduled": str(entry.subject.unscheduled)}
    if gang.rule:
        properties["gpugateRule"] = gang.rule
    if entry.subject.system_says:
        properties["systemSays"] = entry.subject.system_says[0][:1000]
    return {"policy": FEASIBILITY_POLICY, "rule": gang.cause, "result": result, "severity": severity,
            "category": "GPU scheduling", "source": "gpugate", "scored": True, "timestamp": stamp,
            "message": gang.reason, "resources": [_resource(entry)], "properties": properties}


def _finding_result(entry: Entry, finding: Finding, stamp: dict[str, int]) -> dict[str, Any]:
    result, severity = _FINDING_RESULT[finding.severity]
    properties = {"path": finding.path} if finding.path else {}
    return {"policy": finding.rule, "rule": finding.slug, "result": result, "severity": severity,
            "category": "GPU workload policy", "source": "gpugate", "scored": True, "timestamp": stamp,
            "message": finding.message, "resources": [_resource(entry)], "properties": properties}


def build_reports(audit: Audit, now_seconds: int) -> dict[tuple[str, str], dict[str, Any]]:
    """The report of each namespace with results (and the cluster's, for cluster-scoped
    objects), keyed by :func:`report_key`; a namespace without results has none (a writer
    deletes the report it wrote before)."""
    stamp = {"seconds": int(now_seconds), "nanos": 0}
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in audit.entries:
        found = results.setdefault(report_key(entry.subject.ref.namespace), [])
        verdict = _verdict_result(entry, stamp)
        if verdict is not None:
            found.append(verdict)
        found.extend(_finding_result(entry, f, stamp) for f in entry.findings
                     if f.rule not in FEASIBILITY_RULES)
    reports: dict[tuple[str, str], dict[str, Any]] = {}
    for key, items in results.items():
        if not items:
            continue
        items.sort(key=lambda r: _RESULT_ORDER[r["result"]])
        left_out = max(0, len(items) - MAX_RESULTS)
        kept = items[:MAX_RESULTS]
        summary = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
        for item in kept:
            summary[item["result"]] += 1
        metadata: dict[str, Any] = {"name": REPORT_NAME, "labels": dict(MANAGED_BY)}
        if key[1]:
            metadata["namespace"] = key[1]
        if left_out:
            metadata["annotations"] = {TRUNCATED_ANNOTATION: str(left_out)}
        reports[key] = {"apiVersion": API_VERSION, "kind": key[0], "metadata": metadata,
                        "summary": summary, "results": kept}
    return reports
