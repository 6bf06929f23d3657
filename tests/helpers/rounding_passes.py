"""Correct rewrites that change the bits of float results, for ``approximates``'s false-alarm
runs (docs/history.md): a pass that reassociates is what the contract exists for, and an
identity would never bring its tolerance into play."""

from __future__ import annotations

import torch
from torch import fx

_ADD = torch.ops.aten.add.Tensor
_SUM = torch.ops.aten.sum.default
_FLIP = torch.ops.aten.flip.default
_MM = torch.ops.aten.mm.default
_MUL = torch.ops.aten.mul.Tensor
_UNSQUEEZE = torch.ops.aten.unsqueeze.default
_SUM_DIM = torch.ops.aten.sum.dim_IntList
_LINEAR = torch.ops.aten.linear.default


def _same_float_tensor(nodes: list[object]) -> bool:
    """Every one a node of one floating dtype and one shape (compared as text: symbolic sizes
    must not be guarded on), so ``a + (b + c)`` promotes and broadcasts as ``(a + b) + c``."""
    vals = [n.meta.get("val") if isinstance(n, fx.Node) else None for n in nodes]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    first = vals[0]
    return first.dtype.is_floating_point and all(
        v.dtype == first.dtype and [str(s) for s in v.shape] == [str(s) for s in first.shape] for v in vals
    )


def _pure_between(first: fx.Node, last: fx.Node) -> bool:
    """Only ATen ops that write nothing between the two: no grad toggle, no region, no in-place
    update, so the inner sum computed at ``last`` reads what it read at ``first``, under the same
    grad mode."""
    node = first.next
    while node is not last:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
            return False
        node = node.next
    return True


def _reassociate_adds(graph: fx.Graph) -> None:
    """``(a + b) + c`` to ``a + (b + c)`` where the inner sum has no other use, no ``alpha``,
    and all three are floats of one dtype and shape."""
    for node in list(graph.nodes):
        inner = node.args[0] if node.target is _ADD and not node.kwargs and len(node.args) == 2 else None
        if not (
            isinstance(inner, fx.Node)
            and inner.target is _ADD
            and not inner.kwargs
            and len(inner.args) == 2
            and len(inner.users) == 1
            and node.args[1] is not inner
            and _same_float_tensor([*inner.args, node.args[1], node])
            and _pure_between(inner, node)
        ):
            continue
        a, b = inner.args
        with graph.inserting_before(node):
            tail = graph.call_function(_ADD, (b, node.args[1]))
        tail.meta = dict(inner.meta)
        node.args = (a, tail)
        graph.erase_node(inner)


def _reverse_sums(graph: fx.Graph) -> None:
    """A full ``sum`` of a float tensor taken over the tensor flipped in every dimension: the
    same sum, added up in another order."""
    for node in list(graph.nodes):
        x = node.args[0] if node.target is _SUM and len(node.args) == 1 else None
        if not (isinstance(x, fx.Node) and _same_float_tensor([x])):
            continue
        val = x.meta["val"]
        dims = list(range(val.dim()))
        with graph.inserting_before(node):
            flipped = graph.call_function(_FLIP, (x, dims))
        flipped.meta = {**node.meta, "val": torch.flip(val, dims)}
        node.args = (flipped,)


def _exact_floats(node: fx.Node, operands: list[object]) -> list[torch.Tensor] | None:
    """The metas of ``operands`` where they and ``node``'s are float32 or float64 tensors of one
    dtype (under autocast a matrix product's is another: its kernel casts, a sum of products
    would not), else None."""
    vals = [n.meta.get("val") if isinstance(n, fx.Node) else None for n in (*operands, node)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    dtype = vals[0].dtype
    return vals[:-1] if dtype in (torch.float32, torch.float64) and all(v.dtype == dtype for v in vals) else None


def _decompose_mms(graph: fx.Graph) -> None:
    """``mm(a, b)`` as ``(a.unsqueeze(2) * b.unsqueeze(0)).sum(1)``, as Inductor's
    ``decompose_mm`` rewrites small matrix products: the same products, added up in another
    order than the BLAS kernel's."""
    for node in list(graph.nodes):
        if node.target is not _MM or node.kwargs or len(node.args) != 2:
            continue
        vals = _exact_floats(node, list(node.args))
        if vals is None:
            continue
        a, b = node.args
        with graph.inserting_before(node):
            left = graph.call_function(_UNSQUEEZE, (a, 2))
            right = graph.call_function(_UNSQUEEZE, (b, 0))
            product = graph.call_function(_MUL, (left, right))
            total = graph.call_function(_SUM_DIM, (product, [1]))
        # Each new node keeps what the rewritten one carried (its nn_module_stack, which
        # export's unflatten reads), with a value of its own.
        left.meta = {**node.meta, "val": vals[0].unsqueeze(2)}
        right.meta = {**node.meta, "val": vals[1].unsqueeze(0)}
        product.meta = {**node.meta, "val": left.meta["val"] * right.meta["val"]}
        total.meta = {**node.meta, "val": product.meta["val"].sum(1)}
        node.replace_all_uses_with(total)
        graph.erase_node(node)


def _decompose_linears(graph: fx.Graph) -> None:
    """``linear(x, w, b)`` as ``(x.unsqueeze(-2) * w).sum(-1) + b``: each output the same dot
    product of an input row with a weight row, added up in another order than the kernel's."""
    for node in list(graph.nodes):
        if node.target is not _LINEAR or node.kwargs or len(node.args) not in (2, 3):
            continue
        x, w, *rest = node.args
        bias = rest[0] if rest else None
        vals = _exact_floats(node, [x, w, *([bias] if bias is not None else [])])
        if vals is None or vals[1].dim() != 2:
            continue
        with graph.inserting_before(node):
            rows = graph.call_function(_UNSQUEEZE, (x, -2))
            product = graph.call_function(_MUL, (rows, w))
            total = graph.call_function(_SUM_DIM, (product, [-1]))
            out = graph.call_function(_ADD, (total, bias)) if bias is not None else total
        rows.meta = {**node.meta, "val": vals[0].unsqueeze(-2)}
        product.meta = {**node.meta, "val": rows.meta["val"] * vals[1]}
        total.meta = {**node.meta, "val": product.meta["val"].sum(-1)}
        if bias is not None:
            out.meta = {**node.meta, "val": total.meta["val"] + vals[2]}
        node.replace_all_uses_with(out)
        graph.erase_node(node)


def reassociates(gm: fx.GraphModule) -> fx.GraphModule:
    """Float sums added up in another order, in every graph of the module (cond branches and
    map bodies too): ``(a + b) + c`` as ``a + (b + c)``, a full ``sum`` over the flipped
    tensor, ``mm`` and ``linear`` as sums of broadcast products. Correct rewrites whose float results round
    otherwise."""
    for module in gm.modules():
        if isinstance(module, fx.GraphModule):
            _reassociate_adds(module.graph)
            _reverse_sums(module.graph)
            _decompose_mms(module.graph)
            _decompose_linears(module.graph)
            module.recompile()
    return gm


reassociates.fxfuzz_contract = "approximates"  # type: ignore[attr-defined]
