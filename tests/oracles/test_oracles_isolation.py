"""Every run starts from the process state the campaign started with: what a graph (or torch
failing inside it) leaves behind in the thread's dispatch-key sets is put back, and a recorded
error does not keep torch's guards alive to restore stale state later."""

from __future__ import annotations

import gc
import operator

import handmade as hm
import torch
import torch.autograd.forward_ad as fwAD
from fxfuzz.oracles import verify
from fxfuzz.oracles.execute import GlobalState, _dispatch_keys, run_graph
from fxfuzz.oracles.forward_ad import tangents
from torch import fx

aten = torch.ops.aten
FUNCTIONALIZE = torch._C.DispatchKey.Functionalize


def _map_reading_a_tensor_attribute() -> fx.GraphModule:
    """``map`` whose body reads a tensor through ``get_attr`` (the adversarial domain draws
    these): torch fails inside ``materialize_as_graph`` under forward-mode AD and leaves the
    autograd keys excluded (torch 2.13)."""
    body = fx.Graph()
    row, c = body.placeholder("row"), body.get_attr("c")
    body.output((body.call_function(aten.add.Tensor, (row, c)),))
    root = torch.nn.Module()
    root.body_graph_0 = fx.GraphModule({"c": torch.ones(3)}, body)
    g = fx.Graph()
    x, b = g.placeholder("x"), g.get_attr("body_graph_0")
    m = g.call_function(torch.ops.higher_order.map_impl, (b, [x], []))
    g.output((g.call_function(operator.getitem, (m, 0)),))
    return fx.GraphModule(root, g)


def test_dispatch_keys_torch_leaves_behind_are_restored():
    before = _dispatch_keys()
    x = torch.randn(2, 3, requires_grad=True)
    failed = tangents(_map_reading_a_tensor_attribute(), (x,), True, "cpu")
    assert failed.error is not None
    assert _dispatch_keys() == before
    # What broke every later example of a campaign: forward-mode AD on a plain int tensor.
    with fwAD.dual_level():
        assert fwAD.unpack_dual(torch.tensor([1])).tangent is None


def _leaves_a_guard_and_raises(x: torch.Tensor) -> torch.Tensor:
    torch._C._dispatch_tls_set_dispatch_key_excluded(FUNCTIONALIZE, True)
    guard = torch._C._ForceDispatchKeyGuard(
        torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()
    )
    guard.__enter__()  # its state restores, on the guard's destruction, the exclusion above
    raise RuntimeError("failed half-way")


def test_a_recorded_error_frees_torchs_guards_at_once():
    """The run's error keeps the raising frame alive; freeing its guard whenever the error
    goes (or the garbage collector gets to it) would restore a stale exclusion then."""
    before = _dispatch_keys()
    run = run_graph(_leaves_a_guard_and_raises, (torch.ones(2),), True)
    assert isinstance(run.error, RuntimeError) and "half-way" in str(run.error)
    assert _dispatch_keys() == before
    del run
    gc.collect()
    assert _dispatch_keys() == before
    assert not torch._C._dispatch_tls_is_dispatch_key_excluded(FUNCTIONALIZE)


def _leaks_process_state(gm, sig):
    """A pass whose own code (not the graph it returns) leaves grad mode, autocast and a
    dispatch key changed."""
    torch.set_grad_enabled(not torch.is_grad_enabled())
    torch.set_autocast_enabled("cpu", True)
    torch._C._dispatch_tls_set_dispatch_key_excluded(FUNCTIONALIZE, True)
    return gm, sig


def test_what_the_pass_itself_leaves_changed_is_put_back():
    before = GlobalState.read()
    findings = verify(hm.no_grad_region_case(True), _leaks_process_state)
    assert GlobalState.read() == before
    # The pass ran twice (the second time on its own output) and every run was judged from a
    # clean state: the identity pass it really is passes the run-based checks, and only what
    # it left changed is reported (tests/oracles/test_state_leak.py).
    run_based = [f for f in findings if f.oracle in ("equivalence", "gradients", "idempotence")]
    assert {(f.kind, tuple(f.details["state"])) for f in run_based} == {
        ("state_leak", ("grad mode", "autocast state"))
    }, findings
