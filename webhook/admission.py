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
from policies.findings import Finding, Severity, quoted
from policies.kinds import KINDS
from policies.patch import PatchError, apply_patch
from webhook import jsonio

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

MUTATE = "mutate"
VALIDATE = "validate"

# The API server caps an object at ~1.5 MiB in etcd; a review carries object and
# oldObject, so 4 MiB leaves room and still bounds what one request can make us parse.
MAX_BODY_BYTES = 4 * 1024 * 1024
# The API server's limits on warnings (k8s.io/apiserver, endpoints/filters/warning.go):
# once the warnings of a request pass 4096 characters in all, it cuts each to 256 and drops
# the rest. gpugate never gets there: each warning is at most 256 characters, and when the
# next would take the total past 4096 it stops and says how many it left out. The rule ID
# and the failing number come within the first WARNING_HEAD_CHARS (what kubectl users read).
MAX_WARNING_CHARS = 256
MAX_WARNINGS_TOTAL_CHARS = 4096
WARNING_HEAD_CHARS = 120
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
    verdict: str                    # allowed | denied | patched | skipped | excluded | owned | unchanged
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
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH and not _shallow(body, MAX_JSON_DEPTH) \
            and _nested_deeper_than(review, MAX_JSON_DEPTH):
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


def _shallow(body: bytes, limit: int) -> bool:
    """True when the JSON text ``body`` (valid: it was parsed) certainly nests no more than
    ``limit`` levels, worked out on the bytes at C speed; False when it may (then the values
    are walked). Without escaped quotes, every other ``"`` opens a string: dropping the
    strings leaves the structure's brackets, and each round of dropping the innermost ``{}``
    and ``[]`` takes one or two levels off the deepest nesting."""
    if b'\\"' in body:
        return False
    # the structure first (quotes and brackets: one C pass), then the strings out of it
    brackets = b"".join(body.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    for _ in range(limit // 2):
        if not brackets:
            return True
        brackets = brackets.replace(b"{}", b"").replace(b"[]", b"")
    return not brackets


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'{}[]"')


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (level by level: cannot
    overflow). The values come from JSON: containers are exactly dicts and lists."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            below += [c for c in (item.values() if type(item) is dict else item)
                      if type(c) is dict or type(c) is list]
        level = below
        depth += 1
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
    """``text`` cut to ``limit`` characters at a word boundary when one is near, with an
    ellipsis: only for what gpugate does not judge (the object's own name in a denial, a
    single finding longer than a whole denial); never for a warning."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def warning_text(finding: Finding) -> str:
    """One kubectl warning: ``<rule> <slug>: <message>``, whole (rule messages are written to
    fit, see :func:`warning_lines`)."""
    return f"{finding.rule} {finding.slug}: {finding.message}"


def _fitted_warning(finding: Finding) -> str:
    """:func:`warning_text` when it fits in MAX_WARNING_CHARS (always, for gpugate's own
    rules: tests/test_messages.py). Else, a bug: without the slug, or a notice that names
    the rule and says where to read the message, never a message cut short."""
    text = warning_text(finding)
    if len(text) <= MAX_WARNING_CHARS:
        return text
    text = f"{finding.rule}: {finding.message}"
    if len(text) <= MAX_WARNING_CHARS:
        return text
    return (f"{finding.rule} {finding.slug}: message too long ({len(finding.message)} characters); "
            "run gpugate lint")


def _left_out(count: int) -> str:
    return f"gpugate: {count} more warning{'s' if count != 1 else ''} not shown; run gpugate lint for all"


def warning_lines(findings: Sequence[Finding]) -> list[str]:
    """The ``response.warnings`` for these findings (only warning-severity ones), in order:
    each at most MAX_WARNING_CHARS, at most MAX_WARNINGS_TOTAL_CHARS in all. When the next
    would not fit, the rest are left out and a last line says how many."""
    # identical texts once: the API server would drop the repeats anyway
    texts = list(dict.fromkeys(_fitted_warning(f) for f in findings if f.severity == Severity.WARNING))
    if sum(len(t) for t in texts) <= MAX_WARNINGS_TOTAL_CHARS:
        return texts
    room = MAX_WARNINGS_TOTAL_CHARS - len(_left_out(len(texts)))  # the notice's longest count
    kept: list[str] = []
    for text in texts:
        if len(text) > room:
            break
        kept.append(text)
        room -= len(text)
    return [*kept, _left_out(len(texts) - len(kept))]


def deny_message(findings: Sequence[Finding], subject: str) -> str:
    """All error findings in one message that names the object once, bounded to
    MAX_DENY_MESSAGE_CHARS: whole findings, as many as fit, then ``(and N more)``; only a
    first finding longer than the whole bound is shown cut."""
    # the subject is the client's own kind, namespace and name, unvalidated before admission:
    # bound it (a valid one is far shorter)
    head = f"gpugate denied {truncate(subject, MAX_DENY_MESSAGE_CHARS // 4)}: "
    parts = [f"{f.rule} {f.slug}: {f.message}" for f in findings]
    message = head + "; ".join(parts)
    if len(message) <= MAX_DENY_MESSAGE_CHARS:
        return message
    room = MAX_DENY_MESSAGE_CHARS - len(head) - len(f" (and {len(parts)} more)")
    kept: list[str] = []
    used = 0
    for part in parts:
        if used + len(part) > room:
            break
        kept.append(part)
        used += len(part) + 2  # "; "
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


@dataclass(frozen=True)
class ScaleTarget:
    """The object a ``scale`` subresource request scales up: read it from the API server,
    then judge the scale-up with :func:`admit` (``parent=``)."""

    group: str
    version: str
    resource: str
    namespace: str
    name: str
    replicas: int


_BY_RESOURCE = {(spec.group, spec.resource): spec for spec in KINDS}


def _replicas(scale: Any) -> int | None:
    spec = scale.get("spec") if isinstance(scale, dict) else None
    value = spec.get("replicas", 0) if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scale_target(request: dict[str, Any], endpoint: str) -> ScaleTarget | None:
    """For a ``/validate`` review of a scale-up through the ``scale`` subresource of a kind
    whose scale gpugate models, the object to read; None for anything else (scaling down,
    other subresources, ``/mutate``)."""
    if endpoint != VALIDATE or request.get("subResource") != "scale" or request.get("operation") != "UPDATE":
        return None
    resource = request.get("resource")
    if not isinstance(resource, dict):
        return None
    spec = _BY_RESOURCE.get((resource.get("group", ""), resource.get("resource", "")))
    new, old = _replicas(request.get("object")), _replicas(request.get("oldObject"))
    namespace, name = request.get("namespace"), request.get("name")
    if (spec is None or not spec.scale_replicas or new is None or (old is not None and new <= old)
            or not isinstance(namespace, str) or not isinstance(name, str) or not name):
        return None
    return ScaleTarget(spec.group, str(resource.get("version", "")), spec.resource, namespace, name, new)


def _scaled(parent: dict[str, Any], target: ScaleTarget) -> dict[str, Any] | None:
    """A copy of ``parent`` with the replica count the scale request writes, or None when
    the path is not there to write to (a shape the model reports as GG002 anyway)."""
    path = _BY_RESOURCE[(target.group, target.resource)].scale_replicas
    try:
        scaled: dict[str, Any] = apply_patch(parent, [{"op": "add", "path": path, "value": target.replicas}])
    except (PatchError, LookupError, TypeError, ValueError):
        return None
    return scaled


def admit(request: dict[str, Any], endpoint: str, policy: Policy, clusters: Sequence[Any] | None = None,
          *, now: float | None = None, parent: dict[str, Any] | None = None,
          parent_error: str = "") -> Outcome:
    """Judge one parsed review request (see :func:`parse_review`) for ``endpoint``.

    A scale-up (:func:`scale_target`) is judged as the equivalent UPDATE of ``parent``, the
    object read from the API server; without it (``parent_error`` says why) it is allowed
    with a warning that it was not checked."""
    uid: str = request["uid"]
    kind = _kind_label(request)
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    target = scale_target(request, endpoint)
    if target is not None:
        if parent is None:
            # bounded by construction: within 256 characters whatever the name
            why = quoted(parent_error or "the object could not be read", 100)
            text = (f"gpugate: scale-up to {target.replicas} not checked ({why}): "
                    f"{target.resource}/{quoted(target.name)}")
            return Outcome(envelope(uid, warnings=[text]), "allowed", kind)
        scaled = _scaled(parent, target)
        if scaled is None:
            return Outcome(envelope(uid), "allowed", kind)
        request = {**request, "subResource": "", "object": scaled, "oldObject": parent}
        obj, meta = scaled, scaled.get("metadata")
        kind = _kind_label(request)
    if (request.get("operation") not in JUDGED_OPERATIONS or not isinstance(obj, dict)
            # status updates come from controllers, scale-downs are always fine
            or request.get("subResource")
            # an object being deleted must be able to drop its finalizers
            or (isinstance(meta, dict) and meta.get("deletionTimestamp"))):
        return Outcome(envelope(uid), "skipped", kind)

    budget_ms = policy.feasibility.get("budgetMilliseconds", 200)
    deadline = (time.monotonic() if now is None else now) + float(budget_ms) / 1000.0
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    previous = _with_request_namespace(old, request) if isinstance(old, dict) else None
    # /mutate only patches, and mutations never read the topology: skipping the feasibility
    # rules there halves what one object costs (the API server calls both endpoints).
    evaluation = evaluate(_with_request_namespace(obj, request), policy,
                          None if endpoint == MUTATE else clusters, deadline=deadline, previous=previous,
                          checks=endpoint != MUTATE)
    if evaluation.excluded:
        return Outcome(envelope(uid), "excluded", kind, evaluation=evaluation)
    if evaluation.owned:
        return Outcome(envelope(uid), "owned", kind, evaluation=evaluation)
    if evaluation.unchanged:
        return Outcome(envelope(uid), "unchanged", kind, evaluation=evaluation)
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
    warnings = warning_lines(findings)
    extra: dict[str, Any] = {"warnings": warnings} if warnings else {}
    if errors:
        status = {"code": 403, "reason": "Forbidden",
                  "message": deny_message(errors, _subject(request, evaluation))}
        return Outcome(envelope(uid, False, status=status, **extra), "denied", kind, findings, evaluation)
    return Outcome(envelope(uid, **extra), "allowed", kind, findings, evaluation)
