"""A pass broken on one pattern, and the deep model that holds the pattern once, for the
tests of ``fxfuzz reduce`` (tests/campaign/test_reduce.py)."""

import torch


def tanh_after_relu_as_sigmoid(gm, signature):
    """Rewrites ``tanh(relu(x))`` as ``sigmoid(relu(x))``, wrong, and leaves every other node alone."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.tanh.default:
            if getattr(n.args[0], "target", None) is torch.ops.aten.relu.default:
                n.target = torch.ops.aten.sigmoid.default
    gm.recompile()
    return gm, signature


class Block(torch.nn.Module):
    def __init__(self, pattern: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.pattern = pattern

    def forward(self, x):
        y = torch.relu(self.linear(x))
        y = torch.tanh(y) if self.pattern else torch.sin(y)
        return x + y * 0.5


class Deep(torch.nn.Module):
    """``depth`` residual blocks (linear, relu, sin, mul, add: five compute nodes each), the
    block at ``depth // 2`` computing tanh(relu(...)) instead of sin."""

    def __init__(self, depth: int = 48) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(i == depth // 2) for i in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum(-1)


def unchanged(gm, signature):
    """A correct pass: it changes nothing."""
    return gm, signature
