"""JobSet's webhook (``pkg/webhooks/jobset_webhook.go``): what it refuses of a JobSet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal


def jobset(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
