"""Correct passes for the contracts that excuse what a dialect changes by design, for their
false-alarm runs (docs/history.md): a pass the contract exists for, since an identity would
never meet the excuse."""

from __future__ import annotations

import torch
from torch import fx
from torch._export.error import InternalError
from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import get_view_copy_of_view_op


def views_to_copies(gm: fx.GraphModule) -> fx.GraphModule:
    """Every ATen view call, in every graph of the module, made its ``_copy`` variant, by torch's
    own table (``get_view_copy_of_view_op``, which Edge's ``ReplaceViewOpsWithViewCopyOpsPass``
    uses); a view without one (``reshape``) stays, where Edge's pass raises. On graphs without
    in-place updates (the ``functional`` domain) that changes aliasing and strides alone.
    ``detach`` stays too: torch's ``detach_copy`` has no forward-mode derivative, so forward AD
    through the result would raise (which ``functional`` reports, as it should)."""
    for module in gm.modules():
        if not isinstance(module, fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target is torch.ops.aten.detach.default:
                continue
            try:
                copy = get_view_copy_of_view_op(node.target._schema)
            except InternalError:
                continue
            if copy is not None:
                node.target = copy
        module.recompile()
    return gm


views_to_copies.fxfuzz_contract = "functional"  # type: ignore[attr-defined]
