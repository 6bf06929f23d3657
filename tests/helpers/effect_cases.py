"""Modules whose exported graphs hold effectful calls (fxfuzz::logged), lowered to ATen, and the
path of tests/helpers/effect_passes.py, for the ordered-effects tests."""

import os
import warnings

import torch
from fxfuzz.core import custom_ops  # noqa: F401  (registers fxfuzz::logged, used below at import)
from fxfuzz.core.case import GraphCase
from paths import HELPERS

logged = torch.ops.fxfuzz.logged


BROKEN = os.path.join(HELPERS, "effect_passes.py")


class UnusedFirst(torch.nn.Module):
    def forward(self, x):
        logged(x)
        return logged(x.sin()).cos()


class TwiceEqual(torch.nn.Module):
    def forward(self, x):
        return logged(x) + logged(x)


class SwappableTwo(torch.nn.Module):
    def forward(self, x):
        y = x.sin()
        logged(x)
        return logged(y) * 2


MODULES = (UnusedFirst, TwiceEqual, SwappableTwo)


def lowered(module: type[torch.nn.Module], requires_grad: bool = False, ambient_grad: bool = True) -> GraphCase:
    """The ATen graph torch.export lowers for ``module``: a token in, one with_effects call per
    logged call, a token out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(module(), (torch.randn(3),)).run_decompositions()
    inputs = (torch.ops.prims._make_token.default(), torch.randn(3, requires_grad=requires_grad))
    return GraphCase(program.graph_module, program.graph_signature, inputs, ambient_grad=ambient_grad, domain="aten")
