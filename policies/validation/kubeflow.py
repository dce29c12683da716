"""The training-operator's own validation: what it refuses of a PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob and (kubeflow.org/v1) MPIJob.

Upstream: kubeflow/trainer (the former kubeflow/training-operator) at v1.9.4, the last v1
release: the validating webhooks ``pkg/webhooks/{pytorch,tensorflow,xgboost,paddlepaddle,jax}``
and, for the MPIJob (which has no webhook), ``ValidateV1MpiJobSpec`` in
``pkg/apis/kubeflow.org/v1/mpi_validation.go``, which the controller runs before it does
anything with the job. v1 has no mutating webhook: the controller's defaults (Master replicas
1, camel-cased replica types, ...) come after validation, so the webhooks judge the object as
submitted, and so do these validators. The CRD schemas add nothing decidable on CREATE (their
one CEL rule, ``schedulingPolicy.queue`` immutable, is an UPDATE check).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.names import DNS1035_LABEL as _DNS1035
from policies.names import DNS1035_PREFIX as _DNS1035_PREFIX
from policies.pointers import join_pointer
from policies.validation import Refusal
from policies.workload import MISSING, resolve

__all__ = ["jaxjob", "mpijob", "paddlejob", "pytorchjob", "tfjob", "xgboostjob"]

KUBEFLOW_CONTROLLER = "kubeflow.org/training-operator"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
_MANAGERS = (KUBEFLOW_CONTROLLER, MULTIKUEUE_CONTROLLER)
_DNS1035_MAX = 63
# the apiserver keeps at most 58 characters of generateName and appends 5 random ones
_GENERATE_KEEP = 58


def _hook(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: the training-operator's webhook refuses it", path)


def pytorchjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the PyTorchJob webhook refuses: its name, managedBy, replica types Master and Worker,
    one Master, Workers at least 1, a ``pytorch`` container, and the elastic policy's needs."""
    yield from _common(doc, "pytorchReplicaSpecs", "pytorch", ("Master", "Worker"), run_policy=True)
    specs = resolve(doc, "/spec/pytorchReplicaSpecs")
    if isinstance(specs, dict):
        yield from _master_is_one(specs, "/spec/pytorchReplicaSpecs")
        for role, entry in specs.items():
            replicas = _replicas(entry)
            if role != "Master" and replicas is not None and replicas < 1:
                yield _hook(f"spec.pytorchReplicaSpecs.{role}.replicas {replicas} is below 1",
                            join_pointer("/spec/pytorchReplicaSpecs", role, "replicas"))
    elastic = resolve(doc, "/spec/elasticPolicy")
    if isinstance(elastic, dict):
        if specs is MISSING or specs is None or isinstance(specs, dict) and "Worker" not in specs:
            yield _hook("spec.pytorchReplicaSpecs has no Worker, which an elastic policy needs",
                        "/spec/pytorchReplicaSpecs")
        nproc = resolve(doc, "/spec/nprocPerNode")
        if elastic.get("nProcPerNode") is not None and nproc is not MISSING and nproc is not None:
            yield _hook("spec.elasticPolicy.nProcPerNode is set with spec.nprocPerNode (deprecated; "
                        "set only spec.nprocPerNode)", "/spec/elasticPolicy/nProcPerNode")


def tfjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the TFJob webhook refuses: its name, managedBy, a ``tensorflow`` container, and more
    than one Chief or Master (any replica type name is accepted)."""
    yield from _common(doc, "tfReplicaSpecs", "tensorflow", None, run_policy=True)
    specs = resolve(doc, "/spec/tfReplicaSpecs")
    if isinstance(specs, dict):
        leaders = [role for role in specs if role in ("Chief", "Master")]
        if len(leaders) > 1:
            yield _hook(f"spec.tfReplicaSpecs has {len(leaders)} Chief or Master roles; at most 1",
                        "/spec/tfReplicaSpecs")


def xgboostjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the XGBoostJob webhook refuses: its name, managedBy, replica types Master and Worker,
    exactly one Master replica, and an ``xgboost`` container."""
    yield from _common(doc, "xgbReplicaSpecs", "xgboost", ("Master", "Worker"), run_policy=True)
    specs = resolve(doc, "/spec/xgbReplicaSpecs")
    if isinstance(specs, dict):
        yield from _master_is_one(specs, "/spec/xgbReplicaSpecs")
        if "Master" not in specs:
            yield _hook("spec.xgbReplicaSpecs has no Master", "/spec/xgbReplicaSpecs")


def paddlejob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the PaddleJob webhook refuses: its name, managedBy, replica types Master and Worker,
    and a ``paddle`` container."""
    yield from _common(doc, "paddleReplicaSpecs", "paddle", ("Master", "Worker"), run_policy=True)


def jaxjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the JAXJob webhook refuses: its name, replica type Worker only, and a ``jax``
    container (this webhook does not look at managedBy)."""
    yield from _common(doc, "jaxReplicaSpecs", "jax", ("Worker",), run_policy=False)


