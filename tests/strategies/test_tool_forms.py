"""The graph shapes torch's own tools emit (``fxfuzz.strategies.tooled``, the kind ``tool_form``)
and the torch-level random functions: drawn for generic passes only; each form fires on a pass
broken that way and is quiet on correct ones; each survives the saved-case round trip and
replays; a topological sort that drops the pytree calling convention and a constant folder that
deletes an attribute another read still uses are found by short in-process campaigns, while the
torch passes they come from are not."""

from __future__ import annotations

import functools
import json
import os

import pytest
import torch
from draws import GENERATE
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.contract import MEANING, REFINES
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.tooled import TOOL_FORM
from fxfuzz.tools.bench import population
from hypothesis import find, settings
from paths import HELPERS, ROOT
from refines_campaigns import MUTANTS, examples_to_find
from torch import fx
from torch.utils._pytree import tree_flatten, tree_leaves

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_CSE = os.path.join(HELPERS, "fixed_cse.py") + ":fixed_cse"
KNOWN = os.path.join(ROOT, "docs", "known")
FORMS = ("tool:call_module", "tool:pytree", "tool:symint_literal")
TORCH_RANDOM = {torch.rand, torch.randn, torch.rand_like, torch.randn_like, torch.bernoulli, torch.randperm}
TORCH_RANDOM |= {torch.nn.functional.dropout}
# The first case holding a form, not the simplest: the tests only read it, and shrinking one
# took hundreds of cases.
SEARCH = settings(max_examples=300, **GENERATE)


@functools.cache
def _with(feature: str, domain: str = "export"):
    """The first case of ``domain`` holding ``feature``, drawn for the tool forms alone (once
    per process: the tests only read it)."""
    return find(graph_cases(domain, reacts_to=(TOOL_FORM,)), lambda c: feature in c.features, settings=SEARCH)


def _buckets(case, spec: str) -> set[str]:
    return {bucket_id(f) for f in verify(case, load_pass(spec, REFINES if ":" in spec else None))}


@pytest.fixture(scope="module")
def generic():
    """Cases for a generic pass (meaning's kinds), seed 0."""
    return population(30, 0, "export", MEANING.reacts_to)


def test_generic_passes_draw_every_form_and_torch_level_draws(generic):
    assert TOOL_FORM in MEANING.reacts_to and TOOL_FORM in generation_kinds(load_pass("dce"))
    for form in FORMS:
        assert any(form in c.features for c in generic), form
    assert any(n.target in TORCH_RANDOM for c in generic for n in c.gm.graph.nodes)


def test_the_set_grad_pass_draws_none():
    cases = population(20, 0, "export", generation_kinds(load_pass("set_grad")))
    assert not any(k.startswith("tool:") for c in cases for k in c.features)
    assert not any(isinstance(c.gm.graph._codegen, fx.graph._PyTreeCodeGen) for c in cases)


@pytest.mark.slow
def test_every_form_survives_the_round_trip_and_is_quiet_under_the_identity(generic):
    """Saved and loaded, a case prints the same code (call_module, the pytree convention and
    SymInt literals included) and the identity draws nothing from it; the first case of each
    form also through every stage (export's stages cost seconds a case: campaigns take a share)."""
    for case in generic:
        back = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
        assert back.gm.code == case.gm.code
        assert [type(n.args[i]) for n in back.gm.graph.nodes for i in range(len(n.args))] == [
            type(n.args[i]) for n in case.gm.graph.nodes for i in range(len(n.args))
        ]
    staged = {id(next(c for c in generic if form in c.features)) for form in FORMS}
    for case in generic:
        if any(k.startswith("tool:") for k in case.features):
            staging = {"stage_share": 1.0} if id(case) in staged else {}  # else a campaign's share
            assert verify(case, load_pass("identity"), **staging) == [], case.gm.code


