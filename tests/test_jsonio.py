"""webhook.jsonio: orjson where it can, the standard library where it refuses; same values."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import jsonio

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (st.lists(children, max_size=5)
                      | st.dictionaries(st.text(max_size=8), children, max_size=5)),
    max_leaves=30)


def _same(a: Any, b: Any) -> bool:
    """Equal with types: 1 and 1.0 and True are different JSON."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_decodes_what_json_decodes(value: Any) -> None:
    text = json.dumps(value)
    assert _same(jsonio.loads(text.encode()), json.loads(text))
    assert _same(jsonio.loads(jsonio.dumps(value)), json.loads(text))


@pytest.mark.parametrize("raw", [
    b'{"replicas": NaN, "x": Infinity}',          # orjson refuses; json accepts
    b'\xef\xbb\xbf{"a": 1}',                         # byte order mark
    b'{"name": "\\ud800x"}',                         # lone surrogate
    b'{"a": 1e400}',                                 # overflows to inf in json
])
def test_what_orjson_refuses_is_read_as_json_reads_it(raw: bytes) -> None:
    got, want = jsonio.loads(raw), json.loads(raw)
    assert repr(got) == repr(want) or (isinstance(want, dict) and any(
        isinstance(v, float) and math.isnan(v) for v in want.values()))


@pytest.mark.parametrize("raw", [b"", b"{", b'{"a": 1}}', b"\xff", b"\x00" * 10])
def test_invalid_json_raises_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        jsonio.loads(raw)


def test_nesting_beyond_both_limits_raises_recursion_error_as_json_does() -> None:
    # parse_review turns it into a 400 with a reason
    with pytest.raises(RecursionError):
        jsonio.loads(b"[" * 5000 + b"]" * 5000)


def test_integers_beyond_64_bits_arrive_as_floats_as_the_api_server_sends_them() -> None:
    assert jsonio.loads(b"[123456789012345678901234567890]") == [1.2345678901234568e29]
    assert jsonio.loads(b"[18446744073709551615]") == [2**64 - 1]


def test_encodes_what_orjson_refuses() -> None:
    for value in ({"uid": "\ud800"}, {"n": 2**70}, {1: "a"}):
        assert json.loads(jsonio.dumps(value)) == json.loads(json.dumps(value))
