"""JobSet's own validation: what its webhook (``pkg/webhooks/jobset_webhook.go``, ValidateCreate)
and its CRD schema (CEL rules, enums, list limits) refuse of a JobSet.

Upstream: kubernetes-sigs/jobset. The webhook judges the object after JobSet's mutating webhook
and the CRD defaults, so the validator applies the same defaults where they change the verdict
(``replicas`` 1, ``groupName`` "default", ``completionMode`` Indexed, unnamed failure policy rules
named ``failurePolicyRule<i>``). Checks behind feature gates (InPlaceRestart, RestartJob, both
off by default) are refused only where the object is refused with the gate on and off alike.
What needs other objects (an existing PVC of the same name) or the stored object (UPDATE
immutability) is not judged here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from policies.names import DNS1035_LABEL as _DNS1035
from policies.names import DNS1123_LABEL as _DNS1123_LABEL
from policies.names import HTTP_PATH as _PATH_CHARS
from policies.names import LABEL_VALUE as _LABEL_VALUE
from policies.validation import Refusal
from policies.workload import MISSING, resolve

__all__ = ["jobset"]

INT32_MAX = 2**31 - 1
# the apiserver keeps at most 58 characters of generateName and appends 5 random ones
_GENERATE_KEEP = 58
_GENERATED_SUFFIX = "abcde"
_MAX_RESTART_JOB_REPLICAS = 1024
_RESTART_JOB_ACTIONS = frozenset({"RestartJob", "RestartJobAndIgnoreMaxRestarts"})
_JOB_FAILURE_REASONS = frozenset({
    "BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
})
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_ENUMS = (
    ("/spec/failurePolicy/restartStrategy", ("Recreate", "BlockingRecreate", "InPlaceRestart")),
    ("/spec/startupPolicy/startupPolicyOrder", ("AnyOrder", "InOrder")),
    ("/spec/successPolicy/operator", ("All", "Any")),
)
_RULE_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                 "RestartJobAndIgnoreMaxRestarts")


def _hook(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: JobSet's webhook refuses it", path)


def _crd(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: JobSet's CRD refuses it", path)


def jobset(doc: dict[str, Any]) -> Iterator[Refusal]:
    """Everything JobSet's webhook and CRD schema refuse of ``doc`` when it is created."""
    spec = resolve(doc, "/spec")
    if not isinstance(spec, dict):
        return
    name = _name_for_validation(doc)
    rjobs = [r if isinstance(r, dict) else {} for r in _list(spec.get("replicatedJobs"))]
    yield from _schema(spec, rjobs)
    yield from _network(spec)
    yield from _managed_by(spec)
    yield from _replicated_jobs(rjobs, name)
    names = {r.get("name") for r in rjobs if isinstance(r.get("name"), str)}
    for i, target in enumerate(_list(resolve(spec, "/successPolicy/targetReplicatedJobs"))):
        if isinstance(target, str) and target not in names:
            yield _hook(f"spec.successPolicy.targetReplicatedJobs[{i}] {target!r} names no replicated job",
                        f"/spec/successPolicy/targetReplicatedJobs/{i}")
    yield from _in_place_restart(spec, rjobs)
    yield from _failure_policy(spec, rjobs, names)
    yield from _coordinator(spec, rjobs, name)
    yield from _volume_claim_policies(spec, rjobs, name)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _name_for_validation(doc: dict[str, Any]) -> str | None:
    """The JobSet's name as the webhook sees it: ``metadata.name``, or what the apiserver makes
    of ``generateName`` (at most 58 characters of it and 5 random lowercase ones: the length and
    the character classes, which are all the checks look at); None when neither is set (a
    template the tooling names later: nothing to judge)."""
    name = resolve(doc, "/metadata/name")
    if isinstance(name, str) and name:
        return name
    prefix = resolve(doc, "/metadata/generateName")
    if isinstance(prefix, str) and prefix:
        return prefix[:_GENERATE_KEEP] + _GENERATED_SUFFIX
    return None


