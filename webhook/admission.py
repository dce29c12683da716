"""AdmissionReview in, AdmissionReview out (``admission.k8s.io/v1``).

Pure functions over parsed JSON, so that the server stays a thin transport and the
semantics can be tested without sockets:

- :func:`parse_review` checks a request body and raises :class:`ReviewError` (an HTTP
  status and a reason) for anything that is not a well-formed review;
- :func:`admit` evaluates the object with :func:`policies.engine.evaluate` and builds the
  response for ``/mutate`` (patch, never a denial) or ``/validate`` (deny on errors).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.config import Policy
from policies.engine import Evaluation, evaluate
from policies.findings import Finding, Severity
from policies.kinds import KINDS
from webhook import jsonio

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

MUTATE = "mutate"
VALIDATE = "validate"
ENDPOINTS = (MUTATE, VALIDATE)

# The API server caps an object at ~1.5 MiB in etcd; a review carries object and
# oldObject, so 4 MiB leaves room and still bounds what one request can make us parse.
MAX_BODY_BYTES = 4 * 1024 * 1024
# kubectl prints each warning on one line; the API server truncates long ones itself,
# we keep them short and informative instead.
MAX_WARNING_CHARS = 119
MAX_WARNINGS = 20
MAX_DENY_MESSAGE_CHARS = 2000

# Real Kubernetes objects nest ~20 levels (a RayJob's affinity values); the rules and
# copy.deepcopy recurse per level, so deeper input is refused before anything walks it.
MAX_JSON_DEPTH = 128
# The API server sends a UUID (36 characters); the uid is echoed and logged, so bound it.
MAX_UID_CHARS = 128
# Attacker-chosen values quoted in a 400 reason (and its log line) are cut to this.
MAX_QUOTED_CHARS = 80

# Operations whose object is judged; DELETE and CONNECT are always allowed untouched.
JUDGED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
_TABLE_KINDS = frozenset(spec.kind for spec in KINDS)


class ReviewError(ValueError):
    """A request that is not a well-formed AdmissionReview: answered with ``status``."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass
class Outcome:
    """What one review produced: the response JSON plus labels for metrics and logs."""

    review: dict[str, Any]
    verdict: str                    # allowed | denied | patched | skipped | excluded
    kind: str = ""
    findings: list[Finding] = field(default_factory=list)
    evaluation: Evaluation | None = None

    @property
    def response(self) -> dict[str, Any]:
        return self.review["response"]


