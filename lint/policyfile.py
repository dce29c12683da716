"""The linter's side of the policy file: finding it and reading it.

``policies`` does no I/O: it takes the text (:func:`policies.config.policy_from_text`).
"""

from __future__ import annotations

from pathlib import Path

from policies.config import Policy, PolicyError, policy_from_text

__all__ = ["CONFIG_FILENAME", "find_policy_file", "load_policy"]

CONFIG_FILENAME = ".gpugate.yaml"


def load_policy(path: str | Path) -> Policy:
    """The policy file at ``path``, read, validated and defaulted (:class:`PolicyError`
    naming the file when it cannot be read or is invalid)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read policy file: {exc}") from None
    return policy_from_text(text, str(path))


def find_policy_file(start: str | Path = ".") -> Path | None:
    """``.gpugate.yaml`` in ``start`` or the nearest parent directory that has one."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    return None