def mpijob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the training-operator's controller refuses to run of a kubeflow.org/v1 MPIJob: a
    Launcher and Worker only, exactly one Launcher, containers with a name and an image.

    The v2beta1 MPIJob of the MPI Operator shares the group and kind but not these rules: it is
    not judged here. Neither is a job another controller manages (the operator skips it).
    """
    if doc.get("apiVersion") != "kubeflow.org/v1":
        return
    manager = resolve(doc, "/spec/runPolicy/managedBy")
    if isinstance(manager, str) and manager != KUBEFLOW_CONTROLLER:
        return
    specs = resolve(doc, "/spec/mpiReplicaSpecs")
    base = "/spec/mpiReplicaSpecs"
    if specs is MISSING or specs is None:
        yield _controller("spec.mpiReplicaSpecs is missing", base)
        return
    if not isinstance(specs, dict):
        return
    for role, entry in specs.items():
        path = join_pointer(base, role)
        if role not in ("Launcher", "Worker"):
            yield _controller(f"spec.mpiReplicaSpecs.{role} is not a replica type (Launcher or Worker)", path)
        containers = _containers(entry)
        if containers is None:
            continue
        if not containers:
            yield _controller(f"spec.mpiReplicaSpecs.{role} has no containers",
                              join_pointer(path, "template", "spec", "containers"))
        for i, container in enumerate(containers):
            if not isinstance(container, dict):
                continue
            if not container.get("image"):
                yield _controller(f"spec.mpiReplicaSpecs.{role} container {i} has no image",
                                  join_pointer(path, "template", "spec", "containers", i, "image"))
            if not container.get("name"):
                yield _controller(f"spec.mpiReplicaSpecs.{role} container {i} has no name",
                                  join_pointer(path, "template", "spec", "containers", i, "name"))
        replicas = _replicas(entry)
        if role == "Launcher" and replicas is not None and replicas != 1:
            yield _controller(f"spec.mpiReplicaSpecs.Launcher.replicas {replicas} is not 1",
                              join_pointer(path, "replicas"))
    if "Launcher" not in specs:
        yield _controller("spec.mpiReplicaSpecs has no Launcher", base)


def _controller(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: the training-operator's controller refuses to run it", path)


# -- shared by the webhooks -------------------------------------------------------------------

def _common(doc: dict[str, Any], key: str, container_name: str, roles: tuple[str, ...] | None,
            run_policy: bool) -> Iterator[Refusal]:
    """The checks every v1 webhook makes: the name is a DNS-1035 label, managedBy names a
    known controller, the replica specs exist, each has containers with images and one named
    like the kind's default container, and (where the kind has a list) known replica types."""
    yield from _name(doc)
    if run_policy:
        manager = resolve(doc, "/spec/runPolicy/managedBy")
        if isinstance(manager, str) and manager not in _MANAGERS:
            yield _hook(f"spec.runPolicy.managedBy {manager!r} is neither {KUBEFLOW_CONTROLLER} "
                        f"nor {MULTIKUEUE_CONTROLLER}", "/spec/runPolicy/managedBy")
    base = f"/spec/{key}"
    specs = resolve(doc, base)
    if specs is MISSING or specs is None:
        yield _hook(f"spec.{key} is missing", base)
        return
    if not isinstance(specs, dict):
        return
    for role, entry in specs.items():
        path = join_pointer(base, role)
        if roles is not None and role not in roles:
            yield _hook(f"spec.{key}.{role} is not a replica type ({' or '.join(roles)})", path)
        containers = _containers(entry)
        if containers is None:
            continue
        containers_path = join_pointer(path, "template", "spec", "containers")
        if not containers:
            yield _hook(f"spec.{key}.{role} has no containers", containers_path)
        for i, container in enumerate(containers):
            if isinstance(container, dict) and not container.get("image"):
                yield _hook(f"spec.{key}.{role} container {i} has no image",
                            join_pointer(containers_path, i, "image"))
        if not any(isinstance(c, dict) and c.get("name") == container_name for c in containers):
            yield _hook(f"spec.{key}.{role} has no container named {container_name!r}", containers_path)


def _master_is_one(specs: dict[str, Any], base: str) -> Iterator[Refusal]:
    """A Master replica spec must say ``replicas: 1`` (absent is refused: v1 defaults it only
    in the controller, after the webhook)."""
    if "Master" not in specs or not isinstance(specs["Master"], dict):
        return
    replicas = specs["Master"].get("replicas")
    if replicas is None or (type(replicas) is int and replicas != 1):
        said = "is not set" if replicas is None else f"{replicas} is not 1"
        yield _hook(f"{base[1:].replace('/', '.')}.Master.replicas {said}; a Master must have 1",
                    join_pointer(base, "Master", "replicas"))


def _containers(entry: Any) -> list[Any] | None:
    """The containers of a replica spec ([] when it has none, a null spec included); None when
    a field on the way has the wrong type (GG002's business, not a refusal)."""
    node = entry
    for key in ("template", "spec", "containers"):
        if node is None:
            return []
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    if node is None:
        return []
    return node if isinstance(node, list) else None


def _replicas(entry: Any) -> int | None:
    replicas = entry.get("replicas") if isinstance(entry, dict) else None
    return replicas if type(replicas) is int else None


def _name(doc: dict[str, Any]) -> Iterator[Refusal]:
    """metadata.name must be a DNS-1035 label (a name generated from generateName is judged by
    its prefix: the random suffix is lower-case letters and digits)."""
    name = resolve(doc, "/metadata/name")
    if isinstance(name, str) and name:
        if len(name) > _DNS1035_MAX or not _DNS1035.fullmatch(name):
            yield _hook(f"metadata.name {name!r} is not a DNS-1035 label (lower-case letters, digits and "
                        "'-', starting with a letter, ending alphanumeric, at most 63)", "/metadata/name")
        return
    prefix = resolve(doc, "/metadata/generateName")
    if isinstance(prefix, str) and prefix and not _DNS1035_PREFIX.fullmatch(prefix[:_GENERATE_KEEP]):
        yield _hook(f"metadata.generateName {prefix!r} cannot make a DNS-1035 label (it must start with "
                    "a lower-case letter and hold only lower-case letters, digits and '-')",
                    "/metadata/generateName")
