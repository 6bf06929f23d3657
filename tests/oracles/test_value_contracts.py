"""The contracts that excuse rounding or views (``approximates``, ``quantizes``, ``functional``)
and ``post_grad``'s domain: each fires on a pass broken in its way and stays quiet on correct
ones, and the exact contracts still fire where these excuse (so the excuse is what quiets them)."""

from __future__ import annotations

import handmade as hm
import pytest
import torch
from fxfuzz.core.calls import example_inputs, exported_program, given_inputs, lifted, module_form
from fxfuzz.core.case import GraphCase
from fxfuzz.core.contract import APPROXIMATES, FUNCTIONAL, POST_GRAD, QUANTIZES, REFINES, check_domain
from fxfuzz.core.errors import UsageError
from fxfuzz.core.passes import default_domain, load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.bounds import quantization_steps
from fxfuzz.strategies import from_module
from fxfuzz.strategies.builder import GraphBuilder
from paths import HELPERS
from torch.export.graph_signature import InputKind

aten = torch.ops.aten


def kinds(findings):
    return {f.kind for f in findings}


# --- approximates ---------------------------------------------------------------------------


def sum_of_three_case() -> GraphCase:
    """(a + b) + c on float32 values whose sum rounds differently in the other order."""
    b = GraphBuilder(grad_mode=False)
    g = torch.Generator().manual_seed(0)
    xs = [
        b.placeholder(n, torch.randn(64, generator=g) * 10 ** (i * 3), InputKind.USER_INPUT)
        for i, n in enumerate("abc")
    ]
    gm, sig = b.finish([b.call(aten.add.Tensor, [b.call(aten.add.Tensor, [xs[0], xs[1]]), xs[2]])])
    return GraphCase(gm, sig, tuple(b.inputs), ambient_grad=False)


