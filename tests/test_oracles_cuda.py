"""The oracles on CUDA: original against transformed on the GPU, and CPU-against-CUDA parity.

These run only where torch sees a CUDA device; on a CPU-only machine they skip with a reason,
and only the command-line refusal of ``--device cuda`` is tested.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import broken_passes as bp
import handmade as hm
from fuzz.passes import load_pass
from oracles import verify
from strategies import graph_cases

REAL = load_pass("set_grad")
IDENTITY = load_pass("identity")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
CASES = [hm.no_grad_region_case, hm.view_output_case, hm.random_op_case, hm.pytree_case]
aten = torch.ops.aten


def kinds(findings):
    return {(f.oracle, f.kind) for f in findings}


def _sin_but_cos_on_cuda(x):
    # Right on CPU, wrong on CUDA: only the CUDA-side checks can see it.
    return x.cos() if x.is_cuda else x.sin()


def cuda_only_bug(gm, sig):
    gm, sig = REAL(gm, sig)
    for mod in bp.graphs(gm):
        for node in mod.graph.nodes:
            if node.op == "call_function" and node.target is aten.sin.default:
                node.target = _sin_but_cos_on_cuda
        mod.recompile()
    return gm, sig


@cuda_only
@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ambient", [True, False])
def test_correct_passes_are_clean_on_cuda(make, ambient):
    case = make(ambient)
    assert verify(case, REAL, device="cuda") == []
    assert verify(case, IDENTITY, device="cuda") == []


@cuda_only
@pytest.mark.parametrize("ambient", [True, False])
def test_cuda_only_bug_is_seen_on_cuda_and_in_parity(ambient):
    case = hm.no_grad_region_case(ambient)
    assert "value_mismatch" not in {f.kind for f in verify(case, cuda_only_bug)}
    found = kinds(verify(case, cuda_only_bug, device="cuda"))
    assert ("equivalence", "cuda:value_mismatch") in found
    assert ("equivalence", "cpu_vs_cuda:value_mismatch") in found


@cuda_only
def test_bug_on_both_devices_is_reported_once():
    found = [f.kind for f in verify(hm.no_grad_region_case(True), bp.sin_to_cos, device="cuda")]
    assert "value_mismatch" in found and "cuda:value_mismatch" not in found


@cuda_only
@pytest.mark.parametrize(
    "broken, expected",
    [(bp.wrong_sin_grad, ("gradients", "grad_value_mismatch")), (bp.drops_toggles, ("equivalence", "requires_grad_mismatch"))],
)
def test_cpu_findings_still_fire_with_cuda_on(broken, expected):
    assert expected in kinds(verify(hm.no_grad_region_case(True), broken, device="cuda"))


@cuda_only
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph_cases())
def test_real_pass_shows_nothing_on_cuda_that_cpu_does_not(case):
    """torch's pass has known findings on generated cases (fxfuzz-known.txt), all visible on
    CPU; running on CUDA too must add none: no cuda: or cpu_vs_cuda: kind, no new CPU kind."""
    cpu = kinds(verify(case, REAL))
    assert kinds(verify(case, REAL, device="cuda")) - cpu == set()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so --device cuda is accepted")
def test_device_cuda_without_cuda_is_one_line_and_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "fuzz.cli", "run", "--device", "cuda", "--budget", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device" in lines[0] and "CUDA" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
