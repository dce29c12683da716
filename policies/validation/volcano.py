"""Volcano's admission webhook (``pkg/webhooks/admission``): what it refuses of a Job.

Upstream: volcano-sh/volcano ``pkg/webhooks/admission/jobs/validate/admit_job.go``.
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