def test_a_saved_call_module_names_only_a_graph_the_case_defines():
    from fxfuzz.core.errors import UntrustedError

    saved = case_to_dict(_with("tool:call_module"))
    call = next(n for n in saved["graph"]["nodes"] if n["op"] == "call_module")
    call["target"] = "not_a_child"
    with pytest.raises(UntrustedError, match="names no graph module the case defines"):
        case_from_dict(saved)


@pytest.mark.slow
def test_call_module_fires_on_a_pass_that_loses_the_children_and_is_quiet_on_correct_ones():
    case = _with("tool:call_module")
    assert {b.split("-")[1] for b in _buckets(case, f"{MUTANTS}:rebuilds_from_attributes")} == {"pass_raised"}
    for spec in ("identity", "dce", FIXED_CSE, f"{MUTANTS}:legalize_graph"):
        assert _buckets(case, spec) == set(), spec


@pytest.mark.slow
def test_the_pytree_convention_fires_on_a_sort_that_drops_it_and_is_quiet_on_legalize_graph():
    case = _with("tool:pytree")
    kinds = {b.split("-")[1] for b in _buckets(case, f"{MUTANTS}:topo_sort_dropping_convention")}
    # Where the convention returned something other than a flat tuple, its structure changes too.
    assert "calling_convention_changed" in kinds <= {"calling_convention_changed", "output_structure_mismatch"}
    for spec in ("identity", "dce", FIXED_CSE, f"{MUTANTS}:legalize_graph"):
        assert _buckets(case, spec) == set(), spec


@pytest.mark.slow
def test_a_non_tuple_output_is_called_as_its_convention_says():
    case = find(
        graph_cases(reacts_to=(TOOL_FORM,)), lambda c: "tool:pytree_output:single" in c.features, settings=SEARCH
    )
    out = case.gm(*case.inputs)
    assert isinstance(out, torch.Tensor) or not isinstance(out, (tuple, list))


@pytest.mark.slow
def test_symint_literals_fire_on_csepass_and_are_quiet_on_fx_graph_cse():
    """torch's CSEPass hashes a call's arguments and a SymInt is unhashable (docs/known/cse.txt);
    AOTAutograd's ``fx_graph_cse`` hashes the SymInt's node instead, and the text-keyed CSE of
    tests/helpers/fixed_cse.py its value."""
    case = _with("tool:symint_literal")
    assert any(isinstance(a, torch.SymInt) for n in case.gm.graph.nodes for a in tree_leaves(n.args))
    found = _buckets(case, "cse")
    assert {b.split("-")[1] for b in found} == {"pass_raised"} and found <= set(load_known(f"{KNOWN}/cse.txt"))
    for spec in ("identity", "dce", FIXED_CSE, "aot_cse"):
        assert _buckets(case, spec) == set(), spec


class TwoSines(torch.nn.Module):
    def forward(self, x):
        return x.sin(), x.sin()


def test_csepass_drops_the_convention_once_it_merges():
    from fxfuzz.core.capture import from_module

    case = from_module(TwoSines(), (torch.randn(3),))
    names = [n.name for n in case.gm.graph.find_nodes(op="placeholder")]
    in_spec = tree_flatten(((0,) * len(names), {}))[1]
    out_spec = tree_flatten({"a": 0, "b": 0})[1]  # returned as a dict
    case.gm.graph._codegen = fx.graph._PyTreeCodeGen(fx.graph._PyTreeInfo(names, in_spec, out_spec))
    case.gm.recompile()
    found = _buckets(case, "cse")
    assert "calling_convention_changed" in {b.split("-")[1] for b in found}
    assert found <= set(load_known(f"{KNOWN}/cse.txt")), found
    # It merges the two sines too (their outputs now share storage), keeping the convention.
    assert "calling_convention_changed" not in {b.split("-")[1] for b in _buckets(case, FIXED_CSE)}


class Sine(torch.nn.Module):
    def forward(self, x):
        return x.sin()


