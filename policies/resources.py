"""Effective pod requests: what the scheduler compares against a node's free resources.

Per resource: ``max(sum(app containers) + sum(sidecars), max over regular init
containers i of (init_i + sidecars started before i)) + overhead``, where a sidecar is
an init container with ``restartPolicy: Always`` (KEP-753). A container that sets a
limit but no request gets the limit as request: the API server defaults this for Pods
but not inside templates, so we must.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from policies.findings import join_pointer, split_pointer
from policies.quantity import QuantityError, parse_quantity

Requests = dict[str, Fraction]


def container_requests(container: Mapping[str, Any], path: str,
                       errors: list[tuple[str, str]]) -> Requests:
    """Requests of one container, defaulted from limits; bad quantities go to ``errors``."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    out: Requests = {}
    for part in ("limits", "requests"):  # requests override the limits they default from
        values = resources.get(part)
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            try:
                amount = parse_quantity(raw)
            except QuantityError as exc:
                errors.append((join_pointer(path, "resources", part, str(name)), str(exc)))
                continue
            if part == "requests" or name not in out:
                out[str(name)] = amount
    return out


def _add(into: Requests, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Fraction(0)) + v


def _max(into: Requests, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        if v > into.get(k, Fraction(0)):
            into[k] = v


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
        req = container_requests(c, f"{spec_path}/initContainers/{i}", errors)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
        else:
            during = dict(sidecars)
            _add(during, req)
            _max(init_peak, during)
    containers = spec.get("containers")
    for i, c in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(c, dict):
            _add(total, container_requests(c, f"{spec_path}/containers/{i}", errors))
    _add(total, sidecars)
    _max(total, init_peak)
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        overhead_errors: list[tuple[str, str]] = []
        _add(total, container_requests({"resources": {"requests": overhead}}, spec_path, overhead_errors))
        # reported where the value is: spec.overhead.<name>, not a container's resources
        errors.extend((join_pointer(spec_path, "overhead", split_pointer(path)[-1]), reason)
                      for path, reason in overhead_errors)
    return {k: v for k, v in total.items() if v != 0}, errors
