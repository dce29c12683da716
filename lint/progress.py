"""A one-line progress bar on stderr for long runs (lint files, audit objects).

Drawn only when the stream is a terminal and there is enough work to be worth it, so
pipes, CI logs and redirected output never see control characters.
"""

from __future__ import annotations

import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

MIN_FILES = 50          # fewer files finish before a bar would be readable
REDRAW_SECONDS = 0.05   # redrawing on every file would cost more than linting small files


class Progress:
    """``with Progress(total) as bar: ... bar.advance(name)``."""

    def __init__(self, total: int, stream: TextIO | None = None, *, enabled: bool | None = None,
                 min_total: int = MIN_FILES, unit: str = "files") -> None:
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = total > min_total and _isatty(self.stream)
        self.enabled = enabled
        self.done = 0
        self._last_draw = 0.0
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def advance(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw < REDRAW_SECONDS and self.done < self.total:
            return
        self._last_draw = now
        self._draw(label)

    def render(self, label: str, width: int) -> str:
        """The bar as one line of at most ``width`` characters."""
        counter = f" {self.done}/{self.total} {self.unit} "
        bar_width = max(10, min(40, width // 3))
        filled = bar_width * self.done // self.total if self.total else bar_width
        line = f"[{'#' * filled}{'-' * (bar_width - filled)}]{counter}"
        room = width - len(line) - 1
        if label and room > 4:
            line += label if len(label) <= room else "..." + label[-(room - 3):]
        return line[: width - 1]

    def _draw(self, label: str) -> None:
        width = shutil.get_terminal_size((80, 24)).columns
        self.stream.write("\r\033[K" + self.render(label, width))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the bar so that what follows starts on a clean line."""
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False
