"""The way the feasibility rules (GG306, GG402-GG406) reach :mod:`policies.feasibility`.

That module (numpy with it) is imported on the first call, so the linter without a
topology never loads it; after that the function is kept here, because an ``import``
statement in each rule's ``check`` costs more than the lookup it leads to, six times
per review. (A leading underscore: the registry loads no rule from this module.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from policies.engine import Context
from policies.findings import Problem
from policies.workload import Workload

_Problems = Callable[[Workload, Context, str], Iterator[Problem]]
_loaded: _Problems | None = None


def problems(workload: Workload, ctx: Context, rule_id: str) -> Iterator[Problem]:
    """:func:`policies.feasibility.problems`: what rule ``rule_id`` reports for this evaluation."""
    global _loaded
    if _loaded is None:
        from policies.feasibility import problems as loaded

        _loaded = loaded
    return _loaded(workload, ctx, rule_id)
