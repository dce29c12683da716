"""YuniKorn's task groups and scheduling policy parameters as its Kubernetes shim reads them off a
pod (for :mod:`policies.yunikorn`): Go's JSON decoding (field names matched without regard to case,
the last duplicate winning, numbers kept as written), the task groups of
``yunikorn.apache.org/task-groups`` and what the API server would refuse of their placeholder pods,
and ``yunikorn.apache.org/schedulingPolicyParameters``.

Upstream: apache/yunikorn-k8shim (read at 23b6b47): ``GetTaskGroupsFromAnnotation`` and
``validateTaskGroupResources`` (pkg/cache/utils.go), ``GetSchedulingPolicyParam`` and
``GeneratePlaceholderName`` (pkg/cache/gang_utils.go), ``newPlaceholder`` (pkg/cache/placeholder.go).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies import memo
from policies.findings import SHORT_QUOTED_CHARS, quoted, quoted_repr
from policies.kinds import (
    YUNIKORN_QUEUE_ANNOTATION,
)
from policies.names import (
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    is_extended_resource,
    is_native_resource,
    is_qualified_name,
)
from policies.quantity import QuantityError, parse_quantity

APP_ID_LABEL = "yunikorn.apache.org/app-id"
DEFAULT_TIMEOUT_SECONDS = 15 * 60     # yunikorn-core defaultPlaceholderTimeout
_INT64_MAX = 2**63 - 1
_CPU_CANONICAL = "vcore"              # the core's name for cpu (siCommon.CPU)
_CONTAINER_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage"})
_HUGEPAGES = "hugepages-"
_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
_SHORT = SHORT_QUOTED_CHARS


def _qn(value: str, limit: int = _SHORT) -> str:
    """A user's name in a message, bounded (several may share one message)."""
    return quoted(value, limit)


def _qr(value: object, limit: int = _SHORT) -> str:
    """A user's value in a message, quoted and bounded."""
    return quoted_repr(value, limit)


# -- Go's JSON decoding ---------------------------------------------------------------------------

class _Number(str):
    """A JSON number with a fraction or an exponent, as written: Go decodes it into a
    float or a quantity, never into an integer field."""


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order, duplicates kept: Go matches struct
    fields without regard to case and the last matching key wins."""


class _Undecodable(Exception):
    """What Go's ``json.Unmarshal`` fails on: the shim then ignores the whole annotation."""


