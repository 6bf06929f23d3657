"""Contracts select the checks: each is proven twice, firing on a pass broken in the way it
judges and quiet on correct passes. The passes here are ``gm -> gm`` functions, wrapped to
hand the signature through unchanged."""

from __future__ import annotations

import functools
import os

import handmade as hm
import pytest
import torch
from fxfuzz.core.contract import (
    APPROXIMATES,
    AUTOCAST,
    CONTRACTS,
    FUNCTIONAL,
    MEANING,
    POST_GRAD,
    QUANTIZES,
    REFINES,
    SET_GRAD,
    contract_by_name,
    union,
)
from fxfuzz.core.errors import UsageError
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.report.markdown import render_markdown
from fxfuzz.report.schema import Report
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.builder import GraphBuilder
from handmade import report_with
from hypothesis import HealthCheck, Phase, given, seed, settings
from paths import DATA
from torch.export.graph_signature import InputKind

aten = torch.ops.aten
TOGGLE = torch._C._set_grad_enabled


def gm_to_gm(fn):
    """``fn(gm) -> gm`` as the ``(gm, sig) -> (gm, sig)`` shape verify calls."""

    @functools.wraps(fn)
    def wrapped(gm, sig):
        out = fn(gm)
        out.recompile()
        return out, sig

    return wrapped


def _calls(gm, target):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


@gm_to_gm
def identity(gm):
    return gm


@gm_to_gm
def renames_nodes(gm):
    for n in list(gm.graph.nodes):
        if n.op != "output":
            n._rename(f"renamed_{n.name}")
    return gm


@gm_to_gm
def dead_code_eliminated(gm):
    gm.graph.eliminate_dead_code()
    return gm


@gm_to_gm
def drops_a_toggle(gm):
    gm.graph.erase_node(_calls(gm, TOGGLE)[0])
    return gm


@gm_to_gm
def moves_an_op_across_a_toggle(gm):
    """The first computation after the first toggle, moved in front of it."""
    toggle = _calls(gm, TOGGLE)[0]
    toggle.prepend(
        next(n for n in toggle.graph.nodes if n > toggle and n.op == "call_function" and n.target is not TOGGLE)
    )
    return gm


def _merge_equal_calls(gm, across_toggles):
    """Common subexpressions: a call with the target and arguments of an earlier one is
    replaced by it (``across_toggles``: blind to grad-mode toggles, as a naive CSE is)."""
    seen = {}
    for n in list(gm.graph.nodes):
        if n.op != "call_function":
            continue
        if n.target is TOGGLE:
            if not across_toggles:
                seen = {}
            continue
        key = (n.target, n.args, tuple(sorted(n.kwargs.items())))
        if key in seen:
            n.replace_all_uses_with(seen[key])
            gm.graph.erase_node(n)
        else:
            seen[key] = n
    return gm


merges_across_toggles = gm_to_gm(functools.partial(_merge_equal_calls, across_toggles=True))
merges_within_regions = gm_to_gm(functools.partial(_merge_equal_calls, across_toggles=False))


def _case(build, ambient=True):
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.tensor([0.3, -1.2, 2.5, 0.7], requires_grad=True), InputKind.USER_INPUT)
    return hm._case(b, build(b, x), ambient)


def sin_twice_across_a_toggle_case(ambient=True):
    """sin(x) under the ambient mode, then the same call under the other: equal calls in two
    regions."""

    def build(b, x):
        a = b.call(aten.sin.default, [x])
        b.set_grad(not ambient)
        c = b.call(aten.sin.default, [x])
        b.set_grad(ambient)
        return [b.call(aten.mul.Tensor, [a, x]), c]

    return _case(build, ambient)


def sin_twice_case(ambient=True):
    """Two equal sin(x) in one region, each used by its own output: a correct CSE merges them."""

    def build(b, x):
        a = b.call(aten.sin.default, [x])
        c = b.call(aten.sin.default, [x])
        return [b.call(aten.mul.Tensor, [a, x]), b.call(aten.mul.Tensor, [c, c])]

    return _case(build, ambient)


def dead_sin_case(ambient=True):
    """A dead sin(x): it saves x for a backward nobody runs."""

    def build(b, x):
        b.call(aten.sin.default, [x])
        return [b.call(aten.cos.default, [x])]

    return _case(build, ambient)


