"""Where pre-wrapped regions, regions without outputs and colliding attribute names come from,
checked against what torch.export really hands the set-grad pass."""

from __future__ import annotations

from collections import Counter

import torch
from torch.export.graph_signature import InputKind

from fuzz.passes import load_pass
from oracles import verify
from strategies import from_module
from strategies.builder import GraphBuilder
from strategies.state import Budget, State, count_regions_without_outputs

SET_GRAD = torch._C._set_grad_enabled
WRAP = torch.ops.higher_order.wrap_with_set_grad_enabled
REAL = load_pass("set_grad")


class NoGradBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x):
        y = x * self.p
        with torch.no_grad():
            z = y.sin() + 1
            w = z.cos()
        return y + z, w


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]


def test_reexported_program_reaches_the_pass_unwrapped():
    """``ep.module()`` of a program whose no_grad block the pass wrapped calls
    wrap_with_set_grad_enabled, yet export traces through the HOP (its ``__call__`` runs the
    body eagerly), so the set-grad pass is handed plain toggles again. This is why
    pre-wrapped regions stay in the adversarial domain only."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ep = torch.export.export(NoGradBlock(), (x,), strict=False)
    assert WRAP in _targets(ep.graph_module), "the first export wrapped the block"
    case = from_module(ep.module(), (x,))
    targets = _targets(case.gm)
    assert WRAP not in targets and targets.count(SET_GRAD) == 2
    assert verify(case, REAL) == []


def _one_region_case(read_outside: bool) -> Counter:
    """x -> no_grad { y = sin(x) } -> returns y (read outside) or x (y read by nothing)."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("arg0_1", torch.ones(3), InputKind.USER_INPUT)
    s = State(b, "export", Counter(), Budget(0))
    enter = b.set_grad(False)
    y = b.call(torch.ops.aten.sin.default, [x])
    s.regions.append((enter, b.set_grad(True)))
    b.finish([y if read_outside else x])
    count_regions_without_outputs(s)
    return s.stats


def test_region_without_outputs_is_counted_only_when_nothing_outside_reads_it():
    assert _one_region_case(read_outside=False)["region:no_outputs"] == 1
    assert _one_region_case(read_outside=True)["region:no_outputs"] == 0

