"""The bait steps next to grad toggles (regions._bait, the "repeat" step): generic optimizing
passes that merge equal calls or move an op across a toggle meet the shapes that expose them."""

from __future__ import annotations

import os

import torch
from fxfuzz.campaign.engine import Hooks, run_campaign
from fxfuzz.core.passes import load_pass
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.strategies import graph_cases
from hypothesis import find, settings
from test_strategies import _draw
from torch import fx

SET_GRAD = torch._C._set_grad_enabled
SHAPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shaped_passes.py")


def _modes(case) -> dict[fx.Node, bool]:
    """The grad mode each top-level node runs under."""
    mode, modes = case.ambient_grad, {}
    for node in case.gm.graph.nodes:
        if node.target is SET_GRAD:
            mode = node.args[0]
        modes[node] = mode
    return modes


def _equal_calls_in_two_modes(case) -> bool:
    """Two calls equal in target and arguments run under different grad modes: what a CSE that
    ignores toggles merges."""
    modes, seen = _modes(case), {}
    for node, mode in modes.items():
        if node.op == "call_function" and node.target is not SET_GRAD:
            seen.setdefault((node.target, node.args, tuple(node.kwargs.items())), set()).add(mode)
    return any(len(m) == 2 for m in seen.values())


def _op_next_to_flip(case) -> bool:
    """A graph output computed by an ATen call on a value needing grad, right before or right
    after a toggle that flips the mode, its operands all from before the toggle: an op a
    scheduler may move across it, and the move shows in the output's requires_grad."""
    modes = _modes(case)
    outputs = set(case.gm.graph.output_node().all_input_nodes)
    for toggle in (n for n in modes if n.target is SET_GRAD):
        if modes[toggle] == modes.get(toggle.prev, case.ambient_grad):
            continue
        for op in (toggle.prev, toggle.next):
            if (
                op in outputs
                and isinstance(op.target, torch._ops.OpOverload)
                and all(a < toggle for a in op.all_input_nodes)
                and any(getattr(a.meta.get("val"), "requires_grad", False) for a in op.all_input_nodes)
            ):
                return True
    return False


def test_sample_holds_equal_calls_and_movable_ops_across_toggles():
    """Seeded sample of 200 default cases (seed 0), measured 2026-11-26 outside pytest: 13 hold
    equal calls in two modes, 9 a movable op next to a flipping toggle, 50 a bait step; the same
    seed before the bait steps drew 0, 2 and 0. Under the suite's conftest (its custom ops join
    the op table) the movable count is 4 at this seed, hence its bound of 3."""
    cases = _draw(200)
    shares = (
        sum(map(_equal_calls_in_two_modes, cases)),
        sum(map(_op_next_to_flip, cases)),
        sum(any(k.startswith("bait:") for k in c.features) for c in cases),
    )
    assert shares[0] >= 10 and shares[1] >= 3 and shares[2] >= 40, shares


def test_bait_shrinks_away():
    """A failure that needs only a flipping toggle shrinks to a case without any bait: each bait
    choice's simplest value is "not taken"."""
    case = find(graph_cases(max_steps=6), lambda c: "toggle:flip" in c.features, settings=settings(database=None, max_examples=500))
    assert not [k for k in case.features if k.startswith(("bait:", "output:bait"))], case.features


def _found(name: str, max_examples: int, seed: int) -> int:
    """Examples run before ``name`` drew a finding in an in-process campaign (0: none)."""
    found = []
    result = run_campaign(
        load_pass(f"{SHAPED}:{name}"),
        CampaignSettings(budget_s=60, max_examples=max_examples, seed=seed, contract="meaning", max_shrink_s=0),
        hooks=Hooks(stop=lambda: bool(found), on_bucket=found.append),
    )
    return result.examples if found else 0


def test_campaigns_find_a_moved_op_and_merged_calls_across_toggles():
    """In-process campaigns (seed 0, one process) stop at the first finding: measured 2026-11-26,
    hoists_across_toggle after 49 examples and merges_across_toggles after 61
    (seeds 1: 84 and 84). The limit of 120 leaves room, not a certainty for any seed."""
    assert 0 < _found("hoists_across_toggle", 120, 0)
    assert 0 < _found("merges_across_toggles", 120, 0)
