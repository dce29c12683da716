"""Device selectors: CEL expressions evaluated in Kubernetes' DRA environment, with
Google's CEL (``cel-expr-python``, the C++ implementation; docs/dra.md says why this one).

The environment is the scheduler's (staging/src/k8s.io/dynamic-resource-allocation/cel):
``device.driver``, ``device.attributes[domain].name`` (int, bool, string, or a semantic
version), ``device.capacity[domain].name`` (quantities), ``device.allowMultipleAllocations``;
an attribute name without a domain is in the driver's; looking up a domain a device has
none of gives an empty map, so ``"name" in device.attributes["x"]`` is false while reading a
missing attribute is an error, as upstream. Quantities and versions are maps with one marker
key (the library has no opaque Python types); the functions Kubernetes adds for them
(``quantity``, ``isQuantity``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``sign``,
``asInteger``, ``asApproximateFloat``, ``isInteger``, ``add``, ``sub``; ``semver``,
``isSemver``, ``major``, ``minor``, ``patch``) are declared on them, with ``cel.bind`` and
the strings extension. Anything else (an unknown function, a syntax error, a runtime
error) is an :class:`Unknown` with its reason, never a "no match".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies import memo
from policies.quantity import QuantityError, parse_quantity

from .objects import Device

__all__ = ["Unknown", "Selector", "compile_selector", "compile_failure", "device_value", "matches"]

_QUANTITY = "__k8s_quantity__"
_SEMVER = "__k8s_semver__"
_SEMVER_RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                        r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")


@dataclass(frozen=True)
class Unknown:
    """A selector gpugate cannot evaluate on a device, and why."""

    reason: str


def _q(text: Fraction) -> dict[str, str]:
    return {_QUANTITY: f"{text.numerator}/{text.denominator}"}


def _fraction(value: Any) -> Fraction:
    if isinstance(value, Mapping) and _QUANTITY in value:
        return Fraction(value[_QUANTITY])
    raise ValueError("not a quantity")


def _semver_parts(value: Any) -> tuple[int, int, int, tuple[Any, ...]]:
    if not (isinstance(value, Mapping) and _SEMVER in value):
        raise ValueError("not a semantic version")
    found = _SEMVER_RE.match(value[_SEMVER])
    if found is None:
        raise ValueError(f"{value[_SEMVER]!r} is not a semantic version")
    major, minor, patch, pre = found.groups()
    # Precedence (semver.org 11): a pre-release sorts before its release; numeric parts numerically.
    pre_key: tuple[Any, ...] = (1,) if pre is None else (0, *[(0, int(p), "") if p.isdigit() else (1, 0, p)
                                                             for p in pre.split(".")])
    return int(major), int(minor), int(patch), pre_key


def _quantity_of(text: str) -> dict[str, str]:
    try:
        return _q(parse_quantity(text))
    except QuantityError as exc:
        raise ValueError(f"quantity({text!r}): {exc}") from exc


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _semver(text: str) -> dict[str, str]:
    if _SEMVER_RE.match(text) is None:
        raise ValueError(f"semver({text!r}): not a semantic version")
    return {_SEMVER: text}


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Mapping) and _SEMVER in a:
        left: Any = _semver_parts(a)
        right: Any = _semver_parts(b)
    else:
        left, right = _fraction(a), _fraction(b)
    return (left > right) - (left < right)


def _as_integer(a: Any) -> int:
    value = _fraction(a)
    if value.denominator != 1 or not -(2**63) <= value.numerator < 2**63:
        raise ValueError("quantity is not an int64")
    return value.numerator


def _environment() -> Any:
    from cel_expr_python import cel
    from cel_expr_python.ext.ext_bindings import ExtBindings
    from cel_expr_python.ext.ext_strings import ExtStrings

    t = cel.Type
    opaque = t.Map(t.STRING, t.STRING)

    def decl(name: str, result: Any, params: list[Any], impl: Any, member: bool = True) -> Any:
        overload = cel.Overload(f"dra_{name}_{len(params)}", result, params, is_member=member, impl=impl)
        return cel.FunctionDecl(name, [overload])

    functions = [
        decl("quantity", opaque, [t.STRING], _quantity_of, member=False),
        decl("isQuantity", t.BOOL, [t.STRING], _is_quantity, member=False),
        decl("semver", opaque, [t.STRING], _semver, member=False),
        decl("isSemver", t.BOOL, [t.STRING], lambda s: _SEMVER_RE.match(s) is not None, member=False),
        decl("compareTo", t.INT, [opaque, opaque], _compare),
        decl("isGreaterThan", t.BOOL, [opaque, opaque], lambda a, b: _compare(a, b) > 0),
        decl("isLessThan", t.BOOL, [opaque, opaque], lambda a, b: _compare(a, b) < 0),
        decl("sign", t.INT, [opaque], lambda a: (_fraction(a) > 0) - (_fraction(a) < 0)),
        decl("asInteger", t.INT, [opaque], _as_integer),
        decl("isInteger", t.BOOL, [opaque], lambda a: _fraction(a).denominator == 1),
        decl("asApproximateFloat", t.DOUBLE, [opaque], lambda a: float(_fraction(a))),
        decl("add", opaque, [opaque, opaque], lambda a, b: _q(_fraction(a) + _fraction(b))),
        decl("sub", opaque, [opaque, opaque], lambda a, b: _q(_fraction(a) - _fraction(b))),
        decl("major", t.INT, [opaque], lambda a: _semver_parts(a)[0]),
        decl("minor", t.INT, [opaque], lambda a: _semver_parts(a)[1]),
        decl("patch", t.INT, [opaque], lambda a: _semver_parts(a)[2]),
    ]
    return cel.NewEnv(variables={"device": t.Map(t.STRING, t.DYN)}, extensions=[ExtBindings(), ExtStrings()],
                      functions=functions)


_ENV: Any = None


def _env() -> Any:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


# What a selector may read of a device, when its text tells (see :func:`_reads`).
_SUBSCRIPT = re.compile(r"\[\s*(\"[^\"\\]*\"|'[^'\\]*')\s*\]")
_DOMAIN_WHOLE = re.compile(r"(?:attributes|capacity)\s*\[\s*(?:\"[^\"]*\"|'[^']*')\s*\]\s*(?![\s.\[])")
_LITERALS = re.compile(r"\"([^\"\\]*)\"|'([^'\\]*)'")
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Calls that may read a map whole (its keys, its size, its text).
_ENUMERATE = re.compile(r"\b(?:exists|all|exists_one|map|filter|size|string|dyn|type)\s*\(")


def _reads(expression: str) -> frozenset[str] | None:
    """The attribute and capacity names (and domains) a selector can read, or None when it
    may read others: every subscript must be one string literal, no macro or function may
    enumerate a map, and no domain's map may be used whole. Devices that agree on these
    names give the selector the same answer, so it is evaluated once for all of them."""
    if expression.count("[") != len(_SUBSCRIPT.findall(expression)) or _DOMAIN_WHOLE.search(expression):
        return None
    if _ENUMERATE.search(expression):
        return None
    words = set(_WORDS.findall(expression))
    literals = {a or b for a, b in _LITERALS.findall(expression)}
    names = words | literals | {part for text in literals for part in text.split("/")}
    return frozenset(names)


@dataclass(frozen=True)
class Selector:
    expression: str
    program: Any                    # None when it does not compile
    error: str                      # why it does not compile
    reads: frozenset[str] | None    # see _reads
    results: dict[Any, bool | Unknown]  # answers by the device's projection (bounded)


@memo.process_cache(4096)
def compile_selector(expression: str) -> Selector:
    """A selector compiled once per process (a syntax error or an unknown function is kept
    as its reason)."""
    try:
        program = _env().compile(expression)
    except Exception as exc:  # the library raises RuntimeError with the checker's text
        return Selector(expression, None, " ".join(str(exc).split())[:300], None, {})
    return Selector(expression, program, "", _reads(expression), {})


def compile_failure(selector: Selector) -> Unknown | None:
    """Why ``selector`` cannot be evaluated on any device (it does not compile), or None."""
    if selector.program is None:
        return Unknown(f"selector {_short(selector.expression)} does not compile: {selector.error}")
    return None


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, ident = name.rpartition("/")
    return (domain or driver), ident


def device_value(device: Device, reads: frozenset[str] | None = None) -> dict[str, Any]:
    """``device`` as the selector's ``device`` variable, with only the names ``reads`` (all
    when None)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes:
        domain, ident = _qualified(name, device.driver)
        if reads is not None and ident not in reads:
            continue
        attributes.setdefault(domain, {})[ident] = {_SEMVER: value[1]} if isinstance(value, tuple) else value
    capacity: dict[str, dict[str, Any]] = {}
    for name, amount in device.capacity:
        domain, ident = _qualified(name, device.driver)
        if reads is not None and ident not in reads:
            continue
        capacity.setdefault(domain, {})[ident] = _q(amount)
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity,
            "allowMultipleAllocations": device.multiple}


