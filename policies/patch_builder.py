"""A JSON Patch builder: RFC 6902 ops against a workload's document, each valid against
the document as patched by the ones before it (what GG101 and GG102 inject)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from policies.findings import join_pointer, pointer_tokens
from policies.patch import PatchOp
from policies.workload import PodSet, Workload


class _Builder:
    """Collects RFC 6902 ops against ``doc`` while applying them to a private copy, so that
    each op sees the effect of the previous ones. Additions inside an object this builder
    created are folded into that object's ``add`` instead of becoming ops of their own."""

    def __init__(self, workload: Workload) -> None:
        # The document as patched so far. Copied along each changed path only (the rest is
        # shared with the workload's document, which is never written to): most documents
        # need no change at all, and a change touches a few nodes of a large object.
        self.work: Any = workload.doc
        self._copied = False
        self._owned: set[int] = set()   # ids of the containers this builder made or copied
        self.ops: list[PatchOp] = []
        self._created: set[tuple[str, ...]] = set()
        # Nodes found by lookup_in, by path: a pod template is looked into several times.
        # Forgotten on every append, which may copy the document or create the node.
        self._found: dict[tuple[str, ...], Any] = {}

    def _inside_created(self, tokens: tuple[str, ...]) -> bool:
        # prefixes of the path, not every created path: linear in depth, not in pod sets
        return any(tokens[:depth] in self._created for depth in range(1, len(tokens) + 1))

    def lookup(self, tokens: Sequence[str]) -> Any:
        return _walk(self.work, tokens)

    def enter(self, pod_set: PodSet) -> tuple[str, ...]:
        """The tokens of the pod set's spec: the ``base`` of its :meth:`lookup_in` calls.

        The node there is found by walking the tokens, not taken from ``pod_set.spec``: a
        map key that is not a string (YAML ``1:``) is found by the model but not by a JSON
        Pointer walk, and the walk is the truth here. On the workload's own (unpatched)
        document the walk is remembered on the pod set, for the next builder."""
        if self._copied:
            return _spec_tokens(pod_set)
        tokens, node = _spec_walk(pod_set, self.work)
        self._found[tokens] = node
        return tokens

    def lookup_in(self, base: tuple[str, ...], rest: Sequence[str]) -> Any:
        """``lookup((*base, *rest))``, with the node at ``base`` remembered."""
        node = self._found.get(base, _UNSEEN)
        if node is _UNSEEN:
            node = self._found[base] = _walk(self.work, base)
        return _walk(node, rest)

    def append(self, tokens: Sequence[str], item: Any) -> bool:
        """Append ``item`` to the list at ``tokens``, creating missing parents (mappings,
        then the list). False when something in the way has the wrong type."""
        self._found.clear()
        self._own_all(item)   # folded into later: it must never be copied away from its op
        if not self._copied:
            self.work, self._copied = self._copy(self.work), True
        node: Any = self.work
        for depth, token in enumerate(tokens):
            is_last = depth == len(tokens) - 1
            if isinstance(node, list):
                if not (token.isdigit() and int(token) < len(node)):
                    return False
                index = int(token)
                child = node[index]
                if child is None:
                    return False
                if isinstance(child, (dict, list)) and id(child) not in self._owned:
                    child = node[index] = self._copy(child)
                node = child
                continue
            if not isinstance(node, dict):
                return False
            child = node.get(token)
            if child is None:  # missing (or null): create everything from here down
                value: Any = [item]
                self._owned.add(id(value))
                for key in reversed(tokens[depth + 1:]):
                    value = {key: value}
                    self._owned.add(id(value))
                node[token] = value
                here = tuple(tokens[:depth + 1])
                if not self._inside_created(here):
                    self.ops.append({"op": "add", "path": _pointer(here), "value": value})
                    self._created.add(here)
                return True
            if isinstance(child, (dict, list)) and id(child) not in self._owned:
                child = node[token] = self._copy(child)
            if is_last:
                if not isinstance(child, list):
                    return False
                child.append(item)
                if not self._inside_created(tuple(tokens)):
                    self.ops.append({"op": "add", "path": _pointer(tokens) + "/-", "value": item})
                return True
            node = child
        return False

    def _copy(self, node: Any) -> Any:
        """A shallow copy of a container on a changed path, owned by this builder."""
        copied = dict(node) if isinstance(node, dict) else list(node) if isinstance(node, list) else node
        self._owned.add(id(copied))
        return copied

    def _own_all(self, value: Any) -> None:
        if isinstance(value, dict):
            self._owned.add(id(value))
            for child in value.values():
                self._own_all(child)
        elif isinstance(value, list):
            self._owned.add(id(value))
            for child in value:
                self._own_all(child)


_UNSEEN: Any = object()


def _spec_tokens(pod_set: PodSet) -> tuple[str, ...]:
    """The JSON Pointer tokens of the pod set's spec, split once per pod set."""
    found = pod_set.memo.get("spec_walk")
    return found[0] if found is not None else _spec_pointer_tokens(pod_set.path)


def _spec_walk(pod_set: PodSet, doc: Any) -> tuple[tuple[str, ...], Any]:
    """(tokens, node) of the pod set's spec in ``doc``, its workload's own (unpatched) document,
    found by walking the tokens (see :meth:`_Builder.enter`); remembered on the pod set."""
    found: tuple[tuple[str, ...], Any] | None = pod_set.memo.get("spec_walk")
    if found is None:
        tokens = _spec_pointer_tokens(pod_set.path)
        found = pod_set.memo["spec_walk"] = (tokens, _walk(doc, tokens))
    return found


def _spec_pointer_tokens(template_path: str) -> tuple[str, ...]:
    """The tokens of ``<template_path>/spec`` (``pointer_tokens`` keeps the path's)."""
    return (*pointer_tokens(template_path), "spec")


def _walk(node: Any, tokens: Sequence[str]) -> Any:
    """The node at ``tokens`` below ``node``, or None."""
    for token in tokens:
        if type(node) is dict:  # nearly always: no subclass check
            node = node.get(token)
        elif isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _pointer(tokens: Iterable[str]) -> str:
    return join_pointer("", *tokens)
