"""The gate where baseline and candidate both lose ordered effects: their two results are
compared directly, effect log against effect log, as values and gradients are."""

from __future__ import annotations

import effect_passes as ep
from effect_cases import BROKEN, UnusedFirst, lowered
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles.differential import regressions

DROPS = load_pass(f"{BROKEN}:{ep.drops_unused_effect.__name__}")
NEGATES = load_pass(f"{BROKEN}:{ep.logs_other_value.__name__}")


def test_both_failing_effects_but_disagreeing_is_a_regression():
    """Both fail the effects check against the original; the candidate keeps the call the
    baseline drops (with another value), so its log holds one effect more than the baseline's."""
    case = lowered(UnusedFirst)
    assert regressions(case, DROPS, DROPS) == []
    kinds = {f"{f.oracle}/{f.kind}" for f in regressions(case, NEGATES, DROPS)}
    assert "effects/vs_baseline_effects_added" in kinds, kinds


def test_both_failing_effects_alike_is_no_regression():
    """A candidate that loses the very effects its baseline loses (the same pass loaded twice)."""
    assert (
        regressions(
            lowered(UnusedFirst, requires_grad=True), DROPS, load_pass(f"{BROKEN}:{ep.drops_unused_effect.__name__}")
        )
        == []
    )
