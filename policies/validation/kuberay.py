"""KubeRay's validation (``ray-operator/controllers/ray/utils/validation.go``), its webhooks
(``ray-operator/pkg/webhooks/v1``) and its CRD schemas: what they refuse of a RayCluster,
RayJob and RayService.

RayJob embeds a RayCluster spec at ``/spec/rayClusterSpec`` and RayService at
``/spec/rayClusterConfig``; the cluster-spec checks the three kinds share
(:func:`~policies.validation.kuberay_clusters._cluster_spec`) are in
:mod:`policies.validation.kuberay_clusters`, with the field readers both modules use. This
module holds the three validators, their metadata checks and RayJob's own fields.

Several KubeRay checks depend on operator feature gates (``RayJobDeletionPolicy``,
``RayClusterNetworkPolicy``, ``RayClusterMTLS``, ``RayClusterHistoryServer``,
``GCSFaultToleranceEmbeddedStorage``, ``RayServiceIncrementalUpgrade``) that gpugate cannot
see. Only what is refused under every setting is refused here: when a gate is off, the gated
field is refused outright, and when it is on, its content is checked; so content that the
checks refuse is refused either way, while merely using the field is not.

CRD defaults are taken into account: ``minReplicas`` 0 and ``maxReplicas`` 2147483647 (so
"must set both" never fires on a submitted object), ``priority`` 0, ``networkPolicy.mode``
``DenyAll``, ``shutdownAfterJobFinishes`` false, ``ttlSecondsAfterFinished`` 0.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

from policies.names import DNS1035_LABEL as _DNS1035
from policies.pointers import join_pointer
from policies.validation import Refusal, go_duration_seconds
from policies.validation.kuberay_clusters import (
    _MANAGED_BY,
    _autoscaling,
    _cluster_spec,
    _enum,
    _field,
    _int,
    _k8s_auth,
    _map,
    _upgrade_origin,
)
from policies.workload import MISSING, resolve
from policies.yamlvalues import DocumentError, values

__all__ = ["raycluster", "rayjob", "rayservice"]

# Name limits (KubeRay's constants): the RayCluster name is the prefix of its pods' names;
# RayJob and RayService names leave room for the suffix of the RayCluster they create.
_MAX_CLUSTER_NAME = 53
_MAX_JOB_NAME = _MAX_CLUSTER_NAME - 6
_MAX_SERVICE_NAME = _MAX_CLUSTER_NAME - 6

_ORIGIN_LABEL = "ray.io/originated-from-crd"
_INIT_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"

_DELETION_POLICIES = ("DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone")
_DELETION_ORDER = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")
_SERVICE_UPGRADES = ("NewClusterWithIncrementalUpgrade", "NewCluster", "None")


# -- the three kinds ---------------------------------------------------------------------------

def raycluster(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A RayCluster: its name (webhook), worker group names unique (webhook), the cluster spec
    (controller and CRD schema) and its upgrade strategy."""
    yield from _name(doc, _MAX_CLUSTER_NAME, "RayCluster")
    spec = _map(resolve(doc, "/spec"))
    yield from _cluster_spec(spec, "/spec", _map(resolve(doc, "/metadata/annotations")))
    origin = resolve(doc, join_pointer("/metadata/labels", _ORIGIN_LABEL))
    yield from _upgrade_origin(spec, "/spec", _str(origin))


def rayjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A RayJob: its name (webhook), its own fields and its embedded RayCluster spec."""
    yield from _name(doc, _MAX_JOB_NAME, "RayJob")
    yield from _managed_by(doc)
    yield from _job_spec(doc)


def rayservice(doc: dict[str, Any]) -> Iterator[Refusal]:
    """A RayService: its name and initializing-timeout annotation (webhook), its own fields and
    its embedded RayCluster spec."""
    yield from _name(doc, _MAX_SERVICE_NAME, "RayService")
    yield from _managed_by(doc)
    annotations = _map(resolve(doc, "/metadata/annotations"))
    yield from _initializing_timeout(annotations)
    spec = _map(resolve(doc, "/spec"))
    cluster = spec.get("rayClusterConfig")
    base = "/spec/rayClusterConfig"
    if _k8s_auth(_map(resolve(cluster, "/authOptions"))):
        yield Refusal(f"{_field(base)}.authOptions.enableK8sTokenAuth is true: KubeRay does not support "
                      "Kubernetes token auth for a RayService", base + "/authOptions/enableK8sTokenAuth")
    yield from _cluster_spec(_map(cluster), base, annotations)
    yield from _upgrade_origin(_map(cluster), base, "RayService")
    service_name = resolve(cluster, "/headGroupSpec/headService/metadata/name")
    if isinstance(service_name, str) and service_name:
        path = base + "/headGroupSpec/headService/metadata/name"
        yield Refusal(f"{_field(path)} {service_name!r} is set: KubeRay names a RayService's head service "
                      "itself and refuses a name", path)
    kind = resolve(spec, "/upgradeStrategy/type")
    if isinstance(kind, str) and kind not in _SERVICE_UPGRADES:
        yield Refusal(f"spec.upgradeStrategy.type {kind!r} is not one of {', '.join(_SERVICE_UPGRADES)}: "
                      "KubeRay refuses it", "/spec/upgradeStrategy/type")
    delay = _int(spec.get("rayClusterDeletionDelaySeconds"))
    if delay is not None and delay < 0:
        yield Refusal(f"spec.rayClusterDeletionDelaySeconds {delay} is negative: KubeRay's CRD schema "
                      "refuses it",
                      "/spec/rayClusterDeletionDelaySeconds")
    options = resolve(spec, "/upgradeStrategy/clusterUpgradeOptions")
    if isinstance(options, dict):
        for key in ("gatewayClassName", "intervalSeconds", "stepSizePercent"):
            if options.get(key) is None:
                yield Refusal(f"spec.upgradeStrategy.clusterUpgradeOptions.{key} is missing: KubeRay's CRD "
                              "schema requires it", "/spec/upgradeStrategy/clusterUpgradeOptions")


def _managed_by(doc: dict[str, Any]) -> Iterator[Refusal]:
    value = resolve(doc, "/spec/managedBy")
    if value is not MISSING and value is not None:
        yield from _enum(value, "/spec/managedBy", _MANAGED_BY)


# -- metadata ----------------------------------------------------------------------------------

def _name(doc: dict[str, Any], limit: int, kind: str) -> Iterator[Refusal]:
    name = resolve(doc, "/metadata/name")
    if not isinstance(name, str) or not name:
        return  # generateName: the API server picks the name after gpugate sees the object
    if len(name) > limit:
        yield Refusal(f"metadata.name has {len(name)} characters, more than {limit}: KubeRay's webhook "
                      f"refuses a longer {kind} name (it prefixes the names of the objects it creates)",
                      "/metadata/name")
    if not _DNS1035.fullmatch(name) or len(name) > 63:
        yield Refusal(f"metadata.name {name!r} is not a DNS-1035 label (lower case letters, digits and '-', "
                      f"starting with a letter): KubeRay's webhook refuses it", "/metadata/name")


def _initializing_timeout(annotations: dict[str, Any]) -> Iterator[Refusal]:
    value = annotations.get(_INIT_TIMEOUT_ANNOTATION)
    if not isinstance(value, str) or not value:
        return
    path = join_pointer("/metadata/annotations", _INIT_TIMEOUT_ANNOTATION)
    seconds = go_duration_seconds(value)
    if seconds is None:
        seconds = _go_atoi(value)
        if seconds is None:
            yield Refusal(f"annotation {_INIT_TIMEOUT_ANNOTATION} {value!r} is neither a duration (5m, 1h) "
                          "nor a whole number of seconds: KubeRay refuses it", path)
            return
    if seconds <= 0:
        yield Refusal(f"annotation {_INIT_TIMEOUT_ANNOTATION} {value!r} is not positive: KubeRay refuses it",
                      path)


# -- RayJob ------------------------------------------------------------------------------------

def _job_spec(doc: dict[str, Any]) -> Iterator[Refusal]:
    spec = _map(resolve(doc, "/spec"))
    annotations = _map(resolve(doc, "/metadata/annotations"))
    suspend = spec.get("suspend") is True
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    selector = _map(spec.get("clusterSelector"))
    mode = spec.get("submissionMode")
    backoff = _int(spec.get("backoffLimit"))
    cluster = _map(spec.get("rayClusterSpec"))
    has_cluster = isinstance(spec.get("rayClusterSpec"), dict)
    if suspend and not shutdown:
        yield Refusal("spec.suspend is true while spec.shutdownAfterJobFinishes is false: KubeRay only "
                      "suspends a RayJob that deletes its cluster when it finishes", "/spec/suspend")
    ttl = _int(spec.get("ttlSecondsAfterFinished"))
    if ttl is not None and ttl < 0:
        yield Refusal(f"spec.ttlSecondsAfterFinished {ttl} is negative: KubeRay refuses it",
                      "/spec/ttlSecondsAfterFinished")
    if ttl is not None and ttl > 0 and not shutdown:
        yield Refusal(f"spec.ttlSecondsAfterFinished {ttl} is set while spec.shutdownAfterJobFinishes is "
                      "false: KubeRay refuses a TTL for a cluster it never deletes",
                      "/spec/ttlSecondsAfterFinished")
    yield from _deletion_strategy(spec, shutdown, bool(selector), _autoscaling(cluster))
    if suspend and selector:
        yield Refusal("spec.suspend is true with spec.clusterSelector: KubeRay cannot suspend a RayJob "
                      "that runs on an existing cluster", "/spec/suspend")
    if not has_cluster and not selector:
        yield Refusal("spec.rayClusterSpec and spec.clusterSelector are both missing: KubeRay needs one",
                      "/spec")
    if selector:
        name = selector.get("ray.io/cluster")
        if not isinstance(name, str) or not name:
            yield Refusal("spec.clusterSelector has no ray.io/cluster name: KubeRay needs the name of the "
                          "cluster to run on", "/spec/clusterSelector")
        if mode == "SidecarMode":
            yield Refusal("spec.clusterSelector is set with spec.submissionMode SidecarMode: KubeRay does "
                          "not support it", "/spec/clusterSelector")
        if backoff is not None and backoff > 0:
            yield Refusal(f"spec.backoffLimit {backoff} is set with spec.clusterSelector: KubeRay does not "
                          "retry a RayJob on an existing cluster", "/spec/backoffLimit")
    if mode == "InteractiveMode" and backoff is not None and backoff > 0:
        yield Refusal(f"spec.backoffLimit {backoff} is set with spec.submissionMode InteractiveMode: KubeRay "
                      "refuses retries in interactive mode", "/spec/backoffLimit")
    if mode == "SidecarMode":
        for key in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(key) is not None:
                yield Refusal(f"spec.{key} is set with spec.submissionMode SidecarMode: KubeRay does not "
                              "support it", f"/spec/{key}")
        policy = resolve(cluster, "/headGroupSpec/template/spec/restartPolicy")
        if isinstance(policy, str) and policy and policy != "Never":
            path = "/spec/rayClusterSpec/headGroupSpec/template/spec/restartPolicy"
            yield Refusal(f"{_field(path)} {policy} is not Never: KubeRay refuses it in SidecarMode", path)
    if has_cluster:
        base = "/spec/rayClusterSpec"
        if _k8s_auth(_map(resolve(cluster, "/authOptions"))):
            yield Refusal(f"{_field(base)}.authOptions.enableK8sTokenAuth is true: KubeRay does not support "
                          "Kubernetes token auth for a RayJob", base + "/authOptions/enableK8sTokenAuth")
        yield from _cluster_spec(cluster, base, annotations)
        yield from _upgrade_origin(cluster, base, "RayJob")
    yield from _runtime_env(spec.get("runtimeEnvYAML"))
    for key, least in (("activeDeadlineSeconds", 1), ("preRunningDeadlineSeconds", 1), ("backoffLimit", 0)):
        value = _int(spec.get(key))
        if value is not None and value < least:
            what = "is not positive" if least else "is negative"
            yield Refusal(f"spec.{key} {value} {what}: KubeRay refuses it", f"/spec/{key}")


def _runtime_env(text: Any) -> Iterator[Refusal]:
    """KubeRay reads ``runtimeEnvYAML`` into a mapping; a scalar or a list is refused. Only a text
    PyYAML reads without doubt is judged (no anchors, bounded size): on any parse question, no
    refusal, as Go's YAML reader may differ."""
    if not isinstance(text, str) or not text.strip() or len(text) > 65536 or "&" in text:
        return
    try:  # the bounded reader of manifests (C parser, depth and size limits): never raises else
        documents = list(itertools.islice(values(text), 2))
    except DocumentError:
        return
    if len(documents) > 1:
        return  # several documents: what Go's reader makes of them is not certain
    value = documents[0] if documents else None
    if value is not None and not isinstance(value, dict):
        yield Refusal("spec.runtimeEnvYAML is not a YAML mapping: KubeRay cannot read it as a runtime "
                      "environment", "/spec/runtimeEnvYAML")


