"""Kubeflow Trainer v2's own validation: what its webhooks (``pkg/webhooks``) and its CRD schemas
(``pkg/apis/trainer/v1alpha1`` markers and CEL rules) refuse of a TrainJob, a TrainingRuntime
and a ClusterTrainingRuntime.

Upstream: kubeflow/trainer at v2.3.0 (the CRDs in ``shared/kube/crds/trainer.yaml.xz``). The
webhooks see the object after the CRD defaults (``runtimeRef.apiGroup`` trainer.kubeflow.org,
``runtimeRef.kind`` ClusterTrainingRuntime, a replicated job's ``replicas`` 1, ...), so these
validators read absent fields as those defaults.

Most of the TrainJob webhook's checks are the runtime plugins' (Torch, MPI, XGBoost, Flux,
JobSet, Volcano) and judge the TrainJob against the runtime it references, which gpugate does
not see: those are not judged here. What is judged is what the CRD refuses, what the webhook
refuses whatever the runtime (an unsupported runtime kind; a runtime patch's manager that is not
a domain-prefixed path; env on the initializer or node containers in a runtime patch, refused
whether that container exists in the runtime or not), and, for the runtimes, their own webhook
(a replicated job with a trainer ancestor label runs one replica and has its container).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from policies.names import DNS1035_LABEL as _RFC1035
from policies.names import DNS1035_PREFIX as _RFC1035_PREFIX
from policies.names import DNS1123_SUBDOMAIN as _DNS1123_SUBDOMAIN
from policies.names import HTTP_PATH as _HTTP_PATH
from policies.pointers import join_pointer
from policies.validation import Refusal
from policies.workload import MISSING, resolve

__all__ = ["trainjob", "training_runtime"]

GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
MANAGERS = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
# ancestor label value -> the container its replicated job must have
ANCESTOR_CONTAINERS = {"trainer": "node", "model-initializer": "model-initializer",
                       "dataset-initializer": "dataset-initializer"}
RESERVED_PATCH_ENV = ("dataset-initializer", "model-initializer", "node")
_GENERATE_KEEP = 58  # the apiserver keeps 58 characters of generateName and adds 5
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+")
_TRAINER_ITEM_MAX = 1048576


def _crd(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: Kubeflow Trainer's CRD refuses it", path)


def _hook(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: Kubeflow Trainer's webhook refuses it", path)


# -- TrainJob ---------------------------------------------------------------------------------

def trainjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the TrainJob CRD and webhook refuse of ``doc`` when it is created, whatever runtime
    it references."""
    yield from _name(doc)
    spec = resolve(doc, "/spec")
    if spec is MISSING or spec is None:
        yield _hook("spec.runtimeRef is missing, so it names no supported runtime", "/spec")
        return
    if not isinstance(spec, dict):
        return
    yield from _runtime_ref(spec.get("runtimeRef"))
    manager = spec.get("managedBy")
    if isinstance(manager, str) and manager not in MANAGERS:
        yield _crd(f"spec.managedBy {manager!r} is neither {MANAGERS[0]} nor {MANAGERS[1]}",
                   "/spec/managedBy")
    deadline = spec.get("activeDeadlineSeconds")
    if type(deadline) is int and deadline < 1:
        yield _crd(f"spec.activeDeadlineSeconds {deadline} is below 1", "/spec/activeDeadlineSeconds")
    for which in ("dataset", "model"):
        yield from _initializer(spec, which)
    yield from _trainer(spec.get("trainer"))
    yield from _runtime_patches(spec.get("runtimePatches"))


