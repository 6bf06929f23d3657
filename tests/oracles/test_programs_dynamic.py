"""Program level with dynamic shapes (#15): programs exported with ``dynamic_shapes``, sizes read
inside grad blocks, and the end-to-end checks at other sizes inside the Dim's range."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import broken_passes as bp
import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.capture import from_module
from fxfuzz.core.passes import REGISTRY, load_pass
from fxfuzz.core.program import Cond, Function, GradBlock, Input, Op, Program, Size, load_program, module_source
from fxfuzz.core.symbols import valid_sizes
from fxfuzz.oracles.downstream import stages_forced
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.program import check_program, pass_in_export, shrinks_with_shared_checks
from fxfuzz.repro.files import program_repro_source
from fxfuzz.repro.program_check import main
from fxfuzz.strategies import module_programs
from hypothesis import HealthCheck, given, seed, settings
from paths import ROOT

REAL = load_pass("set_grad")

# The size crosses the no_grad region's boundary twice: read inside (a SymInt operand of the
# region, and one of its outputs), used inside (x.sin() + n) and after it (the view).
SIZES_ACROSS_REGIONS = Program(
    shape=(3, 3),
    inputs=(Input("x0", 1, True),),
    state=(),
    helpers=(),
    submodules=(),
    body=(
        GradBlock(
            "no_grad", None, (Size("v0", "x0", 0, 2), Op("v1", "sin", ("x0",)), Op("v2", "add_size", ("v1", "v0", "2")))
        ),
        Op("v3", "view_size", ("v2", "v0", "2")),
    ),
    outputs=(("var", "v3"),),
    dynamic=True,
    dim_max=8,
)


def test_a_seeded_share_of_programs_is_dynamic():
    drawn: list[Program] = []

    @seed(15)
    @settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(module_programs())
    def draw(p):
        drawn.append(p)

    draw()
    dynamic = [p for p in drawn if p.dynamic]
    assert len(dynamic) >= 0.25 * len(drawn), (len(dynamic), len(drawn))
    assert {p.dim_max is None for p in dynamic} == {True, False}  # Dim.AUTO and ranged Dims
    assert all(min(p.shape) >= 2 and len(p.other_sizes()) >= 2 for p in dynamic)
    # A size read inside a grad block of forward, which the rest of forward can then use.
    assert any(isinstance(b, GradBlock) and any(isinstance(s, Size) for s in b.body) for p in dynamic for b in p.body)


def test_source_carries_the_dynamic_shapes_and_rebuilds_inputs_at_a_size():
    source = module_source(SIZES_ACROSS_REGIONS)
    assert 'n = torch.export.Dim("n", min=2, max=8)' in source and "return ({0: n, 1: n},)" in source
    assert "def other_sizes():\n    return (2, 4, 8)" in source
    cls, example_inputs, dynamic_shapes = load_program(SIZES_ACROSS_REGIONS)
    assert example_inputs(5)[0].shape == (5, 5) and example_inputs()[0].shape == (3, 3)
    ep = torch.export.export(cls(), example_inputs(), dynamic_shapes=dynamic_shapes, strict=False)
    assert ep.module()(*example_inputs(5))[0].shape == (5, 5)
    auto = load_program(dataclasses.replace(SIZES_ACROSS_REGIONS, dim_max=None))[2]
    assert auto == ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},)


def test_real_pass_is_quiet_at_every_size():
    assert check_program(SIZES_ACROSS_REGIONS, REAL) == []


def test_a_pass_dropping_symint_operands_is_found_only_at_other_sizes():
    """Right at the traced size: the static program shows nothing; the dynamic one is found
    end to end (every stage) and on the captured graph, each finding at another size."""
    assert check_program(dataclasses.replace(SIZES_ACROSS_REGIONS, dynamic=False), bp.drops_symint_operands) == []
    found = check_program(SIZES_ACROSS_REGIONS, bp.drops_symint_operands)
    assert found and all("sizes" in f.details for f in found), found
    assert all(f.details["sizes"]["n"] in (2, 4, 8) for f in found if f.kind.startswith("e2e_"))
    assert {"e2e_value_mismatch", "e2e_decomposed_value_mismatch", "e2e_saved_value_mismatch", "value_mismatch"} <= {
        f.kind for f in found
    }


@pytest.mark.slow
def test_other_sizes_and_later_stages_run_for_the_share_and_always_while_forced():
    """Outside the share only ep.module() at the traced size is checked end to end (the
    captured graph's verify still runs its own other sizes); a bucket of the shared checks
    shrinking forces them on every attempt."""
    quiet = check_program(SIZES_ACROSS_REGIONS, bp.drops_symint_operands, share=0.0)
    with stages_forced():
        forced = {f.kind for f in check_program(SIZES_ACROSS_REGIONS, bp.drops_symint_operands, share=0.0)}
    assert quiet and not [f for f in quiet if f.kind.startswith("e2e_")], quiet
    assert {"e2e_value_mismatch", "e2e_decomposed_value_mismatch", "e2e_saved_value_mismatch"} <= forced


def test_the_buckets_of_shared_checks_are_the_ones_forced_while_shrinking():
    sized = {"level": "program", "sizes": {"n": 4}}
    assert shrinks_with_shared_checks(Finding("equivalence", "e2e_decomposed_value_mismatch", ""))
    assert shrinks_with_shared_checks(Finding("equivalence", "e2e_saved_grad_mismatch", ""))
    assert shrinks_with_shared_checks(Finding("equivalence", "e2e_value_mismatch", "", sized))
    assert shrinks_with_shared_checks(Finding("downstream", "save_load_raised", ""))
    assert not shrinks_with_shared_checks(Finding("equivalence", "e2e_value_mismatch", "", {"level": "program"}))
    assert not shrinks_with_shared_checks(Finding("structure", "leftover_call", ""))


def test_a_pass_freezing_symint_operands_is_found():
    """An int operand where the region takes a SymInt: the structure check sees it at the
    traced size, and export itself fails after the pass."""
    found = {(f.kind, "sizes" in f.details) for f in check_program(SIZES_ACROSS_REGIONS, bp.freezes_symint_operands)}
    assert {("malformed_hop", False), ("export_raised", False)} <= found


def test_sizes_a_trace_specialized_are_not_tried():
    """Dim.AUTO lets export specialize a dim that meets a static size: no other size is valid."""

    class Pinned(torch.nn.Module):
        def forward(self, x):
            return x + torch.ones(3)

    auto = ({0: torch.export.Dim.AUTO},)
    assert valid_sizes(from_module(Pinned(), (torch.randn(3),), dynamic_shapes=auto).gm, (2, 4)) == ()


def test_repro_check_runs_at_the_other_sizes(capsys):
    cls, example_inputs, dynamic_shapes = load_program(SIZES_ACROSS_REGIONS)
    sizes = SIZES_ACROSS_REGIONS.other_sizes()
    assert main(cls, example_inputs, dynamic_shapes, sizes) == 0
    with pass_in_export((REGISTRY["set_grad"],), bp.drops_symint_operands):
        assert main(cls, example_inputs, dynamic_shapes, sizes) == 1
    out = capsys.readouterr().out
    assert "at size n=2: output leaf 0" in out and "at size n=3" not in out


@pytest.mark.processes
def test_standalone_repro_exports_with_the_dynamic_shapes(tmp_path):
    path = tmp_path / "repro.py"
    path.write_text(program_repro_source(SIZES_ACROSS_REGIONS, "control"))
    assert "sys.exit(main(Program, example_inputs, dynamic_shapes(), other_sizes()))" in path.read_text()
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and "OK: exported and eager agree" in r.stdout, r.stdout + r.stderr


# torch 2.13.0, met by the seeded real-pass sample of dynamic programs (on their static twins
# too): a tensor constant created inside a torch.cond branch is lifted into the branch
# subgraph, and then torch.export.save raises SerializeError ("getattr nodes containing tensors
# should not appear in the graph") and run_decompositions raises "Attempting to use
# FunctionalTensor on its own". The program export itself produces; no pass is involved.
CONSTANT_IN_COND_BRANCH = Program(
    shape=(3,),
    inputs=(Input("x0", 1, False),),
    state=(),
    helpers=(
        Function("branch0", ("a0",), (Op("v1", "add_const", ("a0",)),), "v1"),
        Function("branch1", ("a0",), (Op("v2", "sin", ("a0",)),), "v2"),
    ),
    submodules=(),
    body=(Cond("v3", "x0", "branch0", "branch1", ("x0",)),),
    outputs=(("var", "v3"),),
)


@pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded against torch 2.13")
def test_known_stage_failures_on_a_constant_in_a_cond_branch():
    ids = {bucket_id(f) for f in check_program(CONSTANT_IN_COND_BRANCH, REAL)}
    assert ids == {"downstream-run_decompositions_raised-1cab78ce", "downstream-save_load_raised-4eeed781"}
    known = open(os.path.join(ROOT, "fxfuzz-known.txt")).read()
    assert all(f"\n{i} " in known for i in ids)
