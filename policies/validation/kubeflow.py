"""The training-operator's webhooks (``pkg/webhooks``): what they refuse of a PyTorchJob,
TFJob, XGBoostJob, PaddleJob, JAXJob and MPIJob.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.validation import Refusal


def pytorchjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def tfjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def xgboostjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def paddlejob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def jaxjob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())


def mpijob(doc: dict[str, Any]) -> Iterator[Refusal]:
    return iter(())
