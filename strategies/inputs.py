"""Graph inputs of every kind the training IR has: parameters, buffers, constants, user inputs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from fxfuzz.strategies.builder import GraphBuilder
from fxfuzz.strategies.state import rarely
from fxfuzz.strategies.symbolic import Dims
from hypothesis import strategies as st
from torch import fx
from torch.export.graph_signature import InputKind

# Index 0 is what shrinking reaches: float32 first, the rarer dtypes after.
DTYPES = (
    torch.float32,
    torch.float32,
    torch.float32,
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.bool,
)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass
class Inputs:
    """The placeholders drawn for one graph, split by what may be done to them."""

    values: list[fx.Node]
    # Buffers (and user inputs that need no grad) a no_grad region may update in place.
    mutable: list[fx.Node]


def base_shapes() -> st.SearchStrategy[tuple[int, ...]]:
    """The graph's main shape: 1-d to 3-d, sizes 1..3 (inputs take 0-d suffixes of it);
    shrinks toward ``(1,)``."""
    return st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)


def _shape(draw: st.DrawFn, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape related to ``base`` so that ops combine inputs: the base itself, a
    broadcastable suffix, the base with a size-1 dim, or its last two dims swapped
    (a matrix operand for mm/linear)."""
    how = draw(st.integers(0, 3))
    if how == 1:
        return base[draw(st.integers(0, len(base))) :]
    if how == 2 and base:
        i = draw(st.integers(0, len(base) - 1))
        return base[:i] + (1,) + base[i + 1 :]
    if how == 3 and len(base) >= 2:
        return base[:-2] + (base[-1], base[-2])
    return base


def tensor_value(draw: st.DrawFn, shape: tuple[int, ...], dtype: torch.dtype, requires_grad: bool) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` made by torch's generator from one drawn seed, so a
    single integer draws it, shrinks it and replays it."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=gen).bool()
    elif dtype == torch.int64:
        t = torch.randint(-3, 4, shape, generator=gen)
    else:
        t = torch.randn(shape, generator=gen).to(dtype)
    return t.requires_grad_(requires_grad and dtype in FLOATS)


def draw_inputs(
    draw: st.DrawFn,
    b: GraphBuilder,
    base: tuple[int, ...],
    stats: Counter,
    names: list[str],
    dims: Dims | None = None,
    batch: frozenset[int] = frozenset(),
) -> Inputs:
    """Placeholders in export's order (parameters, buffers, constants, user inputs), each
    with a real example tensor; ``names`` supplies placeholder names in that order. With
    ``dims``, user inputs get symbolic sizes (export keeps parameters and buffers static);
    parameters, buffers and constants take size 1 at the traced sizes in ``batch``."""
    out = Inputs([], [])
    name = iter(names)

    def add(
        kind: InputKind, dtype: torch.dtype, grad: bool, target: str | None, persistent: bool | None = None
    ) -> fx.Node:
        shape = _shape(draw, base)
        if kind != InputKind.USER_INPUT:
            # Weights and buffers broadcast over the (batch-like) sizes chosen for symbols, as in
            # models exported with a dynamic dim: a static size equal to the traced one would
            # specialize the symbol at once. Static cases alike, so a case and its static twin
            # (what shrinking tries first) have the same shapes.
            shape = tuple(1 if n in batch else n for n in shape)
        t = tensor_value(draw, shape, dtype, grad)
        meta = dims.meta(t) if dims is not None and kind == InputKind.USER_INPUT else None
        node = b.placeholder(next(name), t, kind, target, persistent, meta)
        stats[f"input:{kind.name.lower()}"] += 1
        stats[f"dtype:{str(dtype).removeprefix('torch.')}"] += 1
        if t.requires_grad:
            stats["input:requires_grad"] += 1
        out.values.append(node)
        return node

    for i in range(draw(st.integers(0, 2))):
        # Frozen parameters (requires_grad=False) exist too; most train.
        add(InputKind.PARAMETER, draw(st.sampled_from(FLOATS)), not rarely(draw, 5), f"layer{i}.weight")
    for i in range(draw(st.integers(0, 2))):
        persistent = draw(st.booleans())
        if not persistent:
            stats["input:buffer_nonpersistent"] += 1
        out.mutable.append(add(InputKind.BUFFER, draw(st.sampled_from(DTYPES)), False, f"buf{i}", persistent))
    for i in range(draw(st.integers(0, 1))):
        add(InputKind.CONSTANT_TENSOR, draw(st.sampled_from(DTYPES)), False, f"lifted_tensor_{i}")
    for _ in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from(DTYPES))
        node = add(InputKind.USER_INPUT, dtype, draw(st.booleans()), None)
        if not node.meta["val"].requires_grad:
            out.mutable.append(node)
    return out
