"""The aten domain (fxfuzz.strategies.forms): post-dispatch ATen graphs with effect tokens,
drawn and shrunk by Hypothesis, saved and loaded through the allowlisted serializer, judged
quietly for correct passes and loudly for a pass broken on the form."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import BOTH, DOMAIN_CHOICES, DOMAINS
from fxfuzz.core.errors import UntrustedError
from fxfuzz.core.passes import REGISTRY, load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, find, given, settings
from torch.export.graph_signature import InputKind, OutputKind

# Lowering costs about a second a case: few examples, no deadline.
FEW = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
ATEN = graph_cases(domain="aten")


class Logs(torch.nn.Module):
    def forward(self, x):
        torch.ops.fxfuzz.logged(x)
        return torch.ops.fxfuzz.logged(x.sin()).cos()


@pytest.fixture(scope="module")
def token_case() -> GraphCase:
    """What torch.export lowers for a module calling an effectful operator twice: a token in,
    two with_effects calls (one result used, one not), a token out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(Logs(), (torch.randn(3),)).run_decompositions()
    inputs = (torch.ops.prims._make_token.default(), torch.randn(3, requires_grad=True))
    return GraphCase(program.graph_module, program.graph_signature, inputs, domain="aten")


def test_aten_is_a_domain_a_user_can_name_and_both_keeps_the_pre_dispatch_ones():
    assert "aten" in DOMAINS and "aten" in DOMAIN_CHOICES
    assert BOTH == ("export", "adversarial")


@FEW
@given(graph_cases(domain="both"))
def test_both_never_draws_aten(case):
    assert case.domain in BOTH


@FEW
@given(ATEN)
def test_drawn_cases_are_lowered_graphs_that_run(case):
    assert case.domain == "aten"
    code = case.code()
    # After dispatch: no grad-mode or autocast toggles, nothing in place.
    assert "_set_grad_enabled" not in code and "autocast" not in code
    placeholders = [n for n in case.gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(case.signature.input_specs) == len(case.inputs)
    with torch.set_grad_enabled(case.ambient_grad):
        case.gm(*case.inputs)


@pytest.mark.slow
def test_effect_tokens_are_drawn_and_shrink():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = find(
            ATEN,
            lambda c: "with_effects" in c.code(),
            settings=settings(database=None, deadline=None, max_examples=200, derandomize=True),
        )
    assert [s.kind for s in case.signature.input_specs].count(InputKind.TOKEN) == 1
    assert [s.kind for s in case.signature.output_specs].count(OutputKind.TOKEN) == 1
    # Shrunk: one effectful call, next to at most a couple of other ops.
    assert case.code().count("with_effects(") == 1
    assert case.compute_nodes() <= 6


def test_a_token_case_survives_the_serializer(token_case):
    back = case_from_dict(json.loads(json.dumps(case_to_dict(token_case))))
    assert back.code() == token_case.code()
    assert back.domain == "aten"
    assert [(s.kind, s.arg) for s in back.signature.input_specs] == [
        (s.kind, s.arg) for s in token_case.signature.input_specs
    ]
    assert [(s.kind, s.arg) for s in back.signature.output_specs] == [
        (s.kind, s.arg) for s in token_case.signature.output_specs
    ]
    for a, b in zip(back.inputs, token_case.inputs):
        assert torch.equal(a, b) and a.requires_grad == b.requires_grad
    assert verify(back, load_pass("identity")) == []


@pytest.mark.parametrize(
    "target",
    [
        "builtins.eval",  # a Python callable outside the allowlist
        "higher_order::executorch_call_delegate",  # a higher-order op that runs foreign code
        "aten::from_file.default",  # an ATen op that reads any file
    ],
)
def test_a_hostile_effect_call_is_refused(token_case, target):
    """The op a saved with_effects call names is resolved through the allowlist like any
    target: a stored case cannot smuggle a callable in through it."""
    d = case_to_dict(token_case)
    node = next(n for n in d["graph"]["nodes"] if n["target"] == "higher_order::with_effects")
    node["args"]["tuple"][1] = {"callable": target}
    with pytest.raises(UntrustedError):
        case_from_dict(d)


def test_a_hostile_call_target_is_refused(token_case):
    d = case_to_dict(token_case)
    node = next(n for n in d["graph"]["nodes"] if n["target"] == "higher_order::with_effects")
    node["target"] = "os.system"
    with pytest.raises(UntrustedError):
        case_from_dict(d)


@pytest.mark.slow
@FEW
@given(ATEN)
def test_identity_is_quiet_on_the_form(case):
    assert verify(case, load_pass("identity")) == []


@pytest.mark.slow
@FEW
@given(ATEN)
def test_effect_token_removal_is_quiet_on_the_form(case):
    assert verify(case, load_pass("remove_effect_tokens")) == []


def test_effect_token_removal_does_its_job(token_case):
    """The row takes every with_effects call out, and hands the result back in the input's
    calling convention (a token in, a fresh token out, at the same positions)."""
    work = token_case.copy()
    gm, sig = load_pass("remove_effect_tokens")(work.gm, work.signature)
    assert "with_effects" not in gm.code and "fxfuzz.logged.default" in gm.code
    assert [s.kind for s in sig.input_specs] == [s.kind for s in token_case.signature.input_specs]
    assert [s.kind for s in sig.output_specs] == [s.kind for s in token_case.signature.output_specs]
    assert REGISTRY["remove_effect_tokens"].domain == "aten"


def stale_signature(gm, graph_signature):
    """Effect-token removal that hands back the signature it was given: the graph loses its
    token input and output, the signature still names them."""
    from fxfuzz.core.calls import on_program
    from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

    gm, _ = on_program(_remove_effect_tokens, gm, graph_signature)
    return gm, graph_signature


def unwired_result(gm, graph_signature):
    """Effect-token removal gone wrong: the uses of an effectful call's result read its new
    token instead."""
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.higher_order.with_effects):
        by_index = {user.args[1]: user for user in node.users}
        if 0 in by_index and 1 in by_index:
            by_index[1].replace_all_uses_with(by_index[0])
    gm.recompile()
    return gm, graph_signature


def test_the_oracles_fire_on_a_stale_signature(token_case):
    kinds = {f.kind for f in verify(token_case, stale_signature, contract=REGISTRY["identity"].contract)}
    assert kinds, "a graph that lost its token input while the signature kept it went unnoticed"


def test_the_oracles_fire_on_an_unwired_result(token_case):
    assert verify(token_case, unwired_result, contract=REGISTRY["identity"].contract)


def test_effect_token_removal_is_quiet_on_the_lowered_module(token_case):
    assert verify(token_case, load_pass("remove_effect_tokens")) == []
