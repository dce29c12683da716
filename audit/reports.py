"""``gpugate audit --write-reports``: the audit's PolicyReports written to the cluster, updated
in place, and the ones gpugate wrote before for namespaces now without results deleted."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from policies.audit.policyreports import API_VERSION, MANAGED_BY, REPORT_NAME
from webhook.kube import namespace_terminating

__all__ = ["Written", "ReportsError", "write_reports"]

_GROUP, _VERSION = API_VERSION.split("/")
_PLURALS = {"PolicyReport": "policyreports", "ClusterPolicyReport": "clusterpolicyreports"}
_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


class ReportsError(Exception):
    """The reports cannot be written (no CRD, no permission): said, and the command exits with 2."""


@dataclass
class Written:
    """What a write did, by report key (kind, namespace)."""

    created: list[tuple[str, str]] = field(default_factory=list)
    updated: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    # namespaces being deleted: the API server takes nothing new in them
    terminating: list[tuple[str, str]] = field(default_factory=list)
    # reports that could not be written or deleted, with the API server's words
    failed: list[tuple[tuple[str, str], str]] = field(default_factory=list)

    def summary(self) -> str:
        text = (f"{len(self.created)} created, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
                f"{len(self.deleted)} deleted")
        if self.terminating:
            text += f", {len(self.terminating)} skipped (namespace being deleted)"
        if self.failed:
            text += f", {len(self.failed)} failed"
        return text


def _comparable(report: Mapping[str, Any]) -> Any:
    """A report's content without the run's timestamps (an unchanged report is not rewritten)."""
    results = [{k: v for k, v in r.items() if k != "timestamp"} for r in report.get("results") or []]
    meta = report.get("metadata") or {}
    return results, report.get("summary"), (meta.get("annotations") or {}), (meta.get("labels") or {})


def _status(exc: ApiException) -> dict[str, Any]:
    """The API server's Status object of an error ({} when the body is not one)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _terminating(exc: ApiException) -> bool:
    return namespace_terminating(int(exc.status or 0), _status(exc))


def _explain(exc: ApiException, what: str) -> ReportsError:
    message = _status(exc).get("message")
    if isinstance(message, str) and message and exc.status not in (404,):
        return ReportsError(f"{what}: the API server answered {exc.status}: {message[:300]}")
    if exc.status == 404:
        return ReportsError(f"{what}: the API server does not serve {API_VERSION} PolicyReports (install the "
                            "wg-policy PolicyReport CRDs, e.g. with Policy Reporter or Kyverno)")
    if exc.status == 403:
        return ReportsError(f"{what}: forbidden (403); these credentials need get, list, create, update and "
                            f"delete on policyreports and clusterpolicyreports.{_GROUP}")
    return ReportsError(f"{what}: the API server answered {exc.status} {(exc.reason or '').strip()}")


def _existing(api: k8s.CustomObjectsApi) -> dict[tuple[str, str], dict[str, Any]]:
    """The reports gpugate wrote before, by key."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, plural in _PLURALS.items():
        try:
            listed: Any = api.list_cluster_custom_object(_GROUP, _VERSION, plural, label_selector=_SELECTOR)
        except ApiException as exc:
            raise _explain(exc, f"listing {plural}") from None
        for item in listed.get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("name") == REPORT_NAME:
                found[(kind, meta.get("namespace") or "")] = item
    return found


def write_reports(api_client: k8s.ApiClient, reports: Mapping[tuple[str, str], dict[str, Any]],
                  namespaces: Collection[str] | None = None) -> Written:
    """Create or replace each of ``reports`` (:func:`policies.audit.policyreports.build_reports`,
    keyed by its ``report_key``)
    and delete gpugate's reports that have no results now. ``namespaces``: the audit looked at
    these alone (``--namespace``); reports elsewhere, and the cluster's, are left as they are."""
    api = k8s.CustomObjectsApi(api_client)
    existing = _existing(api)
    written = Written()

    def in_scope(key: tuple[str, str]) -> bool:
        return namespaces is None or (key[0] == "PolicyReport" and key[1] in namespaces)

    # One report that cannot be written never loses the others: each failure is kept and said.
    for key, report in reports.items():
        if not in_scope(key):
            continue
        kind, namespace = key
        plural = _PLURALS[kind]
        before = existing.get(key)
        try:
            if before is None:
                _create(api, plural, namespace, report)
                written.created.append(key)
            elif _comparable(before) == _comparable(report):
                written.unchanged.append(key)
            else:
                body = {**report, "metadata": {**report["metadata"],
                                               "resourceVersion": before["metadata"].get("resourceVersion")}}
                _replace(api, plural, namespace, body)
                written.updated.append(key)
        except ApiException as exc:
            if _terminating(exc):
                written.terminating.append(key)
            else:
                written.failed.append((key, str(_explain(exc, f"writing {_name(key)}"))))
    for key in existing:
        if key in reports or not in_scope(key):
            continue
        kind, namespace = key
        try:
            if namespace:
                api.delete_namespaced_custom_object(_GROUP, _VERSION, namespace, _PLURALS[kind], REPORT_NAME)
            else:
                api.delete_cluster_custom_object(_GROUP, _VERSION, _PLURALS[kind], REPORT_NAME)
        except ApiException as exc:
            if exc.status != 404:  # gone already: what was wanted
                written.failed.append((key, str(_explain(exc, f"deleting {_name(key)}"))))
                continue
        written.deleted.append(key)
    return written


def _name(key: tuple[str, str]) -> str:
    kind, namespace = key
    return f"{kind} {namespace}/{REPORT_NAME}" if namespace else f"{kind} {REPORT_NAME}"


def _create(api: k8s.CustomObjectsApi, plural: str, namespace: str, body: dict[str, Any]) -> None:
    if namespace:
        api.create_namespaced_custom_object(_GROUP, _VERSION, namespace, plural, body)
    else:
        api.create_cluster_custom_object(_GROUP, _VERSION, plural, body)


def _replace(api: k8s.CustomObjectsApi, plural: str, namespace: str, body: dict[str, Any]) -> None:
    if namespace:
        api.replace_namespaced_custom_object(_GROUP, _VERSION, namespace, plural, REPORT_NAME, body)
    else:
        api.replace_cluster_custom_object(_GROUP, _VERSION, plural, REPORT_NAME, body)

