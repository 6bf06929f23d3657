"""The oracles on CUDA: original against transformed on the GPU, and CPU-against-CUDA parity.

The CUDA tests run only where torch sees a CUDA device; on a CPU-only machine they skip with a
reason. What ``verify`` does for CUDA is ``check_on_device``, and CPU can stand in for the second
device there, so its glue, kind prefixes, deduplication and parity rule are tested everywhere.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager

import broken_passes as bp
import handmade as hm
import pytest
import torch
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import apply_pass, input_labels, verify
from fxfuzz.oracles.execute import on_device, run_graph
from fxfuzz.oracles.semantics import Reference, check_on_device, compare_graphs
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, settings
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

REAL = load_pass("set_grad")
IDENTITY = load_pass("identity")
cuda_only = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"
)
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
    [
        (bp.wrong_sin_grad, ("gradients", "grad_value_mismatch")),
        (bp.drops_toggles, ("equivalence", "requires_grad_mismatch")),
    ],
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


# --- CPU standing in for the second device ----------------------------------------------
# A bug that only the second device shows is simulated by targets that misbehave only while
# the stand-in's runs are made (the test switches them on between the CPU side and the rest).
_STANDIN = {"active": False}


def _sin_but_cos_on_second(x):
    return x.cos() if _STANDIN["active"] else x.sin()


def _sin_wrong_grad_on_second(x):
    # The same forward bits either way; on the "second device" the derivative is doubled.
    return x.detach().sin() + 2 * (x - x.detach()) if _STANDIN["active"] else x.sin()


def _second_device_bug(target):
    def broken(gm, sig):
        gm, sig = REAL(gm, sig)
        for node in bp._nodes(gm, bp._calls(aten.sin.default)):
            node.target = target
        return bp._recompile(gm), sig

    return broken


@contextmanager
def _standing_in():
    _STANDIN["active"] = True
    try:
        yield
    finally:
        _STANDIN["active"] = False


def _cpu_side(case, pass_fn):
    """What ``verify`` has in hand before the second device: the result, the CPU reference,
    the CPU findings and the transformed graph's CPU observation."""
    gm, _ = apply_pass(case, pass_fn)
    ref = Reference(case.gm, case.inputs, case.ambient_grad, input_labels(case), "cpu")
    semantic, got = compare_graphs(gm, ref)
    return gm, ref, semantic, got


def _device_dependent_original(ambient: bool):
    """An original whose own kernel gives other values on the second device."""
    case = hm.nondeterministic_case(ambient)
    for node in case.gm.graph.nodes:
        if node.target is hm._system_noise:
            node.target = _sin_but_cos_on_second
    case.gm.recompile()
    return case


@pytest.mark.parametrize(
    "make", CASES + [hm.nondeterministic_case, _device_dependent_original], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("ambient", [True, False])
@pytest.mark.parametrize("pass_fn", [REAL, IDENTITY], ids=["set_grad", "identity"])
def test_second_device_is_quiet_on_correct_passes(make, ambient, pass_fn):
    gm, ref, semantic, got = _cpu_side(make(ambient), pass_fn)
    assert semantic == []
    with _standing_in():
        assert check_on_device(gm, ref, got, set(), "cpu") == []


@pytest.mark.parametrize(
    "target, kind",
    [
        (_sin_but_cos_on_second, ("equivalence", "value_mismatch")),
        (_sin_wrong_grad_on_second, ("gradients", "grad_value_mismatch")),
    ],
    ids=["values", "gradients"],
)
@pytest.mark.parametrize("ambient", [True, False])
def test_bug_only_on_second_device_is_seen_there_and_in_parity(target, kind, ambient):
    gm, ref, semantic, got = _cpu_side(hm.no_grad_region_case(ambient), _second_device_bug(target))
    assert semantic == []
    with _standing_in():
        found = kinds(check_on_device(gm, ref, got, set(), "cpu"))
    oracle, name = kind
    assert {(oracle, f"cpu:{name}"), (oracle, f"cpu_vs_cpu:{name}")} <= found


def test_bug_on_both_devices_is_reported_once_with_cpu_standing_in():
    gm, ref, semantic, got = _cpu_side(hm.no_grad_region_case(True), bp.sin_to_cos)
    assert "value_mismatch" in {f.kind for f in semantic}
    assert check_on_device(gm, ref, got, {f.kind for f in semantic}, "cpu") == []


def test_parity_blames_the_pass_only_where_the_original_agrees_across_devices():
    """The transformed graph differs across devices exactly as the original does: torch's
    kernel, not the pass. The same difference planted by the pass into an original that agrees
    across devices is the pass's."""
    gm, ref, _, got = _cpu_side(_device_dependent_original(True), REAL)
    with _standing_in():
        assert check_on_device(gm, ref, got, set(), "cpu") == []
    gm, ref, _, got = _cpu_side(hm.no_grad_region_case(True), _second_device_bug(_sin_but_cos_on_second))
    with _standing_in():
        assert ("equivalence", "cpu_vs_cpu:value_mismatch") in kinds(check_on_device(gm, ref, got, set(), "cpu"))


@cuda_only
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph_cases())
def test_generated_graphs_that_run_on_cpu_run_on_cuda(case):
    """Where the original cannot run on CUDA, the CUDA checks compare two errors: nothing."""
    cpu = run_graph(case.gm, case.inputs, case.ambient_grad)
    cuda = run_graph(on_device(case.gm, "cuda"), case.inputs, case.ambient_grad, "cuda")
    assert not cpu.ok or cuda.ok, repr(cuda.error)


