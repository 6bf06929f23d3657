"""Every pass shape torch.fx uses loads from a spec, runs through verify, and gets the
signature carried by position; what cannot be told apart is refused in one line."""

from __future__ import annotations

import os

import handmade as hm
import pytest
import shaped_passes as sp
import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.passes import REGISTRY, load_pass
from fxfuzz.core.shapes import Shape, by_position, shape_of
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.builder import GraphBuilder
from hypothesis import given, settings
from paths import HELPERS
from torch.export.graph_signature import InputKind

# What the identity promises: meaning alone.
CONTRACT = REGISTRY["identity"].contract
SHAPED = os.path.join(HELPERS, "shaped_passes.py")

IDENTITY_LIKE = {
    "module_identity": Shape.MODULE,
    "in_place": Shape.MODULE,
    "copies_module": Shape.MODULE,
    "graph_copy": Shape.GRAPH,
    "graph_in_place": Shape.GRAPH,
    "Unchanged": Shape.PASS_BASE,
    "UNCHANGED": Shape.PASS_BASE,
    "InPlaceBase": Shape.PASS_BASE,
    "MANAGER": Shape.PASS_MANAGER,
}


def spec(name):
    return f"{SHAPED}:{name}"


@pytest.mark.parametrize("name, shape", IDENTITY_LIKE.items())
def test_each_shape_is_detected_and_marked_signature_blind(name, shape):
    assert shape_of(getattr(sp, name))[0] is shape
    assert load_pass(spec(name)).takes_signature is False
    assert load_pass("identity").takes_signature is True


def test_torch_passes_are_detected_by_their_own_signatures():
    from torch._functorch.compile_utils import fx_graph_cse
    from torch.fx.passes.dialect.common.cse_pass import CSEPass

    assert shape_of(fx_graph_cse)[0] is Shape.GRAPH  # annotated fx.Graph
    shape, built = shape_of(CSEPass)
    assert shape is Shape.PASS_BASE and isinstance(built, CSEPass)  # built with no arguments


IDENTITIES = [load_pass(spec(name)) for name in IDENTITY_LIKE]


@settings(max_examples=6)
@given(graph_cases())
def test_identity_like_passes_of_every_shape_are_clean_on_drawn_cases(case):
    for p in IDENTITIES:
        assert verify(case, p, CONTRACT) == [], p.spec


@pytest.mark.parametrize("name", IDENTITY_LIKE)
def test_identity_like_passes_keep_a_pytree_calling_convention(name):
    assert verify(hm.pytree_case(), load_pass(spec(name)), CONTRACT) == []


def same_call_both_sides_case():
    """sin(x) with grad on, then the same call under no_grad."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    on = b.call(torch.ops.aten.sin.default, [x])
    b.set_grad(False)
    off = b.call(torch.ops.aten.sin.default, [x])
    b.set_grad(True)
    gm, sig = b.finish([on, off])
    return GraphCase(gm, sig, tuple(b.inputs))


@pytest.mark.parametrize(
    "broken, make",
    [
        ("drops_toggles", hm.no_grad_region_case),
        ("hoists_across_toggle", hm.no_grad_region_case),
        ("merges_across_toggles", same_call_both_sides_case),
    ],
)
def test_broken_gm_to_gm_passes_are_found(broken, make):
    """Dropping a toggle, moving an op across one and merging equal calls across one: each
    changes what a region computes or its gradients, found though the pass never saw a signature;
    the same case is clean under the identity."""
    assert verify(make(), load_pass(spec("module_identity")), CONTRACT) == []
    assert {"equivalence", "gradients"} & {f.oracle for f in verify(make(), load_pass(spec(broken)), CONTRACT)}


def test_signature_is_carried_to_the_result_by_position():
    case = hm.no_grad_region_case()
    work = case.copy()
    gm, sig = load_pass(spec("renames_nodes"))(work.gm, work.signature)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = gm.graph.output_node().args[0]
    assert placeholders[0].startswith("renamed_")
    assert [s.arg.name for s in sig.input_specs] == placeholders
    assert [s.arg.name for s in sig.output_specs[:2]] == [o.name for o in outputs[:2]]
    # Kinds, targets and the constant output (None, no node) are the original's.
    assert [(s.kind, s.target) for s in sig.input_specs] == [(s.kind, s.target) for s in case.signature.input_specs]
    assert sig.output_specs[2] == case.signature.output_specs[2]


def test_a_count_the_pass_broke_is_not_carried_away():
    """Specs past the result's outputs stay as they were: the dropped output is still found."""
    case = hm.view_output_case()
    work = case.copy()
    gm, sig = load_pass(spec("drops_last_output"))(work.gm, work.signature)
    assert len(sig.output_specs) == 3 and sig.output_specs[2] == case.signature.output_specs[2]
    kinds = {f.kind for f in verify(hm.view_output_case(), load_pass(spec("drops_last_output")), CONTRACT)}
    assert "output_count_mismatch" in kinds


