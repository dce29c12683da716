"""Pods an object asks for without pod templates of its own (:class:`policies.kinds.DerivedPods`):
a Kubeflow TrainJob's training nodes, ``numNodes`` pods with at least ``resourcesPerNode``.

The pod spec is the runtime's, when the file holds the runtime the object names
(:mod:`policies.references`), with the object's resources on its container. Without the
runtime, it is what is certain: one container with those resources, tolerating every taint
and selecting no node. Either way it never asks more of a node than the real pod will, so
"this pod fits no node" said of it is true of the real pod; what it leaves out (the
runtime's other containers, selectors) only makes gpugate say less.

The spec's metadata is left out (its annotations would point rules at fields the object
does not have): group-size annotations and the like are not read from a runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.kinds import DerivedPods
from policies.references import current, runtime_template
from policies.shapes import MISSING, expect_count, expect_mapping, resolve

__all__ = ["derived_pods", "TOLERATE_ALL"]

# The toleration that tolerates every taint (an empty key with operator Exists).
TOLERATE_ALL: dict[str, Any] = {"operator": "Exists"}
# What decides where a pod may go, beyond tolerations.
_PLACEMENT = ("nodeSelector", "affinity", "nodeName")


def derived_pods(doc: dict[str, Any], source: DerivedPods) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    """(name, JSON Pointer of the entry, pod count, pod template) of the pods ``source``
    derives from ``doc``. Raises :class:`policies.shapes.ShapeError` for a count or
    resources of the wrong type."""
    entry = expect_mapping(resolve(doc, source.at), source.at, source.at.rsplit("/", 1)[-1])
    count_path = f"{source.at}/{source.count}"
    count = expect_count(entry.get(source.count, MISSING), count_path, source.count, None)
    resources_path = f"{source.at}/{source.resources}"
    resources = expect_mapping(entry.get(source.resources, MISSING), resources_path, source.resources)
    runtime = runtime_template(doc, source.runtime, current()) if source.runtime is not None else None
    if count is None:
        count = runtime.count if runtime is not None and runtime.count is not None else 1
    if runtime is None or source.runtime is None:
        spec = _bare_spec(source.container, resources)
    else:
        patched = any(_set(resolve(doc, pointer)) for pointer in source.runtime.patches)
        spec = _runtime_spec(runtime.template, source.container, resources, trusted=not patched)
    yield source.name, source.at, count, {"spec": spec}


def _set(value: Any) -> bool:
    return value is not MISSING and value not in (None, [], {})


def _bare_spec(container: str, resources: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"name": container}
    if resources:
        node["resources"] = resources
    return {"containers": [node], "tolerations": [TOLERATE_ALL]}


def _runtime_spec(template: dict[str, Any], container: str, resources: dict[str, Any],
                  trusted: bool) -> dict[str, Any]:
    """The runtime's pod spec with ``resources`` on ``container``; with its placement
    dropped unless ``trusted`` (the object patches none)."""
    spec = template.get("spec")
    spec = dict(spec) if isinstance(spec, dict) else {}
    containers = spec.get("containers")
    if resources and isinstance(containers, list):
        spec["containers"] = [dict(c, resources=resources)
                              if isinstance(c, dict) and c.get("name") == container else c
                              for c in containers]
    if not trusted:
        for key in _PLACEMENT:
            spec.pop(key, None)
        spec["tolerations"] = [TOLERATE_ALL]
    return spec