def _deletion_strategy(spec: dict[str, Any], shutdown: bool, selector: bool,
                       autoscaling: bool) -> Iterator[Refusal]:
    """Refusals of ``spec.deletionStrategy``'s content. Using the field at all needs the
    RayJobDeletionPolicy gate (undecidable here); its content is refused under either setting."""
    strategy = spec.get("deletionStrategy")
    if not isinstance(strategy, dict):
        return
    base = "/spec/deletionStrategy"
    rules = strategy.get("deletionRules")
    legacy = strategy.get("onSuccess") is not None or strategy.get("onFailure") is not None
    if isinstance(rules, list) and not rules:
        yield Refusal("spec.deletionStrategy.deletionRules is empty: KubeRay's CRD schema needs at least one "
                      "rule", base + "/deletionRules")
    has_rules = isinstance(rules, list) and bool(rules)
    if has_rules and shutdown:
        yield Refusal("spec.deletionStrategy.deletionRules is set with spec.shutdownAfterJobFinishes true: "
                      "KubeRay refuses both", base + "/deletionRules")
    if has_rules and legacy:
        yield Refusal("spec.deletionStrategy has both deletionRules and onSuccess/onFailure: KubeRay refuses "
                      "both", base)
    if legacy:
        yield from _legacy_deletion(strategy, base, shutdown, selector, autoscaling)
    elif has_rules:
        assert isinstance(rules, list)
        yield from _deletion_rules(rules, base + "/deletionRules", selector, autoscaling)
    elif rules is None:
        yield Refusal("spec.deletionStrategy has neither onSuccess and onFailure nor deletionRules: KubeRay "
                      "needs one of them", base)


