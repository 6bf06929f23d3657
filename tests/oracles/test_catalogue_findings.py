"""Known defects of torch's own FX passes (the catalogue rows of ``fxfuzz.core.passes``) in the
installed torch, each pinned on a graph a real caller hands the pass.

Each test asserts the defect is still there: when torch fixes it, the test fails, and its line
in the pass's known file (docs/known/<pass>.txt) and its entry in docs/known-findings.md go.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import os
import traceback
from pathlib import Path

import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.crash import crash_finding
from fxfuzz.strategies import from_module
from handmade import FIXED
from known_modules import (
    DeadCode,
    FoldableBuffer,
    ReturnsAlias,
    SameSumInTwoGradModes,
    TwoNoGradRegions,
    adds_into_a_new_tensor,
    constant_after_no_grad,
    same_sum_in_two_grad_modes,
    two_no_grad_regions,
    unused_constant_read,
)
from paths import DATA, HELPERS, ROOT
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.dialect.common.cse_pass import CSEPass

KNOWN_DIR = Path(ROOT) / "docs" / "known"


def test_cse_merges_grad_toggles_on_make_fx_graph():
    """make_fx's pre-dispatch trace records each ``with torch.no_grad()`` as a pair of
    ``torch._C._set_grad_enabled`` calls. CSEPass takes them for pure calls and keeps only the
    first of each argument, so the second no_grad region runs with grad on."""
    x = torch.randn(3, requires_grad=True)
    gm = make_fx(two_no_grad_regions, pre_dispatch=True)(x)
    assert [t.requires_grad for t in gm(x)] == [False, True, False]
    toggles = len(gm.graph.find_nodes(op="call_function", target=torch._C._set_grad_enabled))
    result = CSEPass()(gm).graph_module
    left = len(result.graph.find_nodes(op="call_function", target=torch._C._set_grad_enabled))
    after = [t.requires_grad for t in result(x)]
    assert (toggles, left, after) == (4, 2, [False, True, True]), FIXED.format(known="docs/known/cse.txt")


def test_cse_merged_toggles_found_by_the_oracles():
    """The same defect through fxfuzz: the pre-dispatch graph torch.export builds for the
    module (before its set-grad pass wraps the regions), judged under the cse row's contract."""
    x = torch.randn(3, requires_grad=True)
    found = {(f.oracle, f.kind) for f in verify(from_module(TwoNoGradRegions(), (x,)), load_pass("cse"))}
    assert ("equivalence", "requires_grad_mismatch") in found, FIXED.format(known="docs/known/cse.txt")


def test_cse_merges_equal_calls_across_a_grad_toggle_on_make_fx_graph():
    """CSEPass hashes a call by its target and arguments, not the grad mode it runs under:
    ``x + x`` with grad and again under no_grad become one node, so the no_grad result
    requires grad and takes gradients. The two outputs are now one tensor, too."""
    x = torch.randn(3, requires_grad=True)
    gm = make_fx(same_sum_in_two_grad_modes, pre_dispatch=True)(x)
    assert [t.requires_grad for t in gm(x)] == [True, False]
    a, b = CSEPass()(gm).graph_module(x)
    assert ([a.requires_grad, b.requires_grad], a is b) == ([True, True], True), FIXED.format(
        known="docs/known/cse.txt"
    )


def test_cse_merged_calls_across_a_toggle_found_by_the_oracles():
    """Through fxfuzz, on the graph torch.export records for the module: the no_grad output
    now requires grad, adds to the input's gradient and is the other output's tensor."""
    x = torch.randn(3, requires_grad=True)
    found = {(f.oracle, f.kind) for f in verify(from_module(SameSumInTwoGradModes(), (x,)), load_pass("cse"))}
    symptoms = {
        ("equivalence", "requires_grad_mismatch"),
        ("gradients", "grad_value_mismatch"),
        ("equivalence", "aliasing_mismatch"),
    }
    assert symptoms <= found, (found, FIXED.format(known="docs/known/cse.txt"))


CSE_SYMPTOMS = sorted(glob.glob(os.path.join(DATA, "cse", "*.json")))


def test_the_fixed_cse_still_merges_equal_calls_in_one_grad_mode():
    """What makes the next test's quiet verdict worth something: tests/helpers/fixed_cse.py is a CSE."""
    from fixed_cse import fixed_cse

    gm = make_fx(lambda x: x.sin() + x.sin(), pre_dispatch=True)(torch.randn(3))
    assert len(fixed_cse(gm).graph.find_nodes(op="call_function", target=torch.ops.aten.sin.default)) == 1


