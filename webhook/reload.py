"""The policy file, re-read while serving: content decides, half-written files wait, a
deleted file keeps the last good policy.

:class:`PolicySource` is polled on the server's reload tick (every 2 s):

- **content, not mtime**: the file's SHA-256 decides whether it changed (a touch, or a
  kubelet refresh that rewrites the same bytes, is not a reload; a change that keeps the
  mtime, as ``cp -p`` or a clock step can, is one);
- **settled**: a new content is applied only once two consecutive polls read the same bytes
  (``settle_polls``), so a file still being written (a hand copy, an editor's save) is never
  taken half-written; then it is parsed and schema-validated (``read_policy``), and only if
  the file still holds those bytes afterwards;
- **deleted**: the last good policy stays in force; this is logged once (error) and counted
  (``on_missing``: ``gpugate_reloads_total{what="config",result="missing"}``); when the file
  comes back its content is judged as any new content.

A rejected content is logged once and counted (``on_reload(False)``); the old policy stays
until the content changes again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from policies.config import Policy, PolicyError, policy_from_file

log = logging.getLogger("gpugate.webhook")

# Polls that must read the same new content before it is applied (1: at once).
SETTLE_POLLS = 2


def read_policy(path: str) -> Policy:
    """The policy file at ``path``, parsed and validated (``PolicyError`` if it cannot be
    read either)."""
    return policy_from_file(path, read=lambda name: Path(name).read_text(encoding="utf-8"))


def _digest(path: str) -> bytes:
    return hashlib.sha256(Path(path).read_bytes()).digest()


class PolicySource:
    """The policy in force, and :meth:`maybe_reload` to pick up a changed file."""

    def __init__(self, path: str | None = None, policy: Policy | None = None,
                 on_reload: Callable[[bool], None] | None = None,
                 on_missing: Callable[[], None] | None = None,
                 settle_polls: int = SETTLE_POLLS) -> None:
        self.path = path
        self._on_reload = on_reload
        self._on_missing = on_missing
        self.settle_polls = max(1, settle_polls)
        self.missing = False
        self._judged: bytes | None = None        # the content in force, or the last one rejected
        self._pending: bytes | None = None       # a new content seen, not yet settled
        self._pending_polls = 0
        if path is not None:
            try:
                self._judged = _digest(path)
            except OSError:
                self._judged = None              # read_policy below says why
            self.policy = read_policy(path)
        else:
            self.policy = policy or Policy()

    def maybe_reload(self) -> bool | None:
        """True reloaded, False rejected or gone (old kept), None unchanged (or not settled)."""
        if self.path is None:
            return None
        try:
            digest = _digest(self.path)
        except OSError as exc:
            self._pending, self._pending_polls = None, 0
            if self.missing:
                return None
            self.missing = True
            log.error("policy file %s cannot be read (%s); keeping the last good policy",
                      self.path, exc.strerror or exc)
            if self._on_missing is not None:
                self._on_missing()
            return False
        if self.missing:
            self.missing = False
            log.info("policy file %s is back", self.path)
        if digest == self._judged:
            self._pending, self._pending_polls = None, 0
            return None
        if digest != self._pending:
            self._pending, self._pending_polls = digest, 1
        else:
            self._pending_polls += 1
        if self._pending_polls < self.settle_polls:
            return None                          # maybe still being written: look again next tick
        self._pending, self._pending_polls = None, 0
        try:
            policy = read_policy(self.path)
            if _digest(self.path) != digest:     # rewritten while we parsed it
                return None
        except OSError:
            return None                          # gone meanwhile: the next tick says so
        except PolicyError as exc:
            if not Path(self.path).exists():
                return None                      # gone meanwhile: the next tick says so
            self._judged = digest
            log.error("policy %s not reloaded, keeping the previous one: %s", self.path, exc)
            ok = False
        else:
            self._judged = digest
            self.policy = policy
            log.info("policy reloaded from %s", self.path)
            ok = True
        if self._on_reload is not None:
            self._on_reload(ok)
        return ok
