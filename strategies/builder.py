"""GraphBuilder: emits pre-dispatch ATen nodes and fills ``meta['val']`` as export does."""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from fxfuzz.core.case import graph_module
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymIntArgument,
    TensorArgument,
)
from torch.fx.passes.shape_prop import _extract_tensor_metadata

SET_GRAD_ENABLED = torch._C._set_grad_enabled
SYM_SIZE = torch.ops.aten.sym_size.int


_FAKE_LOG = logging.getLogger("torch._subclasses.fake_tensor")
AUTOCAST_ENTER = torch.amp.autocast_mode._enter_autocast
AUTOCAST_EXIT = torch.amp.autocast_mode._exit_autocast


@functools.cache
def shared_fake_mode() -> FakeTensorMode:
    """One fake mode per process: creating one costs more than building a small graph, and
    cases never compare fake tensors across modes."""
    return FakeTensorMode(allow_non_fake_inputs=True)


# What torch.export records on every op of a graph traced from a module with no submodules.
ROOT_MODULE_STACK = {"L__self__": ("", "torch.nn.modules.module.Module")}


class GraphBuilder:
    """Builds one fx.Graph while tracking the grad mode its nodes run under.

    Each call node's ``meta['val']`` is computed by running the op on fake tensors under the
    grad mode the node will execute in, so shapes, dtypes and requires_grad match a real run.
    """

    def __init__(self, grad_mode: bool, fake_mode: FakeTensorMode | None = None) -> None:
        self.graph = fx.Graph()
        self.fake_mode = fake_mode or shared_fake_mode()
        self.grad_mode = grad_mode
        self.input_specs: list[InputSpec] = []
        self.inputs: list[torch.Tensor] = []
        self.attrs: dict[str, torch.nn.Module | torch.Tensor] = {}
        # (dtype, enabled) of each autocast region the next node runs inside, outermost first.
        self.autocast: list[tuple[torch.dtype, bool]] = []
        # The node that computes each symbolic size (by its simplified expression): a SymInt
        # an op takes is read from the graph, never baked in as a constant.
        self.sym_nodes: dict[Any, fx.Node] = {}

    @property
    def symbolic(self) -> bool:
        """Do this graph's metas carry symbolic sizes (a ShapeEnv-backed fake mode)?"""
        return self.fake_mode.shape_env is not None

    def sym_expr(self, value: torch.SymInt) -> Any:
        """``value``'s expression with the ShapeEnv's replacements applied."""
        env = self.fake_mode.shape_env
        assert env is not None  # called on symbolic graphs only
        return env.simplify(value.node.expr)

    def size_node(self, value: torch.SymInt, owner: tuple[fx.Node, int] | None = None) -> fx.Node | int:
        """The node computing ``value``: an existing one, else ``sym_size.int`` of a placeholder
        dim that has it, emitted right after the placeholders as export emits input sizes,
        else ``sym_size.int`` of ``owner`` (a node and dim of that size) here; a size the
        ShapeEnv has specialized becomes its constant."""
        expr = self.sym_expr(value)
        if expr.is_number:
            return int(expr)
        if expr in self.sym_nodes:
            return self.sym_nodes[expr]
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        for ph in placeholders:
            val = ph.meta.get("val")
            for dim, size in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
                if isinstance(size, torch.SymInt) and self.sym_expr(size) == expr:
                    with self.graph.inserting_after(placeholders[-1]):
                        return self.call(SYM_SIZE, [ph, dim], name="sym_size_int")
        if owner is not None:
            return self.call(SYM_SIZE, list(owner), name="sym_size_int")
        raise ValueError(f"no node of this graph computes the size {expr}")

    def _sym_args(self, arg: Any) -> Any:
        return fx.node.map_aggregate(arg, lambda a: self.size_node(a) if isinstance(a, torch.SymInt) else a)

    def _meta_of(self, arg: Any) -> Any:
        # A get_attr stands for its subgraph module, which HOPs take in place of a tensor.
        # Not an fx Argument (torch's type for map_arg's results): a fake tensor or a module.
        def meta(n: fx.Node) -> Any:
            return self.attrs[cast(str, n.target)] if n.op == "get_attr" else n.meta.get("val")

        return fx.node.map_arg(arg, meta)

    def _propagate(self, target: Callable[..., Any], args: Sequence[Any], kwargs: dict) -> Any:
        """Run ``target`` on fake tensors under the grad mode and autocast state the node
        will execute in, as export's tracing did."""
        if target is operator.getitem:
            return self._meta_of(args[0])[args[1]]
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.fake_mode)
            stack.enter_context(torch.set_grad_enabled(self.grad_mode))
            for dtype, enabled in self.autocast:
                stack.enter_context(torch.autocast("cpu", dtype=dtype, enabled=enabled))
            return target(*self._meta_of(tuple(args)), **self._meta_of(kwargs))

    def placeholder(
        self,
        name: str,
        example: torch.Tensor,
        kind: InputKind,
        target: str | None = None,
        persistent: bool | None = None,
        meta: torch.Tensor | None = None,
    ) -> fx.Node:
        """A graph input with ``example`` as its value; ``meta`` (a fake tensor of this
        builder's mode, e.g. with symbolic sizes) stands for it in place of its plain fake."""
        node = self.graph.placeholder(name)
        node.meta["val"] = self.fake_mode.from_tensor(example, static_shapes=True) if meta is None else meta
        node.meta["tensor_meta"] = _extract_tensor_metadata(example if meta is None else meta)
        self.input_specs.append(InputSpec(kind, TensorArgument(node.name), target, persistent))
        self.inputs.append(example)
        return node

    def placeholder_like(self, name: str, meta: torch.Tensor) -> fx.Node:
        """A subgraph input: no signature entry, its meta taken from the outer value."""
        node = self.graph.placeholder(name)
        with self.fake_mode:
            node.meta["val"] = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype).requires_grad_(
                meta.requires_grad
            )
        node.meta["tensor_meta"] = _extract_tensor_metadata(node.meta["val"])
        return node

    def call(
        self, target: Callable[..., Any], args: Sequence[Any], kwargs: dict | None = None, name: str | None = None
    ) -> fx.Node:
        """Emit a call node; raises whatever the op raises on fake tensors."""
        kwargs = kwargs or {}
        if self.symbolic:
            args, kwargs = self._sym_args(tuple(args)), self._sym_args(kwargs)
        return self.emit(target, args, kwargs, self._propagate(target, args, kwargs), name)

    def emit(
        self, target: Callable[..., Any], args: Sequence[Any], kwargs: dict, val: Any, name: str | None = None
    ) -> fx.Node:
        """Emit a call node whose ``meta['val']`` is ``val``, already known (``call`` computes it)."""
        # Export names a node after its op (``add_``, ``sum_1``, ``cond``), not its overload.
        name = name or getattr(target, "_opname", None) or getattr(target, "__name__", None)
        node = self.graph.create_node("call_function", target, tuple(args), kwargs, name=name)
        node.meta["val"] = val
        if isinstance(val, torch.Tensor):
            node.meta["tensor_meta"] = _extract_tensor_metadata(val)
        elif isinstance(val, torch.SymInt) and not self.sym_expr(val).is_number:
            self.sym_nodes.setdefault(self.sym_expr(val), node)
        return node

    def try_call(
        self, target: Callable[..., Any], args: Sequence[Any], kwargs: dict | None = None, name: str | None = None
    ) -> fx.Node | None:
        """Emit a call node unless the op rejects these operands (shape, dtype, aliasing)."""
        # Fake-tensor dispatch logs every failing meta kernel; here failure is an expected answer.
        was_disabled, _FAKE_LOG.disabled = _FAKE_LOG.disabled, True
        try:
            return self.call(target, args, kwargs, name)
        except Exception:  # any op error means "does not fit": the caller draws something else
            return None
        finally:
            _FAKE_LOG.disabled = was_disabled

    def set_grad(self, mode: bool) -> fx.Node:
        """Record a grad-mode toggle exactly as pre-dispatch tracing does."""
        node = self.graph.call_function(SET_GRAD_ENABLED, (mode,))
        node.meta["val"] = None
        self.grad_mode = mode
        return node

    def enter_autocast(self, dtype: torch.dtype, enabled: bool = True) -> fx.Node:
        """Record entering ``torch.autocast("cpu", ...)`` as pre-dispatch export does."""
        node = self.graph.call_function(AUTOCAST_ENTER, ("cpu", dtype, enabled, False))
        node.meta["val"] = None
        self.autocast.append((dtype, enabled))
        return node

    def exit_autocast(self, enter: fx.Node) -> fx.Node:
        node = self.graph.call_function(AUTOCAST_EXIT, (enter,))
        node.meta["val"] = None
        self.autocast.pop()
        return node

    def get_attr(self, name: str, module: torch.nn.Module | torch.Tensor) -> fx.Node:
        """Attach ``module`` under a fresh attribute name (``name`` or ``name_1``...)."""
        unique = name
        while unique in self.attrs:
            unique = f"{name}_{len(self.attrs)}"
        self.attrs[unique] = module
        return self.graph.get_attr(unique)

    def finish_subgraph(self, outputs: Sequence[fx.Node]) -> fx.GraphModule:
        """Close a HOP subgraph (cond branch, map body): a tuple output, no signature."""
        self.graph.output(tuple(outputs))
        return self._module()

    def _module(self) -> fx.GraphModule:
        root = torch.nn.Module()
        for name, mod in self.attrs.items():
            setattr(root, name, mod)
        return graph_module(root, self.graph)

    def finish(self, outputs: Sequence[Any]) -> tuple[fx.GraphModule, ExportGraphSignature]:
        """Close the graph with a tuple output and return it with its export signature.
        Root ops get the ``nn_module_stack`` export records, which its verifier demands."""
        for node in self.graph.nodes:
            if node.op in ("call_function", "get_attr"):
                node.meta["nn_module_stack"] = dict(ROOT_MODULE_STACK)
        self.graph.output(tuple(outputs))
        gm = self._module()
        output_specs = [
            OutputSpec(
                OutputKind.USER_OUTPUT,
                node_argument(o) if isinstance(o, fx.Node) else ConstantArgument("", o),
                None,
            )
            for o in outputs
        ]
        return gm, ExportGraphSignature(list(self.input_specs), output_specs)


def node_argument(node: fx.Node) -> TensorArgument | SymIntArgument:
    """How the signature names an output node: a SymInt output is a ``SymIntArgument``."""
    return SymIntArgument(node.name) if isinstance(node.meta.get("val"), torch.SymInt) else TensorArgument(node.name)
