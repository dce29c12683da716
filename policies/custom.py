"""Custom checks written as JSON Schema in the policy file (SPEC section 6).

A ``custom:`` entry of the policy names a *target* inside every workload, and a JSON
Schema (draft 2020-12) that each target instance must satisfy::

    custom:
    - id: MYORG001
      slug: gpu-memory-limit
      severity: error
      target: Container            # Workload | PodSpec | Container
      kinds: [PyTorchJob, Job]     # optional filter: kind, or Kind.group
      message: "container {container} of {object} must set a memory limit"
      schema: {...}

Targets go through the workload model (:mod:`policies.workload`), so ``PodSpec`` and
``Container`` reach the pod templates of every kind in :mod:`policies.kinds` (a Volcano
Job's tasks, a RayCluster's head and worker groups, a PyTorchJob's replica specs) with
one schema. Schemas are checked and compiled once per policy load and shared by content.
"""

from __future__ import annotations

import json
import logging
import re
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol

from policies.findings import Finding, ObjectRef, Severity
from policies.kinds import KINDS
from policies.memo import process_cache
from policies.options import Option, PolicyError
from policies.pointers import join_pointer, split_pointer
from policies.registry import all_rules

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from policies.workload import Workload

log = logging.getLogger("gpugate.custom")

TARGETS = ("Workload", "PodSpec", "Container")
ID_PATTERN = r"^[A-Z][A-Z0-9_-]*$"
SLUG_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
RESERVED_PREFIX = "GG"  # built-in rules own it, now and in future releases

# Placeholders a message may use, by target: a Workload has no container or pod set.
_WORKLOAD_FIELDS = frozenset({"kind", "name", "namespace", "object"})
PLACEHOLDERS: dict[str, frozenset[str]] = {
    "Workload": _WORKLOAD_FIELDS,
    "PodSpec": _WORKLOAD_FIELDS | {"podSet"},
    "Container": _WORKLOAD_FIELDS | {"podSet", "container"},
}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_REASON_MAX = 200  # a validator reason may quote a whole object; keep messages readable

# The jsonschema item schema of one ``custom:`` entry; the policy schema embeds it so
# that shape errors name their path (``custom.0.target``).
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "slug", "severity", "message", "target", "schema"],
    "properties": {
        "id": {"type": "string", "pattern": ID_PATTERN},
        "slug": {"type": "string", "pattern": SLUG_PATTERN},
        "severity": {"enum": ["error", "warning", "info"]},
        "message": {"type": "string", "minLength": 1},
        "target": {"enum": list(TARGETS)},
        "kinds": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "description": {"type": "string"},
        "schema": {"type": ["object", "boolean"]},
    },
}

CUSTOM = Option("custom", {"type": "array", "items": ENTRY_SCHEMA}, [],
                "Your own checks, written as JSON Schema (SPEC section 6): `id`, `slug`, `severity`, "
                "`message`, `target` (Workload, PodSet or Container), `schema`, optional `kinds`.")
OPTIONS = (CUSTOM,)


class RuleSettings(Protocol):
    """What a check reads of the policy (:class:`policies.config.Policy`)."""

    def rule_setting(self, rule_id: str, slug: str = "") -> Any: ...


@dataclass(frozen=True)
class Instance:
    """One target instance: the value to validate and where it sits in the document."""

    value: Any
    path: str                    # JSON Pointer of ``value`` in the document
    pod_set: str = ""
    container: str = ""


