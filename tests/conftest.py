"""Shared fixtures. The corpus of real manifests lives beside the project, in
``../shared/corpus``; tests that need it skip cleanly when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CORPUS = ROOT.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not present")
    return CORPUS


def corpus_files() -> list[Path]:
    """Every manifest of the corpus (empty when the corpus is absent)."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
