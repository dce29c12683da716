"""Exact Kubernetes resource quantities.

The grammar is the one of ``k8s.io/apimachinery/pkg/api/resource``::

    quantity ::= <signedNumber><suffix>
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
               | (e|E)<signedNumber>

Values are kept as :class:`fractions.Fraction`, so ``0.1`` CPU plus ``0.2`` CPU is
exactly ``300m``. For the scheduler's arithmetic a quantity is turned into an
integer the way the scheduler does it: CPU in millicores, everything else in units,
both rounded up (``Quantity.MilliValue`` / ``Quantity.Value``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction

from policies.memo import process_cache

__all__ = ["QuantityError", "parse_quantity", "scheduler_units", "format_quantity", "is_cpu", "exact_sum",
           "is_positive"]


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
# The decimal suffixes that scale by a whole number, as ints.
_WHOLE_DECIMAL = {k: v.numerator for k, v in _DECIMAL.items() if v.denominator == 1}
_RE = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
# Kubernetes rejects quantities whose exponent is absurd; so do we (and a huge
# exponent would make Fraction arithmetic explode).
_MAX_EXPONENT = 64
_MAX_LEN = 128


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity given as a YAML string, int or float.

    Raises :class:`QuantityError` with a short reason for anything else.
    """
    if type(value) is str:  # the common case first: manifests quote most quantities
        return parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite number")
        # repr() is the shortest string that reads back as the same float: 0.1 -> "0.1"
        return parse_quantity(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"expected a quantity string or number, got {type(value).__name__}")
    return parse_text(value)


@process_cache(4096)
def parse_text(value: str) -> Fraction:
    """:func:`parse_quantity` of a string. Manifests repeat the same few quantities (``8``,
    ``32Gi``) across every pod set and review: parse each text once. Fractions are
    immutable, so sharing is safe."""
    text = value.strip()
    if not text or len(text) > _MAX_LEN:
        raise QuantityError(f"{value!r} is not a quantity")
    m = _RE.fullmatch(text)
    if m is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 2, 1.5Gi, 1e3)")
    num = m.group("num")
    suffix = m.group("suffix") or ""
    if num.isdigit():  # ASCII digits only (the pattern's): a whole number, no Fraction parsing
        whole = int(num)
        if suffix == "m":
            return Fraction(whole, 1000)
        if suffix in _BINARY:
            return Fraction(whole * _BINARY[suffix])
        if suffix in _WHOLE_DECIMAL:
            return Fraction(whole * _WHOLE_DECIMAL[suffix])
    number = Fraction(num)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError(f"{value!r}: exponent out of range")
    return number * Fraction(10) ** exponent


_ZERO = Fraction(0)


def exact_sum(amounts: Iterable[Fraction]) -> Fraction:
    """The exact sum of quantities. Whole amounts (GPUs, most CPU and memory) are added as
    ints, which is several times cheaper than Fraction arithmetic and gives the same value;
    a sum of one amount is that amount (Fractions are immutable, so sharing is safe)."""
    values = list(amounts)
    if len(values) <= 1:
        return values[0] if values else _ZERO
    whole = 0
    rest: Fraction | None = None
    for amount in values:
        if amount.denominator == 1:
            whole += amount.numerator
        else:
            rest = amount if rest is None else rest + amount
    return Fraction(whole) if rest is None else rest + whole


def is_positive(amount: Fraction) -> bool:
    """``amount > 0`` without Fraction's comparison machinery (the denominator is positive)."""
    return amount.numerator > 0


def is_cpu(resource: str) -> bool:
    return resource == "cpu"


def scheduler_units(resource: str, amount: Fraction) -> int:
    """The integer the scheduler compares: millicores for CPU, units otherwise, rounded up."""
    # Ceiling by integer floor division: exact, and about 3x cheaper than Fraction arithmetic.
    scale = 1000 if is_cpu(resource) else 1
    return -(-amount.numerator * scale // amount.denominator)


def format_quantity(resource: str, units: int | Fraction) -> str:
    """Human text for a scheduler-unit value: ``1500m`` -> ``1.5``, bytes -> ``Gi``."""
    if is_cpu(resource):
        cores = Fraction(units) / 1000
        return _plain(cores)
    amount = Fraction(units)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, factor in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20),
                               ("Ki", 2**10)):
            if amount >= factor and (amount * 10) % factor == 0:
                return _plain(amount / factor) + suffix
    return _plain(amount)


def _plain(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6g}"