def _rewired(gm, make):
    """Replace the graph's one output value by ``make(graph, placeholders)``."""
    out = gm.graph.output_node()
    ps = list(gm.graph.find_nodes(op="placeholder"))
    with gm.graph.inserting_before(out):
        new = make(gm.graph, ps)
    out.args = ((new,),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def reassociates(gm, sig):
    """a + (b + c): a correct rewrite that rounds otherwise."""
    return _rewired(
        gm, lambda g, p: g.call_function(aten.add.Tensor, (p[0], g.call_function(aten.add.Tensor, (p[1], p[2]))))
    ), sig


def scales_by_a_thousandth(gm, sig):
    """(a + b + c) * 1.001: a change of value far beyond any rounding."""

    def make(g, p):
        total = g.call_function(aten.add.Tensor, (g.call_function(aten.add.Tensor, (p[0], p[1])), p[2]))
        return g.call_function(aten.mul.Tensor, (total, 1.001))

    return _rewired(gm, make), sig


def raises(gm, sig):
    """A result that raises where the original succeeds (a shape error)."""
    return _rewired(
        gm, lambda g, p: g.call_function(aten.add.Tensor, (p[0], g.call_function(aten.view.default, (p[1], [8, 8]))))
    ), sig


def test_reassociation_changes_bits_so_refines_fires():
    assert "value_mismatch" in kinds(verify(sum_of_three_case(), reassociates, REFINES))


def test_approximates_is_quiet_on_a_reassociating_rewrite():
    assert verify(sum_of_three_case(), reassociates, APPROXIMATES) == []


@pytest.mark.parametrize(
    ("broken", "kind"), [(scales_by_a_thousandth, "value_mismatch")], ids=lambda x: getattr(x, "__name__", x)
)
def test_approximates_fires_beyond_its_tolerance(broken, kind):
    assert kind in kinds(verify(sum_of_three_case(), broken, APPROXIMATES))


def test_approximates_fires_on_a_result_that_raises_more():
    """A view to a size the input does not have: the result raises, the original does not."""
    found = verify(sum_of_three_case(), raises, APPROXIMATES)
    assert any(f.kind == "raises_differently" and f.details["original"] is None for f in found)


def products_case(op) -> GraphCase:
    """``op`` (``mm`` or ``linear`` with a bias) on float32 values with 16 products a row,
    whose sums round otherwise in another order."""
    b = GraphBuilder(grad_mode=False)
    g = torch.Generator().manual_seed(0)
    x = b.placeholder("x", torch.randn(4, 16, generator=g), InputKind.USER_INPUT)
    if op is aten.mm.default:
        args = [x, b.placeholder("w", torch.randn(16, 8, generator=g), InputKind.USER_INPUT)]
    else:
        w = b.placeholder("w", torch.randn(8, 16, generator=g), InputKind.USER_INPUT)
        args = [x, w, b.placeholder("bias", torch.randn(8, generator=g), InputKind.USER_INPUT)]
    gm, sig = b.finish([b.call(op, args)])
    return GraphCase(gm, sig, tuple(b.inputs), ambient_grad=False)


@pytest.mark.parametrize("op", [aten.mm.default, aten.linear.default], ids=str)
def test_the_false_alarm_runs_reassociating_pass_changes_bits_and_approximates_excuses_it(op):
    """The correct pass of ``approximates``'s false-alarm run (docs/history.md) decomposes
    ``mm`` and ``linear`` into sums of products as Inductor's ``decompose_mm`` does: the bits
    change (``refines`` fires), the contract excuses it."""
    spec = f"{HELPERS}/rounding_passes.py:reassociates"
    assert "value_mismatch" in kinds(verify(products_case(op), load_pass(spec, REFINES)))
    assert verify(products_case(op), load_pass(spec)) == []


# --- quantizes ------------------------------------------------------------------------------


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1.0


def linear_case() -> GraphCase:
    return from_module(Linear(), (torch.randn(5, 8, generator=torch.Generator().manual_seed(1)),))


@pytest.mark.parametrize("name", ["pt2e_x86", "pt2e_xnnpack", "pt2e_x86_qat"])
def test_quantizes_is_quiet_on_real_pt2e_and_refines_fires(name):
    """The real flows quantize the linear (dequantize calls in the result) and change its
    values by rounding: bitwise, a value_mismatch; within the bound, nothing."""
    case = linear_case().undifferentiated()
    with given_inputs(case.inputs):
        gm, _ = load_pass(name)(case.copy().gm, case.signature)
    assert quantization_steps(gm) > 0
    assert hm.unknown(verify(linear_case(), load_pass(name)), name) == []
    assert "value_mismatch" in kinds(verify(linear_case(), load_pass(name), REFINES))


def off_by_many_steps(gm, sig):
    """The real X86 flow, then every dequantize of an activation reads its zero point eight
    steps off: each value it gives back is off by eight steps."""
    gm, sig = load_pass("pt2e_x86")(gm, sig)
    for node in gm.graph.nodes:
        if node.target is torch.ops.quantized_decomposed.dequantize_per_tensor.default:
            node.args = (node.args[0], node.args[1], node.args[2] + 8, *node.args[3:])
    gm.recompile()
    return gm, sig


def test_quantizes_fires_on_a_convert_off_by_more_than_the_step():
    assert "value_mismatch" in kinds(verify(linear_case(), off_by_many_steps, QUANTIZES))


def drops_the_buffer_update(gm, sig):
    """The real X86 flow, then the in-place update of the buffer is taken out."""
    gm, sig = load_pass("pt2e_x86")(gm, sig)
    for node in list(gm.graph.nodes):
        if node.target is aten.add_.Tensor:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()
    return gm, sig


class Counting(Linear):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x):
        y = self.lin(x)
        self.seen.add_(1.0)
        return y


def test_quantizes_judges_effects_exactly():
    """A buffer's in-place update is no rounding: dropping it is found under quantizes."""
    case = from_module(Counting(), (torch.randn(5, 8),))
    assert hm.unknown(verify(case, load_pass("pt2e_x86")), "pt2e_x86") == []
    assert "value_mismatch" in kinds(verify(case, drops_the_buffer_update, QUANTIZES))


# --- functional -----------------------------------------------------------------------------


class Views(torch.nn.Module):
    def forward(self, x):
        return x.view(6), x.t(), x * 2


def views_case() -> GraphCase:
    """Outputs that are views of the input, lowered as Edge's caller has them (run_decompositions)."""
    ep = torch.export.export(Views(), (torch.randn(2, 3),)).run_decompositions()
    gm, sig = ep.graph_module, ep.graph_signature
    return GraphCase(gm, sig, (torch.randn(2, 3),), ambient_grad=True, domain="aten")


def test_view_copy_breaks_aliasing_so_refines_fires():
    assert "aliasing_mismatch" in kinds(verify(views_case(), load_pass("view_copy"), REFINES))


def test_functional_is_quiet_on_the_real_view_copy_pass():
    assert load_pass("view_copy").contract is FUNCTIONAL
    assert verify(views_case(), load_pass("view_copy")) == []


