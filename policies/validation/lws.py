"""LeaderWorkerSet's own validation: what its webhook (``pkg/webhooks/leaderworkerset_webhook.go``,
the checks shared by CREATE and UPDATE) and its CRD schema (enums, bounds) refuse of a
LeaderWorkerSet.

Upstream: kubernetes-sigs/lws. The webhook judges the object after LWS's mutating webhook and
the CRD defaults, so the validator applies them where they change the verdict (``replicas`` 1,
``size`` 1, rollout RollingUpdate with maxUnavailable 1, maxSurge 0, partition 0). The UPDATE
checks that compare with the stored object (subGroupSize fixed once set) are not judged here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from policies.names import DNS1035_LABEL as _DNS1035
from policies.pointers import join_pointer
from policies.validation import Refusal
from policies.workload import MISSING, resolve

__all__ = ["leaderworkerset"]

INT32_MAX = 2**31 - 1
MAX_REPLICAS = 1_000_000
SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
_PERCENT = re.compile(r"[0-9]+%")
_ROLLING = "/spec/rolloutStrategy/rollingUpdateConfiguration"
_ENUMS = (
    ("/spec/startupPolicy", ("LeaderCreated", "LeaderReady")),
    ("/spec/rolloutStrategy/type", ("RollingUpdate",)),
    ("/spec/networkConfig/subdomainPolicy", ("Shared", "UniquePerReplica")),
    ("/spec/leaderWorkerTemplate/restartPolicy",
     ("Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None")),
    ("/spec/leaderWorkerTemplate/subGroupPolicy/subGroupPolicyType", ("LeaderWorker", "LeaderExcluded")),
)


def _hook(message: str, path: str) -> Refusal:
    return Refusal(f"{message}: LeaderWorkerSet's webhook refuses it", path)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _defaulted(doc: dict[str, Any], pointer: str, default: int) -> int | None:
    """An integer field as the webhook sees it: ``default`` when absent (the CRD default), None
    when it is not an integer (GG002's business)."""
    value = resolve(doc, pointer)
    return default if value is MISSING or value is None else _int(value)


def leaderworkerset(doc: dict[str, Any]) -> Iterator[Refusal]:
    """Everything LeaderWorkerSet's webhook and CRD schema refuse of ``doc``."""
    if not isinstance(resolve(doc, "/spec"), dict):
        return
    yield from _name(doc)
    for pointer, allowed in _ENUMS:
        value = resolve(doc, pointer)
        if isinstance(value, str) and value not in allowed:
            field = pointer[1:].replace("/", ".")
            yield Refusal(f"{field} {value!r} is not one of {', '.join(allowed)}: LeaderWorkerSet's CRD "
                          "refuses it", pointer)
    replicas = _defaulted(doc, "/spec/replicas", 1)
    size = _defaulted(doc, "/spec/leaderWorkerTemplate/size", 1)
    if replicas is not None and replicas < 0:
        yield _hook(f"spec.replicas {replicas} is negative", "/spec/replicas")
    if replicas is not None and replicas > MAX_REPLICAS:
        yield _hook(f"spec.replicas {replicas} is more than {MAX_REPLICAS}", "/spec/replicas")
    if size is not None and size < 1:
        yield _hook(f"spec.leaderWorkerTemplate.size {size} is less than 1",
                    "/spec/leaderWorkerTemplate/size")
    if replicas is not None and size is not None and replicas * size > INT32_MAX:
        yield _hook(f"spec.replicas x leaderWorkerTemplate.size {replicas * size} is more than {INT32_MAX}",
                    "/spec/replicas")
    yield from _rollout(doc, replicas)
    yield from _subgroups(doc, size)


def _name(doc: dict[str, Any]) -> Iterator[Refusal]:
    # the name also names the headless Service, so it must be a DNS-1035 label
    name = resolve(doc, "/metadata/name")
    if isinstance(name, str) and name:
        if len(name) > 63 or not _DNS1035.fullmatch(name):
            why = f"is {len(name)} characters, more than 63" if len(name) > 63 else "is not a DNS-1035 label"
            yield _hook(f"metadata.name {name!r} {why} (it names the headless Service)", "/metadata/name")
        return
    prefix = resolve(doc, "/metadata/generateName")
    if isinstance(prefix, str) and prefix:
        masked = prefix[:-1] + "a" if prefix.endswith("-") and len(prefix) > 1 else prefix
        if len(masked) > 63 or not _DNS1035.fullmatch(masked):
            yield _hook(f"metadata.generateName {prefix!r} does not start a DNS-1035 label (it names the "
                        "headless Service)", "/metadata/generateName")


def _int_or_percent(doc: dict[str, Any], key: str,
                    default: int) -> tuple[int | str | None, Iterator[Refusal]]:
    """maxUnavailable or maxSurge: the value (None when neither an integer nor a string) and what
    the webhook refuses of it."""
    pointer = f"{_ROLLING}/{key}"
    value = resolve(doc, pointer)
    if value is MISSING or value is None:
        return default, iter(())
    field = f"spec.rolloutStrategy.rollingUpdateConfiguration.{key}"
    problems: list[Refusal] = []
    if _int(value) is not None:
        if value < 0:
            problems.append(_hook(f"{field} {value} is negative", pointer))
        return value, iter(problems)
    if isinstance(value, str):
        if not _PERCENT.fullmatch(value):
            problems.append(_hook(f"{field} {value!r} is not an integer or a percentage", pointer))
        elif int(value[:-1]) > 100:
            problems.append(_hook(f"{field} {value} is more than 100%", pointer))
        return value, iter(problems)
    return None, iter(())


def _scaled(value: int | str, total: int, round_up: bool) -> int | None:
    """An int-or-percent scaled against ``total`` as Kubernetes does it; None when it is not one."""
    if isinstance(value, int):
        return value
    if not _PERCENT.fullmatch(value):
        return None
    exact = int(value[:-1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def _rollout(doc: dict[str, Any], replicas: int | None) -> Iterator[Refusal]:
    kind = resolve(doc, "/spec/rolloutStrategy/type")
    if kind not in (MISSING, None, "", "RollingUpdate"):
        return
    # an absent rollingUpdateConfiguration is defaulted to maxUnavailable 1, maxSurge 0, partition 0
    unavailable, problems = _int_or_percent(doc, "maxUnavailable", 1)
    yield from problems
    surge, problems = _int_or_percent(doc, "maxSurge", 0)
    yield from problems
    partition = _defaulted(doc, f"{_ROLLING}/partition", 0)
    if partition is not None and partition < 0:
        yield _hook(f"spec.rolloutStrategy.rollingUpdateConfiguration.partition {partition} is negative",
                    f"{_ROLLING}/partition")
    if unavailable is None or surge is None or replicas is None or replicas == 0:
        return
    scaled_unavailable = _scaled(unavailable, replicas, round_up=False)
    scaled_surge = _scaled(surge, replicas, round_up=True)
    if scaled_unavailable == 0 and scaled_surge == 0:
        yield _hook(f"spec.rolloutStrategy.rollingUpdateConfiguration: maxUnavailable {unavailable} and "
                    f"maxSurge {surge} both come to 0 of {replicas} replicas, so no rollout can proceed",
                    f"{_ROLLING}/maxUnavailable")


def _subgroups(doc: dict[str, Any], size: int | None) -> Iterator[Refusal]:
    policy = resolve(doc, "/spec/leaderWorkerTemplate/subGroupPolicy")
    if not isinstance(policy, dict):
        annotations = resolve(doc, "/metadata/annotations")
        if isinstance(annotations, dict) and SUBGROUP_EXCLUSIVE in annotations:
            yield _hook(f"metadata.annotations {SUBGROUP_EXCLUSIVE} is set without a subGroupPolicy",
                        join_pointer("/metadata/annotations", SUBGROUP_EXCLUSIVE))
        return
    group = _int(policy.get("subGroupSize"))
    at = "/spec/leaderWorkerTemplate/subGroupPolicy/subGroupSize"
    field = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
    if group is None or size is None:
        return
    if group < 1:
        yield _hook(f"{field} {group} is less than 1", at)
        return
    if size % group and (size - 1) % group:
        yield _hook(f"{field} {group} divides neither size {size} nor size - 1", at)
    if size < group:
        yield _hook(f"{field} {group} is more than size {size}", at)
    if policy.get("subGroupPolicyType") == "LeaderExcluded" and (size - 1) % group:
        yield _hook(f"{field} {group} does not divide size - 1 ({size - 1}) with subGroupPolicyType "
                    "LeaderExcluded", at)