@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so --device cuda is accepted")
def test_device_cuda_without_cuda_is_one_line_and_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "run", "--device", "cuda", "--budget", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device" in lines[0] and "CUDA" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def _device_recording_graph() -> fx.GraphModule:
    """What pre-dispatch export records on CPU: a factory call and a metadata assertion that
    name the device, one of them inside a nested graph."""
    inner = fx.Graph()
    y = inner.placeholder("y")
    ones = inner.call_function(aten.ones.default, ([3],), {"device": torch.device("cpu"), "pin_memory": False})
    inner.output(inner.call_function(aten.add.Tensor, (y, ones)))
    root = torch.nn.Module()
    root.sub = fx.GraphModule(torch.nn.Module(), inner)
    g = fx.Graph()
    x = g.placeholder("x")
    kwargs = {"dtype": torch.float32, "device": torch.device("cpu"), "layout": torch.strided}
    g.call_function(aten._assert_tensor_metadata.default, (x,), kwargs)
    g.output(g.call_module("sub", (x,)))
    return fx.GraphModule(root, g)


def test_on_device_retargets_the_devices_a_graph_records():
    """Moved as it is, a graph recorded on CPU raises on any other device, original and
    transformed alike, and the second-device checks would compare nothing. The meta device
    stands in for CUDA here."""
    gm = _device_recording_graph()
    x = torch.empty(3, device="meta")
    with pytest.raises(Exception):  # noqa: B017  a CPU kernel refusing a meta tensor: its type is torch's to choose
        gm(x)
    moved = on_device(gm, "meta")
    assert moved(x).device.type == "meta"
    assert on_device(gm, "cpu") is gm and on_device(moved, "meta") is moved
    with pytest.raises(Exception):  # noqa: B017  a CPU kernel refusing a meta tensor: its type is torch's to choose
        gm(x)  # the original is left as it was


@pytest.mark.parametrize("device", ["cpu:0", pytest.param("cuda", marks=cuda_only)])
def test_on_device_names_the_device_as_its_tensors_report_it(device):
    """Export records cuda:0, never plain "cuda". torch's device assertion is strict under fake
    tensors (where cond with grad traces its branches) and lenient in eager kernels, so a graph
    retargeted to plain "cuda" raised on CUDA only where grad made cond trace: a cuda: finding
    of fxfuzz's making (the first adversarial GPU campaign showed it). "cpu:0" against CPU
    tensors, which report plain "cpu", shows the same strictness on any machine."""
    moved = on_device(_device_recording_graph(), device)
    x = torch.randn(3, device=device)
    recorded = {a for n in moved.graph.nodes for a in n.kwargs.values() if isinstance(a, torch.device)}
    assert recorded == {x.device}
    with FakeTensorMode(allow_non_fake_inputs=True):
        moved(x)


def test_on_device_enters_autocast_regions_for_the_new_device():
    """An autocast region recorded for CPU does nothing on CUDA: moved as it is, the CUDA runs
    would never exercise the pass's handling of autocast."""
    case = hm.no_grad_region_case(True)
    g = case.gm.graph
    first = next(n for n in g.nodes if n.op == "call_function")
    with g.inserting_before(first):
        enter = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, False))
    with g.inserting_after(first):
        g.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    case.gm.recompile()
    moved = on_device(case.gm, "meta")
    entered = [n.args[0] for n in moved.graph.nodes if n.target is torch.amp.autocast_mode._enter_autocast]
    assert entered == ["meta"] and enter.args[0] == "cpu"
