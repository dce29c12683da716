"""The RayCluster spec checks of KubeRay's validation (``ValidateRayClusterSpec`` in
``ray-operator/controllers/ray/utils/validation.go``), its webhook's worker group names and its
RayCluster CRD schema, shared by the three kinds that hold a cluster spec: RayCluster at
``/spec``, RayJob at ``/spec/rayClusterSpec`` and RayService at ``/spec/rayClusterConfig``
(their validators are in :mod:`policies.validation.kuberay`). Also the field readers both
modules use.

Feature gates and CRD defaults are taken into account as :mod:`policies.validation.kuberay`
describes: a gated field's content is refused only when refused under every gate setting.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from policies.names import DNS1123_LABEL as _DNS1123_LABEL
from policies.names import LABEL_VALUE as _LABEL_VALUE
from policies.names import is_qualified_name
from policies.pointers import unescape_pointer
from policies.validation import Refusal
from policies.workload import MISSING, resolve

# k8s.io/apimachinery's generic version: leading digits, dot-separated, anything after ignored.
_GENERIC_VERSION = re.compile(r"\s*v?([0-9]+(?:\.[0-9]+)*)(.*)", re.DOTALL)

_AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"
_FT_ANNOTATION = "ray.io/ft-enabled"
_EXTERNAL_STORAGE_NS_ANNOTATION = "ray.io/external-storage-namespace"
_TLS_ENV = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
_TLS_VOLUME, _TLS_PATH = "ray-tls", "/etc/ray/tls"
_GCS_VOLUME, _GCS_PATH = "gcs-storage", "/data/gcs"
_COLLECTOR_CONTAINER = "ray-history-collector"
_COLLECTOR_MANAGED_ENV = ("POD_IP", "FQ_RAY_IP", "RAY_CLUSTER_NAME", "RAY_CLUSTER_NAMESPACE", "RAY_ROLE",
                          "OWNER_KIND", "OWNER_NAME", "EVENTS_PORT")
_INT32_MAX = 2**31 - 1

# CRD schema enums (ray.io/v1).
_MANAGED_BY = ("ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue")
_ENUMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("/authOptions/mode", ("disabled", "token")),
    ("/autoscalerOptions/version", ("v1", "v2")),
    ("/autoscalerOptions/upscalingMode", ("Default", "Aggressive", "Conservative")),
    ("/gcsFaultToleranceOptions/backend", ("redis", "rocksdb")),
    ("/gcsFaultToleranceOptions/storage/deletionPolicy", ("DeleteWithCluster", "Retain")),
    ("/networkPolicy/mode", ("DenyAll", "DenyAllIngress", "DenyAllEgress")),
    ("/headGroupSpec/ingressOptions/pathType", ("Exact", "Prefix", "ImplementationSpecific")),
    ("/upgradeStrategy/type", ("Recreate", "None")),
    ("/managedBy", _MANAGED_BY),
)


# -- the RayCluster spec, shared -----------------------------------------------------------------

def _cluster_spec(spec: dict[str, Any], base: str, annotations: dict[str, Any]) -> Iterator[Refusal]:
    """What KubeRay refuses of a RayCluster spec at ``base`` (ValidateRayClusterSpec, the
    webhook's worker group names, the CRD schema), given the owning object's annotations."""
    yield from _schema(spec, base)
    head = _map(spec.get("headGroupSpec"))
    head_path = base + "/headGroupSpec"
    if "headGroupSpec" not in spec or spec.get("headGroupSpec") is None:
        yield Refusal(f"{_field(head_path)} is missing: KubeRay's CRD schema requires it", base)
    head_containers = _containers(head)
    if not head_containers:
        path = head_path + "/template/spec/containers"
        yield Refusal(f"{_field(path)} is empty: KubeRay needs a Ray container in the head group", path)
    head_container = _map(head_containers[0]) if head_containers else {}
    head_env = _env(head_container)
    head_params = _map(head.get("rayStartParams"))
    yield from _group_resources(head, head_path)
    yield from _group_labels(head, head_path)
    autoscaling = _autoscaling(spec)
    version = resolve(spec, "/autoscalerOptions/version")
    v2 = version == "v2" or _truthy_v2(head_env)
    groups = _list(spec.get("workerGroupSpecs"))
    names: dict[str, int] = {}
    for index, group in enumerate(groups):
        if not isinstance(group, dict):
            continue
        path = f"{base}/workerGroupSpecs/{index}"
        name = group.get("groupName")
        if name is None:
            yield Refusal(f"{_field(path)}.groupName is missing: KubeRay's CRD schema requires it", path)
        elif isinstance(name, str):
            if name in names:
                yield Refusal(f"{_field(path)}.groupName {name!r} repeats workerGroupSpecs[{names[name]}]: "
                              "KubeRay's webhook needs unique worker group names", path + "/groupName")
            names.setdefault(name, index)
        if not _containers(group):
            yield Refusal(f"{_field(path)}.template.spec.containers is empty: KubeRay needs a Ray container "
                          "in each worker group", path + "/template/spec/containers")
        yield from _replicas(group, path)
        yield from _group_resources(group, path)
        yield from _group_labels(group, path)
        idle = _int(group.get("idleTimeoutSeconds"))
        if idle is not None and idle < 0:
            yield Refusal(f"{_field(path)}.idleTimeoutSeconds {idle} is negative: KubeRay refuses it",
                          path + "/idleTimeoutSeconds")
        elif idle is not None and not v2:
            yield Refusal(f"{_field(path)}.idleTimeoutSeconds {idle} is set without autoscaler v2: KubeRay "
                          f"needs {_field(base)}.autoscalerOptions.version v2", path + "/idleTimeoutSeconds")
        yield from _priority(group, path, spec, v2)
        if group.get("suspend") is True and autoscaling:
            # Without the autoscaler, suspending depends on the RayJobDeletionPolicy gate.
            yield Refusal(f"{_field(path)}.suspend is true with autoscaling enabled: KubeRay cannot suspend "
                          "a worker group the autoscaler manages", path + "/suspend")
    yield from _fault_tolerance(spec, base, head, head_container, annotations)
    if head_params.get("redis-username") not in (None, "") or "REDIS_USERNAME" in head_env:
        yield Refusal(f"{_field(head_path)} sets a Redis username in rayStartParams or the REDIS_USERNAME "
                      "env: "
                      f"KubeRay takes it only from {_field(base)}.gcsFaultToleranceOptions.redisUsername",
                      head_path)
    v2_env = head_env.get(_AUTOSCALER_V2_ENV)
    if not autoscaling and v2_env is not None and v2_env.get("value") in ("1", "true"):
        yield Refusal(f"head env {_AUTOSCALER_V2_ENV} {v2_env.get('value')!r} asks for autoscaler v2 while "
                      f"{_field(base)}.enableInTreeAutoscaling is not true: KubeRay refuses it",
                      head_path + "/template/spec/containers/0/env")
    if autoscaling:
        if version is not MISSING and version is not None and v2_env is not None:
            yield Refusal(f"{_field(base)}.autoscalerOptions.version and head env {_AUTOSCALER_V2_ENV} are "
                          "both set: KubeRay takes only the former", base + "/autoscalerOptions/version")
        if version == "v2":
            yield from _v2_restart_policies(head, head_path, groups, base)
    idle = _int(resolve(spec, "/autoscalerOptions/idleTimeoutSeconds"))
    if idle is not None and idle < 0:
        yield Refusal(f"{_field(base)}.autoscalerOptions.idleTimeoutSeconds {idle} is negative: KubeRay "
                      "refuses it",
                      base + "/autoscalerOptions/idleTimeoutSeconds")
    if "KUBERAY_GEN_AUTOSCALER_START_CMD" in _env(_map(spec.get("autoscalerOptions"))):
        yield Refusal(f"{_field(base)}.autoscalerOptions.env sets KUBERAY_GEN_AUTOSCALER_START_CMD: KubeRay "
                      "manages it", base + "/autoscalerOptions/env")
    yield from _history_server(spec, base, head, groups)
    yield from _auth(spec, base)
    yield from _network_policy(spec, base, groups)
    yield from _tls(spec, base, head_container, groups)


def _schema(spec: dict[str, Any], base: str) -> Iterator[Refusal]:
    for pointer, allowed in _ENUMS:
        value = resolve(spec, pointer)
        if value is not MISSING and value is not None:
            yield from _enum(value, base + pointer, allowed)


def _replicas(group: dict[str, Any], path: str) -> Iterator[Refusal]:
    # The CRD defaults minReplicas to 0 and maxReplicas to 2147483647.
    low = _int(group.get("minReplicas"))
    high = _int(group.get("maxReplicas"))
    if low is not None and low < 0:
        yield Refusal(f"{_field(path)}.minReplicas {low} is negative: KubeRay refuses it",
                      path + "/minReplicas")
    if high is not None and high < 0:
        yield Refusal(f"{_field(path)}.maxReplicas {high} is negative: KubeRay refuses it",
                      path + "/maxReplicas")
    low = 0 if group.get("minReplicas") is None else low
    high = _INT32_MAX if group.get("maxReplicas") is None else high
    if low is not None and high is not None and low > high:
        yield Refusal(f"{_field(path)}.minReplicas {low} is more than maxReplicas {high}: KubeRay refuses it",
                      path + "/minReplicas")


def _group_resources(group: dict[str, Any], path: str) -> Iterator[Refusal]:
    params = _map(group.get("rayStartParams"))
    in_params = [key for key in ("num-cpus", "num-gpus", "memory", "resources")
                 if isinstance(params.get(key), str) and params[key]]
    if in_params and _map(group.get("resources")):
        yield Refusal(f"{_field(path)} sets resources both in rayStartParams ({', '.join(in_params)}) and in "
                      "resources: KubeRay takes only one", path + "/resources")


def _group_labels(group: dict[str, Any], path: str) -> Iterator[Refusal]:
    if isinstance(_map(group.get("rayStartParams")).get("labels"), str):
        yield Refusal(f"{_field(path)}.rayStartParams sets labels: KubeRay takes them only from "
                      f"{_field(path)}.labels", path + "/rayStartParams/labels")
    for key, value in _map(group.get("labels")).items():
        if not _qualified_name(key):
            yield Refusal(f"{_field(path)}.labels key {key!r} is not a valid label key: KubeRay refuses it",
                          path + "/labels")
        if isinstance(value, str) and not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
            yield Refusal(f"{_field(path)}.labels value {value!r} of {key!r} is not a valid label value: "
                          "KubeRay refuses it", path + "/labels")


def _priority(group: dict[str, Any], path: str, spec: dict[str, Any], v2: bool) -> Iterator[Refusal]:
    priority = _int(group.get("priority"))
    if not priority:
        return
    version = spec.get("rayVersion")
    parsed = _version(version) if isinstance(version, str) else None
    if not isinstance(version, str) or not version:
        yield Refusal(f"{_field(path)}.priority {priority} is set without rayVersion: KubeRay needs Ray "
                      "2.56.0 or later", path + "/priority")
    elif parsed is None:
        yield Refusal(f"{_field(path)}.priority {priority} is set and rayVersion {version!r} is not a "
                      "version: KubeRay needs Ray 2.56.0 or later", path + "/priority")
    elif parsed < (2, 56, 0):
        yield Refusal(f"{_field(path)}.priority {priority} needs Ray 2.56.0 or later, rayVersion is "
                      f"{version}: KubeRay refuses it", path + "/priority")
    elif not v2:
        yield Refusal(f"{_field(path)}.priority {priority} is set without autoscaler v2: KubeRay refuses it",
                      path + "/priority")


def _fault_tolerance(spec: dict[str, Any], base: str, head: dict[str, Any], head_container: dict[str, Any],
                     annotations: dict[str, Any]) -> Iterator[Refusal]:
    options = spec.get("gcsFaultToleranceOptions")
    head_path = base + "/headGroupSpec"
    env = _env(head_container)
    env_path = head_path + "/template/spec/containers/0/env"
    flag = annotations.get(_FT_ANNOTATION)
    ft_path = base + "/gcsFaultToleranceOptions"
    if isinstance(flag, str) and flag and options is not None:
        yield Refusal(f"annotation {_FT_ANNOTATION} and {_field(ft_path)} are both set: KubeRay takes only "
                      f"{_field(ft_path)}", ft_path)
    enabled = (isinstance(flag, str) and flag.lower() == "true") or options is not None
    if not enabled and "RAY_REDIS_ADDRESS" in env:
        yield Refusal(f"head env RAY_REDIS_ADDRESS is set without {_field(ft_path)}: KubeRay refuses GCS "
                      "fault tolerance enabled this way", env_path)
    if options is None:
        return
    options = _map(options)
    if _map(head.get("rayStartParams")).get("redis-password") not in (None, ""):
        yield Refusal(f"{_field(head_path)}.rayStartParams sets redis-password with {_field(ft_path)}: "
                      "KubeRay takes it only from gcsFaultToleranceOptions.redisPassword",
                      head_path + "/rayStartParams/redis-password")
    for name, instead in (("REDIS_PASSWORD", "redisPassword"), ("RAY_REDIS_ADDRESS", "redisAddress")):
        if name in env:
            yield Refusal(f"head env {name} is set with {_field(ft_path)}: KubeRay takes it only from "
                          f"gcsFaultToleranceOptions.{instead}", env_path)
    if annotations.get(_EXTERNAL_STORAGE_NS_ANNOTATION) not in (None, ""):
        yield Refusal(f"annotation {_EXTERNAL_STORAGE_NS_ANNOTATION} is set with {_field(ft_path)}: KubeRay "
                      "takes it only from gcsFaultToleranceOptions.externalStorageNamespace", ft_path)
    backend = options.get("backend")
    if backend == "rocksdb":
        # The backend needs the GCSFaultToleranceEmbeddedStorage gate (undecidable); what follows is
        # refused whether the gate is on or off.
        for key, empty in (("redisAddress", ""), ("redisUsername", None), ("redisPassword", None),
                           ("externalStorageNamespace", "")):
            if options.get(key) not in (None, empty):
                yield Refusal(f"{_field(ft_path)}.{key} is set with backend rocksdb: KubeRay refuses it",
                              f"{ft_path}/{key}")
        storage = _map(options.get("storage"))
        if storage.get("claimName") not in (None, "") and (
                storage.get("size") is not None or storage.get("storageClassName") is not None
                or bool(storage.get("accessModes"))):
            yield Refusal(f"{_field(ft_path)}.storage.claimName is set with size, storageClassName or "
                          "accessModes: KubeRay takes one or the other", ft_path + "/storage")
        if "RAY_gcs_storage" in env or "RAY_gcs_storage_path" in env:
            yield Refusal("head env RAY_gcs_storage or RAY_gcs_storage_path is set with backend rocksdb: "
                          "KubeRay manages them", env_path)
        for mount in _list(head_container.get("volumeMounts")):
            if isinstance(mount, dict) and (mount.get("mountPath") == _GCS_PATH
                                            or mount.get("name") == _GCS_VOLUME):
                yield Refusal(f"head volume mount {mount.get('name')!r} at {mount.get('mountPath')!r} uses "
                              "the "
                              f"name {_GCS_VOLUME} or path {_GCS_PATH} KubeRay reserves for backend rocksdb",
                              head_path + "/template/spec/containers/0/volumeMounts")
        for volume in _list(resolve(head, "/template/spec/volumes")):
            if isinstance(volume, dict) and volume.get("name") == _GCS_VOLUME:
                yield Refusal(f"head volume {_GCS_VOLUME} is a name KubeRay reserves for backend rocksdb",
                              head_path + "/template/spec/volumes")
    elif backend in (None, "", "redis") and options.get("storage") is not None:
        yield Refusal(f"{_field(ft_path)}.storage is set with backend redis: it applies only to rocksdb",
                      ft_path + "/storage")


def _v2_restart_policies(head: dict[str, Any], head_path: str, groups: list[Any],
                         base: str) -> Iterator[Refusal]:
    for group, path in [(head, head_path)] + [(g, f"{base}/workerGroupSpecs/{i}") for i,
                                                  g in enumerate(groups)]:
        policy = resolve(group, "/template/spec/restartPolicy")
        if isinstance(policy, str) and policy and policy != "Never":
            pointer = path + "/template/spec/restartPolicy"
            yield Refusal(f"{_field(pointer)} {policy} is not Never: KubeRay refuses it with autoscaler "
                          "v2", pointer)


def _history_server(spec: dict[str, Any], base: str, head: dict[str, Any],
                    groups: list[Any]) -> Iterator[Refusal]:
    options = spec.get("historyServerOptions")
    if options is None:
        return  # using it at all needs the RayClusterHistoryServer gate: undecidable
    path = base + "/historyServerOptions/collectorOptions"
    collector = _map(options).get("collectorOptions")
    if not isinstance(collector, dict):
        yield Refusal(f"{_field(path)} is missing: KubeRay needs it for the history server", path)
    else:
        yield from _collector(collector, path)
    for container in _containers(head):
        if isinstance(container, dict) and container.get("name") == _COLLECTOR_CONTAINER:
            pointer = base + "/headGroupSpec/template/spec/containers"
            yield Refusal(f"{_field(pointer)} has a container named {_COLLECTOR_CONTAINER}: KubeRay adds it "
                          "for the history server", pointer)
    for index, group in enumerate(groups):
        for container in _containers(_map(group)):
            if isinstance(container, dict) and container.get("name") == _COLLECTOR_CONTAINER:
                pointer = f"{base}/workerGroupSpecs/{index}/template/spec/containers"
                yield Refusal(f"{_field(pointer)} has a container named {_COLLECTOR_CONTAINER}: KubeRay adds "
                              "it for the history server", pointer)


def _collector(collector: dict[str, Any], path: str) -> Iterator[Refusal]:
    image = collector.get("image")
    if not isinstance(image, str) or not image:
        yield Refusal(f"{_field(path)}.image is missing: KubeRay needs it", path)
    env = _env(collector, last=True)
    env_path = path + "/env"
    for name in _COLLECTOR_MANAGED_ENV:
        if name in env:
            yield Refusal(f"{_field(env_path)} sets {name}: KubeRay manages it", env_path)

    def has(name: str) -> bool:
        entry = env.get(name)
        return entry is not None and (entry.get("value") not in (None,
                                                "") or entry.get("valueFrom") is not None)

    backend = _map(env.get("STORAGE_BACKEND")).get("value")
    if not isinstance(backend, str) or not backend:
        yield Refusal(f"{_field(env_path)} has no literal STORAGE_BACKEND: KubeRay needs it", env_path)
        return
    needed: list[str] = []
    kind = backend.upper()
    if kind == "GCS":
        needed = ["GCS_BUCKET"]
    elif kind == "S3":
        needed = ["S3_REGION"]
    elif kind == "ALIYUNOSS":
        needed = ["OSS_BUCKET", "OSS_ENDPOINT", "OSS_REGION"]
    elif kind == "AZUREBLOB":
        mode = _map(env.get("AZURE_STORAGE_AUTH_MODE")).get("value")
        mode = mode.strip().lower() if isinstance(mode, str) else ""
        if mode == "connection_string":
            needed = ["AZURE_STORAGE_CONNECTION_STRING"]
        elif mode in ("workload_identity", "default"):
            needed = ["AZURE_STORAGE_ACCOUNT_URL"]
        elif not has("AZURE_STORAGE_CONNECTION_STRING") and not has("AZURE_STORAGE_ACCOUNT_URL"):
            yield Refusal(f"{_field(env_path)} has neither AZURE_STORAGE_CONNECTION_STRING nor "
                          "AZURE_STORAGE_ACCOUNT_URL with STORAGE_BACKEND AZUREBLOB: KubeRay needs "
                          "one", env_path)
    for name in needed:
        if not has(name):
            yield Refusal(f"{_field(env_path)} has no {name} with STORAGE_BACKEND {backend}: KubeRay "
                          "needs it", env_path)


def _auth(spec: dict[str, Any], base: str) -> Iterator[Refusal]:
    auth = _map(spec.get("authOptions"))
    path = base + "/authOptions"
    k8s = _k8s_auth(auth)
    if auth.get("mode") != "token":
        if k8s:
            yield Refusal(f"{_field(path)}.enableK8sTokenAuth is true while mode is not token: KubeRay "
                          "refuses it",
                          path + "/enableK8sTokenAuth")
        return
    version = spec.get("rayVersion")
    parsed = _version(version) if isinstance(version, str) else None
    if not isinstance(version, str) or not version:
        yield Refusal(f"{_field(path)}.mode token is set without {_field(base)}.rayVersion: KubeRay needs "
                      "Ray 2.52.0 or later", base)
        return
    if parsed is None:
        yield Refusal(f"{_field(base)}.rayVersion {version!r} is not a version: KubeRay needs Ray 2.52.0 or "
                      "later for token auth", base + "/rayVersion")
        return
    if parsed < (2, 52, 0):
        yield Refusal(f"{_field(base)}.rayVersion {version} is older than 2.52.0: KubeRay needs it for "
                      "token auth",
                      base + "/rayVersion")
    if k8s:
        if parsed < (2, 55, 0):
            yield Refusal(f"{_field(base)}.rayVersion {version} is older than 2.55.0: KubeRay needs it for "
                          "Kubernetes token auth", base + "/rayVersion")
        if auth.get("secretName") not in (None, ""):
            yield Refusal(f"{_field(path)}.secretName is set with enableK8sTokenAuth: KubeRay refuses both",
                          path + "/secretName")


def _network_policy(spec: dict[str, Any], base: str, groups: list[Any]) -> Iterator[Refusal]:
    """Refusals of ``networkPolicy``'s content; using it at all needs the
    RayClusterNetworkPolicy gate (undecidable), and its content is refused either way."""
    policy = spec.get("networkPolicy")
    if not isinstance(policy, dict):
        return
    path = base + "/networkPolicy"
    mode = policy.get("mode") if policy.get("mode") is not None else "DenyAll"
    names: set[str] = set()
    for index, group in enumerate(groups):
        name = _map(group).get("groupName")
        if isinstance(name, str):
            names.add(name)
            if not (len(name) <= 63 and _DNS1123_LABEL.fullmatch(name)):
                pointer = f"{base}/workerGroupSpecs/{index}/groupName"
                yield Refusal(f"{_field(pointer)} {name!r} is not a DNS-1123 label: KubeRay needs one with "
                              "networkPolicy (it names a NetworkPolicy)", pointer)
    entries: list[tuple[str, Any]] = [(path + "/head",
                                              policy.get("head")), (path + "/worker", policy.get("worker"))]
    entries += [(f"{path}/workerGroups/{i}", g) for i, g in enumerate(_list(policy.get("workerGroups")))]
    for pointer, rules in entries:
        if not isinstance(rules, dict):
            continue
        if mode == "DenyAllEgress" and _list(rules.get("ingressRules")):
            yield Refusal(f"{_field(pointer)}.ingressRules is set with networkPolicy mode DenyAllEgress: "
                          "ingress is not restricted", pointer + "/ingressRules")
        if mode == "DenyAllIngress" and _list(rules.get("egressRules")):
            yield Refusal(f"{_field(pointer)}.egressRules is set with networkPolicy mode DenyAllIngress: "
                          "egress is not restricted", pointer + "/egressRules")
        if "/workerGroups/" in pointer:
            name = rules.get("groupName")
            if name is None:
                yield Refusal(f"{_field(pointer)}.groupName is missing: KubeRay's CRD schema requires "
                              "it", pointer)
            elif isinstance(name, str) and name not in names:
                yield Refusal(f"{_field(pointer)}.groupName {name!r} matches no worker group: KubeRay "
                              "refuses it",
                              pointer + "/groupName")


def _tls(spec: dict[str, Any], base: str, head_container: dict[str, Any],
         groups: list[Any]) -> Iterator[Refusal]:
    """Refusals with ``tlsOptions.enabled`` true; using ``tlsOptions`` at all needs the
    RayClusterMTLS gate (undecidable), and these are refused either way."""
    options = spec.get("tlsOptions")
    if not isinstance(options, dict) or options.get("enabled") is not True:
        return
    containers: list[tuple[dict[str, Any], str]] = []
    if head_container:
        containers.append((head_container, base + "/headGroupSpec/template/spec/containers/0"))
    for index, group in enumerate(groups):
        found = _containers(_map(group))
        if found and isinstance(found[0], dict):
            containers.append((found[0], f"{base}/workerGroupSpecs/{index}/template/spec/containers/0"))
    autoscaler = _map(spec.get("autoscalerOptions"))
    if autoscaler:
        containers.append((autoscaler, base + "/autoscalerOptions"))
    for container, path in containers:
        env = _env(container)
        for name in _TLS_ENV:
            if name in env:
                yield Refusal(f"{_field(path)}.env sets {name} with tlsOptions enabled: KubeRay manages it",
                              path + "/env")
        for mount in _list(container.get("volumeMounts")):
            if isinstance(mount, dict) and (mount.get("name") == _TLS_VOLUME
                                            or mount.get("mountPath") == _TLS_PATH):
                yield Refusal(f"{_field(path)}.volumeMounts uses the name {_TLS_VOLUME} or path "
                              f"{_TLS_PATH} KubeRay "
                              "reserves with tlsOptions enabled", path + "/volumeMounts")


def _upgrade_origin(spec: dict[str, Any], base: str, origin: str | None) -> Iterator[Refusal]:
    """A RayCluster that KubeRay creates for a RayJob or RayService may not set an upgrade strategy
    (checked on the RayCluster, whose ``ray.io/originated-from-crd`` label names its creator)."""
    kind = resolve(spec, "/upgradeStrategy/type")
    if kind is MISSING or kind is None or origin not in ("RayJob", "RayService"):
        return
    yield Refusal(f"{_field(base)}.upgradeStrategy.type is set on a RayCluster created by a {origin}: "
                  "KubeRay refuses it", base + "/upgradeStrategy/type")


# -- helpers -----------------------------------------------------------------------------------

def _enum(value: Any, path: str, allowed: tuple[str, ...]) -> Iterator[Refusal]:
    if value not in allowed:
        yield Refusal(f"{_field(path)} {value!r} is not one of {', '.join(allowed)}: KubeRay's CRD schema "
                      "refuses it", path)


def _autoscaling(spec: dict[str, Any]) -> bool:
    return spec.get("enableInTreeAutoscaling") is True


def _k8s_auth(auth: dict[str, Any]) -> bool:
    return auth.get("enableK8sTokenAuth") is True


def _truthy_v2(env: dict[str, dict[str, Any]]) -> bool:
    return _map(env.get(_AUTOSCALER_V2_ENV)).get("value") in ("1", "true")


def _containers(group: dict[str, Any]) -> list[Any]:
    return _list(resolve(group, "/template/spec/containers"))


def _env(container: dict[str, Any], last: bool = False) -> dict[str, dict[str, Any]]:
    """Env entries by name. Of a repeated name the first wins, as KubeRay looks up a pod's env,
    or the last (``last``), as it indexes the history collector's."""
    found: dict[str, dict[str, Any]] = {}
    for entry in _list(container.get("env")):
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            if last:
                found[entry["name"]] = entry
            else:
                found.setdefault(entry["name"], entry)
    return found


def _qualified_name(key: Any) -> bool:
    return not isinstance(key, str) or is_qualified_name(key)   # a key of the wrong type is GG002's


def _version(text: str) -> tuple[int, ...] | None:
    """k8s.io/apimachinery's ParseGeneric: at least two numeric components; None if not."""
    match = _GENERIC_VERSION.fullmatch(text)
    if match is None:
        return None
    parts = tuple(int(part) for part in match.group(1).split("."))
    if len(parts) < 2:
        return None
    return parts + (0,) * max(0, 3 - len(parts))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _field(pointer: str) -> str:
    """``/spec/workerGroupSpecs/0/minReplicas`` -> ``spec.workerGroupSpecs[0].minReplicas``."""
    out = ""
    for token in pointer.strip("/").split("/"):
        token = unescape_pointer(token)
        out += f"[{token}]" if token.isdigit() else (("." if out else "") + token)
    return out
