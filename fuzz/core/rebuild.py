"""Builders the rebuilt graphs of saved cases call: torch only, because every standalone
repro pastes this file's functions above its graph code (``fxfuzz.repro.files``)."""

import sympy
import torch
import torch.utils._sympy.functions
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

# What sympy.srepr of a size expression may name: sympy's own classes and torch's size functions.
_SYMPY_NAMES = {**vars(sympy), **{k: v for k, v in vars(torch.utils._sympy.functions).items() if not k.startswith("_")}}


def fake_mode(symbols=None):
    """A fake mode for rebuilt metas; with ``symbols`` (name -> {"hint", "min", "max"}), its
    ShapeEnv holds those size symbols with their traced values and ranges."""
    if not symbols:
        return FakeTensorMode(allow_non_fake_inputs=True)
    env = ShapeEnv()
    for name, s in symbols.items():
        sym = sympy.Symbol(name, integer=True, positive=True)  # as ShapeEnv makes size symbols
        env.var_to_range[sym] = ValueRanges(s["min"], int_oo if s["max"] is None else s["max"])
        env.backed_var_to_val[sym] = sympy.Integer(s["hint"])
    return FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)


def size(fake, x):
    """A size: an int, or ``{"sym": srepr}``, a SymInt of ``fake``'s ShapeEnv."""
    if not isinstance(x, dict):
        return x
    env = fake.shape_env
    expr = sympy.sympify(x["sym"], locals=_SYMPY_NAMES)
    return env.create_symintnode(expr, hint=int(expr.xreplace(env.backed_var_to_val)))


def meta_val(fake, spec):
    """Re-create ``meta['val']`` (a fake tensor, a SymInt, a container of them, or a plain value)."""
    (key, x), = spec.items()
    if key == "tensor":
        shape, stride = [size(fake, n) for n in x["shape"]], [size(fake, n) for n in x["stride"]]
        with fake:
            t = torch.empty_strided(shape, stride, dtype=getattr(torch, x["dtype"]), device=x["device"])
        return t.requires_grad_(True) if x["requires_grad"] else t
    if key == "symint":
        return size(fake, x)
    if key in ("tuple", "list"):
        items = [meta_val(fake, i) for i in x]
        return tuple(items) if key == "tuple" else items
    return x if key == "value" else None


def tensor(values, dtype, shape, requires_grad):
    t = torch.tensor(values, dtype=dtype).reshape(shape)
    return t.requires_grad_(True) if requires_grad else t


def set_attr(root, target, value):
    *parents, last = target.split(".")
    for p in parents:
        if not hasattr(root, p):
            setattr(root, p, torch.nn.Module())
        root = getattr(root, p)
    if isinstance(value, torch.Tensor):
        root.register_buffer(last, value)
    else:
        setattr(root, last, value)


def rebuild_graph_module(root, graph):
    """``fx.GraphModule(root, graph)`` keeping every child of ``root`` in its order; the
    constructor alone keeps only the children the graph's get_attr nodes name."""
    gm = fx.GraphModule(root, graph)
    for name, child in root.named_children():
        if hasattr(gm, name):
            delattr(gm, name)
        gm.add_module(name, child)
    return gm


def size_at(size, sizes):
    """A (possibly symbolic) size evaluated at ``sizes`` (symbol name -> value)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    expr = size.node.expr
    return int(expr.xreplace({s: sizes[s.name] for s in expr.free_symbols}))


def inputs_at(gm, inputs, sizes, seed=0):
    """``inputs`` resized to the symbolic sizes ``sizes``: each input whose placeholder meta has
    a symbolic dim gets a fresh seeded tensor of the new shape (same dtype, same
    requires_grad); the others are kept."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for i, (ph, t) in enumerate(zip(placeholders, inputs)):
        val = ph.meta.get("val")
        if not isinstance(t, torch.Tensor) or not isinstance(val, torch.Tensor):
            out.append(t)
            continue
        shape = tuple(size_at(s, sizes) for s in val.shape)
        if shape == tuple(t.shape):
            out.append(t)
            continue
        gen = torch.Generator().manual_seed(seed * 1000 + i)
        if t.dtype == torch.bool:
            new = torch.randint(0, 2, shape, generator=gen).bool()
        elif t.is_floating_point() or t.is_complex():
            new = torch.randn(shape, generator=gen).to(t.dtype)
        else:
            new = torch.randint(-3, 4, shape, generator=gen).to(t.dtype)
        out.append(new.requires_grad_(t.requires_grad))
    return tuple(out)
