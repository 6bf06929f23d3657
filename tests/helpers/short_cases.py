"""Cases that show the known findings (fxfuzz-known.txt, docs/known/), for the short-repro tests:
each the graph a real caller hands the pass (torch.export's for a small module, or a saved
case of tests/data), with the pass it was found against. The modules are the pinning tests'
(tests/helpers/known_modules.py)."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.repro.files import load_repro
from fxfuzz.strategies import from_module
from known_modules import (
    BufferUpdateUnderNoGrad,
    CondInMap,
    CondInsideAutocast,
    CondUnderEnableGrad,
    CondUnderNoGrad,
    DeadCode,
    FoldableBuffer,
    IntegerMul,
    LiteralUpdated,
    LogLinear,
    NestedMapUnderNoGrad,
    NoGradInsideAutocast,
    NoGradInsideAutocastDetached,
    ReturnsAlias,
    SameSumInTwoGradModes,
    SingleOutputRegionReadTwice,
    TwoDraws,
    TwoNoGradRegions,
    adds_into_a_new_tensor,
    constant_after_no_grad,
    integer_args,
    negative_args,
    reread_constant_case,
    unused_constant_read,
)
from paths import DATA


class Calls(torch.nn.Module):
    """A module whose forward is ``fn``."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class CondAddedUnderNoGrad(torch.nn.Module):
    """A no_grad cond result added to one that takes gradients: once the region is dropped,
    the cond's share reaches the input's gradient."""

    def forward(self, x):
        with torch.no_grad():
            c = torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))
        return x * 2 + c


def _grad(x: torch.Tensor) -> torch.Tensor:
    return x.requires_grad_()


def _no_grad_export(module: torch.nn.Module, *args: torch.Tensor) -> GraphCase:
    with torch.no_grad():
        return from_module(module, args)


def _aten(module: torch.nn.Module, *args: torch.Tensor) -> GraphCase:
    """The ATen graph torch.export lowers (run_decompositions), as Inductor's passes take it."""
    program = torch.export.export(module, args).run_decompositions()
    return GraphCase(program.graph_module, program.graph_signature, args, domain="aten")


def _saved(name: str) -> GraphCase:
    return load_repro(os.path.join(DATA, name)).case


