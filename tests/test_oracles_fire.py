"""Each oracle family fires on a pass broken in its way, and stays quiet on correct passes."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings

import broken_passes as bp
from fuzz.passes import load_pass
from handmade import no_grad_region_case
from oracles import verify
from oracles.contract import NONE
from strategies import graph_cases

REAL = load_pass("set_grad")
IDENTITY = load_pass("identity")


def kinds(findings):
    return {(f.oracle, f.kind) for f in findings}


@pytest.mark.parametrize("ambient", [True, False])
def test_correct_passes_are_clean_on_handmade_case(ambient):
    case = no_grad_region_case(ambient)
    assert verify(case, REAL) == []
    assert verify(case, IDENTITY) == []


@pytest.mark.parametrize(
    "broken, expected",
    [
        (bp.crashes, ("crash", "pass_raised")),
        (bp.leaves_toggles, ("structure", "leftover_call")),
        (bp.breaks_lint, ("structure", "lint_failed")),
        (bp.renames_placeholder, ("signature", "input_names_mismatch")),
        (bp.drops_toggles, ("equivalence", "requires_grad_mismatch")),
        (bp.sin_to_cos, ("equivalence", "value_mismatch")),
        (bp.wrong_sin_grad, ("gradients", "grad_value_mismatch")),
    ],
)
@pytest.mark.parametrize("ambient", [True, False])
def test_oracle_fires_on_broken_pass(broken, expected, ambient):
    findings = verify(no_grad_region_case(ambient), broken)
    assert expected in kinds(findings), findings


def test_wrong_grad_is_a_gradients_finding_only():
    """The planted gradient bug keeps forward values bit-identical, so only gradients fire."""
    oracles = {f.oracle for f in verify(no_grad_region_case(True), bp.wrong_sin_grad)}
    assert oracles == {"gradients"}


def test_crash_keeps_exception_type_and_frame():
    (f,) = verify(no_grad_region_case(), bp.crashes)
    assert f.details["exception"] == "RuntimeError"
    assert "broken_passes.py" in f.details["frame"] and f.details["frame"].endswith(":crashes")


def test_identity_without_contract_is_clean_even_with_toggles():
    assert verify(no_grad_region_case(), bp.leaves_toggles, contract=NONE) == []


@pytest.mark.parametrize(
    "broken, oracle",
    [
        (bp.drops_toggles, "equivalence"),
        (bp.wrong_sin_grad, "gradients"),
        (bp.renames_placeholder, "signature"),
        (bp.leaves_toggles, "structure"),
    ],
)
def test_generated_cases_reach_each_planted_bug(broken, oracle):
    """Generation alone, without a hand-made case, finds every planted bug."""
    case = find(
        graph_cases(),
        lambda c: any(f.oracle == oracle for f in verify(c, broken)),
        settings=settings(max_examples=2000, database=None, deadline=None),
    )
    assert any(f.oracle == oracle for f in verify(case, broken))


@settings(max_examples=150)
@given(graph_cases())
def test_real_pass_is_equivalent(case):
    assert verify(case, REAL) == []


@settings(max_examples=60)
@given(graph_cases())
def test_identity_pass_is_equivalent(case):
    assert verify(case, IDENTITY) == []
