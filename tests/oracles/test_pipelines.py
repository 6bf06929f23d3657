"""Pipelines of registered passes, ``set_grad+X`` (X run on what export's set-grad pass hands
on): the contract a pipeline is held to, and the two buckets of the set_grad+dce triage
campaign that are not set_grad's alone (docs/known-findings.md, cases in tests/data/set_grad_dce)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from fxfuzz.core.known import load_known_files
from fxfuzz.core.passes import contract_of, domain_of, load_pass
from fxfuzz.oracles import apply_pass, verify
from fxfuzz.repro.files import load_repro
from handmade import FIXED
from paths import DATA, ROOT

DATA = os.path.join(DATA, "set_grad_dce")
SET_GRAD_DCE = load_pass("set_grad+dce")
MUTATED_BACKWARD = "inplace_after_forward_allow_mutation_raises_differently"


def _case(name):
    return load_repro(os.path.join(DATA, name)).case


def test_a_pipeline_promises_what_its_weakest_pass_does():
    """Meaning then refinement may raise less: the pipeline is held to refinement; its
    internals are judged only where every part promises them (DCE leaves set_grad's dead
    submodules in place: its campaign drew structure/unused_submodule 139 times); the calls
    set_grad removes stay removed. A pipeline with CSE draws functional graphs, as CSE needs."""
    for spec in ("set_grad+dce", "set_grad+cse"):
        contract = contract_of(load_pass(spec))
        assert contract.refines and not contract.internals and contract.eliminates, spec
    export = contract_of(load_pass("export"))  # set_grad+autocast: both keep meaning and form
    assert not export.refines and export.internals
    assert domain_of(load_pass("set_grad+cse")) == "functional"
    assert domain_of(load_pass("set_grad+dce")) == domain_of(load_pass("export")) == "export"


def test_dead_code_removed_after_set_grad_may_let_a_mutated_backward_through():
    """The campaign's case: eliminate_dead_code removes a dead computation that saved an input
    for backward, so the backward after that input's in-place update under
    allow_mutation_on_saved_tensors, which raised in the original, goes through. A refinement;
    held to meaning (as pipelines were before) it was reported."""
    case = _case(f"gradients-{MUTATED_BACKWARD}-6bd34295.json")
    assert MUTATED_BACKWARD not in {
        f.kind for f in verify(case, load_pass("set_grad"))
    }  # set_grad alone keeps the raise
    assert MUTATED_BACKWARD not in {f.kind for f in verify(case, SET_GRAD_DCE)}
    held_to_meaning = dataclasses.replace(contract_of(SET_GRAD_DCE), refines=False)
    assert MUTATED_BACKWARD in {f.kind for f in verify(case, SET_GRAD_DCE, held_to_meaning)}


def _inconsistent(gm):
    """Nodes whose users map leaves out a node that reads them."""
    return [
        (n.name, u.name) for n in gm.graph.nodes for u in gm.graph.nodes if n in u.all_input_nodes and u not in n.users
    ]


def test_dce_after_set_grad_crashes_on_the_users_map_set_grad_corrupts():
    """The campaign's 4-node case: set_grad's node_inline_ leaves ``add.users`` without
    ``add_1`` (the known def_use_inconsistent defect), and eliminate_dead_code, erasing the
    dead ``add_1``, fails to remove it from that map: a SystemError from torch's C code."""
    case = _case("crash-pass_raised-9a4e04cc.json")
    gm, _ = apply_pass(case, load_pass("set_grad"))
    assert ("add", "add_1") in _inconsistent(gm)
    assert "def_use_inconsistent" in {f.kind for f in verify(case, load_pass("set_grad"))}
    crash = [f for f in verify(case, SET_GRAD_DCE) if f.oracle == "crash"]
    assert crash and "SystemError" in crash[0].message and "_update_args_kwargs" in crash[0].message
    known = load_known_files(
        [os.path.join(ROOT, "fxfuzz-known.txt"), os.path.join(ROOT, "docs", "known", "set_grad+dce.txt")]
    )
    from fxfuzz.campaign.engine import bucket_id

    assert bucket_id(crash[0]) in known


