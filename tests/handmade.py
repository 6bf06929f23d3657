"""Small hand-built cases with a known shape, for deterministic oracle tests."""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind

from strategies.builder import GraphBuilder
from strategies.case import GraphCase

aten = torch.ops.aten


def no_grad_region_case(ambient: bool = True) -> GraphCase:
    """p * x, then under no_grad sin(p) and a buffer update, then sin(x) with grad back on."""
    b = GraphBuilder(grad_mode=ambient)
    p = b.placeholder("p_w", torch.tensor([0.5, -1.0, 2.0], requires_grad=True), InputKind.PARAMETER, "w")
    buf = b.placeholder("b_buf", torch.zeros(3), InputKind.BUFFER, "buf", persistent=True)
    x = b.placeholder("x", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), InputKind.USER_INPUT)
    y = b.call(aten.mul.Tensor, [p, x])
    b.set_grad(not ambient)
    z = b.call(aten.sin.default, [p])
    b.call(aten.add_.Tensor, [buf, z])
    b.set_grad(ambient)
    w = b.call(aten.sin.default, [x])
    out = b.call(aten.add.Tensor, [y, w])
    gm, sig = b.finish([out, z, None])
    return GraphCase(gm, sig, tuple(b.inputs), ambient_grad=ambient)