# name -> (pass spec, the case)
CASES: dict[str, tuple[str, Callable[[], GraphCase]]] = {
    "cond_under_no_grad": ("set_grad", lambda: from_module(CondUnderNoGrad(), (_grad(torch.ones(3)),))),
    "no_grad_inside_autocast": ("set_grad", lambda: from_module(NoGradInsideAutocast(), (_grad(torch.ones(3)),))),
    "cond_added_under_no_grad": ("set_grad", lambda: from_module(CondAddedUnderNoGrad(), (_grad(torch.ones(3)),))),
    "saves_for_backward": ("set_grad", lambda: from_module(NoGradInsideAutocastDetached(), (_grad(torch.ones(3)),))),
    "cond_under_enable_grad": ("set_grad", lambda: _no_grad_export(CondUnderEnableGrad(), _grad(torch.ones(3)))),
    "region_read_twice": ("set_grad", lambda: from_module(SingleOutputRegionReadTwice(), (_grad(torch.ones(3)),))),
    "users_map": ("set_grad", lambda: _saved("repro_before_namespace.json")),
    # The README campaign's example of a cond nested in a cond under a toggle, reduced.
    "nested_cond": ("set_grad", lambda: _saved("set_grad/crash-pass_raised-7c297f0d.json")),
    "nested_map": ("set_grad", lambda: from_module(NestedMapUnderNoGrad(), (torch.ones(2, 3), _grad(torch.ones(3))))),
    "buffer_update": ("set_grad", lambda: from_module(BufferUpdateUnderNoGrad(), (_grad(torch.ones(3)),))),
    "autocast_cond": ("autocast", lambda: from_module(CondInsideAutocast(), (torch.randn(3),), stage="autocast")),
    "export_autocast_cond": ("export", lambda: from_module(CondInsideAutocast(), (torch.randn(3),))),
    "cse_two_regions": ("cse", lambda: from_module(TwoNoGradRegions(), (_grad(torch.randn(3)),))),
    "cse_across_toggle": ("cse", lambda: from_module(SameSumInTwoGradModes(), (_grad(torch.randn(3)),))),
    "cse_autocast": ("cse", lambda: _saved("cse/equivalence-meta_mismatch-19aff044.json")),
    # A cse campaign's first example of the leak (seed 2, functional domain), reduced: 22 -> 3 nodes.
    "cse_grad_leak": ("cse", lambda: _saved("cse/equivalence-grad_mode_leak-dcf08181.json")),
    # Seed 11's first example (15 nodes) of both, reduced for each: 3 nodes.
    "cse_grad_fn": ("cse", lambda: _saved("cse/equivalence-grad_fn_mismatch-fd46f87f.json")),
    "cse_backward": ("cse", lambda: _saved("cse/gradients-backward_raises_differently-3bd93a99.json")),
    "split_dead_code": ("split_const_subgraphs", lambda: from_module(DeadCode(), (_grad(torch.randn(3)),))),
    "split_after_toggle": (
        "split_const_subgraphs",
        lambda: from_module(Calls(constant_after_no_grad), (_grad(torch.randn(3)),)),
    ),
    "split_fresh_copy": ("split_const_subgraphs", lambda: from_module(Calls(adds_into_a_new_tensor), (torch.ones(3),))),
    "fold_updated": ("constant_folding", lambda: _saved("constant_folding/structure-cleanup_failed-d8725f23.json")),
    "fold_accumulates": (
        "constant_folding",
        lambda: _saved("constant_folding/equivalence-value_mismatch-6ac4edc4.json"),
    ),
    "inductor_reread": ("inductor_constant_fold", reread_constant_case),
    "inductor_literal": ("inductor_constant_fold", lambda: from_module(LiteralUpdated(), (torch.full((3,), 2.0),))),
    "noop_alias": ("remove_noop_ops", lambda: _aten(ReturnsAlias(), torch.randn(3))),
    "dce_after_set_grad": ("set_grad+dce", lambda: _saved("set_grad_dce/crash-pass_raised-9a4e04cc.json")),
    "dce_update": ("set_grad+dce", lambda: _saved("set_grad_dce/equivalence-value_mismatch-6ac4edc4.json")),
    "cse_two_draws": ("cse", lambda: from_module(TwoDraws(), (torch.randn(3),))),
    "fold_needs_quant_ops": ("constant_folding", lambda: from_module(FoldableBuffer(), (torch.randn(3),))),
    "lift_unused_read": ("lift_constants", unused_constant_read),
    "x86_linear": ("pt2e_x86", lambda: from_module(torch.nn.Linear(3, 3), (torch.randn(2, 3),))),
    "x86_qat_linear": ("pt2e_x86_qat", lambda: from_module(torch.nn.Linear(3, 3), (torch.randn(2, 3),))),
    "xnnpack_linear": ("pt2e_xnnpack", lambda: from_module(torch.nn.Linear(3, 3), (torch.randn(2, 3),))),
    "x86_integer_mul": ("pt2e_x86", lambda: from_module(IntegerMul(), integer_args())),
    "x86_qat_integer_mul": ("pt2e_x86_qat", lambda: from_module(IntegerMul(), integer_args())),
    "xnnpack_nan_calibration": ("pt2e_xnnpack", lambda: from_module(LogLinear(), negative_args())),
    "x86_cond_in_map": ("pt2e_x86", lambda: from_module(CondInMap(), (torch.randn(2, 3),))),
    "xnnpack_cond_in_map": ("pt2e_xnnpack", lambda: from_module(CondInMap(), (torch.randn(2, 3),))),
}
