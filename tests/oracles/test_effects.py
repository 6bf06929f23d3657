"""The ordered-effects check (fxfuzz.oracles.effects): fxfuzz::logged's log is real, each kind
of execution keeps its own, and the check fires on passes that drop, merge, reorder or re-feed
effectful calls while staying quiet on the correct catalogue passes."""

from __future__ import annotations

import effect_passes as ep
import pytest
import torch
from effect_cases import BROKEN, MODULES, SwappableTwo, TwiceEqual, UnusedFirst, logged, lowered
from fxfuzz.core.case import GraphCase
from fxfuzz.core.contract import contract_by_name
from fxfuzz.core.custom_ops import EFFECT_LOG
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.effects import check_effects, compare_logs
from fxfuzz.oracles.execute import run_graph
from fxfuzz.oracles.semantics import Reference, observe
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, settings
from torch import fx


def found(case: GraphCase, pass_fn, contract=None) -> set[str]:
    return {f"{f.oracle}/{f.kind}" for f in verify(case, pass_fn, contract=contract)}


def test_logged_logs_each_call_in_order_and_tracing_logs_nothing():
    case = lowered(UnusedFirst)  # export and lowering trace with fake tensors: no effect
    x = case.inputs[1]
    run = run_graph(case.gm, case.inputs, True)
    assert run.ok and [t.tolist() for t in run.effects] == [x.tolist(), x.sin().tolist()]
    assert EFFECT_LOG == []  # moved into the run's own log, nothing left for the next


def test_an_execution_does_not_count_what_came_before():
    case = lowered(TwiceEqual)
    EFFECT_LOG.append(torch.ones(1))  # what a pass (or an earlier run) logged
    assert len(run_graph(case.gm, case.inputs, True).effects) == 2


@torch.fx.wrap
def log_grad(x):
    return LogGrad.apply(x)


class LogGrad(torch.autograd.Function):
    """The identity whose backward logs the gradient it passes on: an effect of backward only."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return logged(g)


def test_backward_effects_are_a_log_of_their_own():
    once = fx.symbolic_trace(lambda x: log_grad(x) * 3)
    twice = fx.symbolic_trace(lambda x: log_grad(log_grad(x)) * 3)
    x = torch.randn(3, requires_grad=True)
    ref = Reference(once, (x,), True, ["input 0 (x)"], "cpu")
    assert (len(ref.obs.run.effects), len(ref.obs.grads.effects)) == (0, 1)
    assert len(ref.obs.probe.first.effects) == 1  # the create_graph backward of the probe run
    findings = check_effects(ref, observe(twice, (x,), True), grads_exact=True)
    assert [(f.kind, f.details["where"]) for f in findings] == [("effects_added", "backward")]
    assert check_effects(ref, observe(once, (x,), True), grads_exact=True) == []


class Square(torch.autograd.Function):
    """x*x whose backward goes through ``log_grad``: that one's backward (in the double
    backward of the graph) logs, the forward and the first backward do not."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return log_grad(2 * x * g)


