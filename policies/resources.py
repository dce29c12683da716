"""Effective pod requests: what the scheduler compares against a node's free resources.

Per resource: ``max(sum(app containers) + sum(sidecars), max over regular init
containers i of (init_i + sidecars started before i)) + overhead``, where a sidecar is
an init container with ``restartPolicy: Always`` (KEP-753). A container that sets a
limit but no request gets the limit as request: the API server defaults this for Pods
but not inside templates, so we must. A null quantity (`cpu: null`) is unset, as the API
server reads it, not an error.

Pod-level resources (``spec.resources``, KEP-2837, beta and on by default since
Kubernetes 1.34): a request set there for a resource Kubernetes supports at pod level
(``cpu``, ``memory``, ``hugepages-*``) is the pod's request for it, in place of the
containers' (``k8s.io/component-helpers/resource.PodRequests``); overhead is added to it
as to the containers'. Requests the API server would default from pod-level limits are
not counted: where gpugate is unsure, the smaller need wins, so that no pod is judged
never to fit on a request it would not make.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from policies.pointers import join_pointer, split_pointer
from policies.quantity import QuantityError, parse_quantity, parse_text

Requests = dict[str, Fraction]


def container_requests(container: Mapping[str, Any], path: str,
                       errors: list[tuple[str, str]]) -> Requests:
    """Requests of one container, defaulted from limits; bad quantities go to ``errors``."""
    return _container_requests(container, path, errors)


def _container_requests(container: Mapping[str, Any], base: str, errors: list[tuple[str, str]],
                        group: str = "", index: int = 0) -> Requests:
    """:func:`container_requests` for the container at ``base``, or at ``base/group/index``
    when ``group`` is given: the pointer is built only for an error (nearly all parse)."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    out: Requests = {}
    for part in ("limits", "requests"):  # requests override the limits they default from
        values = resources.get(part)
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            if raw is None:  # `cpu: null` is valid: the API server reads it as unset
                continue
            try:
                # parse_quantity's own first step, without the call: this runs per quantity
                amount = parse_text(raw) if type(raw) is str else parse_quantity(raw)
            except QuantityError as exc:
                path = f"{base}/{group}/{index}" if group else base
                errors.append((join_pointer(path, "resources", part, str(name)), str(exc)))
                continue
            if part == "requests" or name not in out:
                out[name if type(name) is str else str(name)] = amount
    return out


def _add(into: Requests, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        current = into.get(k)
        into[k] = v if current is None else current + v  # most pods: one container, no sum


def _max(into: Requests, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        current = into.get(k)
        if v > (0 if current is None else current):
            into[k] = v


def is_pod_level_resource(name: str) -> bool:
    """Whether Kubernetes takes ``name`` at pod level (``spec.resources``): ``cpu``,
    ``memory`` and huge pages (``IsSupportedPodLevelResource`` upstream)."""
    return name in _POD_LEVEL or name.startswith(HUGEPAGES_PREFIX)


HUGEPAGES_PREFIX = "hugepages-"
_POD_LEVEL = frozenset({"cpu", "memory"})


def pod_level_requests(spec: Mapping[str, Any], spec_path: str,
                       errors: list[tuple[str, str]]) -> Requests:
    """The pod-level requests (``spec.resources.requests``) of resources Kubernetes takes at
    pod level; unparsable quantities of ``spec.resources`` (requests and limits) go to
    ``errors``, with their pointers. Empty for nearly every pod spec (no ``resources``)."""
    resources = spec.get("resources")
    if not isinstance(resources, dict) or not resources:
        return {}
    found: Requests = {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            if raw is None:  # unset, as in a container
                continue
            try:
                amount = parse_text(raw) if type(raw) is str else parse_quantity(raw)
            except QuantityError as exc:
                errors.append((join_pointer(spec_path, "resources", part, str(name)), str(exc)))
                continue
            if part == "requests" and type(name) is str and is_pod_level_resource(name):
                found[name] = amount
    return found


def pod_requests(spec: Mapping[str, Any], spec_path: str) -> tuple[Requests, list[tuple[str, str]]]:
    """(effective requests, [(JSON Pointer, reason) of unparsable quantities])."""
    errors: list[tuple[str, str]] = []
    total: Requests = {}
    sidecars: Requests = {}
    init_peak: Requests = {}
    inits = spec.get("initContainers")
    for i, c in enumerate(inits if isinstance(inits, list) else []):
        if not isinstance(c, dict):
            continue
        req = _container_requests(c, spec_path, errors, "initContainers", i)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
        else:
            during = dict(sidecars)
            _add(during, req)
            _max(init_peak, during)
    containers = spec.get("containers")
    for i, c in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(c, dict):
            requests = _container_requests(c, spec_path, errors, "containers", i)
            if total:
                _add(total, requests)
            else:  # the first container: its own fresh dict is the sum so far
                total = requests
    if sidecars:
        _add(total, sidecars)
    if init_peak:
        _max(total, init_peak)
    if "resources" in spec:  # pod-level requests replace the containers' (rare: one lookup)
        pod_level = pod_level_requests(spec, spec_path, errors)
        if pod_level:
            total = {**total, **pod_level}  # a copy: ``total`` may be the first container's dict
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        overhead_errors: list[tuple[str, str]] = []
        _add(total, container_requests({"resources": {"requests": overhead}}, spec_path, overhead_errors))
        # reported where the value is: spec.overhead.<name>, not a container's resources
        errors.extend((join_pointer(spec_path, "overhead", split_pointer(path)[-1]), reason)
                      for path, reason in overhead_errors)
    return {k: v for k, v in total.items() if v}, errors