def _torch_level(target, *args):
    """A case of ``x.sin()`` with an unused ``target(x, *args)`` in front, as Dynamo and
    ``symbolic_trace`` record a torch-level call (``torch.rand_like(x)``, ``F.dropout(x, 0.5,
    True)``)."""
    from fxfuzz.core.capture import from_module

    case = from_module(Sine(), (torch.randn(3),))
    x = next(iter(case.gm.graph.find_nodes(op="placeholder")))
    with case.gm.graph.inserting_after(x):
        node = case.gm.graph.call_function(target, (x, *args))
    node.meta["val"] = x.meta["val"]
    case.gm.recompile()
    return case


def test_torch_level_draws_fire_on_a_dce_that_deletes_them_and_are_quiet_on_correct_passes():
    """torch's own DCE keeps an unused ``torch.rand_like`` (``_RANDOM_FUNCTIONS``) but deletes an
    unused ``F.dropout(x, 0.5, True)``, a draw it does not know (docs/known/dce.txt); the rng
    check finds it, and the test's frozen-draw folder on ``rand_like``."""
    rand, dropout = _torch_level(torch.rand_like), _torch_level(torch.nn.functional.dropout, 0.5, True)
    found = _buckets(dropout, "dce")
    assert {b.split("-")[1] for b in found} == {"rng_state_mismatch"} and found <= set(load_known(f"{KNOWN}/dce.txt"))
    assert _buckets(rand, "dce") == set()
    assert "rng_state_mismatch" in {
        b.split("-")[1] for b in _buckets(rand, os.path.join(HERE, "test_random_ops.py") + ":frozen_draws")
    }
    for case in (rand, dropout):
        for spec in ("identity", FIXED_CSE, f"{MUTANTS}:legalize_graph"):
            assert _buckets(case, spec) == set(), spec


class UnusedDropout(torch.nn.Module):
    def forward(self, x):
        torch.nn.functional.dropout(x, 0.5, True)
        return x.sin()


def test_torch_dce_deletes_the_unused_f_dropout_symbolic_trace_records():
    """The finding on the graph a real caller hands the pass: ``symbolic_trace`` records the
    call as ``F.dropout`` itself, and ``eliminate_dead_code`` erases it (docs/known/dce.txt)."""
    from handmade import FIXED

    gm = fx.symbolic_trace(UnusedDropout())
    assert torch.nn.functional.dropout in {n.target for n in gm.graph.nodes}
    gm.graph.eliminate_dead_code()
    if torch.nn.functional.dropout in {n.target for n in gm.graph.nodes}:
        raise AssertionError(FIXED.format(known="docs/known/dce.txt"))


@pytest.mark.slow
def test_a_repro_of_a_dropped_convention_replays(tmp_path):
    from fxfuzz.cli.main import main
    from fxfuzz.core.identity import identify
    from fxfuzz.repro.files import repro_document, write_repro

    case, spec = _with("tool:pytree"), f"{MUTANTS}:topo_sort_dropping_convention"
    found = verify(case, load_pass(spec, REFINES))
    doc = repro_document(bucket_id(found[0]), found[0].to_dict(), case_to_dict(case), identify(spec, "refines"))
    py = write_repro(str(tmp_path / "repros"), doc)
    assert main(["repro", py[:-3] + ".json", "--pass", spec]) == 1
    assert main(["repro", py[:-3] + ".json", "--pass", f"{MUTANTS}:legalize_graph"]) == 0


@pytest.mark.slow
def test_a_campaign_finds_a_topological_sort_that_drops_the_convention():
    """aten domain (no toggles, which legalize_graph moves), tool forms alone, seed 0: found
    within 20 examples (2026-11-28); the real legalize_graph stays quiet on as many."""
    examples, _ = examples_to_find(
        f"{MUTANTS}:topo_sort_dropping_convention", {"calling_convention_changed"}, 20, 0, "aten"
    )
    assert 0 < examples
    examples, buckets = examples_to_find(f"{MUTANTS}:legalize_graph", {"calling_convention_changed"}, 20, 0, "aten")
    assert (examples, buckets) == (0, set())