@dataclass(frozen=True, eq=False)
class CustomCheck:
    """A compiled custom check; has the attributes front ends list for built-in rules."""

    id: str
    slug: str
    severity: Severity
    message: str
    target: str
    schema: Any
    kinds: tuple[str, ...] = ()
    description: str = ""
    validator: CompiledSchema | None = field(default=None, repr=False)

    @property
    def summary(self) -> str:
        """One line for ``gpugate rules``."""
        text = self.description.strip().splitlines()[0] if self.description.strip() else self.message
        return f"[custom {self.target}] {text}"

    def applies_to(self, workload: Workload) -> bool:
        return not self.kinds or workload.kind in self.kinds or workload.spec.label in self.kinds

    def instances(self, workload: Workload) -> list[Instance]:
        """Every instance of the target in ``workload`` (through the workload model)."""
        return target_instances(workload)[self.target]

    def render(self, ref: ObjectRef, instance: Instance) -> str:
        return self.message.format_map({
            "kind": ref.kind, "name": ref.name or "<unnamed>", "namespace": ref.namespace or "",
            "object": str(ref), "podSet": instance.pod_set, "container": instance.container,
        })

    def evaluate(self, workload: Workload, ref: ObjectRef | None, policy: RuleSettings) -> list[Finding]:
        """Findings for every target instance that does not validate against the schema."""
        setting = policy.rule_setting(self.id, self.slug)
        if not setting.enabled or not self.applies_to(workload):
            return []
        ref = ref or workload.ref
        severity = setting.severity or self.severity
        compiled = self.validator or compiled_validator(_canonical(self.schema))
        findings: list[Finding] = []
        for instance in self.instances(workload):
            try:
                violation = compiled.violation(instance.value)
            except Exception as exc:  # noqa: BLE001 - user data and schemas must not crash a front end
                log.warning("custom check %s failed on %s: %s", self.id, ref, exc)
                findings.append(Finding(
                    rule=self.id, slug=self.slug, severity=severity, object=ref, path=instance.path,
                    message=f"{self.render(ref, instance)} (custom check {self.id} could not be "
                            f"evaluated at {_json_path(instance.path, ())}: {type(exc).__name__}: "
                            f"{_shorten(str(exc))})"))
                continue
            if violation is None:
                continue
            findings.append(Finding(
                rule=self.id, slug=self.slug, severity=severity, object=ref,
                path=join_pointer(instance.path, *violation.path),
                message=f"{self.render(ref, instance)} ({_shorten(violation.reason)} at "
                        f"{_json_path(instance.path, violation.path)})"))
        return findings


def target_instances(workload: Workload) -> dict[str, list[Instance]]:
    """The instances of every target in ``workload``, by target name. Remembered on the
    workload: the engine runs every custom check on it in a row."""
    found: dict[str, list[Instance]] | None = workload.memo.get("custom instances")
    if found is not None:
        return found
    pod_specs: list[Instance] = []
    containers: list[Instance] = []
    for pod_set in workload.pod_sets:
        if not isinstance(pod_set.template.get("spec"), dict):
            continue  # no pod spec written (a doc snippet, `template: null`): nothing to check
        pod_specs.append(Instance(pod_set.spec, pod_set.spec_path, pod_set.name))
        for path, container in pod_set.containers():
            name = container.get("name")
            if not isinstance(name, str) or not name:
                key, _, index = path.rpartition("/")
                name = f"{key.rpartition('/')[2]}[{index}]"  # e.g. containers[0]
            containers.append(Instance(container, path, pod_set.name, name))
    found = workload.memo["custom instances"] = {
        "Workload": [Instance(workload.doc, "")], "PodSpec": pod_specs, "Container": containers}
    return found


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_MAX else text[:_REASON_MAX - 3] + "..."


def _json_path(base_pointer: str, rest: Iterable[str | int]) -> str:
    """A JSONPath (``$.spec.containers[0].resources``): a JSON Pointer (where a number is a
    list index) followed by a validator's path (where only an int is a list index)."""
    return _pointer_json_path(base_pointer) + "".join(map(_json_path_step, rest))


@process_cache(4096)
def _pointer_json_path(pointer: str) -> str:
    # the same pod specs and containers recur for every check: convert each pointer once
    return "$" + "".join(_json_path_step(int(t) if t.isdigit() else t) for t in split_pointer(pointer))


def _json_path_step(token: str | int) -> str:
    if isinstance(token, int):
        return f"[{token}]"
    if _PLAIN_KEY.fullmatch(token):
        return "." + token
    return "[" + json.dumps(token) + "]"


