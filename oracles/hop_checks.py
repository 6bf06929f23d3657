"""torch's run-time input-mutation check of ``cond`` and ``map``, traced once per distinct call.

Each eager call of ``cond`` or ``map`` with grad on and an input that requires grad first
asks the operator's ``gen_schema`` whether the branches (the body) write to their inputs:
torch traces them again with ``make_fx`` under a fresh fake mode, about 80 ms a call on the
bench population, only to raise if one does, and then runs the original subgraphs. The
checks run every graph several times (plain, forward AD, the autograd probe, in-place
updates, reruns, other sizes), so that verdict was recomputed, identical, for the same
subgraphs and operand metas: half of ``verify``'s time (docs/benchmark.md).

Inside ``memoized_hop_checks()`` the verdict (the schema, or the exception tracing raised) is
kept per key and handed back when the same call repeats. The key holds everything the trace
reads: the operator, each subgraph's code with its submodules' and tensor attributes', the
pytree structure, every tensor operand's shape, stride, dtype, device and requires_grad (a
bool tensor's values too: torch clones those rather than faking them), other operands by
value, and the grad mode, autocast state and dispatch-key sets. Nothing else changes: the
subgraphs still run, backward still traces its graphs on every call, and a call made while
something traces (export, fake or functional tensors, a dispatch mode) goes straight to
torch. A callable that is not a GraphModule is never memoized.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.internal import foreign
from fxfuzz.oracles.execute import GlobalState
from torch import fx

# The verdicts of the innermost open ``memoized_hop_checks()``; None outside one.
_memo: dict[Any, tuple[bool, Any]] | None = None


def _ops() -> list[Any]:
    """The operators whose eager autograd path calls ``gen_schema`` (torch 2.13)."""
    from torch._higher_order_ops.cond import cond_op
    from torch._higher_order_ops.map import map_impl

    try:
        from torch._higher_order_ops.utils import _has_gen_schema
    except ImportError:  # a torch without the run-time check: nothing to memoize
        return []

    return [op for op in (cond_op, map_impl) if _has_gen_schema(op)]


class _NotKeyed(Exception):
    """An operand the key cannot describe completely: the call goes to torch as it is."""


def _module_key(gm: fx.GraphModule) -> tuple[Any, ...]:
    tensors = tuple(sorted((name, _tensor_key(v)) for name, v in vars(gm).items() if isinstance(v, torch.Tensor)))
    # This module's own: each child's are in its own key below, and listing them here too keyed
    # every nested buffer once per level above it.
    buffers = tuple((name, _tensor_key(t)) for name, t in gm.named_buffers(recurse=False))
    params = tuple((name, _tensor_key(t)) for name, t in gm.named_parameters(recurse=False))
    children = tuple((name, _leaf_key(c)) for name, c in gm.named_children())
    return (gm.code, tensors, buffers, params, children)


def _tensor_key(t: torch.Tensor) -> tuple[Any, ...]:
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise _NotKeyed  # fake, functional or another subclass: something is tracing
    values = tuple(t.flatten().tolist()) if t.dtype == torch.bool else None
    return (tuple(t.shape), t.stride(), t.dtype, str(t.device), t.layout, t.requires_grad, values)


def _leaf_key(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _tensor_key(x)
    if isinstance(x, fx.GraphModule):
        return ("module", _module_key(x))
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype)):
        return (type(x).__name__, x)
    raise _NotKeyed


def _key(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if torch._C._len_torch_dispatch_stack() or torch.overrides._get_current_function_mode_stack():
        raise _NotKeyed  # a mode is tracing or intercepting the call
    # The trace has effects a run can observe, so these calls trace as torch does: under
    # saved-tensor hooks (the autograd probe), the hooks see the tensors the trace saves;
    # under autocast, the trace leaves the cache of casts emptied, which changes what the rest
    # of the region saves for backward.
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        raise _NotKeyed
    state = GlobalState.read()
    if any(enabled for _, enabled, _ in state.autocast):
        raise _NotKeyed
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return (op.name(), str(spec), tuple(_leaf_key(x) for x in leaves), state)


def _memoized(op: Any, gen_schema: Callable[..., Any]) -> Callable[..., Any]:
    def cached(*args: Any, **kwargs: Any) -> Any:
        memo = _memo
        if memo is None:
            return gen_schema(*args, **kwargs)
        try:
            key = _key(op, args, kwargs)
            kept = memo.get(key)  # hashes the key: an unhashable operand fails here, not in the run
        except Exception:  # _NotKeyed, or an operand the key does not know: torch's path
            return gen_schema(*args, **kwargs)
        if kept is None:
            try:
                kept = memo[key] = (True, gen_schema(*args, **kwargs))
            except Exception as e:
                kept = memo[key] = (False, foreign(e))
        ok, verdict = kept
        if not ok:
            raise verdict.with_traceback(None)
        return verdict

    return cached


@contextmanager
def memoized_hop_checks() -> Iterator[dict[Any, tuple[bool, Any]]]:
    """Within the block, each distinct ``cond``/``map`` mutation check runs once; yields the
    verdicts kept (key -> (returned?, schema or exception)). Blocks nest, each with its own."""
    global _memo
    ops = _ops()
    installed = [op for op in ops if "gen_schema" not in vars(op)]
    for op in installed:
        op.gen_schema = _memoized(op, op.gen_schema)
    prior, _memo = _memo, {}
    try:
        yield _memo
    finally:
        _memo = prior
        for op in installed:
            del op.gen_schema