def _legacy_deletion(strategy: dict[str, Any], base: str, shutdown: bool, selector: bool,
                     autoscaling: bool) -> Iterator[Refusal]:
    policies: dict[str, str] = {}
    for key in ("onSuccess", "onFailure"):
        entry = strategy.get(key)
        if entry is None:
            yield Refusal(f"spec.deletionStrategy.{key} is missing: KubeRay needs both onSuccess and "
                          "onFailure", base)
            continue
        policy = resolve(entry, "/policy")
        if policy is MISSING or policy is None:
            yield Refusal(f"spec.deletionStrategy.{key}.policy is missing: KubeRay needs it", f"{base}/{key}")
        elif isinstance(policy, str):
            policies[key] = policy
            yield from _enum(policy, f"{base}/{key}/policy", _DELETION_POLICIES)
    for key, policy in policies.items():
        if selector and policy in ("DeleteCluster", "DeleteWorkers"):
            yield Refusal(f"spec.deletionStrategy.{key}.policy {policy} is set with spec.clusterSelector: "
                          "KubeRay does not delete a cluster it did not create", f"{base}/{key}/policy")
        if policy == "DeleteWorkers" and autoscaling:
            yield Refusal(f"spec.deletionStrategy.{key}.policy DeleteWorkers is set with autoscaling "
                          "enabled: KubeRay does not support it", f"{base}/{key}/policy")
        if policy == "DeleteNone" and shutdown:
            yield Refusal(f"spec.deletionStrategy.{key}.policy DeleteNone is set with "
                          "spec.shutdownAfterJobFinishes true: KubeRay refuses it", f"{base}/{key}/policy")