def _canonical(schema: Any) -> str:
    """The cache key of a schema: its canonical JSON (YAML may give non-JSON scalars)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Violation:
    """Why an instance does not validate: the validator's reason, and the path of the
    failing value relative to the instance (keys and list indices)."""

    reason: str
    path: tuple[str | int, ...]


def _refuse_retrieval(uri: str) -> Any:
    raise ValueError(f"{uri}: gpugate never fetches schemas")


class CompiledSchema:
    """One schema, compiled once: jsonschema's Draft202012Validator, plus jsonschema-rs
    when it is installed and accepts the schema.

    jsonschema-rs validates and explains (``bench/lint_bench.py`` measures the cost of 20
    checks on the corpus with and without it); jsonschema is the whole validator when
    jsonschema-rs is missing, rejects the schema (a Python-only regex such as ``\\Z``), or
    cannot take the value (a non-string mapping key from YAML).
    """

    def __init__(self, schema: Any) -> None:
        from jsonschema import Draft202012Validator
        from jsonschema_specifications import REGISTRY

        self.python: Validator = Draft202012Validator(schema, registry=REGISTRY,
                                                      format_checker=Draft202012Validator.FORMAT_CHECKER)
        self.fast: Any = None
        try:
            import jsonschema_rs
        except ImportError:
            return
        try:
            # validate_formats: formats are checked as the Python validator's format checker does.
            self.fast = jsonschema_rs.Draft202012Validator(schema, validate_formats=True,
                                                          retriever=_refuse_retrieval)
        except Exception as exc:  # noqa: BLE001 - e.g. a regex dialect difference: stay on Python
            log.debug("jsonschema-rs cannot compile a custom schema (%s); using jsonschema", exc)

    def violation(self, value: Any) -> Violation | None:
        """None when ``value`` validates, else the most relevant reason it does not."""
        if self.fast is not None:
            try:
                if self.fast.is_valid(value):
                    return None
                return _most_relevant(list(self.fast.iter_errors(value)))
            except (ValueError, TypeError, OverflowError):
                pass  # not JSON-shaped for Rust (an int mapping key): the Python validator decides
        from jsonschema.exceptions import best_match

        errors = self.python.iter_errors(value)
        first = next(errors, None)
        if first is None:
            return None
        error = best_match(chain((first,), errors))
        return Violation(error.message, tuple(error.absolute_path))


_WEAK_KINDS = frozenset({"AnyOf", "OneOfNotValid"})  # "none of these matched": explain one branch


def _kind(error: Any) -> str:
    return type(error.kind).__name__


def _most_relevant(errors: list[Any]) -> Violation:
    """jsonschema's ``best_match`` for jsonschema-rs errors: the shallowest error, then,
    inside anyOf/oneOf, the deepest error of a branch of the right type, unless two
    branches are equally relevant (then the anyOf/oneOf message itself says more)."""
    if not errors:  # is_valid said no: cannot happen, but say so rather than nothing
        return Violation("does not validate", ())
    best = min(errors, key=lambda e: (len(e.instance_path), _kind(e) in _WEAK_KINDS))

    def inner_rank(e: Any) -> tuple[int, bool, bool]:
        return len(e.instance_path), _kind(e) != "Type", _kind(e) not in _WEAK_KINDS

    while True:
        context = [e for branch in (getattr(best.kind, "context", None) or ()) for e in branch]
        if not context:
            break
        ranked = sorted(context, key=inner_rank, reverse=True)
        if len(ranked) > 1 and inner_rank(ranked[0]) == inner_rank(ranked[1]):
            break
        best = ranked[0]
    return Violation(best.message, tuple(best.instance_path))


@process_cache(1024)
def compiled_validator(canonical: str) -> CompiledSchema:
    """The compiled schema for a schema given as canonical JSON, shared by every check and
    reload with the same schema. Only the bundled meta-schemas can be referenced:
    ``policies`` never does network I/O, so a remote ``$ref`` is refused at load."""
    return CompiledSchema(json.loads(canonical))


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield value
            elif key not in ("const", "enum", "default", "examples"):
                yield from _refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item)


def _has_nested_id(schema: Any, top: bool = True) -> bool:
    if isinstance(schema, dict):
        if not top and isinstance(schema.get("$id"), str):
            return True
        return any(_has_nested_id(v, False) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_nested_id(v, False) for v in schema)
    return False


def _check_schema(schema: Any, what: str) -> CompiledSchema:
    """The compiled validator, or PolicyError with the meta-schema's reason and path."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema_specifications import REGISTRY
    from referencing.exceptions import Unresolvable

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:  # already the best match, with the meta-schema's format checks
        where = "".join(f".{p}" for p in error.absolute_path)
        raise PolicyError(f"{what}: invalid JSON Schema at schema{where}: "
                          f"{_shorten(error.message)}") from None
    try:
        canonical = _canonical(schema)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{what}: schema is not JSON-compatible: {exc}") from None
    validator = compiled_validator(canonical)
    if isinstance(schema, dict):
        from referencing.jsonschema import DRAFT202012

        resource = DRAFT202012.create_resource(json.loads(canonical))
        base = resource.id() or ""
        resolver = REGISTRY.with_resource(base, resource).resolver(base_uri=base)
        for ref in _refs(schema):
            if _has_nested_id(schema) and not ref.startswith("#"):
                continue  # relative to a nested base URI: resolved, or reported, at evaluation
            try:
                resolver.lookup(ref)
            except (Unresolvable, ValueError, TypeError):
                raise PolicyError(f"{what}: $ref {ref!r} cannot be resolved (only references inside the "
                                  "schema, like '#/$defs/name', and the JSON Schema meta-schemas are "
                                  "available; gpugate never fetches schemas)") from None
    return validator


