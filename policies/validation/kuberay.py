"""KubeRay's validation (``ray-operator/controllers/ray/utils/validation.go``) and webhooks:
what they refuse of a RayCluster, RayJob and RayService.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal


def raycluster(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def rayjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def rayservice(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
