"""How far a result's values may stray under a contract that excuses rounding
(``PassContract.values``): the ``Bound`` its values are compared within.

- ``approximate`` (a rewrite that reassociates float arithmetic): the dtype's tolerance of
  ``torch.testing.assert_close`` (``fxfuzz.oracles.tolerance``, the one the CUDA comparisons
  use), scaled by the original graph's count of calls, nested graphs included: each call may
  round once more, or in another order, than it did.
- ``quantized`` (a pass that quantizes for inference, pt2e's ``convert_pt2e``): the dtype's
  tolerance plus a slack from the quantization parameters the result holds. Each dequantize
  call gives back a value rounded to a step of its scale (the largest of a per-channel one's),
  at most half a step off, or clamped where the observer chose a narrower range; the slack is
  the sum of those steps, each counted whole, times one plus the largest magnitude among the
  original run's inputs and outputs, the most a rounding error is multiplied by a value it
  meets on the way to an output (a product of a rounded activation and a rounded weight).
  It is a first-order bound for the few layers a drawn graph holds, not a proof: a scale the
  pass got wrong by more than a step moves values past it (``tests/oracles/test_value_contracts.py``).
  A scale computed at run time (dynamic quantization) is not read: such a result is held to
  the rest of the bound alone.
"""

from __future__ import annotations

from typing import Any

import torch
from fxfuzz.core.contract import PassContract
from fxfuzz.oracles.execute import Run, graph_modules
from fxfuzz.oracles.tolerance import Bound
from torch import fx

_CALLS = ("call_function", "call_method", "call_module")


def calls(gm: fx.GraphModule) -> int:
    """The calls of ``gm`` and of every nested graph."""
    return sum(1 for _, mod in graph_modules(gm) for n in mod.graph.nodes if n.op in _CALLS)


def _attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _scale(gm: fx.GraphModule, arg: Any) -> float:
    """The largest step a dequantize's scale argument names: a number, or a tensor attribute
    (per channel); 0 for one computed at run time."""
    if isinstance(arg, fx.Node) and arg.op == "get_attr":
        arg = _attr(gm, str(arg.target))
    if isinstance(arg, torch.Tensor) and arg.numel() and arg.is_floating_point():
        return float(arg.detach().abs().max())
    return abs(float(arg)) if isinstance(arg, (int, float)) else 0.0


def quantization_steps(gm: fx.GraphModule) -> float:
    """The sum of the steps of every dequantize call in ``gm`` and its nested graphs (its
    second argument is the scale, in quantized_decomposed's and torchao's operators alike)."""
    total = 0.0
    for _, mod in graph_modules(gm):
        for n in mod.graph.nodes:
            if n.op == "call_function" and "dequantize" in str(n.target) and len(n.args) > 1:
                total += _scale(mod, n.args[1])
    return total


def _magnitude(run: Run) -> float:
    """The largest finite magnitude among a run's floating inputs and outputs."""
    leaves = [*run.inputs, *(run.outputs or ())]
    finite = [
        t.detach().abs().nan_to_num(0.0, 0.0, 0.0).max()
        for t in leaves
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
    ]
    return float(max(finite, default=torch.tensor(0.0)))


def value_bound(contract: PassContract, original: fx.GraphModule, result: fx.GraphModule, ref: Run) -> Bound | None:
    """The Bound ``contract`` compares ``result``'s values with ``original``'s within (module
    docstring); None where it compares them bitwise."""
    if contract.values == "approximate":
        return Bound(scale=float(max(1, calls(original))))
    if contract.values == "quantized":
        return Bound(slack=quantization_steps(result) * (1.0 + _magnitude(ref)))
    return None