def _deletion_rules(rules: list[Any], base: str, selector: bool, autoscaling: bool) -> Iterator[Refusal]:
    seen: dict[tuple[str, str], dict[str, int]] = {}
    for index, rule in enumerate(rules):
        path = f"{base}/{index}"
        if not isinstance(rule, dict):
            continue
        policy, condition = rule.get("policy"), _map(rule.get("condition"))
        if policy is None:
            yield Refusal(f"{_field(path)}.policy is missing: KubeRay's CRD schema requires it", path)
        elif isinstance(policy, str):
            yield from _enum(policy, path + "/policy", _DELETION_POLICIES)
        status, deployment = condition.get("jobStatus"), condition.get("jobDeploymentStatus")
        ttl = _int(condition.get("ttlSeconds"))
        if status is not None:
            yield from _enum(status, path + "/condition/jobStatus", ("SUCCEEDED", "FAILED"))
        if deployment is not None:
            yield from _enum(deployment, path + "/condition/jobDeploymentStatus", ("Failed",))
        if status is not None and deployment is not None:
            yield Refusal(f"{_field(path)}.condition sets both jobStatus and jobDeploymentStatus: KubeRay "
                          "needs exactly one", path + "/condition")
            continue
        if status is None and deployment is None:
            yield Refusal(f"{_field(path)}.condition sets neither jobStatus nor jobDeploymentStatus: KubeRay "
                          "needs exactly one", path + "/condition")
            continue
        if ttl is not None and ttl < 0:
            yield Refusal(f"{_field(path)}.condition.ttlSeconds {ttl} is negative: KubeRay refuses it",
                          path + "/condition/ttlSeconds")
            continue
        if not isinstance(policy, str):
            continue
        if selector and policy in ("DeleteCluster", "DeleteWorkers"):
            yield Refusal(f"{_field(path)}.policy {policy} is set with spec.clusterSelector: KubeRay does "
                          "not delete a cluster it did not create", path + "/policy")
            continue
        if autoscaling and policy == "DeleteWorkers":
            yield Refusal(f"{_field(path)}.policy DeleteWorkers is set with autoscaling enabled: KubeRay "
                          "does not support it", path + "/policy")
            continue
        key = ("jobStatus", status) if status is not None else ("jobDeploymentStatus", deployment)
        if not isinstance(key[1], str):
            continue
        group = seen.setdefault((key[0], key[1]), {})
        if policy in group:
            yield Refusal(f"{_field(path)} repeats policy {policy} for {key[0]} {key[1]}: KubeRay refuses "
                          "duplicate rules", path)
            continue
        group[policy] = ttl or 0
    for (kind, value), ttls in seen.items():
        previous: tuple[str, int] | None = None
        for policy in _DELETION_ORDER:
            if policy not in ttls:
                continue
            if previous is not None and ttls[policy] < previous[1]:
                yield Refusal(f"{_field(base)}: for {kind} {value}, {policy} ttlSeconds {ttls[policy]} is "
                              f"less than {previous[0]} ttlSeconds {previous[1]}: KubeRay deletes workers, "
                              "then the cluster, then the RayJob", base)
            previous = (policy, ttls[policy])


# -- helpers -----------------------------------------------------------------------------------

def _go_atoi(text: str) -> int | None:
    if re.fullmatch(r"[-+]?[0-9]+", text) is None:
        return None
    return int(text)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
