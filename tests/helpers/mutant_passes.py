"""``gm -> gm`` passes each with one defect of torch's FX passes, the way their fixed versions
would be written but for that defect (tests/strategies/test_random_ops.py, tests/strategies/test_motifs.py,
tests/strategies/test_tool_forms.py): fxfuzz must find each, and the torch pass each comes from
(Graph.eliminate_dead_code, CSEPass with tests/helpers/fixed_cse.py's fixes, legalize_graph, export's
constant_fold) must stay quiet where it is right. Historical versions are torch's installed
source with the fix undone (``_historical``)."""

from __future__ import annotations

import copy
from typing import Any

import torch
from fxfuzz.core.passes import REGISTRY
from fxfuzz.strategies.tooled import TOOL_FORM
from torch import fx
from torch.utils._pytree import tree_flatten


def dce_deleting_random(gm: fx.GraphModule) -> fx.GraphModule:
    """torch.fx's dead-code elimination as it was before random calls counted as impure
    (``Node.is_impure(impure_random=False)``): an unused ``rand_like`` goes, and with it a draw."""
    gm.graph.eliminate_dead_code(is_impure_node=lambda n: n.is_impure(impure_random=False))
    gm.recompile()
    return gm


def cse_merging_twins(gm: fx.GraphModule) -> fx.GraphModule:
    """tests/helpers/fixed_cse.py's CSE (impure calls kept, merges only within one grad mode) keyed as
    CSEPass keys a call: its flattened arguments compared by ``==``, so ``x * 1`` and ``x * 1.0``
    (and ``x + 0.0``, ``x + -0.0``) are one call."""
    graph, env, table, mode = fx.Graph(), {}, {}, "ambient"
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.is_impure():
            env[n] = graph.node_copy(n, lambda x: env[x])
            if n.target is torch._C._set_grad_enabled:
                mode = n.args[0]
            continue
        leaves, spec = tree_flatten(
            (fx.node.map_arg(n.args, lambda x: env[x]), fx.node.map_arg(n.kwargs, lambda x: env[x]))
        )
        try:
            key = (mode, n.target, tuple(leaves), str(spec))
            hash(key)
        except TypeError:  # an unhashable argument: never merged
            env[n] = graph.node_copy(n, lambda x: env[x])
            continue
        if key in table:
            env[n] = table[key]
            continue
        env[n] = table[key] = graph.node_copy(n, lambda x: env[x])
    return fx.GraphModule(gm, graph)


def _historical(module: str, function: str, old: str, new: str) -> Any:
    """``module.function`` as it was before a fix: its installed source with ``old`` put back as
    ``new`` (``SourceEdit``), defined in a copy of its module's namespace; torch is untouched."""
    import ast
    import importlib
    import inspect
    import textwrap

    from fxfuzz.tools.mutants import SourceEdit

    installed = importlib.import_module(module)
    fn = ast.parse(textwrap.dedent(inspect.getsource(getattr(installed, function)))).body[0]
    edited = SourceEdit(module, function, old, new).apply(fn)  # type: ignore[arg-type]
    namespace = dict(vars(installed))
    exec(compile(ast.Module(body=[edited], type_ignores=[]), installed.__file__ or module, "exec"), namespace)
    return namespace[function]


_LEGALIZE_WITHOUT_CODEGEN = _historical(
    "torch.fx.passes.tools_common", "legalize_graph", "    new_graph._codegen = gm.graph._codegen\n", ""
)


def topo_sort_dropping_convention(gm: fx.GraphModule) -> fx.GraphModule:
    """torch.fx's ``legalize_graph`` (a topological sort into a new graph) as it was before it
    copied the graph's codegen: the sorted module takes and returns flat tuples, whatever
    calling convention (``_PyTreeCodeGen``) it had."""
    return _LEGALIZE_WITHOUT_CODEGEN(gm)


def legalize_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """torch.fx's ``legalize_graph`` as installed: the correct pass the mutant above comes from."""
    from torch.fx.passes.tools_common import legalize_graph as legalize

    return legalize(gm)


_FOLD_BY_NODE_USERS = _historical(
    "torch._export.passes.constant_folding",
    "constant_fold",
    '            if node.op == "get_attr" and len(get_attr_node_users[node.target]) == 0:',
    "            if len(node.users) == 0:",
)


def constant_fold_deleting_a_read_attribute(gm: fx.GraphModule) -> None:
    """torch.export's ``constant_fold`` (through the catalogue's adapter, as the
    ``constant_folding`` row calls it) as it was before it counted the users of every
    ``get_attr`` of one attribute together: a read whose user was folded deletes the attribute
    though another read of it is still used."""
    from unittest import mock

    from fxfuzz.core.catalogue import constant_fold

    with mock.patch("torch._export.passes.constant_folding.constant_fold", _FOLD_BY_NODE_USERS):
        constant_fold(gm)


# Drawn as the row it comes from is: constants, with the generic kinds.
constant_fold_deleting_a_read_attribute.fxfuzz_reacts_to = REGISTRY["constant_folding"].reacts_to  # type: ignore[attr-defined]
# legalize_graph is not stable (its docstring says so): it moves grad toggles and random calls,
# which have no data dependences. Both sorts are drawn the tool forms alone, on a domain without
# toggles (aten).
for _sort in (topo_sort_dropping_convention, legalize_graph):
    _sort.fxfuzz_reacts_to = (TOOL_FORM,)  # type: ignore[attr-defined]


def rebuilds_from_attributes(gm: fx.GraphModule) -> fx.GraphModule:
    """Broken: copies the graph into a module whose root holds only what ``get_attr`` nodes
    read (a dict root, as passes that rebuild a module often pass), so the GraphModule children
    a ``call_module`` calls are lost and building the module raises."""
    graph = copy.deepcopy(gm.graph)
    root = {n.target: getattr(gm, n.target) for n in graph.find_nodes(op="get_attr")}
    return fx.GraphModule(root, graph)
