"""Known findings against the real set-grad pass of the installed torch, each pinned on the
case torch.export itself hands the pass for a small module (captured by ``from_module``).

Each test asserts that the oracles report the defect; when torch fixes one, its test fails
and the finding can be retired from the known baseline.
"""

from __future__ import annotations

import os

import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies import from_module
from known_modules import (
    BufferUpdateUnderNoGrad,
    CondInsideAutocast,
    CondUnderEnableGrad,
    CondUnderNoGrad,
    NestedMapUnderNoGrad,
    NoGradInsideAutocast,
    NoGradInsideAutocastDetached,
    SingleOutputRegionReadTwice,
)
from paths import DATA, ROOT

REAL = load_pass("set_grad")
KNOWN = os.path.join(ROOT, "fxfuzz-known.txt")


def kinds(findings):
    return {(f.oracle, f.kind) for f in findings}


def test_no_grad_around_cond_is_dropped():
    """The split-off no_grad region starts with the get_attr nodes of cond's branches, not
    with its toggle, so the pass takes it for an ambient-mode region, inlines it and deletes
    the toggle: the exported program's output requires grad where eager's does not."""
    x = torch.ones(3, requires_grad=True)
    assert not CondUnderNoGrad()(x).requires_grad
    found = kinds(verify(from_module(CondUnderNoGrad(), (x,)), REAL))
    assert ("equivalence", "requires_grad_mismatch") in found


def test_no_grad_inside_autocast_is_dropped():
    """The same defect with autocast around the no_grad block: the exported program's
    outputs require grad where eager's do not."""
    x = torch.ones(3, requires_grad=True)
    assert not any(t.requires_grad for t in NoGradInsideAutocast()(x))
    found = kinds(verify(from_module(NoGradInsideAutocast(), (x,)), REAL))
    assert ("equivalence", "requires_grad_mismatch") in found


def test_inlined_region_output_loses_its_users():
    """node_inline_ clears ``users`` of a region's single output node, dropping the readers
    inside the inlined region: ``node.users`` no longer lists every node that reads it, so
    replace_all_uses_with or erase_node in a later pass corrupt the graph."""
    case = from_module(SingleOutputRegionReadTwice(), (torch.ones(3, requires_grad=True),))
    assert ("structure", "def_use_inconsistent") in kinds(verify(case, REAL))


def test_nested_map_under_no_grad_crashes_the_pass():
    """torch.export itself raises AttributeError ('... has no attribute body_graph_0') from
    the pass's recursion into nested graph modules."""
    case = from_module(NestedMapUnderNoGrad(), (torch.ones(2, 3), torch.ones(3, requires_grad=True)))
    (crash,) = [f for f in verify(case, REAL) if f.oracle == "crash"]
    assert crash.details["exception"] == "AttributeError" and "body_graph_0" in crash.message
    assert bucket_id(crash) in load_known(KNOWN)  # the known id: file, function and line text of the raise


def test_wrapped_buffer_update_is_dead_code():
    """The wrap_with_set_grad_enabled call around ``buf.add_`` has no users and is not marked
    side-effecting, so eliminate_dead_code deletes it and the buffer update with it."""
    case = from_module(BufferUpdateUnderNoGrad(), (torch.ones(3, requires_grad=True),))
    assert kinds(verify(case, REAL)) == {("structure", "dead_code_elimination_changes_meaning")}


