"""Random calls: what the default generator's state is after the call.

Every run of a graph starts from one seed (``fxfuzz.oracles.execute.isolated``), so a random
call draws the same numbers in the original and the result as long as the pass keeps the
random calls, in order. A pass that reorders them changes values, which the equivalence check
sees; one that deletes a draw whose result nothing reads, merges two equal random calls into
one, adds a draw, or freezes one into a constant (computed while the pass ran, from the same
seed, so its values even match) changes no output of this call, only the generator's state
after it, which the caller's next random call reads. This check compares that state (CPU's
generator, after the forward run at each size) wherever both graphs ran. Where two runs of
the original leave different states (randomness outside the seeded generator), none is
compared.
"""

from __future__ import annotations

import torch
from fxfuzz.oracles.execute import Run
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.semantics import Observation, Reference


def _same_state(a: Run, b: Run) -> bool:
    return a.rng_after is not None and b.rng_after is not None and torch.equal(a.rng_after, b.rng_after)


def check_rng(ref: Reference, got: Observation) -> list[Finding]:
    """``rng_state_mismatch`` where the result leaves the generator elsewhere than the
    original does (module docstring)."""
    if not (ref.run.ok and got.run.ok) or _same_state(ref.run, got.run):
        return []
    if not _same_state(ref.run, ref.again.run):
        return []
    return [
        Finding(
            "rng",
            "rng_state_mismatch",
            "the random generator's state after the call differs from the original's: a random call "
            "was deleted, merged, added or frozen, so the caller's next random numbers change",
        )
    ]
