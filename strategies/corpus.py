"""The built-in regression corpus: hand-written nn.Modules written the way torch.export users
write them, each captured with ``from_module`` into the GraphCase export hands the pass, and
the gate's corpus built from them (``gate_corpus``).

Every entry covers a pattern the set-grad pass must handle: parameter and buffer updates under
no_grad, lifted constant tensors, empty and None outputs, a toggle left as a side effect,
submodules with grad blocks, ``torch.cond`` with a grad block in a branch, autocast mixed with
grad blocks, ``@torch.no_grad()`` / ``@torch.enable_grad()`` decorators on helpers, and sizes
crossing a no_grad block both ways under a dynamic batch dim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.capture import from_module
from fxfuzz.core.case import GraphCase
from torch import nn
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo


def _t(*values: float, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, requires_grad=requires_grad)


class NoGradBufferUpdate(nn.Module):
    """Running statistics: a buffer updated in place under no_grad, as BatchNorm does."""

    running: torch.Tensor  # a buffer: nn.Module's attribute lookup types it Tensor | Module

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w
        with torch.no_grad():
            self.running.mul_(0.9).add_(y.detach() * 0.1)
        return y.sin() + self.running


class NoGradParameterUpdate(nn.Module):
    """A parameter rescaled in place under no_grad (weight normalisation done by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.w.mul_(0.5)
        return (x * self.w).sum()


class LiftedConstants(nn.Module):
    """Plain tensor attributes and tensors made inside forward become lifted constants."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = _t(2.0, 3.0, 4.0)
        self.w = nn.Parameter(_t(1.0, 1.0, 1.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            shift = self.scale * torch.tensor([1.0, 0.0, -1.0])
        return x * self.w + shift, self.scale.clone()


class EmptyAndNoneOutputs(nn.Module):
    """None outputs and a grad block whose region returns nothing."""

    seen: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        with torch.no_grad():
            self.seen.add_(1.0)
        return None, x.cos(), None


class OnlyStateUpdate(nn.Module):
    """Returns no tensor at all: the only effect is a buffer update under no_grad."""

    count: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> tuple[()]:
        with torch.no_grad():
            self.count.add_(x.sum())
        return ()


class LeftDisabled(nn.Module):
    """``torch.set_grad_enabled(False)`` without a restore: a toggle left as a side effect."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * self.w
        torch.set_grad_enabled(False)
        return y, (y * self.w).sin()


class _Block(nn.Module):
    def __init__(self, frozen: bool) -> None:
        super().__init__()
        self.frozen = frozen
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen:
            with torch.no_grad():
                return self.lin(x).relu()
        return self.lin(x).tanh()


class SubmodulesWithGradBlocks(nn.Module):
    """A frozen backbone block between trainable ones, each grad block inside a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(_Block(False), _Block(True), _Block(False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class NestedGradBlocks(nn.Module):
    """enable_grad inside no_grad inside the ambient mode, values crossing every boundary."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = x * self.w
        with torch.no_grad():
            b = a.exp()
            with torch.enable_grad():
                c = (b * self.w).sin()
            d = c + a
        return a + d, c, b


class CondWithGradBlock(nn.Module):
    """``torch.cond`` whose true branch holds a no_grad block."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                a = x.cos()
            return a + x * self.w

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return x.sin() * self.w

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


class AutocastWithGradBlocks(nn.Module):
    """Autocast around a no_grad block, and a grad block around autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
            with torch.no_grad():
                z = self.lin(y.float())
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                w = self.lin(x)
        return y.float() + z.float(), w.float()


class DecoratedHelpers(nn.Module):
    """``@torch.no_grad()`` and ``@torch.enable_grad()`` on helper methods."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    @torch.no_grad()
    def _target(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w).relu()

    @torch.enable_grad()
    def _regularizer(self) -> torch.Tensor:
        return (self.w * self.w).sum()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = self._target(x)
        with torch.no_grad():
            r = self._regularizer()
        return ((x * self.w - t) ** 2).sum(), r


class GradModeFromArgument(nn.Module):
    """``torch.set_grad_enabled(flag)`` with a Python flag, then a block of the same mode."""

    def __init__(self, train: bool = False) -> None:
        super().__init__()
        self.train_mode = train
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.set_grad_enabled(self.train_mode):
            a = x * self.w
        with torch.set_grad_enabled(True):
            b = a.sin()
        return a, b


class TwoOutputsFromNoGrad(nn.Module):
    """A no_grad block whose two results are both used later: the wrapped region returns a
    tuple, so the pass must rename and annotate each ``getitem`` it creates."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * self.w
        with torch.no_grad():
            a, b = y.sin(), y.cos()
        return a + y, b


class ConstantOutputs(nn.Module):
    """A grad block next to outputs that are Python constants, which export records as
    ConstantArgument output specs rather than nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, None]:
        with torch.no_grad():
            a = (x * self.w).sin()
        return a + x, 3, None


class CondBesideGradBlock(nn.Module):
    """``torch.cond`` after a no_grad block: the region the pass inlines holds the branches'
    ``get_attr`` nodes, which inlining must carry over into the parent module."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(_t(0.5, -1.0, 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            a = x.sin()
        y = torch.cond(x.sum() > 0, lambda x: x.cos() * self.w, lambda x: x.sin(), (x,))
        return y + a


class SizeIntoNoGrad(nn.Module):
    """A size read and computed with inside a no_grad block and used after it (the issue's
    example): exported with a dynamic batch dim, the input's size becomes a SymInt operand of
    the region's ``wrap_with_set_grad_enabled``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            n = x.shape[0] * 2
            z = x.sin() + n
        return z.view(n // 2, -1)


class SizeOutOfNoGrad(nn.Module):
    """A size computed inside a no_grad block and used after it: a SymInt output of the region."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            m = x.shape[0] + 1
            y = x.cos()
        return y.sum(0) + m, x.new_zeros(m)


@dataclass(frozen=True)
class CorpusModule:
    """One corpus entry: how to build the module and its example arguments, and the
    ``dynamic_shapes`` it is exported with (None: static)."""

    name: str
    make: Callable[[], nn.Module]
    args: Callable[[], tuple]
    dynamic_shapes: Callable[[], object] | None = None


def _x() -> tuple:
    return (_t(1.0, -2.0, 0.5, requires_grad=True),)


def _x_no_grad() -> tuple:
    return (_t(1.0, -2.0, 0.5),)


def _batch() -> tuple:
    return (torch.linspace(-1.0, 1.0, 12).reshape(4, 3).requires_grad_(),)


def _dynamic_batch() -> object:
    return ({0: torch.export.Dim("batch", max=64)},)


MODULES: tuple[CorpusModule, ...] = (
    CorpusModule("no_grad_buffer_update", NoGradBufferUpdate, _x),
    CorpusModule("no_grad_parameter_update", NoGradParameterUpdate, _x),
    CorpusModule("lifted_constants", LiftedConstants, _x),
    CorpusModule("empty_and_none_outputs", EmptyAndNoneOutputs, _x),
    CorpusModule("only_state_update", OnlyStateUpdate, _x_no_grad),
    CorpusModule("left_disabled", LeftDisabled, _x),
    CorpusModule("submodules_with_grad_blocks", SubmodulesWithGradBlocks, _x),
    CorpusModule("nested_grad_blocks", NestedGradBlocks, _x),
    CorpusModule("cond_with_grad_block", CondWithGradBlock, _x),
    CorpusModule("autocast_with_grad_blocks", AutocastWithGradBlocks, _x),
    CorpusModule("decorated_helpers", DecoratedHelpers, _x),
    CorpusModule("grad_mode_from_argument", GradModeFromArgument, _x),
    CorpusModule("two_outputs_from_no_grad", TwoOutputsFromNoGrad, _x),
    CorpusModule("constant_outputs", ConstantOutputs, _x),
    CorpusModule("cond_beside_grad_block", CondBesideGradBlock, _x),
    CorpusModule("size_into_no_grad", SizeIntoNoGrad, _batch, _dynamic_batch),
    CorpusModule("size_out_of_no_grad", SizeOutOfNoGrad, _batch, _dynamic_batch),
)


def capture(entry: CorpusModule, ambient: bool) -> GraphCase:
    """The case export hands the pass for ``entry`` when export runs under grad mode ``ambient``."""
    with torch.set_grad_enabled(ambient):
        dynamic = entry.dynamic_shapes() if entry.dynamic_shapes else None
        case = from_module(entry.make(), entry.args(), dynamic_shapes=dynamic)
    case.features = {**case.features, f"corpus:{entry.name}": 1}
    return case


def corpus_cases(ambient_modes: tuple[bool, ...] = (True, False)) -> list[tuple[str, GraphCase]]:
    """Every corpus module captured under each ambient grad mode, named ``<module>[grad=<mode>]``."""
    return [(f"{e.name}[grad={mode}]", capture(e, mode)) for e in MODULES for mode in ambient_modes]


def with_pytree_convention(case: GraphCase) -> GraphCase:
    """A copy of ``case`` whose graph carries a pytree calling convention, as graphs reach a
    pass from callers other than torch.export (``make_fx(..., pre_dispatch=True)`` on
    structured arguments; export itself installs the convention only after its passes).
    Inputs stay flat, since the oracles call graphs with flat inputs; outputs become a dict."""
    out = case.copy()
    names = [n.name for n in out.gm.graph.nodes if n.op == "placeholder"]
    results = out.gm.graph.output_node().args[0]
    in_spec = pytree.tree_flatten((tuple(names), {}))[1]
    out_spec = pytree.tree_flatten({f"out{i}": 0 for i in range(len(cast(Sequence[Any], results)))})[
        1
    ]  # export outputs a tuple
    out.gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))
    out.gm.recompile()
    return out


# The built-in module whose capture also runs with a pytree calling convention: two outputs.
_CONVENTION_MODULE = "two_outputs_from_no_grad"


def gate_corpus() -> list[tuple[str, GraphCase]]:
    """The built-in regression corpus: every corpus module captured under both grad modes,
    then one of them again with a pytree calling convention, which the pass must keep (no
    capture has one, so without it nothing tests that the split graph keeps the codegen)."""
    cases = corpus_cases()
    return cases + [
        (f"{name}[pytree]", with_pytree_convention(case))
        for name, case in cases
        if name.startswith(_CONVENTION_MODULE + "[")
    ]
