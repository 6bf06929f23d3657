"""Run a graph on its own copies of the inputs and record everything observable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from strategies.case import clone_input


@dataclass
class Run:
    """One execution: outputs, the inputs' state afterwards, and the grad mode it left."""

    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...] | None
    grad_mode_after: bool
    error: BaseException | None = None


def run_graph(gm: fx.GraphModule, inputs: tuple[Any, ...], ambient_grad: bool) -> Run:
    """Execute ``gm`` under ``ambient_grad`` on fresh clones of ``inputs``.

    The process-wide grad mode is restored afterwards whatever the graph did, so a graph
    that leaks a toggle cannot poison the next run; the leak itself is recorded.
    """
    clones = tuple(clone_input(t) for t in inputs)
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient_grad)
    try:
        out = gm(*clones)
        outputs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return Run(clones, outputs, torch.is_grad_enabled())
    except Exception as e:  # the graph itself may be broken; that is an observation
        return Run(clones, None, torch.is_grad_enabled(), e)
    finally:
        torch.set_grad_enabled(before)
