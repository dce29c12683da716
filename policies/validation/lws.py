"""LeaderWorkerSet's webhook (``pkg/webhooks/leaderworkerset_webhook.go``): what it refuses
of a LeaderWorkerSet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal


def leaderworkerset(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