class _Unsure(Exception):
    """Input whose reading by the shim gpugate cannot be sure of (hostile nesting, escapes)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _fold(key: str) -> str | None:
    """``key`` as Go's case-insensitive match of an ASCII field name sees it (simple case
    folding: the Kelvin sign is a ``k``, the long s an ``s``); None when it matches none."""
    out = []
    for c in key:
        if c == "\u212a":
            c = "k"
        elif c == "\u017f":
            c = "s"
        elif not c.isascii():
            return None
        out.append(c.lower())
    return "".join(out)


def _fields(value: Any, names: tuple[str, ...], what: str) -> dict[str, Any]:
    """Go's decoding of a JSON value into a struct with fields ``names`` (their JSON names):
    null is the zero struct, keys match without regard to case, the last one wins, unknown
    keys are dropped."""
    if value is None:
        return {}
    if not isinstance(value, _Pairs):
        raise _Undecodable(f"{what} is {_json_type(value)}, not an object")
    folded = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for key, item in value:
        found = _fold(key)
        name = folded.get(found) if found is not None else None
        if name is not None:
            out[name] = item
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, _Number)):
        return f"the number {_qn(str(value))}"
    if isinstance(value, str):
        return f"the string {_qr(value)}"
    return "an object" if isinstance(value, _Pairs) else "a list"


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and not isinstance(value, _Number):
        return value
    raise _Undecodable(f"{what} is {_json_type(value)}, not a string")


def _integer(value: Any, bits: int, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            return value
        raise _Undecodable(f"{what} {value} is out of range for a {bits}-bit integer")
    raise _Undecodable(f"{what} is {_json_type(value)}, not a whole number")


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list) and not isinstance(value, _Pairs):
        return value
    raise _Undecodable(f"{what} is {_json_type(value)}, not a list")


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, _Pairs):
        raise _Undecodable(f"{what} is {_json_type(value)}, not an object")
    return {key: _string(item, f"{what}[{_qn(key)}]") for key, item in value}


def _quantity(value: Any, what: str) -> tuple[str, Fraction]:
    """(text, amount) of a resource.Quantity as Go decodes it: null is zero, a string or a
    number is parsed as written (surrounding spaces trimmed)."""
    if value is None:
        return "0", Fraction(0)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Undecodable(f"{what} is {_json_type(value)}, not a quantity")
    text = (value if isinstance(value, str) else str(value)).strip()
    try:
        return text, parse_quantity(text)
    except QuantityError:
        if len(text) > 64 or "e" in text.lower():
            raise _Unsure from None  # gpugate's bounds on exponents, not Kubernetes' grammar
        raise _Undecodable(f"{what} {_qr(text)} is not a quantity") from None


# -- task groups ----------------------------------------------------------------------------------

_GROUP_FIELDS = ("name", "minMember", "labels", "annotations", "minResource", "nodeSelector", "tolerations",
                 "affinity", "topologySpreadConstraints")
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_AFFINITY_FIELDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NODE_AFFINITY_FIELDS = (_REQUIRED, _PREFERRED)
_TERM_FIELDS = ("matchExpressions", "matchFields")
_REQUIREMENT_FIELDS = ("key", "operator", "values")


@dataclass(frozen=True)
class TaskGroup:
    """One task group as the shim reads it (its lists in a fixed order: two pod sets whose
    annotations differ only in the order of keys or tolerations declare equal groups)."""

    name: str
    min_member: int
    # (name, text, amount) of minResource, by name; None: unset (Go's nil map, which the
    # shim tells from an empty one)
    resources: tuple[tuple[str, str, Fraction], ...] | None
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    # The placeholder pod's placement, as the API server would store it: nodeSelector,
    # tolerations, and the required node affinity (keys spelled as Kubernetes does).
    placement: tuple[tuple[str, Any], ...]
    # Set: placement the check does not read (pod affinity, spread constraints, preferred
    # node affinity): an extra constraint, and one whose validity is not checked.
    unread: str = ""


@dataclass(frozen=True)
class Definition:
    """One ``yunikorn.apache.org/task-groups`` annotation as the shim reads it."""

    groups: tuple[TaskGroup, ...] = ()
    ignored: str = ""        # why the shim ignores the whole annotation ("" when it reads it)
    unsure: bool = False     # gpugate cannot be sure how the shim reads it

    @property
    def read(self) -> bool:
        return not self.ignored and not self.unsure

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.groups]


@memo.process_cache(1024)
def read_task_groups(text: str) -> Definition:
    """The task groups of an annotation value, as ``GetTaskGroupsFromAnnotation`` reads them."""
    if "\\" in text:
        # Go hands a quantity the raw bytes of its JSON string, escapes and all: not judged
        return Definition(unsure=True)
    try:
        value = json.loads(text, parse_float=_Number, parse_constant=_no_constant, object_pairs_hook=_Pairs)
    except RecursionError:
        return Definition(unsure=True)  # Go nests deeper than Python's parser
    except ValueError as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        return Definition(ignored=f"not JSON ({reason.lower()})")
    try:
        groups = tuple(_group(item, i) for i, item in enumerate(_list(value, "the annotation")))
        reason = _checks(groups)
    except _Undecodable as e:
        return Definition(ignored=str(e))
    except _Unsure:
        return Definition(unsure=True)
    if reason:
        return Definition(ignored=reason)
    return Definition(groups)


def _group(item: Any, index: int) -> TaskGroup:
    what = f"task group {index}"
    fields = _fields(item, _GROUP_FIELDS, what)
    name = _string(fields.get("name"), f"{what} name")
    if name:
        what = f"task group {_qr(name)}"
    min_member = _integer(fields.get("minMember"), 32, f"{what} minMember")
    raw = fields.get("minResource")
    resources = None
    if raw is not None:
        if not isinstance(raw, _Pairs):
            raise _Undecodable(f"{what} minResource is {_json_type(raw)}, not an object")
        amounts = {key: _quantity(item, f"{what} minResource {_qn(key)}") for key, item in raw}
        resources = tuple(sorted((key, text, amount) for key, (text, amount) in amounts.items()))
    labels = _string_map(fields.get("labels"), f"{what} labels")
    annotations = _string_map(fields.get("annotations"), f"{what} annotations")
    selector = _string_map(fields.get("nodeSelector"), f"{what} nodeSelector")
    tolerations = [_toleration(t, f"{what} toleration {i}")
                   for i, t in enumerate(_list(fields.get("tolerations"), f"{what} tolerations"))]
    required, unread = _affinity(fields.get("affinity"), what)
    spread = _list(fields.get("topologySpreadConstraints"), f"{what} topologySpreadConstraints")
    if spread and not unread:
        unread = "topologySpreadConstraints"
    placement: dict[str, Any] = {}
    if selector:
        placement["nodeSelector"] = dict(sorted(selector.items()))
    if tolerations:
        placement["tolerations"] = sorted(tolerations, key=lambda t: json.dumps(t, sort_keys=True))
    if required is not None:
        placement["affinity"] = {"nodeAffinity": {_REQUIRED: required}}
    return TaskGroup(name, min_member, resources, tuple(sorted(labels.items())),
                     tuple(sorted(annotations.items())), tuple(placement.items()), unread)


def _toleration(item: Any, what: str) -> dict[str, Any]:
    fields = _fields(item, _TOLERATION_FIELDS, what)
    out: dict[str, Any] = {k: _string(fields.get(k), f"{what} {k}")
                           for k in ("key", "operator", "value", "effect")}
    if fields.get("tolerationSeconds") is not None:
        out["tolerationSeconds"] = _integer(fields["tolerationSeconds"], 64, f"{what} tolerationSeconds")
    return out


def _affinity(value: Any, what: str) -> tuple[dict[str, Any] | None, str]:
    """(the required node affinity as a NodeSelector, or None; the name of a part the
    check does not read, or "")."""
    fields = _fields(value, _AFFINITY_FIELDS, f"{what} affinity")
    unread = next((k for k in ("podAffinity", "podAntiAffinity") if _set(fields.get(k))), "")
    node = _fields(fields.get("nodeAffinity"), _NODE_AFFINITY_FIELDS, f"{what} nodeAffinity")
    if _set(node.get(_PREFERRED)):
        unread = unread or "preferred node affinity"
    raw = node.get(_REQUIRED)
    if raw is None:
        return None, unread
    selector = _fields(raw, ("nodeSelectorTerms",), f"{what} required node affinity")
    terms = []
    for i, term in enumerate(_list(selector.get("nodeSelectorTerms"), f"{what} nodeSelectorTerms")):
        parts = _fields(term, _TERM_FIELDS, f"{what} nodeSelectorTerms {i}")
        terms.append({k: [_requirement(r, f"{what} {k} {j}") for j, r in enumerate(_list(parts.get(k), k))]
                      for k in _TERM_FIELDS if parts.get(k) is not None})
    return {"nodeSelectorTerms": terms}, unread


def _requirement(item: Any, what: str) -> dict[str, Any]:
    fields = _fields(item, _REQUIREMENT_FIELDS, what)
    return {"key": _string(fields.get("key"), f"{what} key"),
            "operator": _string(fields.get("operator"), f"{what} operator"),
            "values": [_string(v, f"{what} values") for v in _list(fields.get("values"), f"{what} values")]}


def _set(value: Any) -> bool:
    """A part of the placement with something in it (null, ``{}`` and ``[]`` are not)."""
    return value is not None and not (isinstance(value, list) and not value)


def _checks(groups: tuple[TaskGroup, ...]) -> str:
    """What ``GetTaskGroupsFromAnnotation`` refuses after decoding, in its order: the first
    refusal, or ""."""
    totals: dict[str, int] = {}
    for i, group in enumerate(groups):
        what = f"task group {_qr(group.name)}" if group.name else f"task group {i}"
        if not group.name:
            return f"{what} has no name"
        if group.resources is None:
            return f"{what} has no minResource"
        if group.min_member == 0:
            return f"{what} has minMember 0 (or none)"
        if group.min_member < 0:
            return f"{what} has minMember {group.min_member}, below 0"
        reason = _resource_checks(group, what, totals)
        if reason:
            return reason
    return ""


def _resource_checks(group: TaskGroup, what: str, totals: dict[str, int]) -> str:
    """``validateTaskGroupResources``: no negative amount, no two names the core counts
    as one (``cpu`` is its ``vcore``; ``pods`` is counted for it), nothing past int64."""
    members = group.min_member
    seen = {"pods"}
    totals["pods"] = totals.get("pods", 0) + members
    if totals["pods"] > _INT64_MAX:
        return "the task groups' minMember add up past a 64-bit integer"
    for name, _, amount in group.resources or ():
        if amount < 0:
            return f"{what} minResource {_qn(name)} is negative"
        cpu = name == "cpu"
        canonical = _CPU_CANONICAL if cpu else name
        if canonical in seen:
            return (f"{what} minResource {_qn(name)} is counted as "
                    f"{_qn(canonical)} twice")
        seen.add(canonical)
        scale = 1000 if cpu else 1
        if amount > _INT64_MAX // (members * scale):
            return f"{what} minResource {_qn(name)} x minMember is past a 64-bit integer"
        value = -(-amount.numerator * scale // amount.denominator)
        totals[canonical] = totals.get(canonical, 0) + members * value
        if totals[canonical] > _INT64_MAX:
            return f"the task groups' minResource {_qn(name)} add up past a 64-bit integer"
    return ""


# -- the placeholder pods -------------------------------------------------------------------------

def _label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


def _resource_refusal(name: str, amount: Fraction) -> str | None:
    """Why a container may not request ``amount`` of ``name`` (None: unsure, hugepages
    depend on a LimitRange gpugate cannot see), or ""."""
    if name.startswith(_HUGEPAGES):
        return None
    if "/" not in name:
        if name == _CPU_CANONICAL:
            return "is YuniKorn's own name for cpu, not a container resource"
        return "" if name in _CONTAINER_STANDARD else "is not a container resource (cpu, memory, ...)"
    if not is_qualified_name(name):
        return "is not a resource name"
    native = is_native_resource(name)
    if not native and not is_extended_resource(name):
        return "is not an extended resource name"
    if not native and amount.denominator != 1:
        return "is not a whole number (an extended resource)"
    return ""


def _placement_refusal(placement: dict[str, Any]) -> str | None:
    """Why the API server refuses this placement (None: unsure), or ""."""
    for key, value in placement.get("nodeSelector", {}).items():
        if not is_qualified_name(key) or not _label_value(value):
            return f"nodeSelector {_qn(key)} is not a label"
    for t in placement.get("tolerations", []):
        key, operator, value, effect = t["key"], t["operator"], t["value"], t["effect"]
        if operator in ("Gt", "Lt"):
            return None  # newer API servers accept them, behind a feature gate
        if (key and not is_qualified_name(key)) or (not key and operator != "Exists") \
                or operator not in ("", "Equal", "Exists") or (operator == "Exists" and value) \
                or (operator != "Exists" and not _label_value(value)) or (effect and effect not in _EFFECTS) \
                or ("tolerationSeconds" in t and effect != "NoExecute"):
            return f"toleration {_qr(key)} is not a valid toleration"
    affinity = placement.get("affinity")
    if affinity is not None:
        terms = affinity["nodeAffinity"][_REQUIRED]["nodeSelectorTerms"]
        if not terms:
            return "required node affinity has no nodeSelectorTerms"
        for term in terms:
            for r in term.get("matchExpressions", []):
                problem = _requirement_problem(r)
                if problem != "":
                    return problem and f"node affinity on {_qn(r['key'])} {problem}"
            for r in term.get("matchFields", []):
                values = r["values"]
                if r["key"] != "metadata.name" or r["operator"] not in ("In", "NotIn") or len(values) != 1 \
                        or DNS1123_SUBDOMAIN.fullmatch(values[0]) is None:
                    return f"node affinity field {_qn(r['key'])} is not a valid requirement"
    return ""


def _requirement_problem(r: dict[str, Any]) -> str | None:
    """Why the API server refuses a node selector requirement ("" it does not; None: only
    its values are no label values, which older API servers accept)."""
    operator, values = r["operator"], r["values"]
    if operator in ("In", "NotIn"):
        count_ok = bool(values)
    elif operator in ("Exists", "DoesNotExist"):
        count_ok = not values
    elif operator in ("Gt", "Lt"):
        count_ok = len(values) == 1
    else:
        return f"has operator {_qr(operator)}"
    if not count_ok or not is_qualified_name(r["key"]):
        return "is not a valid requirement"
    return "" if all(_label_value(v) for v in values) else None


def placeholder_refusal(group: TaskGroup, app_id: str | None, queue: str) -> str | None:
    """Why the API server refuses the placeholder pods the shim creates for ``group`` of the
    application ``app_id`` (None: its ID is generated) in queue ``queue``: "" when it admits
    them, None when gpugate cannot be sure either way."""
    # GeneratePlaceholderName: tg-<app id, 28 characters>-<group, 20 characters>-<10 random [a-z0-9]>
    app = app_id if app_id is not None else "yunikorn-x-autogen"   # generated: <prefix>-<namespace>-<suffix>
    pod_name = f"tg-{app[:28]}-{group.name[:20]}-a0a0a0a0a0"
    if len(pod_name) > 253 or DNS1123_SUBDOMAIN.fullmatch(pod_name) is None:
        return (f"the placeholder pod name {_qr(pod_name[:-10] + '…', _SHORT + 12)} is not "
                "a pod name (lower-case letters, digits, '-', '.')")
    labels = dict(group.labels)
    if app_id is not None:
        labels[APP_ID_LABEL] = app_id
    labels[YUNIKORN_QUEUE_ANNOTATION] = queue
    for key, value in labels.items():
        if not is_qualified_name(key) or not _label_value(value):
            return f"placeholder label {_qn(key)}: {_qr(value)} is not a label"
    for key, _ in group.annotations:
        if not is_qualified_name(key.lower()):
            return f"placeholder annotation {_qn(key)} is not an annotation key"
    unsure = bool(group.unread)
    for name, _, amount in group.resources or ():
        if not name:
            continue  # the shim leaves an empty name out
        reason = _resource_refusal(name, amount)
        if reason:
            return f"minResource {_qn(name)} {reason}"
        unsure = unsure or reason is None
    reason = _placement_refusal(dict(group.placement))
    if reason is None or reason:
        return reason
    return None if unsure else ""


# -- scheduling policy parameters -----------------------------------------------------------------

_STYLE, _TIMEOUT = "gangSchedulingStyle", "placeholderTimeoutInSeconds"


@dataclass(frozen=True)
class Parameters:
    """``yunikorn.apache.org/schedulingPolicyParameters`` as the shim reads it."""

    hard: bool = False
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    problems: tuple[str, ...] = ()      # what the shim skips or replaces by its default


@memo.process_cache(256)
def read_parameters(text: str) -> Parameters:
    """``GetSchedulingPolicyParam``: space-separated ``name=value`` pairs; a pair that is not
    one is skipped, a name it does not know ignored, a style other than ``Hard`` or
    ``Soft`` is ``Soft``, a timeout that is no 64-bit integer is 0; the core gives a timeout
    that is not positive its default (15 minutes)."""
    hard, timeout = False, 0
    problems: list[str] = []
    for part in text.split(" "):
        if not part:
            continue
        pair = part.split("=")
        if len(pair) != 2:
            problems.append(f"{_qr(part)} is no name=value pair: skipped")
            continue
        name, value = pair
        if name == _STYLE:
            hard = value == "Hard"
            if value not in ("Hard", "Soft"):
                problems.append(f"{_STYLE} {_qr(value)} is neither Hard nor Soft: "
                                "Soft is used")
        elif name == _TIMEOUT:
            digits = value[1:] if value[:1] in ("+", "-") else value
            if not digits.isascii() or not digits.isdigit() or not -2**63 <= int(value) <= _INT64_MAX:
                timeout = 0
                problems.append(f"{_TIMEOUT} {_qr(value)} is not a whole number: the "
                                f"default {DEFAULT_TIMEOUT_SECONDS} s is used")
                continue
            timeout = int(value)
            if timeout <= 0:
                problems.append(f"{_TIMEOUT} {timeout} is not positive: the default "
                                f"{DEFAULT_TIMEOUT_SECONDS} s is used")
        else:
            problems.append(f"{_qr(name)} is not a parameter YuniKorn reads "
                            f"({_STYLE}, {_TIMEOUT}): ignored")
    seconds = timeout if 0 < timeout <= _INT64_MAX // 1000 else DEFAULT_TIMEOUT_SECONDS
    return Parameters(hard, seconds, tuple(problems))