def test_by_position_leaves_a_matching_signature_unchanged():
    case = hm.no_grad_region_case()
    assert by_position(case.signature, case.gm) == case.signature


def test_a_failing_pass_base_is_named_and_bucketed_by_its_own_frame():
    case = hm.no_grad_region_case().copy()
    with pytest.raises(RuntimeError, match="broken on purpose") as raised:
        load_pass(spec("Fails"))(case.gm, case.signature)
    assert "in pass Fails" in raised.value.__notes__
    (f,) = verify(hm.no_grad_region_case(), load_pass(spec("Fails")), CONTRACT)
    assert f.details["exception"] == "RuntimeError" and f.details["frame"].endswith(":call")
    assert "shaped_passes.py" in f.details["frame"]


def test_a_failing_pass_manager_names_the_pass_and_keeps_its_exception():
    """PassManager wraps a failure in a bare Exception raised from its own frame: fxfuzz raises
    the real one, with PassManager's message (naming the pass) as a note."""
    case = hm.no_grad_region_case().copy()
    with pytest.raises(RuntimeError, match="broken on purpose") as raised:
        load_pass(spec("FAILING_MANAGER"))(case.gm, case.signature)
    (note,) = raised.value.__notes__
    assert "'Fails' pass" in note and "Unchanged" in note
    (f,) = verify(hm.no_grad_region_case(), load_pass(spec("FAILING_MANAGER")), CONTRACT)
    assert f.details["exception"] == "RuntimeError" and "shaped_passes.py" in f.details["frame"]


def test_a_pass_result_without_a_module_is_a_bad_return():
    (f,) = verify(hm.no_grad_region_case(), load_pass(spec("Gone")), CONTRACT)
    assert (f.oracle, f.kind) == ("crash", "bad_return")


@pytest.mark.parametrize(
    "name, message",
    [
        ("optional_signature", "is ambiguous: it can be called with (gm) or (gm, graph_signature)"),
        ("takes_three", "does not take (gm, graph_signature), (gm) or (graph)"),
        ("NeedsArgs", "cannot be built with no arguments"),
        ("NotAPass", "is a class but not a torch.fx PassBase"),
        ("TENSOR", "is a Tensor, not a callable"),
    ],
)
def test_a_spec_of_no_shape_or_two_is_refused_in_one_line(refused, name, message):
    line = refused(["run", "--pass", spec(name), "--no-db"])
    assert message in line and spec(name) in line


@pytest.mark.processes
def test_run_takes_a_gm_to_gm_pass(tmp_path):
    """The whole path: the CLI loads the shape, its worker loads it again, nothing is found."""
    from fxfuzz.cli.main import main

    argv = ["run", "--pass", spec("module_identity"), "--max-examples", "4", "--workers", "1", "--no-db"]
    assert main([*argv, "--report-dir", str(tmp_path)]) == 0


GM_PASS = """import torch


def drop_toggles(gm):
    for node in [n for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled]:
        gm.graph.erase_node(node)
    return gm
"""


@pytest.mark.processes
def test_a_repro_calls_a_gm_to_gm_pass_in_its_shape(tmp_path):
    """The standalone repro (torch only) and ``fxfuzz repro`` both adapt the pass as the campaign did."""
    from fxfuzz.core.identity import identify
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.repro.files import repro_document, write_repro
    from handmade import run_standalone

    (tmp_path / "gmpass.py").write_text(GM_PASS)
    target = f"{tmp_path / 'gmpass.py'}:drop_toggles"
    case = hm.no_grad_region_case()
    (first, *_) = verify(case, load_pass(target), CONTRACT)
    doc = repro_document("gm-pass", first.to_dict(), case_to_dict(case), identify(target))
    py = write_repro(str(tmp_path / "repros"), doc)
    run = run_standalone(py)
    assert run.returncode == 1 and "FAIL" in run.stdout and "Traceback" not in run.stderr, run.stdout + run.stderr
    from fxfuzz.cli.main import main

    assert main(["repro", py]) == 1


def test_a_signature_blind_pass_is_not_held_to_names_it_never_saw():
    """Renaming every node (user inputs too) is no finding for a gm -> gm pass under meaning;
    the same renaming by a pass that took the signature and kept the old names is one."""
    from fxfuzz.core.contract import MEANING

    blind = load_pass(spec("renames_nodes"))
    for make in (hm.no_grad_region_case, hm.view_output_case, hm.pytree_case):
        assert verify(make(), blind, MEANING) == []

    def renames_with_signature(gm, graph_signature):
        gm, _ = blind(gm, graph_signature)
        return gm, by_position(graph_signature, gm)

    kinds = {f.kind for f in verify(hm.no_grad_region_case(), renames_with_signature, MEANING)}
    assert kinds == {"user_inputs_renamed"}
