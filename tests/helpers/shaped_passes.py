"""Passes in each shape torch.fx uses, identity-like unless named otherwise, for test_pass_shapes."""

from __future__ import annotations

import torch
from fxfuzz.core.passes import REGISTRY
from torch import fx
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.fx.passes.infra.pass_manager import PassManager, pass_result_wrapper


def module_identity(gm):
    return gm


def in_place(gm) -> None:
    for node in gm.graph.nodes:
        node.meta["visited"] = True


def copies_module(gm):
    """A different GraphModule: the same graph copied, with the old module's attributes."""
    return fx.GraphModule(gm, graph_copy(gm.graph))


def graph_copy(graph: fx.Graph) -> fx.Graph:
    """A new Graph with the same nodes and calling convention."""
    new = fx.Graph()
    new._codegen = graph._codegen
    new.output(new.graph_copy(graph, {}))
    return new


def graph_in_place(graph: fx.Graph) -> None:
    for node in graph.nodes:
        node.meta["visited"] = True


def renames_nodes(gm):
    """Every placeholder and computed node gets a new name: only names change."""
    for node in gm.graph.nodes:
        if node.op != "output":
            node.name = gm.graph._graph_namespace.create_name(f"renamed_{node.name}", None)
    return gm


def _toggles(gm):
    return [n for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled]


def drops_toggles(gm):
    """Broken: every grad toggle erased, so the whole graph runs in the ambient mode."""
    for node in _toggles(gm):
        gm.graph.erase_node(node)
    return gm


def hoists_across_toggle(gm):
    """Broken: each toggle moved in front of the ATen call just before it, which so runs in the
    next region's grad mode."""
    for toggle in [n for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled]:
        before = toggle.prev
        if before.op == "call_function" and isinstance(before.target, torch._ops.OpOverload):
            before.prepend(toggle)
    return gm


def merges_across_toggles(gm):
    """Broken: calls equal in target and arguments merged, whatever grad mode each ran in."""
    seen = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is torch._C._set_grad_enabled:
            continue
        key = (node.target, node.args, tuple(node.kwargs.items()))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            gm.graph.erase_node(node)
        else:
            seen[key] = node
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
        in_place(graph_module)


class NeedsArgs(PassBase):
    def __init__(self, banned):
        self.banned = banned

    def call(self, graph_module):
        return PassResult(graph_module, False)


class Fails(PassBase):
    def call(self, graph_module):
        raise RuntimeError("broken on purpose")


class Gone(PassBase):
    """Broken: returns a PassResult holding what is no GraphModule."""

    def call(self, graph_module):
        return PassResult(None, True)


class NotAPass:
    def __call__(self, gm):
        return gm


UNCHANGED = Unchanged()
MANAGER = PassManager([Unchanged(), pass_result_wrapper(module_identity)])
FAILING_MANAGER = PassManager([Unchanged(), Fails()])
TENSOR = torch.ones(1)

# The identity-like passes promise what the registered identity does (not the set-grad contract).
for _identity in (
    module_identity,
    in_place,
    copies_module,
    graph_copy,
    graph_in_place,
    renames_nodes,
    Unchanged,
    InPlaceBase,
):
    _identity.fxfuzz_contract = REGISTRY["identity"].contract


def drops_unread_calls(gm):
    """Broken: dead-code elimination that takes every call nothing reads for dead, effectful
    calls included (declares the kind ``effect``, so generation draws them)."""
    gm.graph.eliminate_dead_code(is_impure_node=lambda node: False)
    gm.recompile()
    return gm


def eliminates_dead_code(gm):
    """torch.fx's own dead-code elimination, which keeps impure calls (correct under refines)."""
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def graph_eliminates_dead_code(graph: fx.Graph) -> None:
    graph.eliminate_dead_code()


class EliminatesDeadCode(PassBase):
    fxfuzz_reacts_to = ("effect",)

    def call(self, graph_module):
        return PassResult(graph_module, eliminates_dead_code(graph_module) is not None)


for _dce in (drops_unread_calls, eliminates_dead_code, graph_eliminates_dead_code, EliminatesDeadCode):
    _dce.fxfuzz_contract = REGISTRY["dce"].contract
for _dce in (drops_unread_calls, eliminates_dead_code, graph_eliminates_dead_code):
    _dce.fxfuzz_reacts_to = ("effect",)
DEAD_CODE_MANAGER = PassManager([pass_result_wrapper(eliminates_dead_code)])


def sorts_nodes(g):
    """Takes a Graph under a name fxfuzz reads as a module's (``g``): ``--pass-shape graph`` says so."""
    g.lint()
    return len(g.nodes)