def view_copy_then_doubles(gm, sig):
    gm, sig = load_pass("view_copy")(gm, sig)
    out = gm.graph.output_node()
    first = out.args[0][0]
    with gm.graph.inserting_before(out):
        doubled = gm.graph.call_function(aten.mul.Tensor, (first, 2))
    out.args = ((doubled, *out.args[0][1:]),)
    gm.recompile()
    return gm, sig


def test_functional_fires_on_a_changed_value():
    assert "value_mismatch" in kinds(verify(views_case(), view_copy_then_doubles, FUNCTIONAL))


class UpdatesInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x.view(6) * 3


def drops_the_input_update(gm, sig):
    """Edge's pass, then the write-back of the updated input (a mutated-input output) reads
    the input as it came in."""
    gm, sig = load_pass("view_copy")(gm, sig)
    out = gm.graph.output_node()
    placeholder = next(iter(gm.graph.find_nodes(op="placeholder")))
    out.args = ((placeholder, *out.args[0][1:]),)
    gm.recompile()
    return gm, sig


def test_functional_fires_on_a_lost_in_place_effect():
    ep = torch.export.export(UpdatesInput(), (torch.randn(2, 3),)).run_decompositions()
    case = GraphCase(ep.graph_module, ep.graph_signature, (torch.randn(2, 3),), ambient_grad=True, domain="aten")
    assert verify(case, load_pass("view_copy")) == []
    assert verify(case, drops_the_input_update, FUNCTIONAL)


# A correct view-to-copy pass, declared functional.
VIEWS_TO_COPIES = f"{HELPERS}/dialect_passes.py:views_to_copies"


class StridedSum(torch.nn.Module):
    def forward(self, x):
        return (x - x.unsqueeze(1)).transpose(0, 1).sum(1)


def test_a_reduction_over_a_view_made_a_copy_rounds_otherwise_within_functional():
    """A copy has other strides than the view it replaces, so a sum over it adds up in another
    order (its false-alarm run drew this, 2026-11-28): refines reports the bits, functional
    compares within rounding, and still fires on a doubled value (above)."""
    x = torch.randn(8, generator=torch.Generator().manual_seed(0)) * 10
    case = from_module(StridedSum(), (x,))
    copies = load_pass(VIEWS_TO_COPIES)
    assert "value_mismatch" in kinds(verify(case, copies, REFINES))
    assert verify(case, copies) == []


class SquaredSelect(torch.nn.Module):
    def forward(self, x):
        s = x.select(0, 1)
        return s * s


def test_backward_after_an_input_update_is_aliasing_functional_does_not_judge():
    """The graph saves a view of its input for backward; updated in place after the forward,
    under ``allow_mutation_on_saved_tensors``, backward reads the update through the view and
    not through the copy a dialect pass makes (its false-alarm run drew this at its 15,830th
    example, 2026-11-28): refines reports it, functional leaves it to the aliasing it does not
    judge."""
    case = from_module(SquaredSelect(), (torch.randn(2, requires_grad=True),))
    copies = load_pass(VIEWS_TO_COPIES)
    assert "inplace_after_forward_allow_mutation_grad_value_mismatch" in kinds(verify(case, copies, REFINES))
    assert verify(case, copies) == []


class NoGradView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        with torch.no_grad():
            v = self.w.view(-1)
        return v, v + v, x * 2


def copies_then_detaches(gm, sig):
    """Views made copies, then the last output detached: a lost gradient, which no contract
    excuses."""
    gm = load_pass(VIEWS_TO_COPIES)(gm, sig)[0]
    out = gm.graph.output_node()
    with gm.graph.inserting_before(out):
        last = gm.graph.call_function(aten.detach.default, (out.args[0][-1],))
    out.args = ((*out.args[0][:-1], last),)
    gm.recompile()
    return gm, sig


def test_a_view_made_with_grad_off_and_copied_is_excused_by_functional_alone():
    """Eager gives a parameter's view made under no_grad the parameter's requires_grad (True)
    and no grad_fn, and what is computed from it with grad on requires grad too; the copy made
    there requires none. A backward from either reaches no input: the flag is the view's,
    which functional does not judge (its false-alarm run drew both, 2026-11-28); refines still
    reports it, and functional a gradient lost otherwise."""
    case = from_module(NoGradView(), (torch.randn(3, requires_grad=True),))
    assert any(n.target is aten.view.default for n in case.gm.graph.nodes), case.gm.code
    copies = load_pass(VIEWS_TO_COPIES)
    assert copies.contract is FUNCTIONAL  # as it declares
    assert {f.message for f in verify(case, copies, REFINES)} >= {
        "output 0: requires_grad True became False",
        "output 1: requires_grad True became False",
    }
    assert verify(case, copies) == []
    assert "requires_grad_mismatch" in kinds(verify(case, copies_then_detaches, FUNCTIONAL))


