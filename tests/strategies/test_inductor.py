"""Inductor's graph forms as domains (fxfuzz.strategies.inductor, fxfuzz.core.inductor): they
draw what torch.compile hands Inductor's passes, node for node; an identity pass on them finds
nothing; passes broken in the form's own ways are found; the pattern entries a pass applies are
counted."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import torch
from faithful_inductor import differences, seeded_cases
from fxfuzz.core.choices import DOMAIN_CHOICES, INDUCTOR_FORMS
from fxfuzz.core.inductor import FROZEN, INFERENCE, JOINT, compile_to_form, counting_patterns, drain_reach
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, seed, settings
from torch import fx

# One worker draws the module's samples, each once (``_cases``): lowering a case is a
# torch.compile run.
pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.xdist_group("inductor_forms")]


@functools.cache
def _cases(form: str, count: int, at: int = 7) -> tuple:
    """``count`` cases of ``form`` drawn from seed ``at``, once per process (tests only read them)."""
    drawn: list = []

    @settings(max_examples=count, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @seed(at)
    @given(graph_cases(form))
    def draw(case) -> None:
        drawn.append(case)

    draw()
    return tuple(drawn)


def test_the_forms_are_domains_a_user_can_name():
    assert set(INDUCTOR_FORMS) <= set(DOMAIN_CHOICES)


@pytest.mark.slow
@pytest.mark.parametrize("form", [INFERENCE, JOINT])
def test_twenty_seeded_cases_equal_what_torch_compile_hands_inductor_node_for_node(form):
    """The graph of each case is the graph Inductor's joint_custom_pre_pass hook receives under
    torch.compile(backend="inductor") for the same callable: 20 cases lowered per form."""
    checked = 0
    for case in seeded_cases(300 if form == JOINT else 80):
        lowered, diff = differences(case, form)
        assert diff is None, diff
        checked += lowered
        if checked == 20:
            break
    assert checked == 20


@pytest.mark.slow
def test_the_inference_form_is_inductors_aten_prims_and_copy_epilogues():
    cases = _cases(INFERENCE, 30)
    targets = [str(n.target) for c in cases for n in c.gm.graph.nodes if n.op == "call_function"]
    assert any(t.startswith("prims.") for t in targets), "Inductor's decompositions give prims calls"
    assert "aten.copy_.default" in targets, "a mutated input is a copy_ epilogue"
    assert not any("_set_grad_enabled" in t for t in targets)
    assert all(c.domain == INFERENCE and not c.ambient_grad for c in cases)
    fake = next(
        n.meta["val"].fake_mode for c in cases for n in c.gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
    )
    assert fake.shape_env is not None


@pytest.mark.slow
def test_the_joint_form_takes_primals_and_tangents_and_returns_gradients():
    cases = _cases(JOINT, 30)
    assert cases
    for case in cases:
        names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
        assert any(n.startswith("tangents_") for n in names) and any(n.startswith("primals_") for n in names)
        forward = case.features["inductor_joint:forward_outputs"]
        assert len(case.signature.output_specs) > forward


@pytest.mark.slow
def test_the_frozen_form_reads_weights_as_constants():
    cases = _cases(FROZEN, 30)
    assert any(
        n.op == "get_attr" and str(n.target).startswith("_frozen_param") for c in cases for n in c.gm.graph.nodes
    )


@pytest.mark.slow
@pytest.mark.parametrize("form", INDUCTOR_FORMS)
def test_a_case_of_each_form_saves_and_loads_as_json(form):
    for case in _cases(form, 8, at=11)[:4]:
        back = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
        assert back.code() == case.code() and back.domain == form
        assert verify(back, load_pass("identity")) == []


@pytest.mark.slow
@pytest.mark.parametrize("form", INDUCTOR_FORMS)
def test_identity_finds_nothing_on_each_form(form):
    identity = load_pass("identity")
    for case in _cases(form, 8, at=11):
        assert verify(case, identity) == [], case


def drop_copy_epilogue(gm: fx.GraphModule, graph_signature: Any) -> tuple[fx.GraphModule, Any]:
    """Broken in the inference form's way: the copy_ that writes a mutated input back is gone."""
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder":
            node.replace_all_uses_with(node.args[1])
            gm.graph.erase_node(node)
    gm.recompile()
    return gm, graph_signature


