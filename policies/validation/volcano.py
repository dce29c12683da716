"""Volcano's admission webhook (``pkg/webhooks/admission``): what it refuses of a Job,
PodGroup, Queue and HyperNode.

Upstream: volcano-sh/volcano ``pkg/webhooks/admission/{jobs,podgroups,queues,hypernodes}/validate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal
from policies.workload import MISSING, resolve


def job(doc: dict[str, Any]) -> Iterator[Refusal]:
    tasks = resolve(doc, "/spec/tasks")
    if tasks is MISSING or tasks is None or tasks == []:
        yield Refusal("no tasks: a Volcano Job needs at least one task", "/spec/tasks")


def podgroup(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def queue(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def hypernode(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
