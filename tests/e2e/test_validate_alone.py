"""README Lifecycle: "/validate stands alone": the same verdict and warnings for the same
objects whether the mutating webhook ran or not (it fails open)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .conftest import Session
from .kube import REPO, free_port
from .objects import batch_job, deployment, pytorch_job, volcano_job
from .steps import RULE_ID

pytestmark = pytest.mark.e2e

EXAMPLES = sorted((REPO / "examples" / "workloads").glob("*.yaml"))


def _documents(namespace: str) -> list[tuple[str, dict]]:
    out = []
    for path in EXAMPLES:
        for i, document in enumerate(yaml.safe_load_all(Path(path).read_text())):
            if isinstance(document, dict) and document.get("kind"):
                document.setdefault("metadata", {})["namespace"] = namespace
                out.append((f"{path.name}#{i}", document))
    return out


def _verdicts(e2e: Session, documents: list[tuple[str, dict]]) -> dict[str, tuple[int, list[str], str]]:
    verdicts = {}
    for name, document in documents:
        answer = e2e.api.create(document, dry_run=True)
        gpugate_warnings = sorted(w for w in answer.warnings if RULE_ID.match(w))
        message = "" if answer.ok else re.sub(r"\s+", " ", answer.message)
        verdicts[name] = (answer.status, gpugate_warnings, message)
    return verdicts


def _own(namespace: str) -> list[tuple[str, dict]]:
    """Objects that fit this test's nodes only with the tolerations /mutate injects (the nodes
    are tainted with pool and product), and ones that never fit."""
    group = namespace
    return [("own-pytorchjob-fits", pytorch_job(namespace, "fits", group, gpus=4)),
            ("own-job-fits", batch_job(namespace, "fits", group, gpus=8, parallelism=2)),
            ("own-deployment-fits", deployment(namespace, "fits", group, gpus=2, replicas=2)),
            ("own-volcano-too-big", volcano_job(namespace, "big", group, "default", gpus=16)),
            ("own-pytorchjob-waits", pytorch_job(namespace, "waits", group, gpus=8, workers=3))]


def test_validate_verdicts_do_not_depend_on_mutation(crds: Session, namespace: str) -> None:
    e2e, group = crds, namespace
    e2e.cluster.gpu_node(f"{group}-0", group)
    e2e.cluster.gpu_node(f"{group}-1", group, pool="inference")
    e2e.cluster.gpu_node(f"{group}-2", group, pool="hybrid")
    e2e.wait_nodes_synced()
    documents = _documents(namespace) + _own(namespace)
    with_mutation = _verdicts(e2e, documents)
    statuses = {v[0] for v in with_mutation.values()}
    assert {201, 403} <= statuses, with_mutation
    assert with_mutation["own-pytorchjob-fits"][0] == 201, with_mutation["own-pytorchjob-fits"]

    closed = f"https://127.0.0.1:{free_port()}/mutate"   # nothing listens: the API server fails open
    e2e.register(mutate_url=closed)
    try:
        before = e2e.gate.counters()
        without_mutation = _verdicts(e2e, documents)
        delta = e2e.gate.counters() - before
    finally:
        e2e.register()
    assert delta.reviews(endpoint="mutate") == 0
    assert delta.reviews(endpoint="validate") >= sum(1 for v in with_mutation.values() if v[0] in (201, 403))
    differences = {name: (with_mutation[name], without_mutation[name]) for name in with_mutation
                   if with_mutation[name] != without_mutation[name]}
    assert not differences, "\n".join(f"{name}:\n  with /mutate:    {a}\n  without /mutate: {b}"
                                      for name, (a, b) in differences.items())
