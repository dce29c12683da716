"""The policy file: one YAML document read by both front ends, validated with jsonschema.

Its keys are declared where they are used (:mod:`policies.options`): each rule module's
``OPTIONS``, the domain modules several rules share (:mod:`policies.gpu`,
:mod:`policies.groups`, :mod:`policies.custom`) and, here, the frame of the file. The
JSON Schema and the defaults are generated from those declarations. Every key has a
default, so no file is needed. A bad file is a :class:`PolicyError` whose message names
the path of the offending key.

This module takes text or parsed data, never a path: the front ends read the file
(``lint/`` also finds it, ``webhook/`` watches it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from policies import custom
from policies.findings import Severity
from policies.memo import Scratch, process_cache
from policies.options import Option, OptionTable, PolicyError
from policies.registry import all_rules

__all__ = ["Policy", "PolicyError", "RuleSetting", "FRAME_OPTIONS", "option_table", "policy_defaults",
           "policy_schema", "policy_from_data", "policy_from_text", "MAX_POLICY_BYTES", "MAX_POLICY_DEPTH",
           "MAX_POLICY_VALUES"]

_STR_LIST = {"type": "array", "items": {"type": "string"}}
_SEVERITY = {"enum": ["error", "warning", "info"]}

# The frame of the file: what it is, which rules run, what is never judged.
API_VERSION = Option("apiVersion", {"const": "gpugate.io/v1alpha1"}, "gpugate.io/v1alpha1",
                     "The version of the policy format.")
KIND = Option("kind", {"const": "Policy"}, "Policy", "Always `Policy`.")
RULES = Option(
    "rules",
    {"type": "object",
     "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_-]*$"},
     "additionalProperties": {
         "oneOf": [
             {"enum": ["off", "on", "error", "warning", "info"]},
             {"type": "boolean"},
             {"type": "object", "additionalProperties": False,
              "properties": {"severity": _SEVERITY, "enabled": {"type": "boolean"}}},
         ]}},
    {},
    "Rule (by ID or slug) -> `off`, `on`, a severity, or `{severity, enabled}`; custom checks too.")
EXCLUDE_NAMESPACES = Option("exclude.namespaces", _STR_LIST, ["kube-system", "kube-public", "gpugate-system"],
                            "Namespaces whose objects are never judged.")
FRAME_OPTIONS = (API_VERSION, KIND, RULES, EXCLUDE_NAMESPACES)

# The order of keys in the defaults, the schema and the reference: top-level keys, then
# keys within a section (SPEC section 3); keys not listed follow in declaration order.
KEY_ORDER = ("apiVersion", "kind", "usage", "controlPlaneTaint", "gpu", "platform", "queues",
             "feasibility", "rules", "exclude", "custom",
             "usage.nodeKey", "usage.workloadKey", "usage.pools", "usage.preferredWeight", "usage.scope",
             "usage.defaults", "gpu.resources", "gpu.groupSizeAnnotation", "gpu.atomicGroupSizeAnnotation",
             "gpu.supernodeLabels", "gpu.modelPins.nodeLabels", "gpu.modelPins.annotations",
             "feasibility.mode", "feasibility.autoscaling", "feasibility.staleAfterSeconds",
             "feasibility.whenStale", "feasibility.budgetMilliseconds")


def declared_options() -> Iterator[Option]:
    """Every declaration: the frame, custom checks, and each rule's ``OPTIONS`` (which
    include the options of the domain modules it reads)."""
    yield from FRAME_OPTIONS
    yield from custom.OPTIONS
    for rule in all_rules().values():
        yield from rule.options


@process_cache(1, "policies.config.option_table")
def option_table() -> OptionTable:
    """The table of every declared option (schema and defaults generated from it)."""
    return OptionTable(declared_options(), KEY_ORDER,
                       top={"$schema": "https://json-schema.org/draft/2020-12/schema"})


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file, generated from the declarations."""
    return option_table().schema


def policy_defaults() -> dict[str, Any]:
    """The policy in force without a file (a fresh copy), generated from the declarations."""
    return option_table().defaults()


def __getattr__(name: str) -> Any:
    # Old names, generated on use: the declarations live in modules that import this one.
    if name == "DEFAULT_POLICY":
        return policy_defaults()
    if name == "SCHEMA":
        return policy_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RuleSetting:
    enabled: bool = True
    severity: Severity | None = None


