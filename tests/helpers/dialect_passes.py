"""Correct passes for the contracts that excuse what a dialect changes by design, for their
false-alarm runs (docs/history.md): a pass the contract exists for, since an identity would
never meet the excuse."""

from __future__ import annotations

import torch
from fxfuzz.strategies.ops import TORCH_RANDOM_OPS
from torch import fx
from torch._export.error import InternalError
from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import get_view_copy_of_view_op

_TORCH_RANDOM = frozenset(spec.target for spec in TORCH_RANDOM_OPS)


def _random(node: fx.Node) -> bool:
    """A random call: ATen's by its tag, a torch-level one fxfuzz draws by its table."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    return target in _TORCH_RANDOM


def _feeds_random(node: fx.Node) -> bool:
    """Whether a random call reads ``node``'s value, directly or through other calls: random
    calls follow their input's strides (``rand_like``, ``dropout``), so a copy in place of a
    view changes their numbers, a change of values that ``functional`` reports."""
    seen, stack = set(), list(node.users)
    while stack:
        user = stack.pop()
        if user in seen:
            continue
        seen.add(user)
        if _random(user):
            return True
        stack.extend(user.users)
    return False


def views_to_copies(gm: fx.GraphModule) -> fx.GraphModule:
    """Every ATen view call, in every graph of the module, made its ``_copy`` variant, by torch's
    own table (``get_view_copy_of_view_op``, which Edge's ``ReplaceViewOpsWithViewCopyOpsPass``
    uses); a view without one (``reshape``) stays, where Edge's pass raises. On graphs without
    in-place updates (the ``functional`` domain) that changes aliasing and strides alone.
    ``detach`` stays too: torch's ``detach_copy`` has no forward-mode derivative, so forward AD
    through the result would raise; and so does a view a random call reads (``_feeds_random``).
    Both would be changes ``functional`` reports, as it should."""
    for module in gm.modules():
        if not isinstance(module, fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target is torch.ops.aten.detach.default or _feeds_random(node):
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