def _name(doc: dict[str, Any]) -> Iterator[Refusal]:
    """metadata.name must be an RFC 1035 label of at most 63 characters (the CRD's CEL rules); a
    generated name is judged by its prefix, the random suffix being lower-case alphanumerics."""
    name = resolve(doc, "/metadata/name")
    if isinstance(name, str) and name:
        if not _RFC1035.fullmatch(name):
            yield _crd(f"metadata.name {name!r} is not an RFC 1035 label (lower-case letters, digits and "
                       "'-', starting with a letter, ending alphanumeric)", "/metadata/name")
        if len(name) > 63:
            yield _crd(f"metadata.name has {len(name)} characters; at most 63", "/metadata/name")
        return
    prefix = resolve(doc, "/metadata/generateName")
    if isinstance(prefix, str) and prefix and not _RFC1035_PREFIX.fullmatch(prefix[:_GENERATE_KEEP]):
        yield _crd(f"metadata.generateName {prefix!r} cannot make an RFC 1035 label (it must start with a "
                   "lower-case letter and hold only lower-case letters, digits and '-')",
                   "/metadata/generateName")


def _runtime_ref(ref: Any) -> Iterator[Refusal]:
    if ref is None:
        yield _crd("spec.runtimeRef is missing", "/spec/runtimeRef")
        return
    if not isinstance(ref, dict):
        return
    name = ref.get("name")
    if name is None:
        yield _crd("spec.runtimeRef.name is missing", "/spec/runtimeRef/name")
    elif isinstance(name, str) and not 1 <= len(name) <= 253:
        yield _crd(f"spec.runtimeRef.name has {len(name)} characters; 1 to 253", "/spec/runtimeRef/name")
    group = ref.get("apiGroup")
    kind = ref.get("kind")
    group = GROUP if group is None else group
    kind = "ClusterTrainingRuntime" if kind is None else kind
    if isinstance(group, str) and isinstance(kind, str) and (group != GROUP or kind not in RUNTIME_KINDS):
        yield _hook(f"spec.runtimeRef names kind {kind!r} of group {group!r}: the runtimes are "
                    f"{' and '.join(RUNTIME_KINDS)} of {GROUP}", "/spec/runtimeRef")


def _initializer(spec: dict[str, Any], which: str) -> Iterator[Refusal]:
    init = resolve(spec, f"/initializer/{which}")
    if not isinstance(init, dict):
        return
    path = f"/spec/initializer/{which}"
    uri = init.get("storageUri")
    if isinstance(uri, str):
        if len(uri) > 2048:
            yield _crd(f"spec.initializer.{which}.storageUri has {len(uri)} characters; at most 2048",
                       f"{path}/storageUri")
        if uri and not _URI.fullmatch(uri):
            yield _crd(f"spec.initializer.{which}.storageUri {uri[:80]!r} is not a URI (scheme://...)",
                       f"{path}/storageUri")
    yield from _env(init.get("env"), f"{path}/env")


def _trainer(trainer: Any) -> Iterator[Refusal]:
    if not isinstance(trainer, dict):
        return
    image = trainer.get("image")
    if isinstance(image, str) and len(image) > 500:
        yield _crd(f"spec.trainer.image has {len(image)} characters; at most 500", "/spec/trainer/image")
    for key in ("command", "args"):
        items = trainer.get(key)
        if not isinstance(items, list):
            continue
        if len(items) > 128:
            yield _crd(f"spec.trainer.{key} has {len(items)} items; at most 128", f"/spec/trainer/{key}")
        for i, item in enumerate(items):
            if isinstance(item, str) and len(item) > _TRAINER_ITEM_MAX:
                yield _crd(f"spec.trainer.{key}[{i}] has {len(item)} characters; at most {_TRAINER_ITEM_MAX}",
                           f"/spec/trainer/{key}/{i}")
    yield from _env(trainer.get("env"), "/spec/trainer/env")


def _env(env: Any, path: str) -> Iterator[Refusal]:
    yield from _named_list(env, path, "variables", 128)


def _named_list(items: Any, path: str, what: str, most: int,
                required: tuple[str, ...] = ("name",)) -> Iterator[Refusal]:
    """A list the CRD keys by ``name`` (``x-kubernetes-list-type: map``): at most ``most`` items,
    each with its ``required`` keys, no two with the same name."""
    if not isinstance(items, list):
        return
    field = re.sub(r"/(\d+)", r"[\1]", path)[1:].replace("/", ".")
    if len(items) > most:
        yield _crd(f"{field} has {len(items)} {what}; at most {most}", path)
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        for key in required:
            if item.get(key) is None:
                yield _crd(f"{field}[{i}] has no {key}", f"{path}/{i}")
        name = item.get("name")
        if isinstance(name, str):
            if name in seen:
                yield _crd(f"{field}[{i}].name {name[:80]!r} is repeated", f"{path}/{i}/name")
            seen.add(name)