class NoGradBlockWithoutCond(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        with torch.no_grad():
            z = y.sin() + 1
        return y + z


def test_forward_ad_differs_because_the_region_around_cond_is_dropped():
    """cond's autograd.Function has no jvp rule, so forward-mode AD through cond raises exactly
    when cond runs with grad enabled. The pass drops the region around cond (the get_attrs of
    its branches are hoisted ahead of the toggle), so cond runs in the other grad mode: under
    ambient grad a no_grad block's cond starts raising, under ambient no_grad an enable_grad
    block's cond stops raising. The bucket is that defect, not a forward-AD gap of the HOP."""
    x = torch.ones(3, requires_grad=True)
    assert ("gradients", "jvp_raises_differently") in kinds(verify(from_module(CondUnderNoGrad(), (x,)), REAL))
    with torch.no_grad():
        case = from_module(CondUnderEnableGrad(), (x,))
    assert not case.ambient_grad
    assert ("gradients", "jvp_raises_differently") in kinds(verify(case, REAL))


def test_wrap_with_set_grad_enabled_carries_tangents():
    """Where the pass does wrap the region, forward AD matches: the HOP keeps tangents."""
    case = from_module(NoGradBlockWithoutCond(), (torch.ones(3, requires_grad=True),))
    result, _ = REAL(case.copy().gm, case.signature)
    assert any(n.target is torch.ops.higher_order.wrap_with_set_grad_enabled for n in result.graph.nodes)
    assert verify(case, REAL) == []


def test_dropped_no_grad_region_saves_tensors_for_backward():
    """The dropped no_grad region inside autocast runs with grad on: its multiplication now
    saves both operands for backward. Nothing that requires grad reads it (the output is
    detached), so values and first-order gradients agree and only the saved tensors show it."""
    case = from_module(NoGradInsideAutocastDetached(), (torch.ones(3, requires_grad=True),))
    findings = verify(case, REAL)
    assert kinds(findings) == {("gradients", "saved_tensors_mismatch")}, findings
    assert "1 tensors packed for backward became 3" in findings[0].message


class UnusedNoGradResult(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            x.sin()  # computed, never read
        return x * 2


def test_save_load_rejects_a_hop_without_outputs():
    """The region's result is unused, so the pass's wrap_with_set_grad_enabled returns () and
    its meta['val'] is (); torch.export.save writes no val for it and torch.export.load's
    verifier rejects the loaded program (SpecViolationError: Node.meta
    wrap_with_set_grad_enabled is missing val field). The original, with its toggles, round-trips.
    Export's own ExportedProgram of this module fails the same round trip, end to end
    (tests/oracles/test_programs.py)."""
    from fxfuzz.campaign.engine import bucket_id
    from fxfuzz.oracles.downstream import stages_forced

    with stages_forced():
        found = verify(from_module(UnusedNoGradResult(), (torch.randn(3),)), REAL)
    assert [(f.kind, f.details["exception"]) for f in found] == [("save_load_raised", "SpecViolationError")]
    with open(KNOWN) as fh:
        assert bucket_id(found[0]) in fh.read()


def test_autocast_around_cond_is_left_in_place():
    """The autocast pass's analogue of the dropped no_grad region: the split-off autocast
    region starts with the get_attr nodes of cond's branches, not with _enter_autocast, so the
    pass inlines it and leaves _enter_autocast/_exit_autocast in the graph (torch.export's
    ExportedProgram of this module still calls them)."""
    found = verify(from_module(CondInsideAutocast(), (torch.randn(3),), stage="autocast"), load_pass("autocast"))
    assert ("structure", "leftover_call") in kinds(found)


class CondInNoGradThenInPlace(torch.nn.Module):
    def forward(self, x, y):
        with torch.no_grad():
            c = torch.cond(x.sum() > 0, lambda x: x.clone(), lambda x: x.clone(), (y,))
        z = (c + 1).mul_(y)
        return z - z  # zero either way: first-order gradients agree


def test_dropped_cond_region_changes_what_backward_saves():
    """The dropped no_grad region (finding 1) runs cond with grad on, and cond's
    autograd.Function saves its operand: an in-place update of ``y`` between forward and
    backward now raises the version-counter error, and a second-order gradient appears.
    First-order values and gradients agree, so only the autograd-graph checks show it; both
    buckets met the 20,000-example false-alarm run and are known."""
    from fxfuzz.campaign.engine import bucket_id

    found = verify(from_module(CondInNoGradThenInPlace(), (torch.randn(2), torch.randn(2, requires_grad=True))), REAL)
    new = [
        f for f in found if f.kind in ("inplace_after_forward_raises_differently", "double_backward_presence_mismatch")
    ]
    assert len(new) == 2, found
    with open(KNOWN) as fh:
        known = fh.read()
    assert all(bucket_id(f) in known for f in new)


def test_unflatten_repeats_the_corrupted_users_map():
    """A minimized case of the 20,000-example run (tests/data/unflatten_after_def_use.json):
    node_inline_ dropped ``linear`` from ``gelu.users`` (finding 2), and unflatten, which
    copies the graph, loses the read exactly as dead-code elimination does (same difference)."""
    from fxfuzz.campaign.engine import bucket_id
    from fxfuzz.oracles.downstream import stages_forced
    from fxfuzz.repro.files import load_repro

    repro = load_repro(os.path.join(DATA, "unflatten_after_def_use.json"))
    with stages_forced():
        found = {f.kind: f for f in verify(repro.case, REAL)}
    assert "def_use_inconsistent" in found
    unflatten, dce = found["unflatten_changes_meaning"], found["dead_code_elimination_changes_meaning"]
    assert unflatten.message.rsplit("max abs diff", 1)[1] == dce.message.rsplit("max abs diff", 1)[1]
    with open(KNOWN) as fh:
        assert bucket_id(unflatten) in fh.read()
