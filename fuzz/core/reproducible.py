"""One seed, one sequence of cases, in every process.

Hypothesis (6.131 on) now and then draws a literal it found in the source of the *local*
modules the process has imported so far (not site-packages, not tests). fxfuzz's own modules
are local under an editable install, and so are a user's pass file and whatever a test run
imported before: the same ``--seed`` drew other graphs from the CLI than from
``fxfuzz.run_campaign``, under pytest than in plain Python, and with one pass file than with
another. Inside ``reproducible_draws()`` that pool is empty, as it is for a wheel install with
nothing local imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

try:  # private to Hypothesis: without it (older or newer Hypothesis) there is nothing to pin
    from hypothesis.internal.conjecture import providers as _providers

    _EMPTY = _providers.Constants()
    _PINNED = hasattr(_providers, "_get_local_constants") and hasattr(_providers, "CONSTANTS_CACHE")
except (ImportError, AttributeError):
    _PINNED = False


@contextlib.contextmanager
def reproducible_draws() -> Iterator[None]:
    """Generate with no local constants: a seed draws the same cases whatever was imported."""
    if not _PINNED:
        yield
        return
    prior = _providers._get_local_constants
    # Constants already picked for a choice's bounds would keep the local ones: drop them on the
    # way in, and on the way out, so code after the block collects its own again.
    _providers.CONSTANTS_CACHE.cache.clear()
    _providers._get_local_constants = lambda: _EMPTY
    try:
        yield
    finally:
        _providers._get_local_constants = prior
        _providers.CONSTANTS_CACHE.cache.clear()
