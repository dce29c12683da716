"""A small RFC 6902 applier for the operations gpugate itself emits (add, replace,
remove, test), so that validation can run on the mutated object without a dependency.
"""

from __future__ import annotations

import copy
from typing import Any

from policies.pointers import split_pointer

PatchOp = dict[str, Any]


class PatchError(ValueError):
    pass


def clone(value: Any) -> Any:
    """A deep copy of a JSON-like document (dicts, lists, scalars): several times faster
    than ``copy.deepcopy``, which the engine would otherwise pay on every mutated object."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def apply_patch(doc: Any, ops: list[PatchOp], in_place: bool = False) -> Any:
    target = doc if in_place else clone(doc)
    for op in ops:
        target = _apply(target, op)
    return target


def _apply(doc: Any, op: PatchOp) -> Any:
    tokens = split_pointer(op["path"])
    kind = op["op"]
    if not tokens:
        if kind in ("add", "replace"):
            return clone(op["value"])
        raise PatchError(f"cannot {kind} the whole document")
    parent: Any = doc
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, clone(op["value"]))
        elif kind == "replace":
            parent[index] = clone(op["value"])
        elif kind == "remove":
            del parent[index]
        elif kind == "test" and parent[index] != op["value"]:
            raise PatchError(f"test failed at {op['path']}")
    elif isinstance(parent, dict):
        if kind in ("add", "replace"):
            if kind == "replace" and last not in parent:
                raise PatchError(f"replace of missing {op['path']}")
            parent[last] = clone(op["value"])
        elif kind == "remove":
            del parent[last]
        elif kind == "test" and parent.get(last) != op["value"]:
            raise PatchError(f"test failed at {op['path']}")
    else:
        raise PatchError(f"{op['path']}: parent is not a container")
    return doc