class SquareTwice(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return log_grad(log_grad(2 * x * g))


def test_double_backward_effects_are_a_log_of_their_own():
    once = fx.symbolic_trace(lambda x: square(x) * 3)
    twice = fx.symbolic_trace(lambda x: square_twice(x) * 3)
    x = torch.randn(3, requires_grad=True)
    ref = Reference(once, (x,), True, ["input 0 (x)"], "cpu")
    assert (len(ref.obs.run.effects), len(ref.obs.grads.effects), len(ref.obs.probe.second.effects)) == (0, 0, 1)
    findings = check_effects(ref, observe(twice, (x,), True), grads_exact=True)
    assert [(f.kind, f.details["where"]) for f in findings] == [("effects_added", "double backward")]


@torch.fx.wrap
def square(x):
    return Square.apply(x)


@torch.fx.wrap
def square_twice(x):
    return SquareTwice.apply(x)


@pytest.mark.parametrize(
    ("module", "broken", "kind"),
    [
        (UnusedFirst, ep.drops_unused_effect, "effects_lost"),
        (TwiceEqual, ep.merges_equal_effects, "effects_lost"),
        (SwappableTwo, ep.reorders_effects, "effects_reordered idempotence/second_application_changes_meaning"),
        # Negated again by a second application: the call sees its original value.
        (UnusedFirst, ep.logs_other_value, "effect_value_mismatch idempotence/second_application_changes_meaning"),
    ],
    ids=lambda p: getattr(p, "__name__", p),
)
@pytest.mark.parametrize("contract", ["meaning", "refines"])
def test_fires_on_a_pass_broken_on_effects_and_nothing_else_sees_it(module, broken, kind, contract):
    """Every value stays equal, so before the effects check these went unseen (a ``gm -> gm``
    pass, loaded as a user names one). A second application of the swap or the negation undoes
    it, which idempotence now sees in the effects too."""
    case = lowered(module)
    effects, *also = kind.split()
    assert found(case, load_pass(f"{BROKEN}:{broken.__name__}"), contract_by_name(contract)) == {
        f"effects/{effects}",
        *also,
    }


@pytest.mark.parametrize(
    ("broken", "kind"),
    [
        (ep.unwraps_then_drops_dead_effects, "idempotence/second_application_changes_meaning"),
        (ep.hides_effects_from_dce, "structure/dead_code_elimination_changes_meaning"),
    ],
    ids=lambda p: getattr(p, "__name__", p),
)
def test_later_runs_compare_effects_too(broken, kind):
    """The checks that run a graph again compare its effects: a second application, and a
    dead-code-eliminated copy, that lose an effect change no value."""
    findings = verify(lowered(UnusedFirst), load_pass(f"{BROKEN}:{broken.__name__}"))
    assert {f"{f.oracle}/{f.kind}" for f in findings} == {kind}
    assert "ordered effects became" in findings[0].message


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize(
    "grad", [(False, True), (True, True), (True, False)], ids=["plain", "requires_grad", "no_grad"]
)
@pytest.mark.parametrize("name", ["identity", "remove_effect_tokens", "aot_cse", "remove_noop_ops"])
def test_quiet_on_the_catalogue_passes(module, grad, name):
    case = lowered(module, *grad)
    assert not {k for k in found(case, load_pass(name)) if k.startswith("effects/")}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(graph_cases(domain="aten"))
def test_aot_cse_keeps_the_effects_of_drawn_cases(case):
    assert not [f for f in verify(case, load_pass("aot_cse")) if f.oracle == "effects"]


def test_aot_cse_keeps_equal_effectful_calls_apart_by_their_tokens():
    """fx_graph_cse hashes a call by target and arguments and ignores purity, but each
    with_effects call takes the token its predecessor returned: two equal calls of an effectful
    operator differ in their first argument and are never merged (docs/known-findings.md)."""
    from torch._functorch.compile_utils import fx_graph_cse

    case = lowered(TwiceEqual)
    assert len(fx_graph_cse(case.gm.graph).find_nodes(op="call_function", target=ep.WITH_EFFECTS)) == 2


def test_aot_cse_merges_equal_effectful_calls_once_the_tokens_are_gone():
    """The same two calls after torch.export's _remove_effect_tokens (what ``ep.module()``
    runs): nothing tells them apart, and fx_graph_cse merges them. No caller of torch's hands
    fx_graph_cse such a graph (AOTAutograd threads tokens again), so this is no torch defect,
    but the real pass shows the check firing on a merge of effects."""
    case = lowered(TwiceEqual)
    gm, sig = load_pass("remove_effect_tokens")(case.copy().gm, case.copy().signature)
    untokened = GraphCase(gm, sig, case.inputs, domain="aten")
    assert "with_effects" not in gm.code
    assert "effects/effects_lost" in found(untokened, load_pass("aot_cse"))


def test_compare_logs_tells_the_four_differences_apart():
    a, b = torch.zeros(2), torch.ones(2)
    assert compare_logs("forward", [a, b], [a, b], True) == []
    assert [f.kind for f in compare_logs("forward", [a, b], [b, a], True)] == ["effects_reordered"]
    assert [f.kind for f in compare_logs("forward", [a, b], [a], True)] == ["effects_lost"]
    assert [f.kind for f in compare_logs("forward", [a], [a, a], True)] == ["effects_added"]
    assert [f.kind for f in compare_logs("forward", [a, b], [a, b + 1e-7], True)] == ["effect_value_mismatch"]
    # Within tolerance where values are compared so (CUDA; derivatives under refinement).
    assert compare_logs("backward", [a, b], [a, b + 1e-7], False) == []


@pytest.mark.processes
def test_the_repro_of_an_effects_finding_runs_and_fails(tmp_path):
    """The saved repro pastes fxfuzz::logged's code (the with_effects call names it only as an
    argument) and fails on the lost effect twice: in its torch-only check, and in fxfuzz's
    oracles, which read the log the pasted operator writes."""
    import subprocess
    import sys

    from fxfuzz.core.identity import identify
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.repro.files import repro_document, write_repro

    case, spec = lowered(UnusedFirst), f"{BROKEN}:drops_unused_effect"
    (finding,) = verify(case, load_pass(spec))
    path = write_repro(
        str(tmp_path), repro_document("effects-effects_lost-0", finding.to_dict(), case_to_dict(case), identify(spec))
    )
    done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL equivalence: ordered effects: 2 calls of fxfuzz::logged became 1" in done.stdout, done.stdout
    assert "FAIL (fxfuzz oracles) [effects/effects_lost]" in done.stdout, done.stdout