def parse_review(body: bytes, content_type: str | None, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The ``request`` of a well-formed review; :class:`ReviewError` otherwise."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ReviewError(f"content type must be application/json, not {_quoted(content_type or 'missing')}")
    if len(body) > limit:
        raise ReviewError(f"request body of {len(body)} bytes exceeds the limit of {limit} bytes", 413)
    try:
        review = jsonio.loads(body)
    except RecursionError:
        raise ReviewError(f"request body is not valid JSON: nested more than {MAX_JSON_DEPTH} "
                          "levels deep") from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise ReviewError(f"request body is not valid JSON: {exc}") from None
    # Counting brackets is C-speed and rules out deep nesting for almost every body.
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH and _nested_deeper_than(review, MAX_JSON_DEPTH):
        raise ReviewError(f"request body is not valid JSON for a review: nested more than "
                          f"{MAX_JSON_DEPTH} levels deep")
    if not isinstance(review, dict):
        raise ReviewError(f"request body must be a JSON object, not {_json_type(review)}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise ReviewError(f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, got "
                          f"{_quoted(review.get('apiVersion'))} and {_quoted(review.get('kind'))}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("review has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid is missing or not a string")
    if len(uid) > MAX_UID_CHARS:
        raise ReviewError(f"request.uid is {len(uid)} characters long, more than {MAX_UID_CHARS}")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise ReviewError("request.operation is missing or not a string")
    if operation in JUDGED_OPERATIONS and not isinstance(request.get("object"), dict):
        raise ReviewError(f"request.object is missing or not an object for a {operation}")
    return request


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (iterative: cannot overflow)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
                     if isinstance(child, (dict, list)))
    return False


def _quoted(value: Any) -> str:
    """``repr`` of a client-supplied value, cut short: it goes into a reason and a log line."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + f"... ({len(text)} chars)"


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def envelope(uid: str, allowed: bool = True, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": uid, "allowed": allowed, **extra}}


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a word boundary when one is near, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def warning_text(finding: Finding) -> str:
    """One kubectl warning line: the rule id always survives truncation; the slug goes first."""
    full = f"{finding.rule} {finding.slug}: {finding.message}"
    if len(full) <= MAX_WARNING_CHARS:
        return full
    return truncate(f"{finding.rule}: {finding.message}", MAX_WARNING_CHARS)


def deny_message(findings: Sequence[Finding], subject: str) -> str:
    """All error findings in one message, bounded; says how many were left out."""
    # the subject is the client's own name/namespace, unvalidated before admission: bound it
    head = f"gpugate denied {truncate(subject, MAX_DENY_MESSAGE_CHARS // 4)}: "
    parts = [f"{f.rule} {f.slug}: {f.message}" for f in findings]
    message = head + "; ".join(parts)
    if len(message) <= MAX_DENY_MESSAGE_CHARS:
        return message
    room = MAX_DENY_MESSAGE_CHARS - len(head) - len(f" (and {len(parts)} more)")
    kept: list[str] = []
    for part in parts:
        if sum(len(k) + 2 for k in kept) + len(part) > room:
            break
        kept.append(part)
    if not kept:  # the first finding always shows, shortened
        kept = [truncate(parts[0], room)]
    left = len(parts) - len(kept)
    return head + "; ".join(kept) + (f" (and {left} more)" if left else "")


def _subject(request: dict[str, Any], evaluation: Evaluation) -> str:
    if evaluation.object is not None:
        return str(evaluation.object)
    resource = request.get("resource")
    resource = resource if isinstance(resource, dict) else {}
    where = f"{request.get('namespace') or ''}/{request.get('name') or ''}"
    return f"{resource.get('resource', 'object')} {where}"


def _with_request_namespace(obj: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """On CREATE the object often has no namespace: the request carries it."""
    namespace = request.get("namespace")
    meta = obj.get("metadata")
    if isinstance(namespace, str) and namespace and isinstance(meta, dict) and not meta.get("namespace"):
        return {**obj, "metadata": {**meta, "namespace": namespace}}
    return obj


def _kind_label(request: dict[str, Any]) -> str:
    """The kind for metric labels: one of the table's kinds, else "other" (a client that
    reaches the port directly must not be able to mint unbounded label values)."""
    kind = request.get("kind")
    if isinstance(kind, dict) and isinstance(kind.get("kind"), str):
        name = kind["kind"]
    else:
        obj = request.get("object")
        name = obj["kind"] if isinstance(obj, dict) and isinstance(obj.get("kind"), str) else ""
    return name if name in _TABLE_KINDS or not name else "other"


def admit(request: dict[str, Any], endpoint: str, policy: Policy, clusters: Sequence[Any] | None = None,
          *, now: float | None = None) -> Outcome:
    """Judge one parsed review request (see :func:`parse_review`) for ``endpoint``."""
    uid: str = request["uid"]
    kind = _kind_label(request)
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if (request.get("operation") not in JUDGED_OPERATIONS or not isinstance(obj, dict)
            # status and scale updates come from controllers; judging them could wedge a job
            or request.get("subResource")
            # an object being deleted must be able to drop its finalizers
            or (isinstance(meta, dict) and meta.get("deletionTimestamp"))):
        return Outcome(envelope(uid), "skipped", kind)

    budget_ms = policy.feasibility.get("budgetMilliseconds", 200)
    deadline = (time.monotonic() if now is None else now) + float(budget_ms) / 1000.0
    # /mutate only patches, and mutations never read the topology: skipping the feasibility
    # rules there halves what one object costs (the API server calls both endpoints).
    evaluation = evaluate(_with_request_namespace(obj, request), policy,
                          None if endpoint == MUTATE else clusters, deadline=deadline)
    if evaluation.excluded:
        return Outcome(envelope(uid), "excluded", kind, evaluation=evaluation)
    if evaluation.skipped or (not evaluation.findings and not evaluation.patch):
        return Outcome(envelope(uid), "allowed", kind, evaluation=evaluation)

    if endpoint == MUTATE:
        if not evaluation.patch:
            return Outcome(envelope(uid), "allowed", kind, evaluation=evaluation)
        patch = base64.b64encode(jsonio.dumps(evaluation.patch)).decode()
        fixed = [f for f in evaluation.findings if f.fixable]
        return Outcome(envelope(uid, patchType="JSONPatch", patch=patch), "patched", kind, fixed, evaluation)

    # /validate: what the mutating webhook fixes is its business, not a reason to deny.
    findings = [f for f in evaluation.findings if not f.fixable]
    errors = [f for f in findings if f.severity >= Severity.ERROR]
    warnings = [warning_text(f) for f in findings if f.severity == Severity.WARNING][:MAX_WARNINGS]
    extra: dict[str, Any] = {"warnings": warnings} if warnings else {}
    if errors:
        status = {"code": 403, "reason": "Forbidden",
                  "message": deny_message(errors, _subject(request, evaluation))}
        return Outcome(envelope(uid, False, status=status, **extra), "denied", kind, findings, evaluation)
    return Outcome(envelope(uid, **extra), "allowed", kind, findings, evaluation)
