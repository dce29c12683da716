"""Kubeflow Trainer v2's webhooks: what they refuse of a TrainJob, TrainingRuntime and
ClusterTrainingRuntime.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal


def trainjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def training_runtime(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
