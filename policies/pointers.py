"""JSON Pointers (RFC 6901): the paths of findings, patches and pod sets."""

from __future__ import annotations

from policies import memo

__all__ = ["escape_pointer", "unescape_pointer", "join_pointer", "pointer_tokens", "split_pointer",
           "field_name"]


def escape_pointer(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    if "~" not in token and "/" not in token:  # nearly every key: no copy
        return token
    return token.replace("~", "~0").replace("/", "~1")


def unescape_pointer(token: str) -> str:
    if "~" not in token:
        return token
    return token.replace("~1", "/").replace("~0", "~")


def join_pointer(base: str, *tokens: str | int) -> str:
    return base + "".join(["/" + escape_pointer(t if type(t) is str else str(t)) for t in tokens])


# The kind table's paths and the pod-set paths are split again on every object; a long
# pointer (a hostile key) is split every time rather than pinned in the cache.
_REMEMBERED_POINTER_MAX = 512


def pointer_tokens(pointer: str) -> tuple[str, ...]:
    """The unescaped reference tokens of a JSON Pointer, as a tuple."""
    if len(pointer) > _REMEMBERED_POINTER_MAX:
        return _tokens(pointer)
    return _remembered_tokens(pointer)


def _tokens(pointer: str) -> tuple[str, ...]:
    if not pointer:
        return ()
    return tuple([unescape_pointer(t) for t in pointer.split("/")[1:]])


_remembered_tokens = memo.process_cache(4096, "policies.pointers.pointer_tokens")(_tokens)


def split_pointer(pointer: str) -> list[str]:
    return list(pointer_tokens(pointer))


def field_name(pointer: str) -> str:
    """A JSON Pointer as the field path people write: ``spec.tasks[0].template``,
    ``metadata.labels[volcano.sh/queue-name]`` (keys with ``.`` or ``/`` in brackets)."""
    out = ""
    for token in split_pointer(pointer):
        if token.isdigit() or "." in token or "/" in token:
            out += f"[{token}]"
        else:
            out += ("." if out else "") + token
    return out or "(root)"
