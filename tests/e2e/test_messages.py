"""README Lifecycle: "Messages", as kubectl sees them (the API server's Warning headers and
denial messages), and the /metrics exposition."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from policies.registry import all_rules

from .conftest import Session
from .kube import REPO
from .objects import deployment, pytorch_job

pytestmark = pytest.mark.e2e

WARNING = re.compile(r"^(GG\d{3}) ([a-z0-9-]+): \S")
MAX_WARNING = 256        # the API server's limit per warning (k8s.io/apiserver warning.go)
MAX_WARNINGS_TOTAL = 4096


def test_every_warning_starts_with_rule_and_slug_and_fits(crds: Session, namespace: str) -> None:
    e2e, ns, group = crds, namespace, namespace
    slugs = {rule_id: rule.slug for rule_id, rule in all_rules().items()}
    objects = []
    for path in sorted((REPO / "examples" / "workloads").glob("*.yaml")):
        for document in yaml.safe_load_all(Path(path).read_text()):
            if isinstance(document, dict) and document.get("kind"):
                document.setdefault("metadata", {})["namespace"] = ns
                objects.append(document)
    # long names, several warnings at once: GPU without product (GG104), a Volcano queue label
    # that Volcano does not read on a Deployment (GG301), tolerating every taint (GG106)
    noisy = deployment(ns, "d" * 200, group, gpus=1, product=False, tolerations=[{"operator": "Exists"}],
                       container_name="c" * 63)
    noisy["spec"]["template"]["metadata"]["labels"]["volcano.sh/queue-name"] = "q" * 63
    objects.append(noisy)
    seen = []
    for obj in objects:
        answer = e2e.api.create(obj, dry_run=True)
        assert sum(len(w) for w in answer.warnings) <= MAX_WARNINGS_TOTAL, answer
        for warning in answer.warnings:
            seen.append(warning)
            match = WARNING.match(warning)
            assert match and slugs.get(match.group(1)) == match.group(2), f"not 'ID slug: ...': {warning!r}"
            assert len(warning) <= MAX_WARNING, f"{len(warning)} characters: {warning!r}"
            assert not warning.endswith("…"), f"gpugate cut the warning itself: {warning!r}"
    assert len(seen) >= 5, f"too few warnings to prove anything: {seen}"


def test_denial_names_the_object_once(crds: Session, namespace: str) -> None:
    e2e, ns = crds, namespace
    name = "never-fits-7f3a"
    answer = e2e.api.create(pytorch_job(ns, name, namespace, gpus=64), dry_run=True)  # no node has 64
    assert answer.status == 403, answer
    assert answer.message.count(f"PyTorchJob {ns}/{name}") == 1, answer.message
    assert answer.message.count(name) == 1, answer.message
    assert "gpugate denied PyTorchJob" in answer.message


def test_metrics_have_no_created_series(e2e: Session) -> None:
    text = e2e.gate.metrics_text()
    assert "gpugate_reviews_total" in text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    created = sorted(n for n in names if n.endswith("_created"))
    assert not created, created
