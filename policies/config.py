"""The policy file: one YAML document read by both front ends, validated with jsonschema.

Every key has a default, so no file is needed. A bad file is a :class:`PolicyError`
whose message names the path of the offending key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies.custom import ENTRY_SCHEMA as CUSTOM_ENTRY_SCHEMA
from policies.findings import Severity

DEFAULT_POLICY: dict[str, Any] = {
    "apiVersion": "gpugate.io/v1alpha1",
    "kind": "Policy",
    "usage": {
        "nodeKey": "maip.mxsf.io/node.usage",
        "workloadKey": "maip.mxsf.io/usage",
        "pools": {"training": ["training", "hybrid"], "inference": ["inference", "hybrid"]},
        "preferredWeight": 100,
        "scope": "gpu",
        "defaults": {
            "Deployment": "inference", "StatefulSet": "inference", "RayService": "inference",
            "Job": "training", "PyTorchJob": "training", "RayJob": "training", "RayCluster": "training",
            "ElasticJob": "training",
            # The other Kubeflow training kinds are training by definition.
            "TFJob": "training", "XGBoostJob": "training", "PaddleJob": "training", "JAXJob": "training",
            "MPIJob": "training",
        },
    },
    "controlPlaneTaint": "maip.mxsf.io/control-plane",
    "gpu": {
        "resources": {
            "nvidia.com/gpu": "nvidia.com/gpu.product",
            "metax-tech.com/gpu": "metax-tech.com/gpu.product",
        },
        "groupSizeAnnotation": "metax-tech.com/gpu-group-size",
        "atomicGroupSizeAnnotation": "metax-tech.com/atomic-gpu-group-size",
        "supernodeLabels": ["nvidia.com/gpu.clique"],
        # What pins a GPU model besides the product labels of `resources` (GG104): a
        # nodeSelector or required node affinity `In` on one of these node labels, or one
        # of these annotations on the pod template.
        "modelPins": {
            "nodeLabels": [
                "nvidia.com/gpu.product", "cloud.google.com/gke-accelerator",
                "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
                "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-family",
                "karpenter.azure.com/sku-gpu-name", "k8s.amazonaws.com/accelerator",
                "gpu.nvidia.com/class", "gpu.nvidia.com/model", "amd.com/gpu.product-name", "accelerator",
            ],
            "annotations": ["nvidia.com/use-gputype"],
        },
    },
    # Facts of the platform the cluster runs on.
    "platform": {
        # The ExtendedResourceToleration admission plugin (GKE runs it): a pod requesting an
        # extended resource tolerates `<resource>:NoSchedule` taints. auto: on for a
        # snapshot whose nodes carry GKE labels.
        "extendedResourceToleration": "auto",
    },
    "queues": {"require": False},
    "feasibility": {
        "mode": "enforce",
        "autoscaling": False,
        # A live topology not confirmed by the API server for longer than this is stale:
        # no capacity verdict from it, GG406 says so (a warning, or with whenStale: deny,
        # an error that refuses the workload).
        "staleAfterSeconds": 5,
        "whenStale": "warn",
        "budgetMilliseconds": 200,
    },
    "rules": {},
    "exclude": {"namespaces": ["kube-system", "kube-public", "gpugate-system"]},
    "custom": [],
}

_STR_LIST = {"type": "array", "items": {"type": "string"}}
_SEVERITY = {"enum": ["error", "warning", "info"]}

# Extended by other modules (custom checks) through SCHEMA["properties"].
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "gpugate.io/v1alpha1"},
        "kind": {"const": "Policy"},
        "usage": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "nodeKey": {"type": "string", "minLength": 1},
                "workloadKey": {"type": "string", "minLength": 1},
                "pools": {"type": "object", "additionalProperties": {**_STR_LIST, "minItems": 1}},
                "preferredWeight": {"type": "integer", "minimum": 1, "maximum": 100},
                "scope": {"enum": ["gpu", "all"]},
                "defaults": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "controlPlaneTaint": {"type": "string"},
        "gpu": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "resources": {"type": "object", "additionalProperties": {"type": "string"}},
                "groupSizeAnnotation": {"type": "string", "minLength": 1},
                "atomicGroupSizeAnnotation": {"type": "string", "minLength": 1},
                "supernodeLabels": _STR_LIST,
                "modelPins": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"nodeLabels": _STR_LIST, "annotations": _STR_LIST},
                },
            },
        },
        "platform": {
            "type": "object", "additionalProperties": False,
            "properties": {"extendedResourceToleration": {"enum": ["auto", True, False]}},
        },
        "queues": {
            "type": "object", "additionalProperties": False,
            "properties": {"require": {"type": "boolean"}},
        },
        "feasibility": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "mode": {"enum": ["off", "warn", "enforce"]},
                "autoscaling": {"type": "boolean"},
                "staleAfterSeconds": {"type": "number", "exclusiveMinimum": 0},
                "whenStale": {"enum": ["warn", "deny"]},
                "budgetMilliseconds": {"type": "number", "exclusiveMinimum": 0},
            },
        },
        "rules": {
            "type": "object",
            "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_-]*$"},
            "additionalProperties": {
                "oneOf": [
                    {"enum": ["off", "on", "error", "warning", "info"]},
                    {"type": "boolean"},
                    {"type": "object", "additionalProperties": False,
                     "properties": {"severity": _SEVERITY, "enabled": {"type": "boolean"}}},
                ]
            },
        },
        "exclude": {
            "type": "object", "additionalProperties": False,
            "properties": {"namespaces": _STR_LIST},
        },
        "custom": {"type": "array", "items": CUSTOM_ENTRY_SCHEMA},  # policies.custom (SPEC 6)
    },
}


class PolicyError(ValueError):
    """The policy file is unreadable or invalid; the message names file and key path."""


@dataclass(frozen=True)
class RuleSetting:
    enabled: bool = True
    severity: Severity | None = None


@dataclass
class Policy:
    """A validated policy, defaults filled in. Rules read it; nobody mutates it."""

    data: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_POLICY))
    source: str = "<defaults>"
    # Filled by policies.custom when the file has custom checks (compiled once per load).
    custom_checks: list[Any] = field(default_factory=list)
    # Derived from ``data`` by readers that ask on every object (rule settings, the
    # engine's enabled rules); valid because nobody mutates a loaded policy.
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge for mappings; lists and scalars in ``override`` replace."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict) and key not in ("rules", "pools",
                                                                                          "defaults",
                                                                                          "resources"):
            out[key] = _merge(out[key], value)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _error_path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def policy_from_data(data: Any, source: str = "<policy>") -> Policy:
    """Validate and default a parsed policy document."""
    import jsonschema

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the policy must be a mapping, not {type(data).__name__}")
    validator = jsonschema.Draft202012Validator(SCHEMA)
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
    policy = Policy(data=_merge(copy.deepcopy(DEFAULT_POLICY), data), source=source)
    from policies import custom  # compiled once per load; raises PolicyError on bad entries

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


def load_policy(path: str | Path) -> Policy:
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read policy file: {exc}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: policy file is {len(text):,} characters, over the limit of "
                          f"{MAX_POLICY_BYTES:,}")
    if _too_deep(text, loader):
        raise PolicyError(f"{path}: policy file nests deeper than {MAX_POLICY_DEPTH} levels")
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: policy file is not valid YAML: {exc}") from None
    if "*" in text and _more_values_than(data, MAX_POLICY_VALUES):
        raise PolicyError(f"{path}: policy file expands to more than {MAX_POLICY_VALUES:,} values "
                          "(YAML aliases)")
    return policy_from_data(data, str(path))


CONFIG_FILENAME = ".gpugate.yaml"


def find_policy_file(start: str | Path = ".") -> Path | None:
    """``.gpugate.yaml`` in ``start`` or the nearest parent directory that has one."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    return None
