"""Kubernetes quantities: grammar, exactness and errors (policies/quantity.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.quantity import QuantityError, format_quantity, parse_quantity, scheduler_units

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
           "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
           "P": Fraction(10**15), "E": Fraction(10**18)}


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", Fraction(1, 2)),
    ("2", Fraction(2)),
    ("1.5Gi", Fraction(3, 2) * 2**30),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1e-3", Fraction(1, 1000)),
    ("2E", 2 * 10**18),            # E alone is the exa suffix, not an exponent
    ("1.5e2", Fraction(150)),
    ("+1", Fraction(1)),
    ("-1", Fraction(-1)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("0", Fraction(0)),
    ("100Mi", 100 * 2**20),
    ("128974848", Fraction(128974848)),
    ("129e6", Fraction(129 * 10**6)),
    ("123Mi", 123 * 2**20),
    ("1k", Fraction(1000)),
    ("1u", Fraction(1, 10**6)),
    ("1n", Fraction(1, 10**9)),
])
def test_grammar(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (2, Fraction(2)),
    (0, Fraction(0)),
    (0.1, Fraction(1, 10)),        # the YAML float 0.1 is the decimal 0.1, not its binary approximation
    (1.5, Fraction(3, 2)),
    (1e3, Fraction(1000)),
])
def test_numbers_from_yaml(value: object, expected: Fraction) -> None:
    assert parse_quantity(value) == expected


def test_surrounding_whitespace_is_trimmed_like_the_api_server() -> None:
    # Quantity.UnmarshalJSON trims spaces before parsing: " 1Gi " is accepted.
    assert parse_quantity(" 1Gi ") == 2**30
    with pytest.raises(QuantityError):
        parse_quantity("1 Gi")


def test_decimal_arithmetic_is_exact() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("300m")
    assert parse_quantity(0.1) + parse_quantity(0.2) == parse_quantity("0.3")
    assert parse_quantity("1Gi") == parse_quantity("1024Mi") == parse_quantity("1048576Ki")
    assert parse_quantity("1G") != parse_quantity("1Gi")


@pytest.mark.parametrize("bad", [
    "", " ", "abc", "2 GB", "1.5 cpu", "1K", "1ki", "1GB", "Gi", "1..5", "--1", "1e", "1e+", "1Gi2",
    "1e100", "0x10", "1_000", "∞", "1" * 200, "nan", "inf",
    True, False, None, [], {}, float("nan"), float("inf"), -float("inf"), b"1", object(),
])
def test_errors_are_quantity_errors(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_error_message_names_the_value() -> None:
    with pytest.raises(QuantityError, match="2 GB"):
        parse_quantity("2 GB")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-10**6, max_value=10**6), st.sampled_from(sorted({**BINARY, **DECIMAL})))
def test_integer_with_suffix(number: int, suffix: str) -> None:
    factor = BINARY.get(suffix) or DECIMAL[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * factor


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999),
       st.integers(min_value=-20, max_value=20))
def test_decimal_with_exponent(whole: int, frac: int, exponent: int) -> None:
    text = f"{whole}.{frac:03d}e{exponent}"
    assert parse_quantity(text) == (whole + Fraction(frac, 1000)) * Fraction(10) ** exponent


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=40), st.integers(), st.floats(), st.none(), st.booleans()))
def test_never_raises_anything_but_quantity_error(value: object) -> None:
    try:
        result = parse_quantity(value)
    except QuantityError:
        return
    assert isinstance(result, Fraction)


@pytest.mark.parametrize(("resource", "text", "units"), [
    ("cpu", "100m", 100),
    ("cpu", "1.5", 1500),
    ("cpu", "0.0001", 1),           # rounded up, like Quantity.MilliValue
    ("memory", "1.5", 2),
    ("memory", "1Gi", 2**30),
    ("nvidia.com/gpu", "8", 8),
])
def test_scheduler_units(resource: str, text: str, units: int) -> None:
    assert scheduler_units(resource, parse_quantity(text)) == units


@pytest.mark.parametrize(("resource", "units", "text"), [
    ("cpu", 1500, "1.5"),
    ("cpu", 4000, "4"),
    ("memory", 6 * 2**30, "6Gi"),
    ("memory", 1536 * 2**20, "1.5Gi"),
    ("memory", 1000, "1000"),
    ("nvidia.com/gpu", 8, "8"),
])
def test_format_quantity(resource: str, units: int, text: str) -> None:
    assert format_quantity(resource, units) == text
