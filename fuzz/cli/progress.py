"""A one-line progress display on stderr, redrawn in place on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fxfuzz.campaign.limits import NO_EXAMPLE_LIMIT, NO_TIME_LIMIT_S


class ProgressPrinter:
    """Prints elapsed time, examples, rate and buckets at most once per ``every_s`` seconds
    (every 0.5 s on a terminal, every 10 s into a log)."""

    def __init__(self, budget_s: float, max_examples: int, stream: TextIO | None = None) -> None:
        # sys.stderr is looked up per printer, not bound at import: it may have been replaced
        # (and the old stream closed) since, as pytest's capture does.
        stream = stream or sys.stderr
        self.budget_s, self.max_examples, self.stream = budget_s, max_examples, stream
        self.tty = stream.isatty()
        self.every_s = 0.5 if self.tty else 10.0
        self.last = -1e9
        self.drawn = False

    def update(self, examples: int, buckets: int, elapsed: float) -> None:
        """Redraw with the merged counts of all workers."""
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        rate = examples / elapsed if elapsed > 0 else 0.0
        budget = f"/{self.budget_s:.0f}s" if self.budget_s < NO_TIME_LIMIT_S else ""
        target = f"/{self.max_examples}" if self.max_examples < NO_EXAMPLE_LIMIT else ""
        line = f"[{elapsed:5.0f}s{budget}] {examples}{target} examples, {rate:.1f}/s, {buckets} finding bucket(s)"
        self.stream.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
