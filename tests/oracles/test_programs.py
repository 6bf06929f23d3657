"""Program level: generated nn.Module programs, their source, and the end-to-end check."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import broken_passes as bp
import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core import capture
from fxfuzz.core.capture import from_module
from fxfuzz.core.known import at_level, known_reason, load_known
from fxfuzz.core.passes import identity_pass, load_pass
from fxfuzz.core.program import (
    Autocast,
    Call,
    Cond,
    Function,
    GradBlock,
    Input,
    Op,
    Program,
    SetGrad,
    StateTensor,
    StateUpdate,
    load_program,
    module_source,
)
from fxfuzz.oracles.program import check_program, pass_in_export, stages_of
from fxfuzz.oracles.program_runtime import observe_module
from fxfuzz.repro.files import program_repro_source
from fxfuzz.strategies import module_programs
from hypothesis import given, settings
from paths import ROOT
from torch import fx
from torch.export.graph_signature import InputKind

REAL = load_pass("set_grad")


def no_grad_program(ambient: bool = True, update: bool = True) -> Program:
    """p * x; under no_grad sin of it (and a buffer update); a no_grad-decorated helper;
    outputs in a tuple with a dict, None and a constant."""
    updates = (StateUpdate("b0", "add_", "v2"),) if update else ()
    return Program(
        shape=(3,),
        inputs=(Input("x0", 1, True),),
        state=(StateTensor("p0", "param", 2), StateTensor("b0", "buffer", 3)),
        helpers=(Function("helper0", ("a0",), (Op("v1", "cos", ("a0",)),), "v1", "no_grad"),),
        submodules=(),
        body=(
            Op("v0", "mul", ("x0", "self.p0")),
            GradBlock("no_grad", None, (Op("v2", "sin", ("v0",)), *updates)),
            Call("v3", "helper0", ("v0",)),
            Op("v4", "sin", ("v0",)),
        ),
        outputs=(("var", "v4"), ("dict", (("a", "v2"),)), ("none",), ("const", 1), ("var", "v3")),
        ambient_grad=ambient,
    )


def retarget_sin(gm, sig):
    """Computes cos where the graph said sin, keeping every node name (so export goes on)."""
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for n in mod.graph.nodes:
                if n.target is torch.ops.aten.sin.default:
                    n.target = torch.ops.aten.cos.default
            mod.recompile()
    return gm, sig


def kinds(findings):
    return {(f.oracle, f.kind) for f in findings}


def test_source_is_readable_python_that_builds_the_module():
    src = module_source(no_grad_program())
    assert "with torch.no_grad():" in src and "@torch.no_grad()" in src and "self.b0.add_(v2)" in src
    cls, example_inputs, _ = load_program(no_grad_program())
    out = cls()(*example_inputs())
    assert isinstance(out, tuple) and out[2] is None and out[3] == 1 and set(out[1]) == {"a"}


@pytest.mark.parametrize("ambient", [True, False])
def test_real_pass_is_clean_on_handmade_program(ambient):
    assert check_program(no_grad_program(ambient, update=False), REAL) == []


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_def_use_corruption_when_inlining_a_buffer_update():
    """torch 2.13.0, found at the program level: exported under no_grad, the no_grad block
    with ``self.b0.add_(v2)`` is inlined and ``v2``'s users no longer list the add_.
    Exported under grad mode (the block is wrapped instead) the graph stays consistent."""
    by_mode = {}
    for f in check_program(no_grad_program(True), REAL):
        by_mode.setdefault(f.details["ambient_grad"], set()).add((f.oracle, f.kind))
    assert by_mode == {False: {("structure", "def_use_inconsistent")}}


@pytest.mark.parametrize(
    "broken, expected",
    [
        (bp.crashes, ("crash", "pass_raised")),
        (bp.drops_toggles, ("equivalence", "e2e_requires_grad_mismatch")),
        (bp.drops_toggles, ("equivalence", "requires_grad_mismatch")),
        (bp.drops_toggles, ("gradients", "e2e_grad_value_mismatch")),
        # The renamed output no longer matches the signature: export itself then fails.
        (bp.sin_to_cos, ("crash", "export_raised")),
        (lambda gm, sig: retarget_sin(*REAL(gm, sig)), ("equivalence", "e2e_value_mismatch")),
    ],
)
def test_program_check_fires_on_broken_pass_inside_export(broken, expected):
    """The broken pass runs where export runs the real one; both the captured graph and the
    end-to-end comparison see what it did."""
    assert expected in kinds(check_program(no_grad_program(), broken))


def test_an_fxfuzz_failure_after_export_is_raised_not_reported_as_export_raised(monkeypatch):
    """Only torch.export's own failure is a crash finding: fxfuzz failing while it builds the
    case from what export handed the pass is a harness error, and says so."""

    def broken(gm):
        raise RuntimeError("fxfuzz failed after export")

    monkeypatch.setattr(capture, "other_sizes", broken)
    with pytest.raises(RuntimeError, match="fxfuzz failed after export"):
        check_program(no_grad_program(), REAL)


def test_one_export_per_grad_mode_serves_the_captured_graph_and_end_to_end(monkeypatch):
    """The ExportedProgram the end-to-end check runs is the one whose pass input was
    captured: two exports for the two grad modes (there were four), and still every check."""
    exports = []
    real_export = torch.export.export

    def counting(*args, **kwargs):
        exports.append(torch.is_grad_enabled())
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counting)
    found = kinds(check_program(no_grad_program(), lambda gm, sig: retarget_sin(*REAL(gm, sig))))
    assert sorted(exports) == [False, True]
    assert {("equivalence", "value_mismatch"), ("equivalence", "e2e_value_mismatch")} <= found


def test_findings_say_level_and_grad_mode():
    findings = check_program(no_grad_program(True), bp.drops_toggles)
    assert {f.details["level"] for f in findings} == {"program"}
    assert {f.details["ambient_grad"] for f in findings} <= {True, False}
    assert any(f.details.get("source") == "captured_graph" for f in findings)


@settings(max_examples=20)
@given(module_programs())
def test_generated_programs_run_eagerly_under_both_grad_modes(program):
    """The generator only makes valid programs: eager PyTorch runs them, forward and backward."""
    cls, example_inputs, _ = load_program(program)
    for mode in (True, False):
        seen = observe_module(cls(), example_inputs(), mode)
        assert seen["error"] is None, module_source(program)
        assert seen["backward_error"] is None, module_source(program)
        assert torch.is_grad_enabled()


@pytest.mark.slow
@settings(max_examples=5)
@given(module_programs())
def test_identity_inside_export_agrees_with_real_pass_on_eager_semantics(program):
    """Where the real pass's export agrees with eager, so does export with the set-grad
    pass replaced by the identity (the toggles stay in the graph and run)."""
    if check_program(program, REAL):
        return  # a known torch bug on this program; the real-pass campaign reports it
    assert [f for f in check_program(program, load_pass("identity")) if f.kind.startswith("e2e_")] == []


@pytest.mark.processes
def test_repro_is_standalone_and_exits_by_outcome(tmp_path):
    ok = tmp_path / "ok.py"
    ok.write_text(program_repro_source(no_grad_program(update=False), "control"))
    r = subprocess.run([sys.executable, str(ok)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: exported and eager agree" in r.stdout


# torch 2.13.0, found by `fxfuzz run --level program`: an unused .detach() of a tensor
# attribute makes lift_constants_pass raise StopIteration during export.
UNUSED_DETACH = Program(
    shape=(),
    inputs=(Input("x0", 1, False),),
    state=(StateTensor("c0", "const", 2),),
    helpers=(),
    submodules=(),
    body=(Op("v0", "detach", ("self.c0",)), Op("v1", "sin", ("x0",))),
    outputs=(("var", "v1"),),
)


@pytest.mark.processes
@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_export_crash_on_unused_detach_of_constant(tmp_path):
    found = check_program(UNUSED_DETACH, REAL)
    (f,) = {(f.oracle, f.kind, f.details["frame"].split(":")[0]) for f in found}
    assert f == ("crash", "export_raised", "torch/_export/passes/lift_constants_pass.py")
    assert {at_level("program", bucket_id(f)) for f in found} <= set(load_known(os.path.join(ROOT, "fxfuzz-known.txt")))
    script = tmp_path / "repro.py"
    script.write_text(program_repro_source(UNUSED_DETACH))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 1 and "StopIteration" in r.stdout, r.stdout + r.stderr


# torch 2.13.0, found by `fxfuzz run --level program` (minimized by shrinking):
#     with torch.no_grad():
#         with torch.autocast("cpu", dtype=torch.bfloat16):
#             torch.set_grad_enabled(False)   # redundant: grad is already off
#         v0 = self.p0 * 2.0
# Exported under grad mode, v0 requires grad: the set-grad pass drops the no_grad region
# after the autocast block. Eager, v0 does not.
GRAD_TOGGLE_IN_AUTOCAST = Program(
    shape=(),
    inputs=(Input("x0", 1, False),),
    state=(StateTensor("p0", "param", 2),),
    helpers=(),
    submodules=(),
    body=(GradBlock("no_grad", None, (Autocast((SetGrad(False),)), Op("v0", "scale", ("self.p0",)))),),
    outputs=(("var", "v0"),),
)


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_no_grad_lost_after_toggle_inside_autocast():
    found = {(f.details["ambient_grad"], f.kind) for f in check_program(GRAD_TOGGLE_IN_AUTOCAST, REAL)}
    # Both the captured graph (the set-grad pass alone) and the exported program are wrong.
    assert {(True, "requires_grad_mismatch"), (True, "e2e_requires_grad_mismatch")} <= found
    # The end-to-end save/load round trip of either program fails too: its autocast region
    # returns nothing, a HOP torch.export.load rejects (fxfuzz-known.txt, downstream-save_load_raised).
    assert {(True, "save_load_raised"), (False, "save_load_raised")} <= found
    assert not any(mode is False and kind != "save_load_raised" for mode, kind in found)


# torch 2.13.0, found by `fxfuzz run --level program`: a cond branch holding a no_grad block,
# then an autocast block, then a no_grad block. Export under grad mode fails in the autocast
# pass (AttributeError: 'GraphModule' object has no attribute 'submod_1').
COND_AUTOCAST_NO_GRAD = Program(
    shape=(3,),
    inputs=(Input("x0", 1, False),),
    state=(),
    helpers=(
        Function("branch0", ("a0",), (GradBlock("no_grad", None, (Op("v0", "sin", ("a0",)),)),), "v0"),
        Function("branch1", ("a0",), (Op("v1", "cos", ("a0",)),), "v1"),
    ),
    submodules=(),
    body=(
        Cond("v2", "x0", "branch0", "branch1", ("x0",)),
        Autocast((Op("v3", "matmul", ("x0", "x0")),)),
        GradBlock("no_grad", None, (Op("v4", "add", ("x0", "x0")),)),
    ),
    outputs=(("var", "v2"), ("var", "v4"), ("var", "v3")),
)


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_export_crash_on_cond_then_autocast_then_no_grad():
    raised = [f for f in check_program(COND_AUTOCAST_NO_GRAD, REAL) if f.kind == "export_raised"]
    crashes = {(f.details["ambient_grad"], f.details["exception"], f.message.split(": ")[-1]) for f in raised}
    assert crashes == {(True, "AttributeError", "'GraphModule' object has no attribute 'submod_1'")}
    assert {at_level("program", bucket_id(f)) for f in raised} <= set(
        load_known(os.path.join(ROOT, "fxfuzz-known.txt"))
    )


def test_program_check_leaves_no_compiled_cond_branches_behind():
    """Eager torch.cond installs a dynamo-compiled global per program; the check drops them,
    so memory stays bounded over a long campaign."""
    import torch._higher_order_ops.cond as cond_module

    check_program(COND_AUTOCAST_NO_GRAD, REAL)
    assert not [n for n in vars(cond_module) if n.startswith("__compiled_fn")]


def test_a_pipeline_stands_in_for_every_export_stage(monkeypatch):
    """``export`` runs where torch.export runs its first stage and replaces the later ones:
    export must not call its own autocast pass as well (here one that raises)."""
    import torch._export.passes.replace_autocast_with_hop_pass as autocast_module

    pipeline = load_pass("export")

    def must_not_run(gm, sig):
        raise AssertionError("export ran its own autocast pass after the pipeline")

    monkeypatch.setattr(autocast_module, "replace_autocast_with_hop_pass", must_not_run)
    assert check_program(no_grad_program(update=False), pipeline) == []


def test_capture_keeps_lifted_constants_when_export_fails_after_the_pass():
    """A tensor forward creates is lifted by export before the pass; where export then fails
    (here in the autocast pass, the crash above), the captured case still holds its value
    and the program shows torch's crash alone (it once showed fxfuzz's KeyError instead)."""
    program = dataclasses.replace(
        COND_AUTOCAST_NO_GRAD,
        body=(*COND_AUTOCAST_NO_GRAD.body, Op("v5", "add_const", ("x0",))),
        outputs=(*COND_AUTOCAST_NO_GRAD.outputs, ("var", "v5")),
    )
    program_class, example_inputs, _ = load_program(program)
    with torch.enable_grad(), pass_in_export(stages_of(REAL), REAL):
        case = from_module(program_class(), example_inputs())
    specs = case.signature.input_specs
    assert InputKind.CONSTANT_TENSOR in {s.kind for s in specs} and len(case.inputs) == len(specs)
    crashes = {
        (f.details["ambient_grad"], f.details["exception"]) for f in check_program(program, REAL) if f.oracle == "crash"
    }
    assert crashes == {(True, "AttributeError")}


# torch 2.13.0 defects of the run_decompositions stage, found by `fxfuzz run --level program`
# (2026-11-25) and minimized by hand. Each fails the same with the identity in place of the
# set-grad pass, so torch's stage is at fault, not the pass (the test below shows it).
# 1. A parameter updated under no_grad: the module of run_decompositions() writes the update
#    back with a copy_ outside no_grad, and the call raises "a leaf Variable that requires
#    grad is being used in an in-place operation" (ep.module() and eager run it).
PARAMETER_COPY_UNDER_NO_GRAD = Program(
    shape=(3,),
    inputs=(Input("x0", 1, False),),
    state=(StateTensor("p0", "param", 2),),
    helpers=(),
    submodules=(),
    body=(GradBlock("no_grad", None, (StateUpdate("p0", "copy_", "x0"),)), Op("v0", "sin", ("x0",))),
    outputs=(("var", "v0"),),
)
# 2. Exported under no_grad, an enable_grad block reading a parameter: run_decompositions
#    raises IndexError "list index out of range" in export's set_missing_meta_vals.
ENABLE_GRAD_UNDER_NO_GRAD = Program(
    shape=(3,),
    inputs=(Input("x0", 1, False),),
    state=(StateTensor("p0", "param", 2),),
    helpers=(),
    submodules=(),
    body=(GradBlock("enable_grad", None, (Op("v0", "sub", ("x0", "self.p0")),)),),
    outputs=(("var", "v0"),),
    ambient_grad=False,
)
# 3. A buffer set from a Python scalar (`self.b0.copy_(0.5)`): run_decompositions raises
#    AttributeError "'float' object has no attribute 'name'" in _remove_unnecessary_copy_op_pass
#    (no grad toggle needed; the no_grad block is how programs update state).
SCALAR_COPY_INTO_BUFFER = Program(
    shape=(3,),
    inputs=(Input("x0", 1, False),),
    state=(StateTensor("b0", "buffer", 3),),
    helpers=(),
    submodules=(),
    body=(GradBlock("no_grad", None, (StateUpdate("b0", "copy_", "0.5"),)), Op("v0", "sin", ("x0",))),
    outputs=(("var", "v0"),),
)


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
@pytest.mark.parametrize(
    "program, bucket",
    [
        (PARAMETER_COPY_UNDER_NO_GRAD, "program-equivalence-e2e_decomposed_raises_differently-bafa1db3"),
        (ENABLE_GRAD_UNDER_NO_GRAD, "program-downstream-run_decompositions_raised-60b8e50e"),
        (SCALAR_COPY_INTO_BUFFER, "program-downstream-run_decompositions_raised-df00e591"),
    ],
)
def test_known_run_decompositions_defects_need_no_pass(program, bucket):
    program_class, example_inputs, _ = load_program(program)
    for pass_fn in (REAL, identity_pass):
        found = {at_level("program", bucket_id(f)) for f in check_program(program, pass_fn)}
        assert bucket in found, (pass_fn, found)
    # Whatever else torch's pass shows on it is another known defect (a region that only
    # updates state is DCE's and save/load's); this one is recorded too.
    known = load_known(os.path.join(ROOT, "fxfuzz-known.txt"))
    found = {at_level("program", bucket_id(f)) for f in check_program(program, REAL)}
    assert bucket in known and all(known_reason(known, b) for b in found), found - set(known)


# torch 2.13.0, found by `fxfuzz run --level program` (2026-11-25), minimized by hand: exported
# under no_grad, an enable_grad region starting with torch.cond (the known dropped region,
# equivalence-requires_grad_mismatch-ce6d8dfe), seen end to end: ep.module()'s output does not
# require grad and the input's gradient loses the cond's share.
COND_IN_ENABLE_GRAD_UNDER_NO_GRAD = Program(
    shape=(2,),
    inputs=(Input("x0", 1, True),),
    state=(),
    helpers=(
        Function("branch0", ("a0",), (Op("v1", "clone", ("a0",)),), "v1"),
        Function("branch1", ("a0",), (Op("v2", "sigmoid", ("a0",)),), "v2"),
    ),
    submodules=(),
    body=(GradBlock("set_grad_enabled", True, (Cond("v3", "x0", "branch0", "branch1", ("x0",)),)),),
    outputs=(("var", "v3"), ("var", "x0")),
    ambient_grad=False,
)


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_dropped_region_seen_end_to_end():
    found = {at_level("program", bucket_id(f)) for f in check_program(COND_IN_ENABLE_GRAD_UNDER_NO_GRAD, REAL)}
    assert {
        "program-equivalence-requires_grad_mismatch-ce6d8dfe",
        "program-gradients-grad_value_mismatch-7964935e",
        "program-equivalence-e2e_requires_grad_mismatch-396791b0",
        "program-gradients-e2e_grad_value_mismatch-2c2acb5f",
    } <= found
    known = load_known(os.path.join(ROOT, "fxfuzz-known.txt"))
    assert all(known_reason(known, b) for b in found), found
