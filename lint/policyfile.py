"""The linter's side of the policy file: finding it and reading it.

``policies`` does no I/O: it takes the text (:func:`policies.config.policy_from_file`).
"""

from __future__ import annotations

from pathlib import Path

from policies.config import Policy, policy_from_file

__all__ = ["CONFIG_FILENAME", "find_policy_file", "load_policy"]

CONFIG_FILENAME = ".gpugate.yaml"


def load_policy(path: str | Path) -> Policy:
    """The policy file at ``path``, read, validated and defaulted (:class:`PolicyError`
    naming the file when it cannot be read or is invalid)."""
    return policy_from_file(str(path), read=lambda name: Path(name).read_text(encoding="utf-8"))


def find_policy_file(start: str | Path = ".") -> Path | None:
    """``.gpugate.yaml`` in ``start`` or the nearest parent directory that has one."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    return None
