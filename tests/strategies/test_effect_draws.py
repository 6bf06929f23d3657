"""Effectful calls in pre-dispatch graphs (``fxfuzz.strategies.effects``), drawn for the passes
that declare the kind ``effect`` (CSE, DCE): how they are drawn; the effects check fires on
passes that drop or merge them there and stays quiet on correct ones; and the CSEPass defect
they expose, pinned on graphs make_fx traces (docs/known-findings.md)."""

from __future__ import annotations

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.capture import from_module
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies.effects import EFFECTFUL
from fxfuzz.tools.bench import population
from handmade import FIXED
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops

# 20, not 10: since generic kinds add motif and random steps the first 10 cases of seed 0 hold no
# effect:twice (seed 2 drew none before either); 20 hold every kind.
SAMPLE = 20
KNOWN = "docs/known/cse.txt"


def _calls(gm: fx.GraphModule) -> list[fx.Node]:
    return list(gm.graph.find_nodes(op="call_function", target=EFFECTFUL))


@pytest.fixture(scope="module")
def drawn():
    """CSE's cases (functional domain, its kinds), seed 0."""
    return population(SAMPLE, 0, "functional", generation_kinds(load_pass("cse")))


def test_declaring_passes_draw_effectful_calls_in_the_top_level_graph(drawn):
    with_calls = [c for c in drawn if _calls(c.gm)]
    assert len(with_calls) >= SAMPLE // 3
    assert {"effect:unused", "effect:used", "effect:twice"} <= {k for c in drawn for k in c.features}
    assert any(not n.users for c in with_calls for n in _calls(c.gm))  # kept for its effect alone
    assert any(n.users for c in with_calls for n in _calls(c.gm))
    for case in drawn:  # torch.cond and map refuse effectful bodies
        assert not any(_calls(m) for name, m in case.gm.named_modules() if name and isinstance(m, fx.GraphModule))


def test_passes_that_declare_nothing_draw_none():
    cases = population(SAMPLE, 0, "export", generation_kinds(load_pass("identity")))
    assert not any(_calls(c.gm) for c in cases)
    assert not any(k.startswith("effect:") for c in cases for k in c.features)


def drops_unused_effects(gm):
    """Broken: a dead-code eliminator that takes effectful calls for pure."""
    for node in _calls(gm):
        if not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


def merges_equal_effects(gm):
    """Broken: CSE of effectful calls on the same value."""
    seen: dict[fx.Node, fx.Node] = {}
    for node in _calls(gm):
        if node.args[0] in seen:
            node.replace_all_uses_with(seen[node.args[0]])
            gm.graph.erase_node(node)
        else:
            seen[node.args[0]] = node
    gm.recompile()
    return gm


@pytest.mark.parametrize("broken", ["drops_unused_effects", "merges_equal_effects"])
def test_fires_on_passes_that_drop_or_merge_effectful_calls(drawn, broken):
    pass_fn = load_pass(f"{__file__}:{broken}", load_pass("dce").contract)
    candidates = [c for c in drawn if len(_calls(c.gm)) >= 2]
    assert any("effects_lost" in {f.kind for f in verify(c, pass_fn)} for c in candidates), broken


@pytest.mark.parametrize("name", ["dce", "identity"])
def test_quiet_on_correct_passes(drawn, name):
    assert not [f for c in drawn for f in verify(c, load_pass(name)) if f.oracle == "effects"]


def _twice(x):
    torch.ops.aten._print("step")
    y = x.sin()
    torch.ops.aten._print("step")
    return y


def test_csepass_merges_calls_of_side_effectful_operators():
    """torch's own ``aten::_print``, twice with the same text, traced as torch.export traces
    it: CSEPass keeps one call though ``Node.is_impure()`` says True for both."""
    gm = make_fx(_twice, pre_dispatch=True)(torch.randn(3))
    prints = gm.graph.find_nodes(op="call_function", target=torch.ops.aten._print.default)
    assert len(prints) == 2 and all(n.is_impure() for n in prints)
    result = CSEPass(get_CSE_banned_ops())(gm).graph_module
    if len(result.graph.find_nodes(op="call_function", target=torch.ops.aten._print.default)) == 2:
        raise AssertionError(FIXED.format(known=KNOWN))


class LoggedTwice(torch.nn.Module):
    def forward(self, x):
        return torch.ops.fxfuzz.logged(x) + torch.ops.fxfuzz.logged(x).cos()


def test_the_oracles_find_the_merge_as_a_known_bucket():
    case = from_module(LoggedTwice(), (torch.randn(3),))
    lost = [f for f in verify(case, load_pass("cse")) if f.kind == "effects_lost"]
    assert lost, "CSEPass keeps both calls now"
    assert bucket_id(lost[0]) in load_known(KNOWN)