@pytest.mark.parametrize("path", CSE_SYMPTOMS, ids=lambda p: os.path.basename(p)[:-5])
def test_cse_buckets_that_follow_from_its_two_merges_go_once_both_are_fixed(path):
    """Buckets of the cse row's triage campaigns that did not shrink to a small graph (forward
    AD through a cond now run with grad, a changed process state seen by a second run and by
    the dead-code clean-up): the real CSEPass draws each on its saved case, CSEPass's algorithm
    with both defects above fixed draws nothing. Their known lines say so."""
    from fxfuzz.core.contract import REFINES
    from fxfuzz.oracles.downstream import stages_forced
    from fxfuzz.repro.files import load_repro

    case, name = load_repro(path).case, os.path.basename(path)[:-5]
    # A stage's bucket shows where the stages run, which the campaign drew by chance.
    with stages_forced() if name.startswith("downstream-") else contextlib.nullcontext():
        assert name in {bucket_id(f) for f in verify(case, load_pass("cse"))}, FIXED.format(known="docs/known/cse.txt")
        assert verify(case, load_pass(os.path.join(HELPERS, "fixed_cse.py") + ":fixed_cse", REFINES)) == []


def test_split_const_subgraphs_refuses_a_constant_after_a_toggle():
    """const_fold puts the constant computation (arange, sum) in partition 0 and the rest in 1;
    split_module wants set-grad regions' partitions in increasing node order, and the constant
    comes after the no_grad region: an AssertionError instead of a folded module."""
    from torch.fx.experimental.const_fold import split_const_subgraphs

    gm = make_fx(constant_after_no_grad, pre_dispatch=True)(torch.randn(3, requires_grad=True))
    try:
        split_const_subgraphs(gm)
    except AssertionError as e:
        assert "monotonically increasing partitions" in str(e)
        assert bucket_id(crash_finding(e)) in load_known(str(KNOWN_DIR / "split_const_subgraphs.txt"))
    else:
        raise AssertionError(FIXED.format(known="docs/known/split_const_subgraphs.txt"))


def test_split_const_subgraphs_folds_a_fresh_copy_that_an_in_place_update_then_accumulates_into():
    """make_fx records ``torch.tensor(...)`` as ``lift_fresh_copy`` of a constant: a fresh copy
    on every call. const_fold folds it into one cached tensor, so ``add_`` updates the cache,
    each call returns that same tensor and the sums pile up across calls."""
    from torch.fx.experimental.const_fold import split_const_subgraphs

    x = torch.ones(3)
    gm = make_fx(adds_into_a_new_tensor)(x)
    assert [gm(x).tolist() for _ in range(2)] == [[2.0, 3.0, 4.0]] * 2
    folded = split_const_subgraphs(gm)
    assert [folded(x).tolist() for _ in range(2)] == [[2.0, 3.0, 4.0], [3.0, 4.0, 5.0]], FIXED.format(
        known="docs/known/split_const_subgraphs.txt"
    )


def test_a_deep_copy_of_a_folded_module_cannot_run():
    """GraphModule.__deepcopy__ builds the copy with GraphModule.__init__ (``_deepcopy_init``),
    which FoldedGraphModule does not override: the copy lacks the attributes its ``__call__``
    reads."""
    from torch.fx.experimental.const_fold import FoldedGraphModule, split_const_subgraphs

    x = torch.randn(3, requires_grad=True)
    folded = split_const_subgraphs(make_fx(lambda x: x + torch.arange(3.0).sum(), pre_dispatch=True)(x))
    assert isinstance(folded, FoldedGraphModule)
    expected = folded(x)
    try:
        got = copy.deepcopy(folded)(x)
    except AttributeError as e:
        assert "has_folding_been_run" in str(e)
    else:
        assert torch.equal(got, expected)
        raise AssertionError(FIXED.format(known="docs/known/split_const_subgraphs.txt"))


def test_the_uncallable_copy_found_by_the_oracles():
    """The same defect through fxfuzz, on a graph with nothing to fold (split_const_subgraphs
    still returns a FoldedGraphModule, and leaves the dead ``cos`` to the clean-up check, which
    deep-copies the result before eliminating dead code: the copy's AttributeError reads as a
    changed meaning)."""
    x = torch.randn(3, requires_grad=True)
    found = {(f.oracle, f.kind) for f in verify(from_module(DeadCode(), (x,)), load_pass("split_const_subgraphs"))}
    assert ("structure", "dead_code_elimination_changes_meaning") in found, FIXED.format(
        known="docs/known/split_const_subgraphs.txt"
    )


def test_constant_fold_needs_quantization_ops_torch_may_lack():
    """pt2e quantization calls constant_fold on ``export(...).module()``, where buffers are
    get_attr nodes. Its ConstantFolder.is_impure lists quantized_decomposed and pt2e_quant
    (torchao's) dequantize ops by attribute, so with either namespace unregistered the first
    foldable node raises AttributeError instead of being folded."""
    from torch._export.passes.constant_folding import constant_fold

    x = torch.randn(3)
    gm = torch.export.export(FoldableBuffer(), (x,)).module()
    try:
        constant_fold(gm)
    except AttributeError as e:
        assert "quantized_decomposed" in str(e) or "pt2e_quant" in str(e), e
        assert bucket_id(crash_finding(e)) in load_known(str(KNOWN_DIR / "constant_folding.txt"))
    else:
        raise AssertionError(FIXED.format(known="docs/known/constant_folding.txt") + " (or torchao is installed)")


