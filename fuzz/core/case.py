"""GraphCase: one input to a grad-mode pass, as plain data that can be printed and replayed."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

import torch
from torch import fx
from torch.export.graph_signature import ExportGraphSignature


class Example(Protocol):
    """What a campaign needs of a generated example (a GraphCase, or a program at program level)."""

    ambient_grad: bool
    domain: str
    features: dict[str, object]

    def code(self) -> str: ...

    def compute_nodes(self) -> int: ...


@dataclass
class GraphCase:
    """A pre-dispatch ATen graph, its export signature and concrete example inputs.

    ``inputs`` follow the signature order (parameters, buffers, constants, user inputs),
    each tensor carrying its own ``requires_grad`` flag. ``ambient_grad`` is the grad mode
    the pass runs under and both graphs execute under.
    """

    gm: fx.GraphModule
    signature: ExportGraphSignature
    inputs: tuple[torch.Tensor, ...]
    ambient_grad: bool = True
    domain: str = "export"
    features: dict[str, object] = field(default_factory=dict)
    # Assignments of the symbolic sizes (symbol name -> size), besides the traced sizes, at
    # which the graphs also run; each satisfies the guards the trace recorded.
    sizes: tuple[dict[str, int], ...] = ()

    def code(self) -> str:
        """Readable Python of the graph (and its nested graph modules)."""
        parts = [self.gm.code.strip()]
        for name, sub in self.gm.named_modules():
            if name and isinstance(sub, fx.GraphModule):
                parts.append(f"# {name}\n{sub.code.strip()}")
        return "\n\n".join(parts)

    def compute_nodes(self) -> int:
        """Number of call nodes (the size measure shrinking drives down), nested graphs included."""
        return sum(
            1
            for mod in self.gm.modules()
            if isinstance(mod, fx.GraphModule)
            for n in mod.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")
        )

    def copy(self) -> GraphCase:
        """An independent copy a pass may mutate freely (graphs, signature and inputs)."""
        return GraphCase(
            gm=copy_graph_module(self.gm),
            signature=copy.deepcopy(self.signature),
            inputs=tuple(clone_input(t) for t in self.inputs),
            ambient_grad=self.ambient_grad,
            domain=self.domain,
            features=dict(self.features),
            sizes=self.sizes,
        )

    def undifferentiated(self) -> GraphCase:
        """This case as a graph no one differentiates is run (``PassContract.differentiated``):
        under grad mode off, on inputs that do not require grad."""
        inputs = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in self.inputs)
        return dataclasses.replace(self, inputs=inputs, ambient_grad=False)

    def __str__(self) -> str:
        return (
            f"GraphCase(domain={self.domain}, ambient_grad={self.ambient_grad}, "
            f"nodes={self.compute_nodes()})\n{self.code()}\n{self.signature}"
        )


_T = TypeVar("_T")


def clone_input(t: _T, device: torch.device | str | None = None) -> _T:
    """A fresh leaf with the same value and requires_grad flag (on ``device`` when given);
    non-tensors pass through."""
    if not isinstance(t, torch.Tensor):
        return t
    c = t.detach().to(device or t.device, copy=True)
    return cast(_T, c.requires_grad_(t.requires_grad))


def copy_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """Copy the graph structure recursively; node metas are copied shallowly.

    ``copy.deepcopy`` would also copy every fake tensor in ``meta['val']`` (slow, and it
    fails inside an active fake mode); passes replace metas rather than mutate them.
    """
    root = torch.nn.Module()
    for name, value in gm.named_children():
        setattr(root, name, copy_graph_module(value) if isinstance(value, fx.GraphModule) else value)
    for name, value in vars(gm).items():
        if name in ("_parameters", "_buffers"):
            for k, v in value.items():
                getattr(root, name)[k] = v
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not hasattr(root, node.target.split(".")[0]):
            setattr(root, node.target, getattr(gm, node.target))
    graph = fx.Graph()
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    new = graph_module(root, graph)
    new.meta = dict(gm.meta)
    return new


def graph_module(root: torch.nn.Module, graph: fx.Graph) -> fx.GraphModule:
    """``fx.GraphModule(root, graph)`` with each nested GraphModule of ``root`` compiled once.

    The constructor recompiles every nested GraphModule it copies from ``root``, and each of
    those recompiles its own, so a graph nested d deep would be compiled d + 1 times. The
    nested modules are already compiled: they are attached after construction instead,
    under the same names (the generated code only reads them by name). ``root`` is consumed.
    """
    dotted = {
        str(n.target).split(".")[0] for n in graph.nodes if n.op in ("get_attr", "call_module") and "." in str(n.target)
    }
    nested = {k: m for k, m in root.named_children() if isinstance(m, fx.GraphModule) and k not in dotted}
    for name in nested:
        setattr(root, name, torch.nn.Module())
    gm = fx.GraphModule(root, graph)
    for name, mod in nested.items():
        if name in gm._modules:
            setattr(gm, name, mod)
    return gm
