"""Steps the end-to-end tests share: gating a namespace, cordons, waiting for the scheduler."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .conftest import IGNORE_LABEL, Session
from .kube import Response, wait_until

RULE_ID = re.compile(r"\bGG\d{3}\b")


def ungate(e2e: Session, namespace: str) -> None:
    """Remove ``gpugate.io/ignore`` from the namespace and wait until gpugate is called there."""
    response = e2e.api.patch({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                             {"metadata": {"labels": {IGNORE_LABEL: None}}})
    assert response.ok, response
    assert wait_until(lambda: e2e.probe(namespace) == (True, True), 20), (
        f"gpugate not called in {namespace} after removing {IGNORE_LABEL}")


def cordon(e2e: Session, node: str, on: bool = True) -> None:
    response = e2e.api.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
                             {"spec": {"unschedulable": True if on else None}})
    assert response.ok, response


def bound_pods(e2e: Session, namespace: str, count: int, timeout: float = 30.0,
               selector: str | None = None) -> list[dict[str, Any]]:
    """Wait until ``count`` pods of the namespace are bound by the scheduler; return them."""
    def bound() -> list[dict[str, Any]]:
        pods = [p for p in e2e.api.list("v1", "Pod", namespace, selector) if p["spec"].get("nodeName")]
        return pods if len(pods) >= count else []
    pods = wait_until(bound, timeout, 0.2)
    placed = [(p["metadata"]["name"], p["spec"].get("nodeName"))
              for p in e2e.api.list("v1", "Pod", namespace)]
    assert pods, f"fewer than {count} pods bound in {namespace}: {placed}"
    return pods


def rules(response: Response) -> set[str]:
    """Rule IDs named in a response's warnings and denial message."""
    text = " ".join(response.warnings) + " " + (response.message if not response.ok else "")
    return set(RULE_ID.findall(text))


def eventually(call: Callable[[], Response], until: Callable[[Response], bool],
               timeout: float = 20.0) -> Response:
    """Repeat ``call`` (a dry run) until its answer satisfies ``until`` (gpugate's topology
    follows the API server through a watch: a node or queue change reaches it a moment later)."""
    last: list[Response] = []

    def attempt() -> bool:
        last[:] = [call()]
        return until(last[0])
    wait_until(attempt, timeout, 0.2)
    return last[0]


def denied_for(response: Response, *rule_ids: str) -> bool:
    return response.status == 403 and any(r in response.message for r in rule_ids)