def _check_message(message: str, target: str, what: str) -> None:
    allowed = PLACEHOLDERS[target]
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(message) if name is not None]
    except ValueError as exc:
        raise PolicyError(f"{what}: message is not a valid template ({exc}; write {{{{ and }}}} for "
                          "literal braces)") from None
    for name in fields:
        if name not in allowed:
            other = [t for t in TARGETS if name in PLACEHOLDERS[t]]
            hint = (f"only for target {' or '.join(other)}" if other
                    else f"known: {', '.join('{' + p + '}' for p in sorted(PLACEHOLDERS['Container']))}")
            raise PolicyError(f"{what}: unknown placeholder {{{name}}} in message for target {target} "
                              f"({hint})")
    try:  # format specs and conversions must work with the strings we pass at run time
        message.format_map({p: "x" for p in allowed})
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PolicyError(f"{what}: message cannot be formatted: {exc}") from None


def _check_kinds(kinds: list[str], what: str) -> None:
    known = {k.kind for k in KINDS} | {k.label for k in KINDS}
    for kind in kinds:
        if kind not in known:
            raise PolicyError(f"{what}: kinds: unknown kind {kind!r} (known: "
                              f"{', '.join(sorted({k.kind for k in KINDS}))}; use Kind.group, e.g. "
                              "Job.batch.volcano.sh, to pick one API group)")


def compile_checks(entries: list[Any], source: str) -> list[CustomCheck]:
    """Compile the ``custom:`` entries of a policy (already shape-checked by the policy schema).

    Raises :class:`PolicyError` naming the entry's id for a broken schema,
    an id or slug that collides with a built-in rule or another entry, or a bad message.
    """
    builtin = all_rules()
    builtin_slugs = {rule.slug: rule.id for rule in builtin.values()}
    seen_ids: dict[str, int] = {}
    seen_slugs: dict[str, str] = {}
    checks: list[CustomCheck] = []
    for index, entry in enumerate(entries):
        check_id, slug = entry["id"], entry["slug"]
        what = f"{source}: custom.{index} ({check_id})"
        if check_id.upper().startswith(RESERVED_PREFIX) or check_id in builtin:
            raise PolicyError(f"{what}: id {check_id!r} collides with the built-in rules (the "
                              f"{RESERVED_PREFIX} prefix is reserved; use your own, e.g. MYORG001)")
        if check_id in seen_ids:
            raise PolicyError(f"{what}: id {check_id!r} is already used by custom.{seen_ids[check_id]}")
        if slug in builtin_slugs:
            raise PolicyError(f"{what}: slug {slug!r} is already the slug of built-in rule "
                              f"{builtin_slugs[slug]}")
        if slug in seen_slugs:
            raise PolicyError(f"{what}: slug {slug!r} is already used by custom check {seen_slugs[slug]}")
        seen_ids[check_id], seen_slugs[slug] = index, check_id
        _check_message(entry["message"], entry["target"], what)
        _check_kinds(entry.get("kinds") or [], what)
        validator = _check_schema(entry["schema"], what)
        checks.append(CustomCheck(
            id=check_id, slug=slug, severity=Severity.parse(entry["severity"]), message=entry["message"],
            target=entry["target"], schema=entry["schema"], kinds=tuple(entry.get("kinds") or ()),
            description=entry.get("description", ""), validator=validator))
    return checks