def test_remove_noop_ops_returns_an_input_for_its_alias():
    """Inductor's ``remove_noop_ops`` means to keep an alias an output takes of an input ("don't
    make node is src True"), but tests ``node in output_node.args``: the output node's args are
    ``(outputs,)``, so no node is ever in it. On the ATen graph torch.export lowers for
    ``return torch.ops.aten.alias(x)`` it returns ``x`` itself."""
    gm = torch.export.export(ReturnsAlias(), (torch.randn(3),)).run_decompositions().graph_module
    x = torch.randn(3, requires_grad=True)
    assert gm(x)[0] is not x and gm(x)[0].grad_fn is not None
    from torch._inductor.fx_passes.post_grad import remove_noop_ops

    remove_noop_ops(gm.graph)
    gm.recompile()
    assert gm(x)[0] is x, FIXED.format(known="docs/known/remove_noop_ops.txt")


def test_the_returned_input_found_by_the_oracles():
    """What the campaign found (`--pass remove_noop_ops --domain aten`): the output, a view of
    the input before, is the input itself after. Held to its row's contract (post_grad, run
    without autograd) that is the identity oracle's; differentiated, the leaf input returned
    has no grad_fn where the view had one."""
    from fxfuzz.core.case import GraphCase
    from fxfuzz.core.contract import REFINES

    program = torch.export.export(ReturnsAlias(), (torch.randn(3),)).run_decompositions()
    case = GraphCase(
        program.graph_module, program.graph_signature, (torch.randn(3, requires_grad=True),), domain="aten"
    )
    assert {f"{f.oracle}/{f.kind}" for f in verify(case, load_pass("remove_noop_ops"))} == {
        "equivalence/identity_mismatch"
    }
    assert {f"{f.oracle}/{f.kind}" for f in verify(case, load_pass("remove_noop_ops"), REFINES)} == {
        "equivalence/grad_fn_mismatch"
    }


class DeadReadOfConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.linspace(-1.0, 1.0, 3)  # a plain tensor attribute: export lifts it

    def forward(self, x):
        self.c.detach()  # dead code: its read of c stays in the traced graph with no user
        return x + self.c


def test_lift_constants_pass_raises_on_a_constant_read_nothing_uses():
    """torch.export hands lift_constants_pass the graph it traced, where the read of ``c`` that
    fed the dead ``detach`` is a get_attr with no user; ``_unused_constant`` takes
    ``next(iter(node.users))`` of it and raises StopIteration, and export fails."""
    try:
        torch.export.export(DeadReadOfConstant(), (torch.randn(3),))
    except StopIteration as e:
        assert e.__traceback__ is not None
        frames = [f.name for f in traceback.extract_tb(e.__traceback__)]
        assert frames[-2:] == ["lift_constants_pass", "_unused_constant"], frames
    else:
        raise AssertionError(FIXED.format(known="docs/known/lift_constants.txt"))


def test_the_unused_read_found_by_the_oracles():
    """What the campaign found (`--pass lift_constants`), shrunk: the graph export traces for
    the module above, a read of the constant nothing uses before the one ``x + c`` takes."""
    found = [f for f in verify(unused_constant_read(), load_pass("lift_constants")) if f.oracle == "crash"]
    assert [f.kind for f in found] == ["pass_raised"] and "StopIteration" in found[0].message, FIXED.format(
        known="docs/known/lift_constants.txt"
    )
    assert bucket_id(found[0]) in load_known(str(KNOWN_DIR / "lift_constants.txt"))


def test_each_pass_baseline_loads_and_every_line_has_its_entry():
    """The per-pass baselines are ``--known`` files, and each bucket they mark known is
    explained in docs/known-findings.md."""
    findings = (KNOWN_DIR.parent / "known-findings.md").read_text()
    files = sorted(KNOWN_DIR.glob("*.txt"))
    assert [f.stem for f in files] == [
        "constant_folding",
        "cse",
        "dce",
        "inductor_constant_fold",
        "lift_constants",
        "pt2e_x86",
        "pt2e_x86_qat",
        "pt2e_xnnpack",
        "remove_noop_ops",
        "set_grad+dce",
        "split_const_subgraphs",
    ]
    for path in files:
        known = load_known(str(path))
        assert known and all(reason for reason in known.values()), path
        assert all(f"`{bid}`" in findings for bid in known), path
