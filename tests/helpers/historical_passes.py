"""Fixed defects of torch's set-grad pass put back: torch 2.13's pass with the old code restored.

Each candidate is the installed pass loaded as fresh modules (``fxfuzz.tools.mutants``) with one
hand-written ``SourceEdit`` that undoes the fix; the installed torch is never touched. The list,
with links and what the gate does with each, is in docs/gate-and-mutation.md.
"""

from __future__ import annotations

from typing import Any

from fxfuzz.core.contract import SET_GRAD
from fxfuzz.tools.mutants import SourceEdit, load_pass_variant

_PASS = "torch._export.passes.replace_set_grad_with_hop_pass"
_UTIL = "torch._export.passes.replace_with_hop_pass_util"
_UTILS = "torch._export.utils"

EDITS: dict[str, SourceEdit] = {
    # pytorch PR #123391: set_grad toggles inside HOP subgraphs (cond branches) were left in
    # place; the fix added the recursion into every get_attr GraphModule.
    "pr123391_no_recursion_into_subgraphs": SourceEdit(
        _UTIL,
        "_replace_with_hop_pass_helper",
        '    for node in new_gm.graph.nodes:\n        if node.op == "get_attr":',
        '    for node in ():\n        if node.op == "get_attr":',
    ),
    # pytorch PR #126081 (the pass side of #123671): a region that returns nothing raised
    # instead of being erased. split_module then left such a region without an output node;
    # in 2.13 it returns ``()``, so the old behaviour is restored for an empty result.
    "pr126081_region_without_outputs_raises": SourceEdit(
        _UTIL,
        "_replace_with_hop_helper",
        "            if isinstance(output_args, (tuple, list)):\n                call_func_node",
        "            if isinstance(output_args, (tuple, list)) and not output_args:\n"
        "                raise NotImplementedError(\n"
        '                    "Cannot replace a call_module with a hop if it has no output."\n'
        "                )\n"
        "            if isinstance(output_args, (tuple, list)):\n                call_func_node",
    ),
    # pytorch PR #125133: the graph signature kept the output names the graph had before the
    # pass, while the HOP's getitem nodes carry new ones.
    "pr125133_output_names_not_synced": SourceEdit(
        _UTIL,
        "_sequential_split_and_maybe_inline_subgraphs_helper",
        "                out_spec.arg.name = arg_node.name",
        "                pass",
    ),
    # pytorch PR #129146: renames made while replacing and inlining regions did not reach the
    # graph signature (no replace hook).
    "pr129146_no_signature_replace_hook": SourceEdit(
        _UTIL,
        "_sequential_split_and_maybe_inline_subgraphs_helper",
        "        replace_ctx = new_gm._set_replace_hook(new_signature.get_replace_hook())  # type: ignore[assignment]",
        "        pass",
    ),
    # pytorch PR #129716: inlining a region kept the subgraph's output node among the users of
    # the inlined nodes (dead dependencies in node.users).
    "pr129716_inlined_nodes_keep_dead_users": SourceEdit(
        _UTILS,
        "node_inline_",
        "                new_output.users.clear()\n",
        "",
    ),
    "pr129716_inlined_tuple_keeps_dead_users": SourceEdit(
        _UTILS,
        "node_inline_",
        "                for node in new_output:\n                    node.users.pop(output[0])\n",
        "",
    ),
}

_LOADED: dict[str, Any] = {}


def historical(name: str) -> Any:
    """torch 2.13's set-grad pass with the historical defect ``name`` put back."""
    if name not in _LOADED:
        _LOADED[name] = load_pass_variant("set_grad", EDITS[name])
    return _LOADED[name]


# Module-level callables, so each is a ``file.py:callable`` spec for ``fxfuzz gate --candidate``.
for _name in EDITS:
    globals()[_name] = lambda gm, sig, _n=_name: historical(_n)(gm, sig)
    globals()[_name].fxfuzz_contract = SET_GRAD  # the set-grad pass, held to its contract
