"""KAI Scheduler's own validation: what its PodGroup and Queue webhooks and their CRD schemas
refuse, judged on the object alone.

Upstream: NVIDIA/KAI-Scheduler ``pkg/apis/scheduling/v2alpha2/podgroup_webhook.go``,
``pkg/apis/scheduling/v2/queue_webhook.go`` and the CRDs of ``deployments/kai-scheduler/crds``
(v0.13.0; unchanged since). The webhooks judge CREATE and UPDATE alike, and only the versions
KAI serves (PodGroup ``v2alpha2``, Queue ``v2``): an object of another version is not judged.

- PodGroup (webhook): subGroup names unique, every ``parent`` names a subGroup, no parent
  chain loops; (CRD) ``minMember`` of the PodGroup and of each subGroup at least 1 when set,
  a subGroup ``name`` present and not empty, ``preemptibility`` one of its enum.
- Queue (webhook): ``spec.resources`` set. Its ``quota``, ``limit`` and ``overQuotaWeight``
  are plain numbers to KAI (-1 is "unlimited"; nothing bounds or orders them), and
  ``parentQueue`` is not checked at admission (a missing parent leaves the queue's jobs
  pending, it is not refused).
- Both (the webhook's decoding): an int32 field out of the int32 range, and (Queue) a
  ``preemptMinRuntime`` or ``reclaimMinRuntime`` that is no Go duration (``1d``, ``20 s``),
  do not decode, and the webhook refuses the request.

A field of the wrong type is the CRD schema's business and not judged here. ``minSubGroup``
(KAI's design for a subGroup quorum) is no field of the versions read: the API server drops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal, go_duration_seconds
from policies.workload import MISSING, resolve

__all__ = ["podgroup", "queue"]

_GROUP = "scheduling.run.ai"
_INT32 = (-(2**31), 2**31 - 1)
_PREEMPTIBILITY = ("preemptible", "non-preemptible")
_PODGROUP_INT32 = ("minMember", "parallelism", "completions", "backoffLimit", "schedulingBackoff")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _judged(doc: dict[str, Any], version: str) -> bool:
    """Whether KAI's webhook sees ``doc``: the one version it registers for, with a spec."""
    return doc.get("apiVersion") == f"{_GROUP}/{version}" and isinstance(resolve(doc, "/spec"), dict)


def _int32(value: Any, field: str, path: str, minimum: int | None, crd: str) -> Iterator[Refusal]:
    number = _int(value)
    if number is None:
        return
    if minimum is not None and number < minimum:
        yield Refusal(f"{field} {number} is less than {minimum}: KAI's {crd} CRD refuses it", path)
    elif not _INT32[0] <= number <= _INT32[1]:
        yield Refusal(f"{field} {number} is outside the int32 range: KAI's {crd} webhook cannot decode it",
                      path)


# -- PodGroup ---------------------------------------------------------------------------------

def podgroup(doc: dict[str, Any]) -> Iterator[Refusal]:
    """Everything KAI's PodGroup webhook and CRD refuse of ``doc`` (its queue is GG306's)."""
    if not _judged(doc, "v2alpha2"):
        return
    spec: dict[str, Any] = doc["spec"]
    for key in _PODGROUP_INT32:
        yield from _int32(spec.get(key), f"spec.{key}", f"/spec/{key}", 1 if key == "minMember" else None,
                          "PodGroup")
    value = spec.get("preemptibility")
    if isinstance(value, str) and value not in _PREEMPTIBILITY:
        yield Refusal(f"spec.preemptibility {value!r} is not one of {', '.join(_PREEMPTIBILITY)}: KAI's "
                      "PodGroup CRD refuses it", "/spec/preemptibility")
    groups = spec.get("subGroups")
    if isinstance(groups, list):
        yield from _subgroups(groups)


def _subgroups(groups: list[Any]) -> Iterator[Refusal]:
    """Each subGroup as the CRD sees it, then the tree the webhook checks: unique names,
    parents that exist, no loop."""
    first: dict[str, int] = {}        # name -> index of its first subGroup
    parents: dict[str, str] = {}      # name -> parent, for the subGroups that name one
    unique = True
    for index, group in enumerate(groups):
        if not isinstance(group, dict):
            continue
        at = f"/spec/subGroups/{index}"
        field = f"spec.subGroups[{index}]"
        yield from _int32(group.get("minMember"), f"{field}.minMember", f"{at}/minMember", 1, "PodGroup")
        name = group.get("name", MISSING)
        if name is MISSING or name is None:
            yield Refusal(f"{field}.name is missing: KAI's PodGroup CRD requires it", at)
            continue
        if not isinstance(name, str):
            continue
        if not name:
            yield Refusal(f"{field}.name is empty: KAI's PodGroup CRD refuses it", f"{at}/name")
            continue
        if name in first:
            unique = False
            yield Refusal(f"{field}.name {name!r} repeats spec.subGroups[{first[name]}].name: KAI's PodGroup "
                          "webhook refuses duplicate subGroup names", f"{at}/name")
            continue
        first[name] = index
        parent = group.get("parent")
        if isinstance(parent, str):
            parents[name] = parent
    for name, parent in parents.items():
        if parent not in first:
            index = first[name]
            yield Refusal(f"spec.subGroups[{index}].parent {parent!r} names no subGroup: KAI's PodGroup "
                          "webhook refuses it", f"/spec/subGroups/{index}/parent")
    if unique:  # with two subGroups of one name the tree is ambiguous (refused above anyway)
        for loop in _loops(parents):
            index = min(first[name] for name in loop)
            chain = " -> ".join([*loop, loop[0]])
            yield Refusal(f"spec.subGroups[{index}].parent makes a cycle ({chain}): KAI's PodGroup webhook "
                          "refuses it", f"/spec/subGroups/{index}/parent")


def _loops(parents: dict[str, str]) -> list[list[str]]:
    """The cycles of the parent links (each subGroup has one parent at most, so a walk up
    from any subGroup ends at a root, at a missing parent, or in one cycle)."""
    done: set[str] = set()
    loops: list[list[str]] = []
    for start in parents:
        walk: list[str] = []
        on_walk: set[str] = set()
        node: str | None = start
        while node is not None and node not in done and node not in on_walk:
            walk.append(node)
            on_walk.add(node)
            node = parents.get(node)
        if node is not None and node in on_walk:
            loops.append(walk[walk.index(node):])
        done.update(walk)
    return loops


# -- Queue ------------------------------------------------------------------------------------

def queue(doc: dict[str, Any]) -> Iterator[Refusal]:
    """Everything KAI's Queue webhook refuses of ``doc``."""
    if doc.get("apiVersion") != f"{_GROUP}/v2":
        return
    spec = resolve(doc, "/spec")
    resources = spec.get("resources") if isinstance(spec, dict) else None
    if resources is None:
        yield Refusal("spec.resources is not set: KAI's Queue webhook refuses a queue without resources "
                      "(quota, limit and overQuotaWeight of gpu, cpu, memory; -1 is unlimited)",
                      "/spec" if isinstance(spec, dict) else "")
    if not isinstance(spec, dict):
        return
    for key in ("preemptMinRuntime", "reclaimMinRuntime"):
        value = spec.get(key)
        if isinstance(value, str) and go_duration_seconds(value) is None:
            yield Refusal(f"spec.{key} {value!r} is not a Go duration (20s, 5m, 1h30m): KAI's Queue webhook "
                          "cannot decode it", f"/spec/{key}")
