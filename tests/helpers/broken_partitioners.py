"""Partitioners broken on purpose, each the real ``min_cut_rematerialization_partition`` called
as its catalogue row calls it (``fxfuzz.core.catalogue.split``) with one defect planted between
the partition and AOTAutograd's run of the pair (``joined``): the saved values of the forward
mixed up, or one of them not saved and recomputed wrongly in the backward. The first two
keep the forward's outputs and the backward's inputs in step, so the pair runs and only its
values are wrong (where a graph gives them nothing to break, they return the real partition);
the last returns a backward that takes one input too few."""

from __future__ import annotations

import torch
from fxfuzz.core.catalogue import joined, split
from torch import fx
from torch._functorch.partitioners import min_cut_rematerialization_partition


def _partition(gm: fx.GraphModule) -> tuple[fx.GraphModule, fx.GraphModule, int, list[fx.Node]]:
    forward, backward, forward_outputs = split(min_cut_rematerialization_partition, gm, compiler="inductor")
    saved = list(forward.graph.output_node().args[0][forward_outputs:])
    return forward, backward, forward_outputs, saved


def _returns(part: fx.GraphModule, values: list) -> None:
    part.graph.output_node().args = (values,)
    part.recompile()


def swaps_saved(gm, graph_signature):
    """The forward saves its first two saved tensors of one shape and dtype in each other's place."""
    forward, backward, forward_outputs, saved = _partition(gm)
    meta = [(tuple(n.meta["val"].shape), n.meta["val"].dtype) for n in saved]
    pairs = [(i, j) for i in range(len(saved)) for j in range(i + 1, len(saved)) if meta[i] == meta[j]]
    if pairs:
        i, j = pairs[0]
        saved[i], saved[j] = saved[j], saved[i]
    _returns(forward, [*forward.graph.output_node().args[0][:forward_outputs], *saved])
    return joined(gm, forward, backward, forward_outputs), graph_signature


def recomputes_saved_wrongly(gm, graph_signature):
    """The last saved tensor is not saved: the backward makes it anew, as ones of its shape and dtype."""
    forward, backward, forward_outputs, saved = _partition(gm)
    if not saved:
        return joined(gm, forward, backward, forward_outputs), graph_signature
    _returns(forward, [*forward.graph.output_node().args[0][:forward_outputs], *saved[:-1]])
    taken = list(backward.graph.find_nodes(op="placeholder"))[len(saved) - 1]
    value = taken.meta["val"]
    with backward.graph.inserting_before(next(n for n in backward.graph.nodes if n.op != "placeholder")):
        remade = backward.graph.call_function(
            torch.ops.aten.full.default, (list(value.shape), 1.0), {"dtype": value.dtype}
        )
    remade.meta = dict(taken.meta)
    taken.replace_all_uses_with(remade)
    backward.graph.erase_node(taken)
    backward.recompile()
    return joined(gm, forward, backward, forward_outputs), graph_signature


def drops_a_tangent(gm, graph_signature):
    """The backward's last input (a tangent) taken out: it reads zeros in its place, and takes one input too few."""
    forward, backward, forward_outputs, _ = _partition(gm)
    taken = list(backward.graph.find_nodes(op="placeholder"))[-1]
    value = taken.meta["val"]
    with backward.graph.inserting_before(next(n for n in backward.graph.nodes if n.op != "placeholder")):
        zeros = backward.graph.call_function(torch.ops.aten.zeros.default, (list(value.shape),), {"dtype": value.dtype})
    taken.replace_all_uses_with(zeros)
    backward.graph.erase_node(taken)
    backward.recompile()
    return joined(gm, forward, backward, forward_outputs), graph_signature