def test_known_is_repeatable_and_later_files_add_to_earlier_ones(tmp_path):
    from fxfuzz.cli.main import build_parser

    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("crash-pass_raised-00000001 first\ncrash-pass_raised-00000002 first\n")
    second.write_text("crash-pass_raised-00000002 second\n")
    args = build_parser().parse_args(["run", "--known", str(first), "--known", str(second)])
    assert load_known_files(args.known) == {
        "crash-pass_raised-00000001": "first",
        "crash-pass_raised-00000002": "second",
    }
    gate = ["gate", "--candidate", "set_grad", "--known", str(first), "--known", str(second)]
    assert build_parser().parse_args(gate).known == [str(first), str(second)]


class PrintsUnderNoGrad(torch.nn.Module):
    def forward(self, x):
        y = x.neg()
        with torch.no_grad():
            torch.ops.aten._print("in no_grad")
        return y


def test_dce_after_set_grad_erases_an_effect_the_hop_hides():
    """torch.export's own program: the set-grad pass wraps the no_grad block in a
    wrap_with_set_grad_enabled whose result nothing reads, Node.is_impure() calls that HOP pure
    although its body prints, and eliminate_dead_code erases the print (the set_grad+dce
    campaign's effects_lost, known in docs/known/set_grad+dce.txt)."""
    gm = torch.export.export(PrintsUnderNoGrad(), (torch.randn(3),)).graph_module
    hops = gm.graph.find_nodes(op="call_function", target=torch.ops.higher_order.wrap_with_set_grad_enabled)
    assert len(hops) == 1 and not hops[0].users
    gm.graph.eliminate_dead_code()
    if gm.graph.find_nodes(op="call_function", target=torch.ops.higher_order.wrap_with_set_grad_enabled):
        raise AssertionError(FIXED.format(known="docs/known/set_grad+dce.txt"))


@pytest.mark.parametrize(
    ("name", "erased"),
    [("equivalence-raises_differently-bc45a4ea", "expand"), ("structure-lint_failed-5f2a1a94", "new_zeros")],
)
def test_dce_after_set_grad_erases_a_value_an_effectful_call_still_reads(name, erased):
    """The second campaign's cases (effectful calls drawn): set_grad leaves ``erased.users``
    without the logged call that reads it, so DCE, which keeps that impure call, erases its
    argument: the graph fails lint and raises when run."""
    from fxfuzz.campaign.engine import bucket_id

    case = _case(f"{name}.json")
    gm, _ = apply_pass(case, load_pass("set_grad"))
    assert (erased, "logged") in _inconsistent(gm)
    assert name in {bucket_id(f) for f in verify(case, SET_GRAD_DCE)}
    assert name in load_known_files([os.path.join(ROOT, "docs", "known", "set_grad+dce.txt")])


def test_dce_after_set_grad_deletes_a_wrapped_in_place_update():
    """The 600 s campaign's 4-node case: under no_grad an input is updated in place; set_grad
    wraps that in a HOP nothing reads, which the set_grad campaign's clean-up check reports as
    dead_code_elimination_changes_meaning-72cda7b9 (known), and DCE inside the pipeline deletes
    it: the input after the call differs."""
    from fxfuzz.campaign.engine import bucket_id

    case = _case("equivalence-value_mismatch-6ac4edc4.json")
    assert "structure-dead_code_elimination_changes_meaning-72cda7b9" in {
        bucket_id(f) for f in verify(case, load_pass("set_grad"))
    }
    found = {bucket_id(f) for f in verify(case, SET_GRAD_DCE)}
    assert "equivalence-value_mismatch-6ac4edc4" in found
    assert found <= set(
        load_known_files(
            [os.path.join(ROOT, "fxfuzz-known.txt"), os.path.join(ROOT, "docs", "known", "set_grad+dce.txt")]
        )
    )
