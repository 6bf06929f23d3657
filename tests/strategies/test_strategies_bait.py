"""The bait steps next to grad toggles (regions._bait, the "repeat" step), drawn for a pass that
reacts to ``across_toggle``: generic optimizing passes that merge equal calls or move an op
across a toggle meet the shapes that expose them, and which kinds each pass is drawn for."""

from __future__ import annotations

import os

import pytest
import torch
from draws import draw
from fxfuzz.campaign.engine import Hooks, run_campaign
from fxfuzz.core.contract import AUTOCAST, CONTRACTS, MEANING, REFINES, SET_GRAD, union
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.regions import ACROSS_TOGGLE, EFFECT, MOTIF, NODE_KINDS, RANDOM
from fxfuzz.strategies.tooled import TOOL_FORM, TORCH_LEVEL
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from paths import HELPERS
from torch import fx

TOGGLE = torch._C._set_grad_enabled
SHAPED = os.path.join(HELPERS, "shaped_passes.py")
BAITED = MEANING.reacts_to
BAIT_FEATURES = ("bait:", "repeat:", "output:bait")


def test_each_contract_declares_its_kinds():
    """Generic passes go wrong at grad toggles, on the units pattern passes rewrite and on random
    calls, so meaning and refines ask for toggles and the bait next to them, motifs and random
    calls, the forms torch's tools emit and the torch-level calls they record; set_grad and
    autocast ask for nothing (their rows declare their kinds)."""
    generic = ("grad_toggle", ACROSS_TOGGLE, MOTIF, RANDOM, TOOL_FORM, TORCH_LEVEL)
    assert MEANING.reacts_to == REFINES.reacts_to == generic
    assert SET_GRAD.reacts_to == AUTOCAST.reacts_to == ()
    assert union([SET_GRAD, REFINES, MEANING]).reacts_to == generic
    assert {k for c in CONTRACTS.values() for k in c.reacts_to} <= set(NODE_KINDS)


def test_the_kinds_drawn_for_a_pass():
    """Its own declaration, else its contract's: the one given, its registered one, or meaning
    for a pass fxfuzz does not know."""
    unknown = f"{SHAPED}:module_identity"
    assert generation_kinds(load_pass(unknown)) == BAITED
    assert generation_kinds(load_pass(unknown, SET_GRAD)) == ()
    assert generation_kinds(load_pass(unknown), SET_GRAD) == ()  # a campaign's --contract
    assert (
        generation_kinds(load_pass("set_grad")) == generation_kinds(load_pass("set_grad", MEANING)) == ("grad_toggle",)
    )
    assert generation_kinds(load_pass("autocast")) == ("autocast",)
    assert generation_kinds(load_pass("identity")) == BAITED
    # DCE and CSE remove or merge calls anywhere: effectful calls besides the contract's kinds.
    assert generation_kinds(load_pass("dce")) == generation_kinds(load_pass("cse")) == (EFFECT, *BAITED)
    assert generation_kinds(load_pass("set_grad+dce")) == (
        "grad_toggle",
        EFFECT,
        ACROSS_TOGGLE,
        MOTIF,
        RANDOM,
        TOOL_FORM,
        TORCH_LEVEL,
    )
    assert generation_kinds(load_pass("export")) == ("grad_toggle", "autocast")
    declared = lambda gm, sig: (gm, sig)  # noqa: E731
    declared.fxfuzz_reacts_to = ("autocast",)
    assert generation_kinds(declared, MEANING) == ("autocast",)


def test_stand_ins_for_the_set_grad_pass_keep_their_mix():
    """Mutants (fxfuzz.tools.mutate), historical and broken set-grad passes are held to the
    set-grad contract and declare no kinds: their cases are drawn as before the bait."""
    stand_in = lambda gm, sig: (gm, sig)  # noqa: E731
    stand_in.fxfuzz_contract = SET_GRAD  # as run_mutant marks its candidate
    assert generation_kinds(stand_in) == ()
    for module, name in (
        ("historical_passes.py", "pr123391_no_recursion_into_subgraphs"),
        ("broken_passes.py", "leaves_toggles"),
    ):
        assert generation_kinds(load_pass(os.path.join(HELPERS, f"{module}:{name}"))) == ()


def test_undeclared_kind_draws_no_bait():
    """The bait draws no choice for a pass that does not react to across_toggle; the seeded
    tests that pin draws (test_strategies, test_strategies_regions, test_strategies_reacts,
    test_symbolic) hold that its cases are the ones drawn before the bait, unchanged."""
    for kinds in ((), ("grad_toggle",)):
        assert not [k for c in draw(60, reacts_to=kinds) for k in c.features if k.startswith(BAIT_FEATURES)]