# --- post_grad's domain -----------------------------------------------------------------------


@pytest.mark.parametrize("domain", ["export", "adversarial", "functional", "both"])
def test_post_grad_refuses_domains_with_grad_toggles(domain):
    with pytest.raises(UsageError, match=f"contract post_grad cannot judge --domain {domain}: .* use --domain aten"):
        check_domain(POST_GRAD, domain)
    check_domain(POST_GRAD, "aten")
    check_domain(REFINES, domain)


def test_post_grad_given_to_a_pass_of_the_export_domain_draws_from_aten():
    assert default_domain(load_pass("identity", POST_GRAD), "export") == "aten"
    assert default_domain(load_pass("identity"), "export") == "export"


def test_the_cli_refuses_post_grad_on_the_export_domain_in_one_line(tmp_path, refused):
    argv = ["run", "--pass", "identity", "--contract", "post_grad", "--domain", "export", "--max-examples", "1"]
    line = refused([*argv, "--no-db", "--report-dir", str(tmp_path / "r")])
    assert "contract post_grad cannot judge --domain export" in line
    assert not (tmp_path / "r").exists()


# --- the public ExportedProgram builder -------------------------------------------------------


def untouched(gm, sig):
    """The module form pt2e takes, handed back as it is."""
    form = module_form(gm, sig, example_inputs())
    return lifted(form, form.model, sig)


def test_module_form_handed_back_untouched_means_what_the_case_does():
    case = from_module(Counting(), (torch.randn(5, 8),))
    assert verify(case, untouched) == []
    with given_inputs(case.inputs):
        gm, sig = untouched(case.copy().gm, case.signature)
    assert [s.arg.name for s in sig.input_specs] == [n.name for n in gm.graph.find_nodes(op="placeholder")]


def test_the_builder_copies_only_when_asked():
    case = linear_case()
    code = case.gm.code
    exported_program(case.gm, case.signature, case.inputs, copy=True).run_decompositions()
    assert case.gm.code == code
    work = case.copy()
    assert exported_program(work.gm, work.signature).graph is work.gm.graph


def test_quantizes_judges_only_the_inputs_it_calibrated_on():
    """A case with other sizes: the calibrated result is run at the traced sizes alone."""
    from fxfuzz.oracles.checks import Needs, Observed

    case = linear_case().undifferentiated()
    case.sizes = ({"s0": 7},)
    with given_inputs(case.inputs):
        gm, sig = load_pass("pt2e_x86")(case.copy().gm, case.signature)
    observed = Observed(case, load_pass("pt2e_x86"), gm, sig, QUANTIZES, "cpu", 0.0)
    observed.build(Needs.REFERENCE | Needs.RESULT | Needs.OTHER_SIZES)
    assert observed.others == [] and observed.traced is not None


def test_a_contract_run_with_grad_off_draws_cases_traced_with_grad_off():
    """quantizes runs its graphs with grad off: its cases are traced so (their toggles then
    restore the mode they run under); generic contracts keep drawing the ambient mode, and the
    aten domain, whose lowering bakes toggles in, is drawn as ever."""
    from fxfuzz.core.passes import generation_ambient
    from fxfuzz.strategies import graph_cases
    from hypothesis import HealthCheck, given, settings

    assert generation_ambient(load_pass("pt2e_x86")) is False
    assert generation_ambient(load_pass("identity", POST_GRAD)) is False
    assert generation_ambient(load_pass("identity")) is None
    seen = []

    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(graph_cases(domain="export", ambient=generation_ambient(load_pass("pt2e_x86"))))
    def drawn(case):
        seen.append(case.ambient_grad)

    drawn()
    assert seen and not any(seen)


def test_the_plugin_refuses_post_grad_on_the_export_domain():
    from fxfuzz.pytest_plugin import _domain

    class Config:
        def getoption(self, name):
            return "export" if name == "fxfuzz_domain" else None

    with pytest.raises(pytest.UsageError, match="--fxfuzz-domain: contract post_grad cannot judge --domain export"):
        _domain(Config(), load_pass("identity", POST_GRAD))
