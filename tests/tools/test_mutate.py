"""Mutants of the set-grad pass: enumerated from torch's source, loaded without touching the
installed modules, killed (or not) by the gate."""

from __future__ import annotations

import inspect

import pytest
import torch._export.passes.replace_set_grad_with_hop_pass as real_module
import torch._export.utils as real_utils
from fxfuzz.strategies.corpus import MODULES, capture
from fxfuzz.tools.mutants import enumerate_mutants, load_pass_variant
from fxfuzz.tools.mutate import load_equivalent, run_mutant

MUTANTS = {m.id: m for m in enumerate_mutants("set_grad")}


def test_mutant_ids_are_unique_and_cover_the_pass_and_its_helpers():
    assert len(MUTANTS) == len(enumerate_mutants("set_grad"))
    functions = {m.function for m in MUTANTS.values()}
    assert {
        "replace_set_grad_with_hop_pass",
        "_replace_with_hop_helper",
        "sequential_split",
        "node_inline_",
    } <= functions
    assert {m.operator for m in MUTANTS.values()} == {"compare", "boolop", "negate", "constant", "swap_args", "remove"}


def test_loading_a_mutant_leaves_the_installed_torch_alone():
    before = (real_module.replace_set_grad_with_hop_pass, real_utils.node_inline_, real_utils.nodes_map.__code__)
    mutant = next(m for m in MUTANTS.values() if m.function == "nodes_map")
    variant = load_pass_variant("set_grad", mutant)
    assert variant is not real_module.replace_set_grad_with_hop_pass
    assert (
        real_module.replace_set_grad_with_hop_pass,
        real_utils.node_inline_,
        real_utils.nodes_map.__code__,
    ) == before
    assert "node_call_back(node)" in inspect.getsource(real_utils.nodes_map)


def test_gate_kills_a_mutant_and_lets_an_equivalent_one_survive():
    corpus = [(e.name, capture(e, True)) for e in MODULES[:3]]
    killed = run_mutant(MUTANTS["replace_set_grad_with_hop_pass._is_set_grad_enabled_node:23:boolop:0"], corpus, 30)
    assert killed.status == "killed" and killed.how
    # `return False` removed: the function returns None instead, which every caller reads as False.
    same = run_mutant(MUTANTS["replace_set_grad_with_hop_pass._is_set_grad_enabled_sub_mod:49:remove:1"], corpus, 2)
    assert same.status == "survived"


def test_a_mutant_looping_forever_is_killed_as_a_hang_on_its_first_case(monkeypatch):
    import fxfuzz.tools.mutate as mutate

    def loops(gm, sig):
        while True:
            pass

    monkeypatch.setattr(mutate, "PASS_HANG_S", 0.5)
    monkeypatch.setattr(mutate, "load_pass_variant", lambda spec, m: loops)
    corpus = [(e.name, capture(e, True)) for e in MODULES[:1]]
    hung = run_mutant(next(iter(MUTANTS.values())), corpus, 60)
    assert hung.status == "killed" and hung.how == "hang" and hung.time_s < 5, hung


@pytest.mark.slow
def test_mutate_kills_with_adversarial_cases_what_export_cases_cannot_reach():
    """The recursion's skip of a get_attr that is not a GraphModule: only a graph reading a
    tensor attribute tells (export lifts tensors), so the default --domain both kills it on
    fresh cases alone, with no corpus."""
    mutant = MUTANTS["replace_with_hop_pass_util._replace_with_hop_pass_helper:191:remove:7"]
    killed = run_mutant(mutant, [], 60, domain="both")
    assert killed.status == "killed" and "crash" in killed.how, killed


def test_every_listed_equivalent_mutant_exists_and_has_a_reason():
    for mid, reason in load_equivalent().items():
        assert mid in MUTANTS, f"stale equivalent mutant id {mid}"
        assert reason


def test_a_mutant_of_a_shared_helper_reaches_every_part_of_a_pipeline():
    """``export`` runs set_grad then autocast: both parts of its variant must call the one
    mutated node_inline_, not torch's."""
    from torch._export import utils

    mutant = next(m for m in enumerate_mutants("export") if m.id == "utils.node_inline_:860:remove:20")
    variant = load_pass_variant("export", mutant)
    inlines = {id(part.__globals__["node_inline_"]) for part in variant.passes}
    assert len(variant.passes) == 2 and len(inlines) == 1 and inlines != {id(utils.node_inline_)}


def test_summary_gives_the_distribution_of_kill_times():
    from fxfuzz.tools.mutate import MutantResult, summarize

    results = [MutantResult(f"m{i}", "killed", float(i), "", "") for i in range(1, 11)]
    summary = summarize(
        [*results, MutantResult("s", "survived", 30.0, "", ""), MutantResult("e", "equivalent", 0.0, "", "")]
    )
    assert (summary["kill_time_median_s"], summary["kill_time_p90_s"], summary["kill_time_max_s"]) == (6.0, 9.0, 10.0)
    assert summary["kill_rate"] == round(10 / 11, 4) and summary["survivors"] == ["s"]
