"""The modules and cases the known findings are pinned on (tests/oracles/test_oracles_known.py,
test_catalogue_findings.py, test_pt2e_findings.py, tests/strategies/test_random_ops.py), shared
with the short-repro tests (tests/repro/test_short_repros.py), which write each finding's
program from them."""

from __future__ import annotations

import torch
from functorch.experimental import control_flow
from functorch.experimental.control_flow import map as cf_map
from fxfuzz.core.case import GraphCase
from fxfuzz.strategies.builder import GraphBuilder
from torch.export.graph_signature import InputKind

aten = torch.ops.aten


class CondUnderNoGrad(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class NoGradInsideAutocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                y = -x
            z = -y
        return y, z


class SingleOutputRegionReadTwice(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))
        z = torch.cond(y.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))
        (z - y).sin()
        return z


class NestedMapUnderNoGrad(torch.nn.Module):
    def forward(self, xs, y):
        def body(x, y):
            return cf_map(lambda v: v.sigmoid(), x.unsqueeze(0)).squeeze(0) + y

        with torch.no_grad():
            r = cf_map(body, xs, y)
        return y * 2, r


class BufferUpdateUnderNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        with torch.no_grad():
            self.buf.add_(x)
        return x.sin()


class CondUnderEnableGrad(torch.nn.Module):
    def forward(self, x):
        with torch.enable_grad():
            z = x * 3
            y = torch.cond(z.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (z,))
        return y + x


class NoGradInsideAutocastDetached(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                z = y * y
        return x.sin(), z.detach()


class CondInsideAutocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


def two_no_grad_regions(x):
    with torch.no_grad():
        a = x.sin()
    b = x.cos()
    with torch.no_grad():
        c = x.exp()
    return a, b, c


class TwoNoGradRegions(torch.nn.Module):
    def forward(self, x):
        return two_no_grad_regions(x)


def same_sum_in_two_grad_modes(x):
    a = x + x
    with torch.no_grad():
        b = x + x
    return a, b


class SameSumInTwoGradModes(torch.nn.Module):
    def forward(self, x):
        return same_sum_in_two_grad_modes(x)


def constant_after_no_grad(x):
    with torch.no_grad():
        y = x.sin()
    return y + torch.arange(3.0).sum()


def adds_into_a_new_tensor(x):
    return torch.tensor([1.0, 2.0, 3.0]).add_(x)


class DeadCode(torch.nn.Module):
    def forward(self, x):
        x.cos()  # the clean-up check judges the copy only where it removes something
        return x.sin()


class FoldableBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.ones(3))

    def forward(self, x):
        return x + self.c.sin()


class ReturnsAlias(torch.nn.Module):
    def forward(self, x):
        return torch.ops.aten.alias(x)


def reread_constant_case() -> GraphCase:
    """As the campaign drew it, minimized: a tensor constant read by two get_attr nodes (export
    traces one read per use); one read feeds ``cos`` (folded), the other an op on an input."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0]), InputKind.USER_INPUT)
    first = b.get_attr("_tensor_constant0", torch.tensor([0.5, -1.0, 2.0]))
    second = b.graph.get_attr("_tensor_constant0")
    second.meta.update(first.meta)
    gm, sig = b.finish([b.call(aten.cos.default, [first]), b.call(aten.minimum.default, [second, x])])
    return GraphCase(gm, sig, tuple(b.inputs))


class IntegerMul(torch.nn.Module):
    def forward(self, x, n):
        return x * 2.0, n * n


def integer_args():
    return torch.randn(3), torch.arange(3)


class IntegerAddScalar(torch.nn.Module):
    """``n + 2`` on an int64 tensor: an integer result."""

    def forward(self, n):
        return n + 2


def integer_tensor_args():
    return (torch.arange(6).reshape(3, 1, 2),)


class LogLinear(torch.nn.Module):
    """A linear layer on ``x.log()``: a calibration batch of negative values gives it NaN
    activations."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x.log())


def negative_args():
    return (-torch.ones(2, 3),)


class CondInMap(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, xs):
        def body(x):
            return torch.cond(x.sum() > 0, lambda v: v.cos(), lambda v: v.sin(), (x,))

        return self.lin(control_flow.map(body, xs))


class AddsIntoInput(torch.nn.Module):
    def forward(self, x, y):
        return x.add_(y)


class LiteralUpdated(torch.nn.Module):
    def forward(self, x):
        return torch.tensor([1.0, 2.0, 3.0]).mul_(x)


class TwoDraws(torch.nn.Module):
    def forward(self, x):
        return x + torch.randn_like(x), torch.randn_like(x)


def unused_constant_read() -> GraphCase:
    """What export traces for a dead ``self.c.detach()``: a read of the constant nothing uses
    before the one ``x + c`` takes (tests/oracles/test_catalogue_findings.py)."""
    b = GraphBuilder(grad_mode=True)
    x = b.placeholder("x", torch.randn(3, requires_grad=True), InputKind.USER_INPUT)
    c = torch.linspace(-1.0, 1.0, 3)
    reads = [b.get_attr("_tensor_constant0", c), b.graph.get_attr("_tensor_constant0")]
    for read in reads:
        read.meta["val"] = b.fake_mode.from_tensor(c, static_shapes=True)
    gm, sig = b.finish([b.call(torch.ops.aten.add.Tensor, [x, reads[1]])])
    return GraphCase(gm, sig, tuple(b.inputs))
