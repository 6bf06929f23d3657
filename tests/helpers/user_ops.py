"""A user's own custom operator, as a project that fuzzes its operators defines it:
``userops::scale(x, factor)``, with a fake implementation and an autograd formula, and its
op-table entry (input constraints and how to draw ``factor``). tests/core/test_custom_ops.py adds
it with ``register_op`` and through the plugin's ``--fxfuzz-op``."""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
from fxfuzz.strategies import op_spec
from hypothesis import strategies as st
from torch._export.passes.replace_set_grad_with_hop_pass import replace_set_grad_with_hop_pass


def _define() -> None:
    @torch.library.custom_op("userops::scale", mutates_args=())
    def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor

    @scale.register_fake
    def _(x, factor):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    scale.register_autograd(lambda ctx, grad: (grad * ctx.factor, None), setup_context=setup_context)


# pytester runs sessions in one process and imports this file again for each; torch keeps
# the operator from the first.
if not hasattr(torch.ops.userops, "scale"):
    _define()


def _factor(draw: st.DrawFn, metas: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (draw(st.sampled_from([0.5, 3.0])),), {}


SCALE = op_spec(torch.ops.userops.scale, dtypes="float", arguments=_factor)


def _refuse_scale(gm: torch.fx.GraphModule) -> None:
    for mod in gm.modules():
        if isinstance(mod, torch.fx.GraphModule) and any(
            n.target is torch.ops.userops.scale.default for n in mod.graph.nodes
        ):
            raise RuntimeError("userops::scale reached the pass")


def refuses_scale(gm: torch.fx.GraphModule, sig: Any) -> Any:
    """torch's set-grad pass, except that it raises on a graph calling ``userops::scale``."""
    _refuse_scale(gm)
    return replace_set_grad_with_hop_pass(gm, sig)


def only_refuses_scale(gm: torch.fx.GraphModule, sig: Any) -> Any:
    """No rewrite (so no finding of torch's pass to shrink), except that it raises on a
    graph calling ``userops::scale``."""
    _refuse_scale(gm)
    return gm, sig


def segfaults_on_scale(gm: torch.fx.GraphModule, sig: Any) -> Any:
    """No rewrite, except that its process dies of SIGSEGV on a graph calling ``userops::scale``."""
    try:
        _refuse_scale(gm)
    except RuntimeError:
        os.kill(os.getpid(), signal.SIGSEGV)
    return gm, sig