@dataclass
class Policy:
    """A validated policy, defaults filled in. Rules read it; nobody mutates it."""

    data: dict[str, Any] = field(default_factory=policy_defaults)
    source: str = "<defaults>"
    # Filled by policy_from_data when the file has custom checks (compiled once per load).
    custom_checks: list[Any] = field(default_factory=list)
    # Derived from ``data`` by readers that ask on every object (rule settings, the
    # engine's enabled rules); valid because nobody mutates a loaded policy.
    memo: Scratch = field(default_factory=Scratch, repr=False, compare=False)

    # -- typed views of the sections rules use most ---------------------------------
    @property
    def usage(self) -> dict[str, Any]:
        return self.data["usage"]

    @property
    def gpu(self) -> dict[str, Any]:
        return self.data["gpu"]

    @property
    def gpu_resources(self) -> dict[str, str]:
        """Extended GPU resource name -> node label carrying the product."""
        return self.data["gpu"]["resources"]

    @property
    def feasibility(self) -> dict[str, Any]:
        return self.data["feasibility"]

    @property
    def excluded_namespaces(self) -> frozenset[str]:
        found: frozenset[str] | None = self.memo.get("excluded_namespaces")
        if found is None:  # asked on every object
            found = self.memo["excluded_namespaces"] = frozenset(self.data["exclude"]["namespaces"])
        return found

    def rule_setting(self, rule_id: str, slug: str = "") -> RuleSetting:
        """How the policy sets a rule (by ID, else by slug); remembered, since the engine
        asks for every finding."""
        settings: dict[tuple[str, str], RuleSetting] = self.memo.setdefault("rule_settings", {})
        found = settings.get((rule_id, slug))
        if found is None:
            found = settings[(rule_id, slug)] = self._rule_setting(rule_id, slug)
        return found

    def _rule_setting(self, rule_id: str, slug: str) -> RuleSetting:
        raw = self.data["rules"].get(rule_id, self.data["rules"].get(slug)) if slug else \
            self.data["rules"].get(rule_id)
        if raw is None or raw == "on" or raw is True:
            return RuleSetting()
        if raw == "off" or raw is False:
            return RuleSetting(enabled=False)
        if isinstance(raw, str):
            return RuleSetting(severity=Severity.parse(raw))
        sev = raw.get("severity")
        return RuleSetting(enabled=raw.get("enabled", True),
                           severity=Severity.parse(sev) if sev else None)


def _error_path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def policy_from_data(data: Any, source: str = "<policy>") -> Policy:
    """Validate and default a parsed policy document, and compile its custom checks."""
    import jsonschema

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the policy must be a mapping, not {type(data).__name__}")
    table = option_table()
    validator = jsonschema.Draft202012Validator(table.schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        if first.validator == "additionalProperties":
            unknown = sorted(set(first.instance) - set(first.schema.get("properties", {})))
            where = _error_path(first)
            key = ".".join(p for p in (where if where != "(top level)" else "", unknown[0] if unknown else "")
                           if p)
            message = f"unknown key {key!r}"
        else:
            message = f"{_error_path(first)}: {first.message}"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PolicyError(f"{source}: invalid policy: {message}{more}")
    policy = Policy(data=table.merge(data), source=source)
    # compiled once per load; raises PolicyError on bad entries
    policy.custom_checks = custom.compile_checks(policy.data.get("custom") or [], source)
    return policy


# A policy is a few kilobytes. A hostile one (a `.gpugate.yaml` in a pull request, a bad
# ConfigMap) must not crash or hang the linter or the webhook's reload: libyaml's composer
# recurses per nesting level and overflows the C stack on deep input, and aliases can
# expand a small file into billions of values for the schema validation to walk.
MAX_POLICY_BYTES = 1024 * 1024
MAX_POLICY_DEPTH = 100
MAX_POLICY_VALUES = 100_000


def _too_deep(text: str, loader: Any) -> bool:
    """Nesting over MAX_POLICY_DEPTH, found with libyaml's parser (iterative, unlike its composer)."""
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_POLICY_DEPTH:
                    return True
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return False  # the load below reports it, with its line
    return False


def _more_values_than(data: Any, limit: int) -> bool:
    """Whether ``data``, aliases expanded, holds more than ``limit`` values (stops counting there)."""
    stack, count = [data], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
            count += len(item)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def policy_from_text(text: str, source: str = "<policy>") -> Policy:
    """Parse, validate and default the text of a policy file; ``source`` (its path) starts
    every error message. Hostile input (huge, deeply nested, alias bombs) is refused."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyError(f"{source}: policy file is {len(text):,} characters, over the limit of "
                          f"{MAX_POLICY_BYTES:,}")
    if _too_deep(text, loader):
        raise PolicyError(f"{source}: policy file nests deeper than {MAX_POLICY_DEPTH} levels")
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: policy file is not valid YAML: {exc}") from None
    if "*" in text and _more_values_than(data, MAX_POLICY_VALUES):
        raise PolicyError(f"{source}: policy file expands to more than {MAX_POLICY_VALUES:,} values "
                          "(YAML aliases)")
    return policy_from_data(data, source)


def policy_from_file(path: str, read: Callable[[str], str]) -> Policy:
    """The policy file at ``path``; ``read`` is the front end's (it gives the file's text:
    policies read no file). :class:`PolicyError` naming the file when it cannot be read or
    is invalid."""
    try:
        text = read(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read policy file: {exc}") from None
    return policy_from_text(text, path)