def _is_dns1035(value: str) -> bool:
    return len(value) <= 63 and _DNS1035.fullmatch(value) is not None


def _is_dns1123_subdomain(value: str) -> bool:
    return 0 < len(value) <= 253 and all(_DNS1123_LABEL.fullmatch(part) for part in value.split("."))


def _dns1035_why(value: str) -> str:
    return f"is {len(value)} characters, more than 63" if len(value) > 63 else "is not a DNS-1035 label"


def _schema(spec: dict[str, Any], rjobs: list[dict[str, Any]]) -> Iterator[Refusal]:
    """What the CRD schema refuses: enums, list limits, minimums and its CEL rules."""
    for pointer, allowed in _ENUMS:
        value = resolve({"spec": spec}, pointer)
        if isinstance(value, str) and value not in allowed:
            field = pointer[1:].replace("/", ".")
            yield _crd(f"{field} {value!r} is not one of {', '.join(allowed)}", pointer)
    for i, rule in enumerate(_list(resolve(spec, "/failurePolicy/rules"))):
        action = rule.get("action") if isinstance(rule, dict) else None
        if isinstance(action, str) and action not in _RULE_ACTIONS:
            yield _crd(f"spec.failurePolicy.rules[{i}].action {action!r} is not a failure policy action",
                       f"/spec/failurePolicy/rules/{i}/action")
    ttl = _int(spec.get("ttlSecondsAfterFinished"))
    if ttl is not None and ttl < 0:
        yield _crd(f"spec.ttlSecondsAfterFinished {ttl} is negative", "/spec/ttlSecondsAfterFinished")
    for i, rjob in enumerate(rjobs):
        at = f"/spec/replicatedJobs/{i}/dependsOn"
        depends = _list(rjob.get("dependsOn"))
        if len(depends) > 5:
            yield _crd(f"spec.replicatedJobs[{i}].dependsOn has {len(depends)} entries, more than 5", at)
        for j, dep in enumerate(depends):
            status = dep.get("status") if isinstance(dep, dict) else None
            if isinstance(status, str) and status not in ("Ready", "Complete"):
                yield _crd(f"spec.replicatedJobs[{i}].dependsOn[{j}].status {status!r} is neither Ready nor "
                           "Complete", f"{at}/{j}/status")
    if resolve(spec, "/startupPolicy/startupPolicyOrder") == "InOrder":
        for i, rjob in enumerate(rjobs):
            if rjob.get("dependsOn") is not None:
                yield _crd(f"spec.replicatedJobs[{i}].dependsOn is set with startupPolicy InOrder (the two "
                           "exclude each other)", f"/spec/replicatedJobs/{i}/dependsOn")
                break
    policies = _list(spec.get("volumeClaimPolicies"))
    if len(policies) > 50:
        yield _crd(f"spec.volumeClaimPolicies has {len(policies)} entries, more than 50",
                   "/spec/volumeClaimPolicies")
    for i, policy in enumerate(policies):
        templates = _list(policy.get("templates")) if isinstance(policy, dict) else []
        if len(templates) > 50:
            yield _crd(f"spec.volumeClaimPolicies[{i}].templates has {len(templates)} entries, more than 50",
                       f"/spec/volumeClaimPolicies/{i}/templates")
        for j, template in enumerate(templates):
            namespace = resolve(template, "/metadata/namespace")
            if isinstance(namespace, str) and namespace:
                yield _crd(f"spec.volumeClaimPolicies[{i}].templates[{j}].metadata.namespace {namespace!r} "
                           "is set on a claim template",
                           f"/spec/volumeClaimPolicies/{i}/templates/{j}/metadata/namespace")


def _network(spec: dict[str, Any]) -> Iterator[Refusal]:
    subdomain = resolve(spec, "/network/subdomain")
    # the subdomain names the headless Service too, so it must be a DNS-1035 label
    if isinstance(subdomain, str) and subdomain and not _is_dns1035(subdomain):
        yield _hook(f"spec.network.subdomain {subdomain!r} {_dns1035_why(subdomain)} (it names the headless "
                    "Service)", "/spec/network/subdomain")