def kinds(findings):
    return {f.kind for f in findings}


# --- lookup -----------------------------------------------------------------------------


def test_contracts_are_found_by_name_and_an_unknown_name_is_a_usage_error():
    names = ("meaning", "refines", "post_grad", "approximates", "quantizes", "functional", "set_grad", "autocast")
    assert [contract_by_name(n) for n in names] == [
        MEANING,
        REFINES,
        POST_GRAD,
        APPROXIMATES,
        QUANTIZES,
        FUNCTIONAL,
        SET_GRAD,
        AUTOCAST,
    ]
    assert tuple(CONTRACTS) == names
    with pytest.raises(
        UsageError,
        match="unknown contract 'bogus': expected one of meaning, refines, post_grad, approximates, quantizes, functional, set_grad, autocast",
    ):
        contract_by_name("bogus")


def test_a_pass_fxfuzz_does_not_know_is_held_to_meaning_and_says_so(tmp_path):
    (tmp_path / "mine.py").write_text("def p(gm, sig):\n    return gm, sig\n")
    spec = f"{tmp_path / 'mine.py'}:p"
    unknown = load_pass(spec)
    assert unknown.contract is MEANING and unknown.contract_source == "default"
    assert load_pass("set_grad").contract is SET_GRAD and load_pass("set_grad").contract_source == "registered"
    assert load_pass("broken_passes:crashes").contract_source == "declared"
    given_ = load_pass(spec, REFINES)
    assert given_.contract is REFINES and given_.contract_source == "given"
    assert load_pass("identity+set_grad").contract_source == "registered"
    assert load_pass(f"identity+{spec}").contract_source == "default"


# --- meaning and refines fire on passes broken across a toggle --------------------------

BROKEN = [
    (drops_a_toggle, hm.no_grad_region_case),
    (moves_an_op_across_a_toggle, hm.no_grad_region_case),
    (merges_across_toggles, sin_twice_across_a_toggle_case),
]


@pytest.mark.parametrize("contract", [MEANING, REFINES], ids=lambda c: c.name)
@pytest.mark.parametrize("broken, make", BROKEN, ids=lambda v: getattr(v, "__name__", ""))
def test_a_pass_broken_across_a_grad_toggle_is_found(broken, make, contract):
    found = kinds(verify(make(), broken, contract))
    assert found & {"requires_grad_mismatch", "grad_fn_mismatch", "grad_presence_mismatch", "grad_value_mismatch"}, (
        found
    )


# --- and stay quiet on correct passes ---------------------------------------------------

CASES = [
    hm.no_grad_region_case,
    hm.view_output_case,
    hm.buffer_update_case,
    hm.pytree_case,
    hm.independent_outputs_case,
    sin_twice_across_a_toggle_case,
    dead_sin_case,
]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ambient", [True, False])
@pytest.mark.parametrize(
    "correct, contract",
    [(identity, MEANING), (renames_nodes, MEANING), (dead_code_eliminated, REFINES), (merges_within_regions, REFINES)],
    ids=["identity-meaning", "renames-meaning", "dce-refines", "cse_within_regions-refines"],
)
def test_a_correct_pass_draws_nothing(correct, contract, make, ambient):
    assert verify(make(ambient), correct, contract) == []


