"""``gm -> gm`` passes each with one defect of torch's FX passes, the way their fixed versions
would be written but for that defect (tests/strategies/test_random_ops.py, tests/strategies/test_motifs.py): fxfuzz
must find each, and the torch pass each comes from (Graph.eliminate_dead_code, CSEPass with
tests/helpers/fixed_cse.py's fixes) must stay quiet where it is right."""

from __future__ import annotations

import torch
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
