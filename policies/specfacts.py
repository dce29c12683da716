"""Facts of pod specs, shared by content across objects (``PodSet.facts``,
``PodSet.blind_facts`` in :mod:`policies.workload`).

A sweep submits many jobs of one template, and a Master/Worker pair shares one spec:
what depends only on a spec's content is worked out once. The stores are
:class:`policies.memo.ContentMemo` (per process, bounded, off with the memo switch).
"""

from __future__ import annotations

import itertools
import marshal
from typing import Any

from policies.memo import ContentMemo, Scratch

# Facts of pod specs by content, kept across objects: a sweep submits many jobs of one
# template, and a Master/Worker pair shares one spec. Bounded (the oldest goes first), and
# only for specs of a reasonable size: the key is the spec's bytes.
MAX_SPEC_FACTS = 128
_MAX_SPEC_BYTES = 16 * 1024
SPEC_FACTS = ContentMemo("policies.specfacts.spec_facts", MAX_SPEC_FACTS)
# A facts dict gathers keys per policy (see facts_token; about 16 each): past this many
# (several policies, or reloads leaving old tokens behind) it starts afresh.
_MAX_FACTS_KEYS = 128
_FACTS_TOKENS = itertools.count(1)


def facts_token(policy_memo: dict[Any, Any]) -> int:
    """The number that names a policy (by its ``memo``) in the keys of shared ``facts``.

    Facts outlive the objects they were first derived for, so a key must never name a
    later policy by accident, as ``id()`` of a freed one could."""
    token: int | None = policy_memo.get("facts token")
    if token is None:
        token = policy_memo["facts token"] = next(_FACTS_TOKENS)
    return token


def spec_facts(spec: Any) -> Scratch | None:
    """The shared facts of pod specs with ``spec``'s exact content, or None (not shared).

    The key is ``marshal`` of the spec: unlike ``==``, it tells ``1``, ``1.0`` and ``True``
    apart, and key order, so for what JSON and YAML give equal keys mean every rule reads
    both specs alike. (Format 4 also marks objects referenced from elsewhere, which can
    only make an equal spec miss: the spec is serialised before anything refers into it.)"""
    if type(spec) is not dict:
        return None
    try:
        key = marshal.dumps(spec)
    except (ValueError, RecursionError):  # a YAML date, nested too deep: not shared
        return None
    if len(key) > _MAX_SPEC_BYTES:
        return None
    found: Scratch | None = SPEC_FACTS.get(key)
    if found is None:  # with memoisation off: a fresh store that keeps nothing
        found = SPEC_FACTS.put(key, Scratch())
    elif len(found) > _MAX_FACTS_KEYS:
        found.clear()
    return found


# Facts of pod specs by their content but for the ``cpu`` and ``memory`` amounts of their
# containers (see :attr:`PodSet.blind_facts`), kept in the full facts under this key.
BLIND_AMOUNTS = frozenset({"cpu", "memory"})
BLIND_FACTS_KEY = "blind facts"
BLIND_FACTS = ContentMemo("policies.specfacts.blind_facts", MAX_SPEC_FACTS)


def blind_facts(spec: Any) -> Scratch:
    """The facts of pod specs equal to ``spec`` but for the amounts of :data:`BLIND_AMOUNTS`
    in its containers' requests and limits (a fresh store when not shared, as in
    :func:`spec_facts`). The key is ``marshal`` (format 2: no back-references) of the
    spec with those amounts replaced by None, plain dicts and lists copied only along the
    way to them; any other type on the way (a subclass) is left in place, and marshal
    refuses it."""
    if type(spec) is not dict:
        return Scratch()
    masked = spec
    for group in ("initContainers", "containers"):
        items = spec.get(group)
        if type(items) is not list:
            continue
        copied: list[Any] | None = None
        for i, container in enumerate(items):
            if type(container) is not dict:
                continue
            resources = container.get("resources")
            if type(resources) is not dict:
                continue
            new_resources: dict[str, Any] | None = None
            for part in ("requests", "limits"):
                values = resources.get(part)
                if type(values) is dict and ("cpu" in values or "memory" in values):
                    if new_resources is None:
                        new_resources = dict(resources)
                    new_resources[part] = {k: None if k in BLIND_AMOUNTS else v for k, v in values.items()}
            if new_resources is not None:
                if copied is None:
                    copied = list(items)
                copied[i] = {**container, "resources": new_resources}
        if copied is not None:
            if masked is spec:
                masked = dict(spec)
            masked[group] = copied
    try:
        key = marshal.dumps(masked, 2)
    except (ValueError, RecursionError):
        return Scratch()
    if len(key) > _MAX_SPEC_BYTES:
        return Scratch()
    found: Scratch | None = BLIND_FACTS.get(key)
    if found is None:
        found = BLIND_FACTS.put(key, Scratch())
    elif len(found) > _MAX_FACTS_KEYS:
        found.clear()
    return found