@pytest.mark.slow
def test_a_campaign_finds_a_constant_folder_deleting_an_attribute_still_read():
    """Drawn as the constant_folding row (constants and the generic kinds), seed 1: found after
    13 examples of 150 (2026-11-28; seed 0 found none in 60: a read folded beside a live one is
    about one case in twenty). The real row never raises in as many."""
    examples, _ = examples_to_find(f"{MUTANTS}:constant_fold_deleting_a_read_attribute", {"pass_raised"}, 150, 1)
    assert 0 < examples
    # The installed row never raises so, nor draws the rng and state-leak buckets it drew while
    # it was given torch-level draws (test below), which its ATen-graph callers never hand it.
    examples, buckets = examples_to_find("constant_folding", {"pass_raised"}, 150, 1)
    assert examples == 0 and not [b for b in buckets if b.startswith(("crash-", "rng-", "equivalence-state_leak"))], (
        buckets
    )


def test_random_calls_stay_at_the_top_level_though_torch_holds_f_dropout_pure():
    """Outlining takes pure calls only, and ``Node.is_impure`` holds ``F.dropout`` pure
    (docs/known/dce.txt): the random calls are left out by name, so none lands in a child."""
    from fxfuzz.strategies.tooled import _runs

    g = fx.Graph()
    x = g.placeholder("x")
    drop = g.call_function(torch.nn.functional.dropout, (x, 0.5, True))
    sin = g.call_function(torch.ops.aten.sin.default, (drop,))
    for n in (x, drop, sin):
        n.meta["val"] = torch.randn(3)
    assert not drop.is_impure()
    assert _runs(g) == [[sin]]


def test_the_constant_folding_rows_rng_findings_are_torch_level_draws_it_freezes():
    """Triage of the row's ``rng_state_mismatch`` and ``state_leak`` (seed 1, 150 examples: both
    on a ``torch.randn_like`` of values computed from constants alone). Export's
    ``constant_fold`` leaves alone calls tagged ``nondeterministic_seeded``, a tag only ATen
    overloads carry: it runs a torch-level draw on constants while it runs (the generator moves)
    and folds the numbers. Its callers (pt2e) hand it ATen graphs, where the draw is
    ``aten.randn_like`` and stays: no torch finding, so the row does not declare
    ``torch_level`` and is never given a torch-level draw
    (test_random_ops.py::test_torch_level_draws_only_for_passes_that_declare_them)."""
    from fxfuzz.core.catalogue import constant_fold

    for target, kept in ((torch.randn_like, False), (torch.ops.aten.randn_like.default, True)):
        root = torch.nn.Module()
        root.c = torch.ones(3)
        g = fx.Graph()
        x, c = g.placeholder("x"), g.get_attr("c")
        g.output((g.call_function(torch.ops.aten.add.Tensor, (x, g.call_function(target, (c,)))),))
        gm = fx.GraphModule(root, g)
        before = torch.get_rng_state()
        constant_fold(gm)
        unmoved = torch.equal(before, torch.get_rng_state())
        assert (target in {n.target for n in gm.graph.nodes}, unmoved) == (kept, kept)


def test_equal_calls_stay_at_the_top_level():
    """A call equal to another (a repeat, a merging pass's bait) is not outlined: a pass merging
    the top-level graph's calls must still meet both."""
    from fxfuzz.strategies.tooled import _runs

    g = fx.Graph()
    x = g.placeholder("x")
    first = g.call_function(torch.ops.aten.sin.default, (x,))
    other = g.call_function(torch.ops.aten.cos.default, (first,))
    again = g.call_function(torch.ops.aten.sin.default, (x,))
    for n in (x, first, other, again):
        n.meta["val"] = torch.randn(3)
    assert _runs(g) == [[other]]