def _modes(case) -> dict[fx.Node, bool]:
    """The grad mode each top-level node runs under."""
    mode, modes = case.ambient_grad, {}
    for node in case.gm.graph.nodes:
        if node.target is TOGGLE:
            mode = node.args[0]
        modes[node] = mode
    return modes


def _equal_calls_in_two_modes(case) -> bool:
    """Two calls equal in target and arguments run under different grad modes: what a CSE that
    ignores toggles merges."""
    modes, seen = _modes(case), {}
    for node, mode in modes.items():
        if node.op == "call_function" and node.target is not TOGGLE:
            # By text: a SymInt literal (the tool forms) is unhashable.
            seen.setdefault((node.target, repr(node.args), repr(node.kwargs)), set()).add(mode)
    return any(len(m) == 2 for m in seen.values())


def _op_next_to_flip(case) -> bool:
    """A graph output computed by an ATen call on a value needing grad, right before or right
    after a toggle that flips the mode, its operands all from before the toggle: an op a
    scheduler may move across it, and the move shows in the output's requires_grad."""
    modes = _modes(case)
    outputs = set(case.gm.graph.output_node().all_input_nodes)
    for toggle in (n for n in modes if n.target is TOGGLE):
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


@pytest.mark.slow
def test_sample_holds_equal_calls_and_movable_ops_across_toggles():
    """Seeded sample of 200 cases (seed 0) under the suite's conftest, measured 2026-11-26: for
    a pass reacting to across_toggle 22 hold equal calls in two modes, 23 a movable op next to a
    flipping toggle, 67 a bait step; for one reacting to grad_toggle only, the same seed draws
    0, 9 and 0 (declaring nothing: 0, 2 and 0). The generic contracts also declare motif and
    random, whose steps share the mix: 18, 19 and 37 bait steps (docs/history.md, 2026-11-28,
    says what that dilution costs and what would win the bait back). With the tool forms too,
    which outline no call equal to another (docs/strategies.md): 15, 29 and 67 (seeds 1 and 2:
    15/17/57, 28/23/61; the same kinds without the tool forms: 21/11/53, 13/20/55, 32/29/84)."""
    cases = draw(200, reacts_to=BAITED)
    shares = (
        sum(map(_equal_calls_in_two_modes, cases)),
        sum(map(_op_next_to_flip, cases)),
        sum(any(k.startswith("bait:") for k in c.features) for c in cases),
    )
    assert shares[0] >= 15 and shares[1] >= 15 and shares[2] >= 35, shares


def test_bait_shrinks_away():
    """A failure that needs only a flipping toggle shrinks to a case without any bait: each bait
    choice's simplest value is "not taken"."""
    case = find(
        graph_cases(max_steps=6, reacts_to=BAITED),
        lambda c: "toggle:flip" in c.features,
        settings=settings(database=None, max_examples=500),
    )
    assert not [k for k in case.features if k.startswith(BAIT_FEATURES)], case.features


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, contract",
    [(f"{SHAPED}:module_identity", MEANING), (f"{SHAPED}:renames_nodes", MEANING), ("dce", REFINES)],
    ids=["identity-meaning", "renames-meaning", "dce-refines"],
)
def test_correct_passes_stay_quiet_on_baited_graphs(spec, contract):
    """The bait is no false alarm: passes that move nothing across a toggle draw no finding on
    30 baited cases of each domain."""
    pass_fn = load_pass(spec, contract)

    @seed(36)
    @settings(
        max_examples=30, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(graph_cases(domain="both", reacts_to=BAITED))
    def check(case):
        assert verify(case, pass_fn) == []

    check()


def _found(name: str, max_examples: int, seed: int) -> int:
    """Examples run before ``name`` drew a finding in an in-process campaign (0: none)."""
    found = []
    result = run_campaign(
        load_pass(f"{SHAPED}:{name}", MEANING),
        CampaignSettings(budget_s=120, max_examples=max_examples, seed=seed, max_shrink_s=0),
        hooks=Hooks(stop=lambda: bool(found), on_bucket=found.append),
    )
    return result.examples if found else 0


@pytest.mark.slow
def test_campaigns_find_a_moved_op_and_merged_calls_across_toggles():
    """In-process campaigns (seed 0, one process, held to meaning, so drawn with its kinds) stop
    at the first finding: measured 2026-11-26, hoists_across_toggle after 24 examples and
    merges_across_toggles after 64 (seed 1: 26 and 38), with max_examples 300. Hypothesis draws
    other cases for another max_examples (seed 0 at 120: no finding in 120), so the limit is
    the one measured; it leaves room, not a certainty for any seed."""
    assert 0 < _found("hoists_across_toggle", 300, 0)
    assert 0 < _found("merges_across_toggles", 300, 0)