@pytest.mark.parametrize(
    "correct, contract",
    [(identity, MEANING), (renames_nodes, MEANING), (dead_code_eliminated, REFINES)],
    ids=["identity", "renames", "dce"],
)
def test_a_correct_pass_draws_nothing_on_drawn_graphs(correct, contract):
    @seed(35)
    @settings(
        max_examples=25, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(graph_cases(domain="adversarial"))
    def check(case):
        assert verify(case, correct, contract) == []

    check()


def test_the_same_correct_passes_are_held_to_internals_under_set_grad():
    """What meaning does not judge, the set-grad contract still does: the checks are chosen,
    not loosened."""
    assert "input_names_mismatch" in kinds(verify(hm.no_grad_region_case(), renames_nodes, SET_GRAD))
    assert "leftover_call" in kinds(verify(hm.no_grad_region_case(), identity, SET_GRAD))


# --- what refines allows and what it does not -------------------------------------------


@gm_to_gm
def saves_a_clone(gm):
    """sin reads a clone of x: backward saves the clone, so updating x in place after the
    forward no longer makes backward refuse (the result raises less)."""
    x = next(iter(gm.graph.find_nodes(op="placeholder")))
    for user in [u for u in x.users if u.target is aten.sin.default]:
        with gm.graph.inserting_before(user):
            copy = gm.graph.call_function(aten.clone.default, (x,))
        copy.meta.update(val=x.meta.get("val"))
        user.replace_input_with(x, copy)
    return gm


def _bypassed(target):
    """A pass replacing each call of ``target`` by its first argument, as removing a no-op does."""

    @gm_to_gm
    def bypasses(gm):
        for n in _calls(gm, target):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
        return gm

    return bypasses


# The way back: sin reads x itself, saves it, and an update that went through now raises.
drops_the_clone = _bypassed(aten.clone.default)


def cloned_sin_case():
    def build(b, x):
        return [b.call(aten.sin.default, [b.call(aten.clone.default, [x])])]

    return _case(build)


def plain_sin_case():
    return _case(lambda b, x: [b.call(aten.sin.default, [x])])


def test_raising_less_is_a_refinement_but_not_the_same_meaning():
    kind = "inplace_after_forward_raises_differently"
    assert kind in kinds(verify(plain_sin_case(), saves_a_clone, MEANING))
    assert verify(plain_sin_case(), saves_a_clone, REFINES) == []


def test_raising_otherwise_where_the_original_raised_is_a_refinement():
    """The cse row's campaign case (tests/data/refines): after an input's in-place update the
    original's backward raised one error and CSEPass's result the version-counter error. Where
    the original raises a refinement may do anything: quiet under refines, a finding under
    meaning."""
    from fxfuzz.core.passes import load_pass
    from fxfuzz.repro.files import load_repro

    kind = "inplace_after_forward_raises_differently"
    path = os.path.join(DATA, "refines", f"gradients-{kind}-131aab27.json")
    case = load_repro(path).case
    assert kind not in kinds(verify(case, load_pass("cse")))
    assert kind in kinds(verify(case, load_pass("cse"), MEANING))


def test_raising_more_is_no_refinement():
    kind = "inplace_after_forward_raises_differently"
    found = [f for f in verify(cloned_sin_case(), drops_the_clone, REFINES) if f.kind == kind]
    assert found and found[0].details["transformed"] == "raised the version-counter error"


# --- the two points docs/oracles.md decides on evidence ---------------------------------


@gm_to_gm
def merges_equal_calls_everywhere(gm):
    return _merge_equal_calls(gm, across_toggles=False)


def test_merging_equal_nodes_rounds_accumulated_gradients_differently():
    """Two uses of one merged sin(x) sum their cotangents before the sin's backward; two sin
    nodes each take theirs through it and autograd adds the results: other rounding. Bitwise
    (meaning) that is a gradient difference; refinement compares derivatives within the
    dtype's tolerance."""
    meaning = verify(sin_twice_case(), merges_equal_calls_everywhere, MEANING)
    assert "grad_value_mismatch" in kinds(meaning), kinds(meaning)
    assert verify(sin_twice_case(), merges_equal_calls_everywhere, REFINES) == []


def outputs_of_equal_calls_case():
    def build(b, x):
        return [b.call(aten.sin.default, [x]), b.call(aten.sin.default, [x])]

    return _case(build)


@pytest.mark.parametrize("contract", [MEANING, REFINES], ids=lambda c: c.name)
def test_merged_outputs_that_now_share_storage_are_found(contract):
    """Two outputs of equal calls merged into one node are one tensor: an in-place update of
    one now changes the other, which users observe."""
    found = kinds(verify(outputs_of_equal_calls_case(), merges_equal_calls_everywhere, contract))
    assert "aliasing_mismatch" in found, found


def test_the_report_says_when_fxfuzz_chose_the_contract():
    report = report_with([])
    assert "contract" not in render_markdown(Report.from_data(report))
    report.update(contract="meaning", contract_source="default")
    assert "Held to the `meaning` contract, the default for a pass fxfuzz does not know." in render_markdown(
        Report.from_data(report)
    )
    report.update(contract="set_grad", contract_source="registered")
    assert "Held to" not in render_markdown(Report.from_data(report))


# --- post_grad: refinement of a graph nobody differentiates -----------------------------


def test_post_grad_does_not_judge_what_autograd_would_do_with_the_result():
    """Dropping a clone makes backward save the input itself, so an update between forward
    and backward now raises: no refinement (test_raising_more_is_no_refinement), yet no
    post-grad graph is ever differentiated, so under post_grad nothing fires; nor where a
    naive CSE merges calls across a toggle, which changes only what requires grad."""
    assert verify(cloned_sin_case(), drops_the_clone, POST_GRAD) == []
    assert verify(sin_twice_across_a_toggle_case(), merges_across_toggles, POST_GRAD) == []
    assert "gradients" in {f.oracle for f in verify(sin_twice_across_a_toggle_case(), merges_across_toggles, REFINES)}


def test_post_grad_is_quiet_on_the_remove_noop_ops_campaign_case():
    """The case the remove_noop_ops row drew when it was held to refines (tests/data/post_grad):
    the clone fed to a map became the parameter, which map's backward then saved. Inductor
    runs the pass after AOTAutograd; held to its own contract, post_grad, nothing fires."""
    from fxfuzz.repro.files import load_repro

    path = os.path.join(
        DATA,
        "post_grad",
        "gradients-inplace_after_forward_raises_differently-914eb3d1.json",
    )
    case = load_repro(path).case
    assert load_pass("remove_noop_ops").contract is POST_GRAD
    assert verify(case, load_pass("remove_noop_ops")) == []
    assert "inplace_after_forward_raises_differently" in kinds(verify(case, load_pass("remove_noop_ops"), REFINES))


@gm_to_gm
def sin_becomes_cos(gm):
    for n in _calls(gm, aten.sin.default):
        n.target = aten.cos.default
    return gm


@gm_to_gm
def drops_buffer_updates(gm):
    """The buffer's in-place update that nothing reads, gone: an effect on an input lost."""
    for n in _calls(gm, aten.add_.Tensor):
        gm.graph.erase_node(n)
    return gm


# What remove_noop_ops does to ``aten.alias(x)`` returned (docs/known/remove_noop_ops.txt).
returns_the_input_for_its_view = _bypassed(aten.alias.default)


def alias_output_case(ambient=True, requires_grad=True):
    b = GraphBuilder(grad_mode=ambient)
    x = b.placeholder("x", torch.tensor([0.3, -1.2, 2.5, 0.7], requires_grad=requires_grad), InputKind.USER_INPUT)
    return hm._case(b, [b.call(aten.alias.default, [x])], ambient)


@pytest.mark.parametrize(
    "broken, make, kind",
    [
        (sin_becomes_cos, plain_sin_case, "value_mismatch"),
        (drops_buffer_updates, hm.buffer_update_case, "value_mismatch"),
        (returns_the_input_for_its_view, alias_output_case, "identity_mismatch"),
    ],
    ids=["values", "in_place_effects", "identity"],
)
def test_post_grad_judges_what_the_graph_computes(broken, make, kind):
    assert kind in kinds(verify(make(), broken, POST_GRAD))


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "correct", [identity, renames_nodes, dead_code_eliminated, merges_within_regions], ids=lambda f: f.__name__
)
def test_post_grad_is_quiet_on_correct_passes(correct, make):
    assert verify(make(), correct, POST_GRAD) == []


def test_a_pipeline_with_a_post_grad_pass_is_not_differentiated():
    assert not union([REFINES, POST_GRAD]).differentiated and union([REFINES, MEANING]).differentiated


@pytest.mark.parametrize("contract", [MEANING, REFINES, POST_GRAD], ids=lambda c: c.name)
def test_an_input_returned_for_its_view_is_found_once(contract):
    """Without autograd, an output that is the input itself where it was a view of it is the
    identity oracle's (a caller's ``t_()`` on the output now transposes the input); where the
    input requires grad, grad_fn presence differs too, and only that is said (one bucket)."""
    assert kinds(verify(alias_output_case(requires_grad=False), returns_the_input_for_its_view, contract)) == {
        "identity_mismatch"
    }
    with_grad = kinds(verify(alias_output_case(), returns_the_input_for_its_view, contract))
    assert with_grad == ({"identity_mismatch"} if contract is POST_GRAD else {"grad_fn_mismatch"})
    assert verify(alias_output_case(requires_grad=False), identity, contract) == []
