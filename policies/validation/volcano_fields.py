"""The readers, Kubernetes name checks and CRD-schema checks (minimums, enums, network
topologies) that Volcano's validators share: :mod:`policies.validation.volcano` and
:mod:`policies.validation.volcano_jobs`. A field of the wrong type is GG002's, never a
refusal here.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from policies.names import DNS1123_LABEL as _DNS_LABEL
from policies.names import DNS1123_SUBDOMAIN as _DNS_SUBDOMAIN
from policies.quantity import QuantityError, parse_quantity
from policies.validation import Refusal
from policies.workload import MISSING, resolve

# -- names ------------------------------------------------------------------------------------

def _is_dns_label(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None


def _is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


# -- small readers: a field of the wrong type is GG002's, never a refusal here ----------------

def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    """A string field as Go reads it: unset and ``null`` are the empty string."""
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _set(value: Any) -> bool:
    """Go's "is set" for a pointer field: present and not ``null``."""
    return value is not MISSING and value is not None


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _minimum(doc: Any, pointer: str, least: int, what: str) -> Iterator[Refusal]:
    """The CRD schema's ``minimum`` on an integer field."""
    value = _int(resolve(doc, pointer))
    if value is not None and value < least:
        yield Refusal(f"{what} {value} is less than {least}: Volcano's CRD schema refuses it", pointer)


def _one_of(doc: Any, pointer: str, allowed: tuple[str, ...], what: str) -> Iterator[Refusal]:
    """The CRD schema's ``enum`` on a string field."""
    value = resolve(doc, pointer)
    if isinstance(value, str) and value not in allowed:
        yield Refusal(f"{what} {value!r} is not one of {', '.join(allowed)}: Volcano's CRD schema "
                      "refuses it", pointer)


def _network_topology(doc: Any, pointer: str) -> Iterator[Refusal]:
    """A network topology names its highest tier either by number or by name, never both
    (webhook); the mode and tier number are the schema's."""
    topology = resolve(doc, pointer)
    if not isinstance(topology, dict):
        return
    if _set(topology.get("highestTierAllowed", MISSING)) and _text(topology.get("highestTierName")):
        yield Refusal(f"{_dotted(pointer)} sets both highestTierAllowed and highestTierName: "
                      "Volcano's webhook allows only one", pointer)
    yield from _minimum(doc, pointer + "/highestTierAllowed", 0, "highestTierAllowed")
    yield from _one_of(doc, pointer + "/mode", ("hard", "soft"), "networkTopology mode")


def _dotted(pointer: str) -> str:
    """``/spec/tasks/0/policies/1`` as ``spec.tasks[0].policies[1]``."""
    parts = pointer.strip("/").split("/")
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts).lstrip(".")