def _runtime_patches(patches: Any) -> Iterator[Refusal]:
    if not isinstance(patches, list):
        return
    base = "/spec/runtimePatches"
    if len(patches) > 16:
        yield _crd(f"spec.runtimePatches has {len(patches)} patches; at most 16", base)
    seen: set[str] = set()
    for i, patch in enumerate(patches):
        if not isinstance(patch, dict):
            continue
        at = f"{base}/{i}"
        manager = patch.get("manager")
        if manager is None:
            yield _crd(f"spec.runtimePatches[{i}] has no manager", at)
        elif isinstance(manager, str):
            if manager in seen:
                yield _crd(f"spec.runtimePatches[{i}].manager {manager!r} is repeated; one patch per manager",
                           f"{at}/manager")
            seen.add(manager)
            yield from _manager(manager, i, f"{at}/manager")
        jobs_at = "/trainingRuntimeSpec/template/spec/replicatedJobs"
        yield from _replicated_job_patches(resolve(patch, jobs_at), i, at + jobs_at)


def _manager(manager: str, i: int, path: str) -> Iterator[Refusal]:
    """A patch's manager is a domain-prefixed path (``acme.io/tool``): the webhook's JobSet plugin
    checks it for every runtime (and a missing runtime is refused anyway)."""
    field = f"spec.runtimePatches[{i}].manager {manager[:80]!r}"
    if not 1 <= len(manager) <= 253:
        yield _crd(f"spec.runtimePatches[{i}].manager has {len(manager)} characters; 1 to 253", path)
        if not manager:
            return
    host, slash, rest = manager.partition("/")
    if not slash or not host or not rest:
        yield _hook(f"{field} is not a domain-prefixed path (such as acme.io/manager)", path)
    elif len(host) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(host):
        yield _hook(f"{field} does not start with a DNS-1123 subdomain", path)
    elif not _HTTP_PATH.fullmatch(rest):
        yield _hook(f"{field} has a path with characters outside [A-Za-z0-9/-._~%!$&'()*+,;=:]", path)


def _replicated_job_patches(jobs: Any, i: int, base: str) -> Iterator[Refusal]:
    if not isinstance(jobs, list):
        return
    field = f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs"
    if len(jobs) > 100:
        yield _crd(f"{field} has {len(jobs)} jobs; at most 100", base)
    yield from _named(jobs, "name", field, base)
    for k, job in enumerate(jobs):
        if not isinstance(job, dict):
            continue
        pod = resolve(job, "/template/spec/template/spec")
        if isinstance(pod, dict):
            yield from _pod_spec_patch(pod, f"{field}[{k}]", f"{base}/{k}/template/spec/template/spec")