def _managed_by(spec: dict[str, Any]) -> Iterator[Refusal]:
    manager = spec.get("managedBy")
    if not isinstance(manager, str):
        return
    prefix, slash, path = manager.partition("/")
    if not slash or not _is_dns1123_subdomain(prefix) or not path or not _PATH_CHARS.fullmatch(path):
        yield _hook(f"spec.managedBy {manager!r} is not a domain-prefixed path (example.com/name)",
                    "/spec/managedBy")
    if len(manager) > 63:
        yield _hook(f"spec.managedBy is {len(manager)} characters, more than 63", "/spec/managedBy")


def _replicas(rjob: dict[str, Any]) -> int | None:
    """``replicas`` as the webhook sees it: the CRD defaults an absent count to 1."""
    value = rjob.get("replicas", 1)
    return 1 if value is None else _int(value)


def _indexed(rjob: dict[str, Any]) -> bool:
    # JobSet's mutating webhook defaults an absent completionMode to Indexed
    mode = resolve(rjob, "/template/spec/completionMode")
    return mode is MISSING or mode is None or mode == "Indexed"


def _replicated_jobs(rjobs: list[dict[str, Any]], name: str | None) -> Iterator[Refusal]:
    if rjobs and rjobs[0].get("dependsOn") is not None:
        yield _hook("spec.replicatedJobs[0].dependsOn is set on the first replicated job",
                    "/spec/replicatedJobs/0/dependsOn")
    seen: set[str] = set()
    for i, rjob in enumerate(rjobs):
        at = f"/spec/replicatedJobs/{i}"
        rname = rjob.get("name")
        if isinstance(rname, str):
            seen.add(rname)
        replicas = _replicas(rjob)
        parallelism_value = resolve(rjob, "/template/spec/parallelism")
        parallelism = 1 if parallelism_value in (MISSING, None) else _int(parallelism_value)
        if replicas is not None and parallelism is not None and replicas * parallelism > INT32_MAX:
            yield _hook(f"spec.replicatedJobs[{i}] replicas x parallelism {replicas * parallelism} is more "
                        f"than {INT32_MAX}", at)
        group = rjob.get("groupName") or "default"
        if isinstance(group, str) and not _is_dns1035(group):
            yield _hook(f"spec.replicatedJobs[{i}].groupName {group!r} {_dns1035_why(group)}",
                        f"{at}/groupName")
        if isinstance(rname, str) and name is not None and replicas is not None:
            job = f"{name}-{rname}-{replicas - 1}"
            if not _is_dns1035(job):
                yield _hook(f"spec.replicatedJobs[{i}].name: the last Job's name {job!r} {_dns1035_why(job)}",
                            f"{at}/name")
            completions = _int(resolve(rjob, "/template/spec/completions"))
            if _indexed(rjob) and completions is not None:
                # a pod's name is its Job's name, its completion index and 5 random characters
                pod = f"{job}-{completions - 1}-{_GENERATED_SUFFIX}"
                if not _is_dns1035(pod):
                    yield _hook(f"spec.replicatedJobs[{i}].name: the last pod's name {_dns1035_why(pod)}",
                                f"{at}/name")
        for j, dep in enumerate(_list(rjob.get("dependsOn"))):
            target = dep.get("name") if isinstance(dep, dict) else None
            if isinstance(target, str) and target not in seen:
                yield _hook(f"spec.replicatedJobs[{i}].dependsOn[{j}] {target!r} is not an earlier "
                            "replicated job",
                            f"{at}/dependsOn/{j}/name")


