"""JSON in and out of the webhook: orjson for what it takes, the standard library for the rest.

orjson decodes a review about 2.3x faster than ``json`` and encodes an answer about 20x
faster; at a few microseconds per review that is a tenth of what a review costs served.
Its grammar is stricter: it refuses ``NaN``/``Infinity``, lone surrogates, a UTF-8 byte
order mark and nesting beyond 1,024 levels, all of which ``json`` accepts (or words its
own error for). Whatever orjson refuses goes to ``json``, so such input is handled
exactly as before. One difference remains and is deliberate: an integer beyond 64 bits
becomes a float, which is also what the API server sends (Kubernetes decodes JSON numbers
to int64, else float64), so a review reads the same whoever sent it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """The value of a JSON document; ``ValueError`` (or ``RecursionError``) as ``json.loads``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)   # accepts more, or raises the error callers know


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (what ``json`` writes with ASCII escapes, orjson writes as
    UTF-8: the same document)."""
    try:
        return orjson.dumps(value)
    except TypeError:   # a lone surrogate, an integer beyond 64 bits, a non-string key
        return json.dumps(value, separators=(",", ":")).encode()
