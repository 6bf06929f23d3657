"""GraphBuilder: emits pre-dispatch ATen nodes and fills ``meta['val']`` as export does."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from torch.fx.passes.shape_prop import _extract_tensor_metadata

SET_GRAD = torch._C._set_grad_enabled


def _meta_of(arg: Any) -> Any:
    return fx.node.map_arg(arg, lambda n: n.meta.get("val"))


class GraphBuilder:
    """Builds one fx.Graph while tracking the grad mode its nodes run under.

    Each call node's ``meta['val']`` is computed by running the op on fake tensors under the
    grad mode the node will execute in, so shapes, dtypes and requires_grad match a real run.
    """

    def __init__(self, grad_mode: bool, fake_mode: FakeTensorMode | None = None) -> None:
        self.graph = fx.Graph()
        self.fake_mode = fake_mode or FakeTensorMode(allow_non_fake_inputs=True)
        self.grad_mode = grad_mode
        self.input_specs: list[InputSpec] = []
        self.inputs: list[torch.Tensor] = []
        self.attrs: dict[str, torch.nn.Module] = {}

    def placeholder(
        self,
        name: str,
        example: torch.Tensor,
        kind: InputKind,
        target: str | None = None,
        persistent: bool | None = None,
    ) -> fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = self.fake_mode.from_tensor(example)
        node.meta["tensor_meta"] = _extract_tensor_metadata(example)
        self.input_specs.append(InputSpec(kind, TensorArgument(node.name), target, persistent))
        self.inputs.append(example)
        return node

    def call(self, target: Callable[..., Any], args: Sequence[Any], kwargs: dict | None = None) -> fx.Node:
        kwargs = kwargs or {}
        node = self.graph.call_function(target, tuple(args), kwargs)
        if target is operator.getitem:
            node.meta["val"] = _meta_of(args[0])[args[1]]
        else:
            with self.fake_mode, torch.set_grad_enabled(self.grad_mode):
                node.meta["val"] = target(*_meta_of(tuple(args)), **_meta_of(kwargs))
        val = node.meta["val"]
        if isinstance(val, torch.Tensor):
            node.meta["tensor_meta"] = _extract_tensor_metadata(val)
        return node

    def set_grad(self, mode: bool) -> fx.Node:
        """Record a grad-mode toggle exactly as pre-dispatch tracing does."""
        node = self.graph.call_function(SET_GRAD, (mode,))
        node.meta["val"] = None
        self.grad_mode = mode
        return node

    def get_attr(self, name: str, module: torch.nn.Module) -> fx.Node:
        self.attrs[name] = module
        return self.graph.get_attr(name)

    def finish(self, outputs: Sequence[fx.Node | None]) -> tuple[fx.GraphModule, ExportGraphSignature]:
        """Close the graph with a tuple output and return it with its export signature."""
        self.graph.output(tuple(outputs))
        root = torch.nn.Module()
        for name, mod in self.attrs.items():
            setattr(root, name, mod)
        gm = fx.GraphModule(root, self.graph)
        output_specs = [
            OutputSpec(
                OutputKind.USER_OUTPUT,
                TensorArgument(o.name) if isinstance(o, fx.Node) else ConstantArgument("", o),
                None,
            )
            for o in outputs
        ]
        return gm, ExportGraphSignature(list(self.input_specs), output_specs)