def break_a_gradient(gm: fx.GraphModule, graph_signature: Any) -> tuple[fx.GraphModule, Any]:
    """Broken in the joint form's way: one is added to the last gradient output (the joint
    graph returns its forward outputs first)."""
    out = gm.graph.output_node()
    flat = list(out.args[0])
    at = max(i for i, v in enumerate(flat) if isinstance(v, fx.Node) and v.meta["val"].dtype.is_floating_point)
    with gm.graph.inserting_before(out):
        flat[at] = gm.graph.call_function(torch.ops.aten.add.Tensor, (flat[at], 1))
    out.args = (type(out.args[0])(flat),)
    gm.recompile()
    return gm, graph_signature


@pytest.mark.slow
def test_a_dropped_copy_epilogue_is_found():
    cases = [
        c for c in _cases(INFERENCE, 30)[:25] if any(n.target is torch.ops.aten.copy_.default for n in c.gm.graph.nodes)
    ]
    assert cases
    for case in cases:
        findings = verify(case, drop_copy_epilogue)
        assert findings, case
    assert all(verify(c, load_pass("identity")) == [] for c in cases)


@pytest.mark.slow
def test_a_broken_gradient_of_the_joint_graph_is_a_wrong_output():
    cases = [
        c
        for c in _cases(JOINT, 30)[:20]
        if c.features["inductor_joint:forward_outputs"] < len(c.signature.output_specs)
    ]
    found = 0
    for case in cases:
        grads = [
            n
            for n in case.gm.graph.output_node().args[0][case.features["inductor_joint:forward_outputs"] :]
            if isinstance(n, fx.Node)
        ]
        if not any(n.meta["val"].dtype.is_floating_point for n in grads):
            continue
        findings = verify(case, break_a_gradient)
        assert any(f.oracle == "equivalence" for f in findings), case
        found += 1
    assert found


def _patterned(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A permute pair (a pattern that replaces) and a float16 round trip (a pattern whose
    handler bails: the round trip is not pointless)."""
    a = x.to(torch.float16).to(torch.float32)
    c = torch.ops.aten.permute.default(torch.ops.aten.permute.default(a, [1, 0]), [1, 0])
    return (c @ y.t()).softmax(-1), y


def _patterned_graph() -> fx.GraphModule:
    with torch.no_grad():
        return compile_to_form(_patterned, [torch.randn(2, 3), torch.randn(4, 3)], INFERENCE).gm


def test_pattern_entries_applied_are_counted_by_list_and_entry():
    """Each application of a pattern entry counts as matched, and as replaced only where its
    handler changed the graph; nothing is counted outside counting_patterns, and draining
    leaves none behind."""
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes

    drain_reach()
    joint_graph_passes(_patterned_graph())
    assert drain_reach() == {}
    with counting_patterns():
        joint_graph_passes(_patterned_graph())
    counts = drain_reach()
    assert drain_reach() == {}
    pair = "pattern:joint_graph.early_patterns:joint_graph.pointless_permute_pair"
    convert = "pattern:joint_graph.patterns:joint_graph.pointless_convert"
    assert counts[f"{pair}:matched"] == counts[f"{pair}:replaced"] == 1
    assert counts[f"{convert}:matched"] == 1 and f"{convert}:replaced" not in counts


def apply_joint_passes_aside(gm: fx.GraphModule, graph_signature: Any) -> tuple[fx.GraphModule, Any]:
    """Leaves the case alone, and applies Inductor's joint passes to a graph they rewrite."""
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes

    joint_graph_passes(_patterned_graph())
    return gm, graph_signature


def test_a_campaign_reports_the_pattern_entries_its_pass_applied():
    from fxfuzz.campaign.engine import run_campaign
    from fxfuzz.core.settings import CampaignSettings

    result = run_campaign(
        apply_joint_passes_aside,
        CampaignSettings(max_examples=3, seed=3, domain=INFERENCE, budget_s=600, max_shrink_s=0),
    )
    key = "pattern:joint_graph.early_patterns:joint_graph.pointless_permute_pair:replaced"
    assert result.stats[key] == result.examples > 0, result.stats
