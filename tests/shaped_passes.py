"""Passes in each shape torch.fx uses, identity-like unless named otherwise, for test_pass_shapes."""

from __future__ import annotations

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.fx.passes.infra.pass_manager import PassManager, pass_result_wrapper


def module_identity(gm):
    return gm


def in_place(gm) -> None:
    gm.graph.eliminate_dead_code()


def copies_module(gm):
    """A different GraphModule: the same graph copied, with the old module's attributes."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def graph_copy(graph: fx.Graph) -> fx.Graph:
    new = fx.Graph()
    new.output(new.graph_copy(graph, {}))
    return new


def graph_in_place(graph: "fx.Graph") -> None:
    graph.eliminate_dead_code()


def renames_nodes(gm):
    """Every placeholder and computed node gets a new name: only names change."""
    for node in gm.graph.nodes:
        if node.op != "output":
            node.name = gm.graph._graph_namespace.create_name(f"renamed_{node.name}", None)
    return gm


def drops_last_output(gm):
    out = gm.graph.output_node()
    out.args = (tuple(out.args[0])[:-1],)
    return gm


def optional_signature(gm, graph_signature=None):
    return gm, graph_signature


def takes_three(gm, graph_signature, extra):
    return gm, graph_signature


class Unchanged(PassBase):
    def call(self, graph_module):
        return PassResult(graph_module, False)


class InPlaceBase(PassBase):
    def call(self, graph_module):
        graph_module.graph.eliminate_dead_code()


class NeedsArgs(PassBase):
    def __init__(self, banned):
        self.banned = banned

    def call(self, graph_module):
        return PassResult(graph_module, False)


class Fails(PassBase):
    def call(self, graph_module):
        raise RuntimeError("broken on purpose")


UNCHANGED = Unchanged()
MANAGER = PassManager([Unchanged(), pass_result_wrapper(module_identity)])
FAILING_MANAGER = PassManager([Unchanged(), Fails()])
TENSOR = torch.ones(1)