_IDENTS: dict[str, str] = {}


def _ident(name: str) -> str:
    found = _IDENTS.get(name)
    if found is None:
        if len(_IDENTS) > 65536:
            _IDENTS.clear()
        found = _IDENTS[name] = name.rpartition("/")[2]
    return found


def _key(device: Device, reads: frozenset[str] | None) -> Any:
    """What of ``device`` a selector reading ``reads`` can see (all of it when None)."""
    if reads is None:
        return (device.driver, device.multiple, device.attributes, device.capacity)
    return (device.driver, device.multiple, tuple(a for a in device.attributes if _ident(a[0]) in reads),
            tuple(c for c in device.capacity if _ident(c[0]) in reads))


_KEPT = 65536


def matches(selector: Selector, device: Device) -> bool | Unknown:
    """Whether ``device`` satisfies ``selector``; :class:`Unknown` when it cannot be said."""
    failed = compile_failure(selector)
    if failed is not None:
        return failed
    key = _key(device, selector.reads)
    found = selector.results.get(key)
    if found is not None:
        return found
    value = device_value(device, selector.reads)
    # Upstream looks a domain no attribute has up as an empty map: so does this.
    for domain in _domains(selector):
        value["attributes"].setdefault(domain, {})
        value["capacity"].setdefault(domain, {})
    try:
        result = selector.program.eval(data={"device": value})
        kind = result.type().name()
        raw = result.value()
    except Exception as exc:  # a conversion the library refuses
        found = Unknown(f"selector {_short(selector.expression)}: {' '.join(str(exc).split())[:200]}")
    else:
        if kind == "BOOL" and isinstance(raw, bool):
            found = raw
        else:
            found = Unknown(f"selector {_short(selector.expression)} on device {device.name}: "
                            f"{' '.join(str(raw).split())[:200]}")
    if len(selector.results) >= _KEPT:
        selector.results.clear()
    selector.results[key] = found
    return found


@memo.process_cache(4096)
def _domain_names(expression: str) -> tuple[str, ...]:
    found = re.findall(r"(?:attributes|capacity)\s*\[\s*(\"[^\"]*\"|'[^']*')", expression)
    return tuple(sorted({m.strip("\"'") for m in found}))


def _domains(selector: Selector) -> Iterable[str]:
    return _domain_names(selector.expression)


def _short(expression: str) -> str:
    text = " ".join(expression.split())
    return repr(text if len(text) <= 80 else text[:77] + "...")
