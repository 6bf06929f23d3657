"""``from_module`` hands back exactly what torch.export gives the set-grad pass."""

from __future__ import annotations

import pytest
import torch
import torch._export.passes.replace_set_grad_with_hop_pass as set_grad_module
from fxfuzz.core import capture
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.execute import run_graph
from fxfuzz.strategies import ExportFailed, from_module
from torch.export.graph_signature import InputKind

SET_GRAD = torch._C._set_grad_enabled
REAL = load_pass("set_grad")
AUTOCAST = load_pass("autocast")


class BufferUpdate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
        self.register_buffer("buf", torch.zeros(3))
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.c = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x):
        y = x * self.w
        with torch.no_grad():
            self.buf.add_(y)
            z = y.sin() + self.c + torch.tensor(4.0)
        return y + self.scratch, z


class CondWithGradBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x):
        def true_fn(x, w):
            with torch.no_grad():
                a = x.cos()
            return (a + w,)

        def false_fn(x, w):
            return (x.sin() * w,)

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x, self.w))


class Autocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.t()
        with torch.no_grad():
            z = y.float().sum()
        return y, z


def _toggles(gm):
    return [
        n for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes if n.target is SET_GRAD
    ]


def test_buffer_update_case_matches_the_signature_and_runs():
    mod = BufferUpdate()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    case = from_module(mod, (x,))
    kinds = [s.kind for s in case.signature.input_specs]
    assert kinds == [
        InputKind.PARAMETER,
        InputKind.BUFFER,
        InputKind.BUFFER,
        InputKind.CONSTANT_TENSOR,
        InputKind.CONSTANT_TENSOR,
        InputKind.USER_INPUT,
    ]
    assert [s.persistent for s in case.signature.input_specs[1:3]] == [True, False]
    assert [t.requires_grad for t in case.inputs] == [True, False, False, False, False, True]
    assert torch.equal(case.inputs[0], mod.w.detach()) and case.inputs[0] is not mod.w
    assert len(_toggles(case.gm)) == 2, "captured before the pass, so the toggles are still there"
    assert case.ambient_grad is True
    placeholders = [n for n in case.gm.graph.nodes if n.op == "placeholder"]
    assert [p.name for p in placeholders] == [s.arg.name for s in case.signature.input_specs]
    assert all(
        n.meta.get("val") is not None
        for n in case.gm.graph.nodes
        if n.op == "call_function" and n.target is not SET_GRAD
    )
    run = run_graph(case.gm, case.inputs, case.ambient_grad)
    assert run.error is None
    expected = mod(x.detach().clone().requires_grad_())
    assert torch.equal(run.outputs[0], expected[0]) and torch.equal(run.outputs[1], expected[1])
    assert verify(case, REAL) == []


def test_export_module_is_restored_even_when_export_fails():
    real = set_grad_module.replace_set_grad_with_hop_pass

    class Bad(torch.nn.Module):
        def forward(self, x):
            return x.item_does_not_exist()

    with pytest.raises(ExportFailed) as raised:
        from_module(Bad(), (torch.ones(1),))
    assert isinstance(raised.value.__cause__, AttributeError)  # torch's own exception, kept
    assert set_grad_module.replace_set_grad_with_hop_pass is real


def test_a_failure_of_fxfuzz_own_copy_inside_export_is_not_blamed_on_export(monkeypatch):
    def broken_copy(gm):
        raise RuntimeError("fxfuzz's copy failed")

    monkeypatch.setattr(capture, "copy_graph_module", broken_copy)
    with pytest.raises(RuntimeError, match="fxfuzz's copy failed"):
        from_module(BufferUpdate(), (torch.ones(3),))


def test_cond_branch_with_grad_block_is_nested_graph_module():
    case = from_module(CondWithGradBlock(), (torch.tensor([1.0, -2.0, 4.0]),))
    toggles = _toggles(case.gm)
    assert len(toggles) == 2 and all(t.graph is not case.gm.graph for t in toggles)
    assert any(n.target is torch.ops.higher_order.cond for n in case.gm.graph.nodes)
    assert verify(case, REAL) == []
    case.inputs = (case.inputs[0], -case.inputs[1])  # the other branch
    assert verify(case, REAL) == []


@pytest.mark.parametrize("ambient", [True, False])
def test_ambient_grad_mode_is_the_one_export_ran_under(ambient):
    with torch.set_grad_enabled(ambient):
        case = from_module(BufferUpdate(), (torch.ones(3),))
    assert case.ambient_grad is ambient
    assert verify(case, REAL) == []


def test_autocast_stage_is_captured_after_the_set_grad_pass():
    case = from_module(Autocast(), (torch.ones(2, 2),), stage="autocast")
    targets = {n.target for n in case.gm.graph.nodes}
    assert torch.amp.autocast_mode._enter_autocast in targets
    assert SET_GRAD not in targets and torch.ops.higher_order.wrap_with_set_grad_enabled in targets
    assert verify(case, AUTOCAST) == []