def _named(items: list[Any], key: str, field: str, base: str) -> Iterator[Refusal]:
    """The CRD's rules for a list of entries named by ``key``: the name is required, 1 to 253
    characters, and unique."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        name = item.get(key)
        if name is None:
            yield _crd(f"{field}[{i}] has no {key}", f"{base}/{i}")
        elif isinstance(name, str):
            if not 1 <= len(name) <= 253:
                yield _crd(f"{field}[{i}].{key} has {len(name)} characters; 1 to 253", f"{base}/{i}/{key}")
            if name in seen:
                yield _crd(f"{field}[{i}].{key} {name!r} is repeated", f"{base}/{i}/{key}")
            seen.add(name)


def _pod_spec_patch(pod: dict[str, Any], field: str, path: str) -> Iterator[Refusal]:
    grace = pod.get("terminationGracePeriodSeconds")
    if type(grace) is int and grace < 0:
        yield _crd(f"{field} terminationGracePeriodSeconds {grace} is negative",
                   f"{path}/terminationGracePeriodSeconds")
    account = pod.get("serviceAccountName")
    if isinstance(account, str) and len(account) > 253:
        yield _crd(f"{field} serviceAccountName has {len(account)} characters; at most 253",
                   f"{path}/serviceAccountName")
    for key, most in (("imagePullSecrets", 64), ("schedulingGates", 16), ("tolerations", 128)):
        items = pod.get(key)
        if isinstance(items, list) and len(items) > most:
            yield _crd(f"{field} {key} has {len(items)} items; at most {most}", f"{path}/{key}")
    yield from _named_list(pod.get("volumes"), f"{path}/volumes", "volumes", 128)
    for key in ("initContainers", "containers"):
        yield from _named_list(pod.get(key), f"{path}/{key}", key, 64)
        containers = pod.get(key)
        for c, container in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(container, dict):
                continue
            at = f"{path}/{key}/{c}"
            name = container.get("name")
            if isinstance(name, str) and not 1 <= len(name) <= 253:
                yield _crd(f"{field} {key}[{c}].name has {len(name)} characters; 1 to 253", f"{at}/name")
            yield from _env(container.get("env"), f"{at}/env")
            yield from _named_list(container.get("volumeMounts"), f"{at}/volumeMounts", "volume mounts", 128,
                                   ("mountPath", "name"))
            env = container.get("env")
            if key == "containers" and name in RESERVED_PATCH_ENV and isinstance(env, list) and env:
                yield _hook(f"{field} sets env on container {name!r}; the dataset-initializer, "
                            "model-initializer and node containers take no env from a runtime patch",
                            f"{at}/env")


# -- TrainingRuntime and ClusterTrainingRuntime -------------------------------------------------

def training_runtime(doc: dict[str, Any]) -> Iterator[Refusal]:
    """What the TrainingRuntime and ClusterTrainingRuntime CRDs and webhooks refuse of ``doc``."""
    spec = resolve(doc, "/spec")
    if isinstance(spec, dict) and not spec:
        yield _crd("spec is empty", "/spec")
    if not isinstance(spec, dict):
        return
    template = spec.get("template")
    if isinstance(template, dict) and not template:
        yield _crd("spec.template is empty", "/spec/template")
    yield from _ml_policy(spec.get("mlPolicy"))
    mode = resolve(spec, "/podGroupPolicy/volcano/networkTopology/mode")
    if isinstance(mode, str) and mode not in ("hard", "soft"):
        yield _crd(f"spec.podGroupPolicy.volcano.networkTopology.mode {mode!r} is neither hard nor soft",
                   "/spec/podGroupPolicy/volcano/networkTopology/mode")
    jobset = resolve(spec, "/template/spec")
    if isinstance(jobset, dict):
        yield from _jobset_schema(jobset)
        yield from _ancestors(jobset.get("replicatedJobs"))


def _ml_policy(policy: Any) -> Iterator[Refusal]:
    if not isinstance(policy, dict):
        return
    base = "/spec/mlPolicy"
    chosen = [key for key in ("torch", "mpi", "jax", "xgboost", "flux") if policy.get(key) is not None]
    if len(chosen) > 1:
        yield _crd(f"spec.mlPolicy configures {len(chosen)} policies ({', '.join(chosen)}); at most 1", base)
    mpi = policy.get("mpi")
    if isinstance(mpi, dict):
        impl = mpi.get("mpiImplementation")
        if isinstance(impl, str) and impl not in ("OpenMPI", ""):
            yield _crd(f"spec.mlPolicy.mpi.mpiImplementation {impl!r} is not OpenMPI",
                       f"{base}/mpi/mpiImplementation")
        mount = mpi.get("sshAuthMountPath")
        if isinstance(mount, str) and len(mount) > 4096:
            yield _crd(f"spec.mlPolicy.mpi.sshAuthMountPath has {len(mount)} characters; at most 4096",
                       f"{base}/mpi/sshAuthMountPath")
    procs = resolve(policy, "/flux/numProcPerNode")
    if type(procs) is int and procs < 1:
        yield _crd(f"spec.mlPolicy.flux.numProcPerNode {procs} is below 1", f"{base}/flux/numProcPerNode")
    targets = resolve(policy, "/torch/envInjection/targets")
    if isinstance(targets, list):
        yield from _env_injection(targets, f"{base}/torch/envInjection/targets")


def _env_injection(targets: list[Any], base: str) -> Iterator[Refusal]:
    field = "spec.mlPolicy.torch.envInjection.targets"
    if len(targets) > 16:
        yield _crd(f"{field} has {len(targets)} targets; at most 16", base)
    yield from _named(targets, "jobName", field, base)
    for i, target in enumerate(targets):
        if not isinstance(target, dict):
            continue
        names = target.get("containerNames")
        if names is None:
            yield _crd(f"{field}[{i}] has no containerNames", f"{base}/{i}")
            continue
        if not isinstance(names, list):
            continue
        at = f"{base}/{i}/containerNames"
        if not 1 <= len(names) <= 8:
            yield _crd(f"{field}[{i}].containerNames has {len(names)} names; 1 to 8", at)
        if "node" in names:
            yield _crd(f"{field}[{i}].containerNames names 'node', which always gets the PET_* envs", at)
        hashable = [n for n in names if isinstance(n, str)]
        if len(set(hashable)) < len(hashable):
            yield _crd(f"{field}[{i}].containerNames repeats a name", at)
        for n in hashable:
            if len(n) > 63:
                yield _crd(f"{field}[{i}].containerNames has a name of {len(n)} characters; at most 63", at)


_JOBSET_ENUMS = (
    ("/failurePolicy/restartStrategy", ("Recreate", "BlockingRecreate", "InPlaceRestart")),
    ("/startupPolicy/startupPolicyOrder", ("AnyOrder", "InOrder")),
    ("/successPolicy/operator", ("All", "Any")),
)
_RULE_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                 "RestartJobAndIgnoreMaxRestarts")


def _jobset_schema(jobset: dict[str, Any]) -> Iterator[Refusal]:
    """The embedded JobSet spec's schema, as Trainer's CRD carries it."""
    base = "/spec/template/spec"
    field = "spec.template.spec"
    for pointer, allowed in _JOBSET_ENUMS:
        value = resolve(jobset, pointer)
        if isinstance(value, str) and value not in allowed:
            yield _crd(f"{field}{pointer.replace('/', '.')} {value!r} is not one of {', '.join(allowed)}",
                       base + pointer)
    for key, required in (("startupPolicy", "startupPolicyOrder"), ("successPolicy", "operator"),
                          ("coordinator", "replicatedJob")):
        part = jobset.get(key)
        if isinstance(part, dict) and part.get(required) is None:
            yield _crd(f"{field}.{key} has no {required}", f"{base}/{key}")
    claims = jobset.get("volumeClaimPolicies")
    if isinstance(claims, list):
        if len(claims) > 50:
            yield _crd(f"{field}.volumeClaimPolicies has {len(claims)} policies; at most 50",
                       f"{base}/volumeClaimPolicies")
        for i, policy in enumerate(claims):
            templates = policy.get("templates") if isinstance(policy, dict) else None
            if isinstance(templates, list) and len(templates) > 50:
                yield _crd(f"{field}.volumeClaimPolicies[{i}].templates has {len(templates)} templates; "
                           "at most 50", f"{base}/volumeClaimPolicies/{i}/templates")
    ttl = jobset.get("ttlSecondsAfterFinished")
    if type(ttl) is int and ttl < 0:
        yield _crd(f"{field}.ttlSecondsAfterFinished {ttl} is negative", f"{base}/ttlSecondsAfterFinished")
    rules = resolve(jobset, "/failurePolicy/rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        for key in ("action", "name"):
            if rule.get(key) is None:
                yield _crd(f"{field}.failurePolicy.rules[{i}] has no {key}",
                           f"{base}/failurePolicy/rules/{i}")
        action = rule.get("action")
        if isinstance(action, str) and action not in _RULE_ACTIONS:
            yield _crd(f"{field}.failurePolicy.rules[{i}].action {action!r} is not a failure policy action",
                       f"{base}/failurePolicy/rules/{i}/action")
    jobs = jobset.get("replicatedJobs")
    if not isinstance(jobs, list):
        return
    in_order = resolve(jobset, "/startupPolicy/startupPolicyOrder") == "InOrder"
    seen: set[str] = set()
    for k, job in enumerate(jobs):
        if not isinstance(job, dict):
            continue
        at = f"{base}/replicatedJobs/{k}"
        for key in ("name", "template"):
            if job.get(key) is None:
                yield _crd(f"{field}.replicatedJobs[{k}] has no {key}", at)
        name = job.get("name")
        if isinstance(name, str):
            if name in seen:
                yield _crd(f"{field}.replicatedJobs[{k}].name {name!r} is repeated", f"{at}/name")
            seen.add(name)
        template = job.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict) \
                and template["spec"].get("template") is None:
            yield _crd(f"{field}.replicatedJobs[{k}].template.spec has no template", f"{at}/template/spec")
        depends = job.get("dependsOn")
        if depends is not None and in_order:
            yield _crd(f"{field}.replicatedJobs[{k}].dependsOn is set with startupPolicyOrder InOrder; "
                       "the two are mutually exclusive", f"{at}/dependsOn")
        yield from _depends_on(depends, f"{field}.replicatedJobs[{k}].dependsOn", f"{at}/dependsOn")


def _depends_on(depends: Any, field: str, base: str) -> Iterator[Refusal]:
    if not isinstance(depends, list):
        return
    if len(depends) > 5:
        yield _crd(f"{field} has {len(depends)} entries; at most 5", base)
    seen: set[str] = set()
    for d, dep in enumerate(depends):
        if not isinstance(dep, dict):
            continue
        for key in ("name", "status"):
            if dep.get(key) is None:
                yield _crd(f"{field}[{d}] has no {key}", f"{base}/{d}")
        status = dep.get("status")
        if isinstance(status, str) and status not in ("Ready", "Complete"):
            yield _crd(f"{field}[{d}].status {status!r} is neither Ready nor Complete", f"{base}/{d}/status")
        name = dep.get("name")
        if isinstance(name, str):
            if name in seen:
                yield _crd(f"{field}[{d}].name {name!r} is repeated", f"{base}/{d}/name")
            seen.add(name)


def _ancestors(jobs: Any) -> Iterator[Refusal]:
    """The runtime webhooks: a replicated job labelled as a trainer, model-initializer or
    dataset-initializer step runs exactly one replica (the CRD defaults an absent count to 1)
    and has the container of that step (``node`` for the trainer)."""
    if not isinstance(jobs, list):
        return
    for k, job in enumerate(jobs):
        if not isinstance(job, dict):
            continue
        labels = resolve(job, "/template/metadata/labels")
        ancestor = labels.get(ANCESTOR_LABEL) if isinstance(labels, dict) else None
        if not isinstance(ancestor, str) or ancestor not in ANCESTOR_CONTAINERS:
            continue
        at = f"/spec/template/spec/replicatedJobs/{k}"
        replicas = job.get("replicas")
        if type(replicas) is int and replicas != 1:
            yield _hook(f"spec.template.spec.replicatedJobs[{k}].replicas {replicas} is not 1 for the "
                        f"{ancestor} step", f"{at}/replicas")
        containers = resolve(job, "/template/spec/template/spec/containers")
        if containers is not MISSING and containers is not None and not isinstance(containers, list):
            continue
        wanted = ANCESTOR_CONTAINERS[ancestor]
        if not any(isinstance(c, dict) and c.get("name") == wanted for c in containers or []):
            yield _hook(f"spec.template.spec.replicatedJobs[{k}] has no container named {wanted!r}, which "
                        f"the {ancestor} step needs", join_pointer(at, "template", "spec", "template", "spec",
                                                                   "containers"))
