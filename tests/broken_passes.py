"""Passes broken on purpose, one per oracle family, to prove each oracle fires."""

from __future__ import annotations

import torch
from torch import fx

from fuzz.passes import load_pass

aten = torch.ops.aten
real = load_pass("set_grad")


def crashes(gm, sig):
    raise RuntimeError("planted crash")


def leaves_toggles(gm, sig):
    """Claims the set-grad contract but rewrites nothing."""
    return gm, sig


def breaks_lint(gm, sig):
    """Moves the first call node after its first user, so the graph uses a value before defining it."""
    gm, sig = real(gm, sig)
    for node in gm.graph.nodes:
        users = [u for u in node.users if u.op == "call_function"]
        if node.op == "call_function" and users:
            users[0].append(node)
            break
    return gm, sig


def renames_placeholder(gm, sig):
    """Renames the first placeholder without telling the signature."""
    gm, sig = real(gm, sig)
    first = next(n for n in gm.graph.nodes if n.op == "placeholder")
    first._rename("renamed_" + first.name)
    gm.recompile()
    return gm, sig


def drops_toggles(gm, sig):
    """Deletes every toggle instead of wrapping regions: no_grad regions now record grads."""
    for mod in list(gm.modules()):
        if isinstance(mod, fx.GraphModule):
            for n in list(mod.graph.nodes):
                if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
                    mod.graph.erase_node(n)
            mod.recompile()
    return gm, sig


def _rewrite_sin(gm, build):
    """Replace every sin, in nested graph modules too, by what ``build`` emits."""
    for mod in list(gm.modules()):
        if not isinstance(mod, fx.GraphModule):
            continue
        for n in list(mod.graph.nodes):
            if n.op == "call_function" and n.target is aten.sin.default:
                with mod.graph.inserting_before(n):
                    new = build(mod.graph, n.args[0])
                n.replace_all_uses_with(new)
                mod.graph.erase_node(n)
        mod.recompile()
    return gm


def sin_to_cos(gm, sig):
    """Computes cos where the graph said sin: a value bug."""
    gm, sig = real(gm, sig)
    return _rewrite_sin(gm, lambda g, x: g.call_function(aten.cos.default, (x,))), sig


def wrong_sin_grad(gm, sig):
    """sin(x.detach()) + 2 * (x - x.detach()): the same forward bits, the wrong derivative."""
    gm, sig = real(gm, sig)

    def build(g, x):
        d = g.call_function(aten.detach.default, (x,))
        s = g.call_function(aten.sin.default, (d,))
        z = g.call_function(aten.sub.Tensor, (x, d))
        z2 = g.call_function(aten.mul.Tensor, (z, 2.0))
        return g.call_function(aten.add.Tensor, (s, z2))

    return _rewrite_sin(gm, build), sig
