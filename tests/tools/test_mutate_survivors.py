"""The mutation survivors that wanted an oracle or a case (README, fxfuzz mutate): the split
graph keeping the default codegen instead of the caller's pytree calling convention (a case
the gate corpus now has), and split submodules left attached unused (the structure check
``unused_submodule``), with the reason the last survivor there is equivalent."""

from __future__ import annotations

import broken_passes as bp
import handmade as hm
import torch
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.differential import regressions
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.corpus import MODULES, capture, with_pytree_convention
from fxfuzz.tools.mutants import enumerate_mutants, load_pass_variant
from hypothesis import HealthCheck, given, settings
from torch import fx

REAL = load_pass("set_grad")
IDENTITY = load_pass("identity")
NEW_KINDS = {"unused_submodule", "calling_convention_changed"}
MUTANTS = {m.id: m for m in enumerate_mutants("set_grad")}
TWO_OUTPUTS = next(e for e in MODULES if e.name == "two_outputs_from_no_grad")


def kinds(findings):
    return {f.kind for f in findings}


def test_unused_submodule_fires_on_a_pass_that_leaves_one():
    case = hm.no_grad_region_case(True)
    [found] = [f for f in verify(case, bp.keeps_unused_submodule) if f.kind == "unused_submodule"]
    assert found.oracle == "structure" and found.details["submodules"] == ["submod_0"]
    assert "serialization" in found.message
    assert "unused_submodule" not in kinds(verify(case, REAL))


def test_a_submodule_the_original_had_unused_is_not_the_pass_fault():
    case = hm.no_grad_region_case(True)
    case.gm.add_submodule("spare", fx.GraphModule(torch.nn.Module(), fx.Graph()))
    assert "unused_submodule" not in kinds(verify(case, IDENTITY))


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(graph_cases())
def test_real_and_identity_pass_keep_both_checks_quiet(case):
    assert not NEW_KINDS & kinds(verify(case, REAL))
    assert not NEW_KINDS & kinds(verify(case, IDENTITY))


def test_pytree_codegen_survivor_is_killed_on_the_gate_corpus():
    """sequential_split:668:remove:4 drops the caller's pytree codegen; the signature oracle
    always compared it, but no captured case carries one: the gate corpus's pytree case does."""
    mutant = load_pass_variant("set_grad", MUTANTS["utils.sequential_split:668:remove:4"])
    case = with_pytree_convention(capture(TWO_OUTPUTS, True))
    assert regressions(case, REAL, REAL) == []
    assert "calling_convention_changed" in kinds(regressions(case, mutant, REAL))


def test_leftover_split_submodules_are_a_finding_without_a_baseline():
    """node_inline_:910:remove:7 skips delete_all_unused_submodules: the inlined regions stay
    attached, each a graph whose nodes were moved out (it fails lint and deepcopy)."""
    mutant = load_pass_variant("set_grad", MUTANTS["utils.node_inline_:910:remove:7"])
    found = [f for f in verify(capture(TWO_OUTPUTS, False), mutant) if f.kind == "unused_submodule"]
    assert found and found[0].details["submodules"] == ["submod_0", "submod_1", "submod_2"]


def test_split_module_gives_every_region_an_output_node():
    """Why node_inline_:908:remove:18 is equivalent (fuzz/equivalent_mutants.txt): it removes
    the erase_node of node_inline_'s branch for a region without an output node, and
    split_module gives one even to a region that returns nothing (``return ()``)."""
    from fxfuzz.strategies.builder import GraphBuilder
    from torch._export.passes.replace_set_grad_with_hop_pass import _is_set_grad_enabled_node
    from torch._export.utils import sequential_split
    from torch.export.graph_signature import InputKind

    aten = torch.ops.aten
    b = GraphBuilder(grad_mode=True)
    buf = b.placeholder("b_count", torch.zeros(3), InputKind.BUFFER, "count", persistent=True)
    x = b.placeholder("x", torch.tensor([1.0, -2.0, 0.5], requires_grad=True), InputKind.USER_INPUT)
    b.set_grad(False)
    y = b.call(aten.sin.default, [x])
    b.set_grad(True)
    b.call(aten.add_.Tensor, [buf, 1])  # a region whose only node nothing reads
    b.set_grad(False)
    z = b.call(aten.cos.default, [x])
    b.set_grad(True)
    gm, _ = b.finish([b.call(aten.add.Tensor, [y, z])])
    regions = dict(sequential_split(gm, _is_set_grad_enabled_node).named_children())
    outputs = {name: [n.args[0] for n in m.graph.nodes if n.op == "output"] for name, m in regions.items()}
    assert () in [out for outs in outputs.values() for out in outs]
    assert all(len(outs) == 1 for outs in outputs.values())
