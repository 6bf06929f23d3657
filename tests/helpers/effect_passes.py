"""``gm -> gm`` passes broken on ordered effects, for the lowered ATen graphs of the ``aten``
domain: each ``with_effects`` call takes the effect token its predecessor returned (output 0)
and returns the operator's result as output 1. Each keeps every value the graph computes, so
only the effect log shows what it broke (tests/oracles/test_effects.py)."""

from __future__ import annotations

import operator

import torch
from fxfuzz.core.passes import REGISTRY
from torch import fx

WITH_EFFECTS = torch.ops.higher_order.with_effects


def _calls(gm: fx.GraphModule) -> list[fx.Node]:
    return list(gm.graph.find_nodes(op="call_function", target=WITH_EFFECTS))


def _output(call: fx.Node, index: int) -> fx.Node:
    """The ``getitem`` reading output ``index`` of ``call``, made where the graph has none."""
    for user in call.users:
        if user.target is operator.getitem and user.args[1] == index:
            return user
    with call.graph.inserting_after(call):
        node = call.graph.call_function(operator.getitem, (call, index))
    node.meta["val"] = call.meta["val"][index]
    return node


def _erase(call: fx.Node) -> None:
    """Take ``call`` out of the token chain (its successor takes its token) and erase it."""
    token = _output(call, 0)
    token.replace_all_uses_with(call.args[0])
    for user in list(call.users):
        call.graph.erase_node(user)
    call.graph.erase_node(call)


def drops_unused_effect(gm):
    """Broken: an effectful call whose result nothing reads is taken for dead code."""
    for call in _calls(gm):
        if not _output(call, 1).users:
            _erase(call)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def logs_other_value(gm):
    """Broken: an effectful call whose result nothing reads is handed the negation of its
    argument (the call stays, in its place, but its effect sees another value)."""
    for call in _calls(gm):
        if not _output(call, 1).users:
            with gm.graph.inserting_before(call):
                neg = gm.graph.call_function(torch.ops.aten.neg.default, (call.args[2],))
            neg.meta["val"] = call.args[2].meta["val"]
            call.args = (*call.args[:2], neg, *call.args[3:])
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def merges_equal_effects(gm):
    """Broken: CSE of effects. A call of the same operator on the same arguments as an earlier
    one reuses the earlier result and is erased, as if it were pure."""
    seen: dict[tuple, fx.Node] = {}
    for call in _calls(gm):
        key = (call.args[1], *call.args[2:], tuple(call.kwargs.items()))
        if key in seen:
            _output(call, 1).replace_all_uses_with(_output(seen[key], 1))
            _erase(call)
        else:
            seen[key] = call
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def reorders_effects(gm):
    """Broken: the first two effectful calls swapped (where the second's arguments are ready
    before the first), the token rethreaded so the graph stays well formed."""
    calls = _calls(gm)
    if len(calls) < 2:
        return gm
    first, second = calls[:2]
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    if any(isinstance(a, fx.Node) and order[a] > order[first] for a in second.args[2:]):
        return gm
    first_token, second_token = _output(first, 0), _output(second, 0)
    second.args = (first.args[0], *second.args[1:])
    first.args = (second_token, *first.args[1:])
    second_token.replace_all_uses_with(first_token, delete_user_cb=lambda user: user is not first)
    for node in (second, *second.users):
        first.prepend(node)
    gm.graph.lint()
    gm.recompile()
    return gm


def _unwrap(gm: fx.GraphModule, plain_call) -> None:
    """Each with_effects call replaced by ``plain_call(graph, op, args)``, the token threaded
    around it, and a fresh token returned (as torch.export's _remove_effect_tokens does)."""
    calls = _calls(gm)
    if not calls:
        return
    token = calls[0].args[0]
    for call in calls:
        with gm.graph.inserting_before(call):
            plain = plain_call(gm.graph, call.args[1], call.args[2:])
        plain.meta["val"] = call.meta["val"][1]
        _output(call, 1).replace_all_uses_with(plain)
        _erase(call)
    with gm.graph.inserting_before(gm.graph.output_node()):
        fresh = gm.graph.call_function(torch.ops.prims._make_token.default, ())
    token.replace_all_uses_with(fresh, delete_user_cb=lambda user: user.op == "output")


def unwraps_then_drops_dead_effects(gm):
    """Broken on its own output: it takes the tokens out (keeping every call), and on a graph
    without tokens erases the effectful calls whose result nothing reads, as if the tokens were
    what made them live."""
    if _calls(gm):
        _unwrap(gm, lambda graph, op, args: graph.call_function(op, tuple(args)))
    else:
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.fxfuzz.logged.default and not node.users:
                gm.graph.erase_node(node)
    gm.recompile()
    return gm


def call_op(op, *args):
    return op(*args)


def hides_effects_from_dce(gm):
    """Broken for later passes: the tokens taken out and each effectful call made through a
    plain Python function, which eliminate_dead_code takes for pure: the graph still runs every
    effect, its dead-code-eliminated copy does not."""
    _unwrap(gm, lambda graph, op, args: graph.call_function(call_op, (op, *args)))
    gm.recompile()
    return gm


for _broken in (
    drops_unused_effect,
    logs_other_value,
    merges_equal_effects,
    reorders_effects,
    unwraps_then_drops_dead_effects,
    hides_effects_from_dce,
):
    _broken.fxfuzz_contract = REGISTRY["identity"].contract