def _in_place_restart(spec: dict[str, Any], rjobs: list[dict[str, Any]]) -> Iterator[Refusal]:
    """restartStrategy InPlaceRestart: refused outright with the InPlaceRestart gate off (its
    default), and with it on unless every replicated job has backoffLimit 2147483647,
    podReplacementPolicy Failed and completions equal to parallelism. The gate is not visible
    here, so only what both settings refuse is refused."""
    if resolve(spec, "/failurePolicy/restartStrategy") != "InPlaceRestart":
        return
    for i, rjob in enumerate(rjobs):
        job = resolve(rjob, "/template/spec")
        job = job if isinstance(job, dict) else {}
        at = f"/spec/replicatedJobs/{i}/template/spec"
        field = f"spec.replicatedJobs[{i}].template.spec"
        tail = "with restartStrategy InPlaceRestart"
        if job.get("backoffLimit") != INT32_MAX:
            yield _hook(f"{field}.backoffLimit {_shown(job.get('backoffLimit'))} is not {INT32_MAX} {tail}",
                        f"{at}/backoffLimit")
        if job.get("podReplacementPolicy") != "Failed":
            policy = _shown(job.get("podReplacementPolicy"))
            yield _hook(f"{field}.podReplacementPolicy {policy} is not Failed {tail}",
                        f"{at}/podReplacementPolicy")
        completions, parallelism = job.get("completions"), job.get("parallelism")
        if completions is None or parallelism is None or completions != parallelism:
            yield _hook(f"{field}.completions {_shown(completions)} and parallelism {_shown(parallelism)} "
                        f"are not set and equal {tail}", f"{at}/completions")


def _failure_policy(spec: dict[str, Any], rjobs: list[dict[str, Any]], names: set[Any]) -> Iterator[Refusal]:
    rules = resolve(spec, "/failurePolicy/rules")
    if not isinstance(rules, list):
        return
    actions = {rule.get("action") for rule in rules if isinstance(rule, dict)}
    if actions & _RESTART_JOB_ACTIONS:
        # refused with the RestartJob gate off (its default); with it on, only past 1024 replicas
        for i, rjob in enumerate(rjobs):
            replicas = _replicas(rjob)
            if replicas is not None and replicas > _MAX_RESTART_JOB_REPLICAS:
                yield _hook(f"spec.replicatedJobs[{i}].replicas {replicas} is more than "
                            f"{_MAX_RESTART_JOB_REPLICAS} with a RestartJob failure policy action",
                            f"/spec/replicatedJobs/{i}/replicas")
                break
    by_name: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        at = f"/spec/failurePolicy/rules/{i}"
        field = f"spec.failurePolicy.rules[{i}]"
        # JobSet's mutating webhook names an unnamed rule before validation
        rule_name = rule.get("name") or f"failurePolicyRule{i}"
        if isinstance(rule_name, str):
            by_name.setdefault(rule_name, []).append(i)
            if len(rule_name) > 128:
                yield _hook(f"{field}.name is {len(rule_name)} characters, more than 128", f"{at}/name")
            if not _RULE_NAME.fullmatch(rule_name):
                yield _hook(f"{field}.name {rule_name!r} does not start with a letter, hold only letters, "
                            "digits and '_,:' and end with a letter, digit or '_'", f"{at}/name")
        for j, target in enumerate(_list(rule.get("targetReplicatedJobs"))):
            if isinstance(target, str) and target not in names:
                yield _hook(f"{field}.targetReplicatedJobs[{j}] {target!r} names no replicated job",
                            f"{at}/targetReplicatedJobs/{j}")
        for j, reason in enumerate(_list(rule.get("onJobFailureReasons"))):
            if isinstance(reason, str) and reason not in _JOB_FAILURE_REASONS:
                yield _hook(f"{field}.onJobFailureReasons[{j}] {reason!r} is not a Job failure reason",
                            f"{at}/onJobFailureReasons/{j}")
    for rule_name, indices in by_name.items():
        if len(indices) > 1:
            yield _hook(f"spec.failurePolicy.rules{indices} share the name {rule_name!r}",
                        f"/spec/failurePolicy/rules/{indices[-1]}/name")


