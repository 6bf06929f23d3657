"""torch.fx CSEPass's algorithm with the fixes docs/known-findings.md suggests: impure nodes
(grad toggles) are kept, a call is merged only with an equal one made under the same grad mode,
calls are keyed by their text (so a SymInt literal is its value, not an unhashable SymInt), and
the graph keeps its calling convention. A finding of the real CSEPass that this one does not
draw follows from those defects."""

import torch
from torch import fx
from torch.fx.passes.dialect.common.cse_pass import get_CSE_banned_ops


def fixed_cse(gm):
    banned = get_CSE_banned_ops()
    graph, env, table, mode = fx.Graph(), {}, {}, "ambient"
    graph._codegen = gm.graph._codegen
    for n in gm.graph.nodes:
        target = getattr(n.target, "overloadpacket", n.target)
        if n.op != "call_function" or n.is_impure() or target in banned:
            env[n] = graph.node_copy(n, lambda x: env[x])
            if n.target is torch._C._set_grad_enabled:
                mode = n.args[0]
            continue
        args = fx.node.map_arg(n.args, lambda x: env[x])
        kwargs = fx.node.map_arg(n.kwargs, lambda x: env[x])
        key = (mode, n.target, repr(args), repr(kwargs))
        if key in table:
            env[n] = table[key]
            continue
        env[n] = table[key] = graph.node_copy(n, lambda x: env[x])
    return fx.GraphModule(gm, graph)
