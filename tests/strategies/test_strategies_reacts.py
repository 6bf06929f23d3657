"""Generation draws what the pass under test reacts to (``Registered.reacts_to``) in nearly
every case, and the mix of a pass that declares nothing is left as it was."""

from __future__ import annotations

import pytest
import torch
from draws import draw
from fxfuzz.core.passes import REGISTRY, load_pass, reacts_to_of
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.builder import AUTOCAST_ENTER, SET_GRAD_ENABLED
from fxfuzz.strategies.regions import NODE_KINDS
from hypothesis import HealthCheck, find, settings
from torch import fx


def _share_without(cases: list, target: object) -> float:
    def holds(case) -> bool:
        return any(
            n.target is target for m in case.gm.modules() if isinstance(m, fx.GraphModule) for n in m.graph.nodes
        )

    return sum(not holds(c) for c in cases) / len(cases)


@pytest.mark.slow
def test_at_most_a_tenth_of_300_set_grad_cases_have_no_grad_toggle():
    """The issue's measure: 300 default export-domain cases for the set-grad pass. Without the
    declaration the same seed leaves more than half of them without a toggle."""
    assert _share_without(draw(300, reacts_to=REGISTRY["set_grad"].reacts_to), SET_GRAD_ENABLED) <= 0.10
    assert _share_without(draw(100), SET_GRAD_ENABLED) > 0.30


def test_nine_cases_in_ten_hold_an_autocast_region_for_the_autocast_pass():
    assert _share_without(draw(150, reacts_to=REGISTRY["autocast"].reacts_to), AUTOCAST_ENTER) <= 0.10


def test_a_pass_that_declares_nothing_draws_the_cases_it_drew_before():
    """No extra choice is drawn: the same seed gives the same graphs with and without ``()``."""
    assert [c.code() for c in draw(30)] == [c.code() for c in draw(30, reacts_to=())]


def test_what_each_pass_reacts_to_and_generation_knows_every_kind():
    assert reacts_to_of(load_pass("set_grad")) == ("grad_toggle",)
    assert reacts_to_of(load_pass("export")) == ("grad_toggle", "autocast")
    assert reacts_to_of(load_pass("identity")) == ()
    assert reacts_to_of(load_pass("set_grad+autocast")) == ("grad_toggle", "autocast")
    # A plain callable declares its kinds as it declares its contract, or declares none.
    assert reacts_to_of(lambda gm, sig: (gm, sig)) == ()
    declared = lambda gm, sig: (gm, sig)  # noqa: E731
    declared.fxfuzz_reacts_to = ("autocast",)
    assert reacts_to_of(declared) == ("autocast",)
    assert {k for row in REGISTRY.values() for k in row.reacts_to} <= set(NODE_KINDS)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown node kinds"):
        find(graph_cases(reacts_to=("while_loop",)), lambda case: True)


@pytest.mark.slow
def test_a_failure_needing_no_toggle_still_shrinks_small():
    """Owing a toggle region costs a shrunk case at most that region, left empty."""
    case = find(
        graph_cases(reacts_to=("grad_toggle",)),
        lambda c: any(n.target is torch.ops.aten.mul.Tensor for n in c.gm.graph.nodes),
        settings=settings(max_examples=300, database=None, deadline=None, suppress_health_check=list(HealthCheck)),
    )
    calls = [n.target for n in case.gm.graph.nodes if n.op == "call_function"]
    assert calls.count(SET_GRAD_ENABLED) <= 2 and len(calls) <= 4, calls