def _coordinator(spec: dict[str, Any], rjobs: list[dict[str, Any]], name: str | None) -> Iterator[Refusal]:
    coordinator = spec.get("coordinator")
    if not isinstance(coordinator, dict):
        return
    target = coordinator.get("replicatedJob")
    job_index = _int(coordinator.get("jobIndex", 0))
    pod_index = _int(coordinator.get("podIndex", 0))
    if not isinstance(target, str) or job_index is None or pod_index is None:
        return
    rjob = next((r for r in rjobs if r.get("name") == target), None)
    replicas = _replicas(rjob) if rjob is not None else None
    completions = _int(resolve(rjob, "/template/spec/completions")) if rjob is not None else None
    at = "/spec/coordinator"
    # upstream stops at the first of these four
    if rjob is None:
        yield _hook(f"spec.coordinator.replicatedJob {target!r} names no replicated job",
                    f"{at}/replicatedJob")
    elif replicas is not None and not 0 <= job_index < replicas:
        yield _hook(f"spec.coordinator.jobIndex {job_index} is outside the {replicas} Jobs of {target!r}",
                    f"{at}/jobIndex")
    elif not _indexed(rjob) or completions is None:
        yield _hook(f"spec.coordinator.replicatedJob {target!r} is not an Indexed Job with completions set",
                    f"{at}/replicatedJob")
    elif not 0 <= pod_index < completions:
        yield _hook(f"spec.coordinator.podIndex {pod_index} is outside the {completions} completions of "
                    f"{target!r}", f"{at}/podIndex")
    if name is None:
        return
    subdomain = resolve(spec, "/network/subdomain")
    domain = subdomain if isinstance(subdomain, str) and subdomain else name
    # the coordinator's address is written to a label on every pod
    value = f"{name}-{target}-{job_index}-{pod_index}.{domain}"
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        why = f"is {len(value)} characters, more than 63" if len(value) > 63 else "is not a label value"
        yield _hook(f"spec.coordinator: the coordinator address {value!r} {why} (it becomes a pod label)", at)


def _mounts(rjobs: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for rjob in rjobs:
        for key in ("initContainers", "containers"):
            for container in _list(resolve(rjob, f"/template/spec/template/spec/{key}")):
                for mount in _list(container.get("volumeMounts") if isinstance(container, dict) else None):
                    if isinstance(mount, dict) and isinstance(mount.get("name"), str):
                        found.add(mount["name"])
    return found


def _volume_claim_policies(spec: dict[str, Any], rjobs: list[dict[str, Any]],
                           name: str | None) -> Iterator[Refusal]:
    policies = _list(spec.get("volumeClaimPolicies"))
    if not policies:
        return
    mounts = _mounts(rjobs)
    seen: set[str] = set()
    for i, policy in enumerate(policies):
        for j, template in enumerate(_list(policy.get("templates")) if isinstance(policy, dict) else []):
            claim = resolve(template, "/metadata/name")
            if not isinstance(claim, str):
                continue
            at = f"/spec/volumeClaimPolicies/{i}/templates/{j}/metadata/name"
            field = f"spec.volumeClaimPolicies[{i}].templates[{j}].metadata.name {claim!r}"
            if claim in seen:
                yield _hook(f"{field} is used twice", at)
            seen.add(claim)
            if not _is_dns1123_subdomain(claim):
                yield _hook(f"{field} is not a lowercase DNS-1123 subdomain", at)
            if name is not None and len(claim) + 1 + len(name) > 63:
                yield _hook(f"{field}: the claim name (template name, '-', JobSet name) is "
                            f"{len(claim) + 1 + len(name)} characters, more than 63", at)
            for k, rjob in enumerate(rjobs):
                for v, volume in enumerate(_list(resolve(rjob, "/template/spec/template/spec/volumes"))):
                    if isinstance(volume, dict) and volume.get("name") == claim:
                        yield _hook(f"spec.replicatedJobs[{k}] volume {claim!r} has the name of a claim "
                                    "template",
                                    f"/spec/replicatedJobs/{k}/template/spec/template/spec/volumes/{v}/name")
            if claim not in mounts:
                yield _hook(f"{field} is mounted by no container of any replicated job", at)
