"""Builders the rebuilt graphs of saved cases call: torch only, because every standalone
repro pastes this file's functions above its graph code (``fxfuzz.repro.files``)."""

import torch
from torch import fx


def meta_val(fake, spec):
    """Re-create ``meta['val']`` (a fake tensor, a container of them, or a plain value)."""
    (key, x), = spec.items()
    if key == "tensor":
        with fake:
            t = torch.empty_strided(x["shape"], x["stride"], dtype=getattr(torch, x["dtype"]), device=x["device"])
        return t.requires_grad_(True) if x["requires_grad"] else t
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
