"""Wall-clock time per step of ``verify``, kept only while someone collects it.

``fxfuzz bench`` uses it to say where an example's time goes without a profiler, whose
overhead falls unevenly (two to three times on Python-heavy code, little on kernels).
Outside ``collecting()`` a step costs one check of a module variable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_totals: dict[str, float] | None = None


@contextmanager
def step(name: str) -> Iterator[None]:
    """Add the block's wall-clock seconds to ``name`` while a ``collecting()`` is open."""
    totals = _totals
    if totals is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def collecting() -> Iterator[dict[str, float]]:
    """Seconds per step, summed over every step run inside the block, in first-run order."""
    global _totals
    prior, _totals = _totals, {}
    try:
        yield _totals
    finally:
        _totals = prior
