"""Grad-mode and autocast regions drawn as a first-class shape.

``with torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled(b)`` (blocks or
decorators) all record ``_set_grad_enabled(mode)`` on entry and ``_set_grad_enabled(outer)``
on exit; ``torch.autocast`` records ``_enter_autocast``/``_exit_autocast``. Regions nest, may be
empty, and values cross their boundaries both ways because every step draws from one pool.
The adversarial domain also leaves regions unbalanced and lets grad and autocast regions cross.
"""

from __future__ import annotations

import torch
from fxfuzz.strategies.emit import draw_inplace, draw_op, draw_tensor_attr
from fxfuzz.strategies.state import State, rarely
from fxfuzz.strategies.subgraphs import draw_cond, draw_map, draw_wrapped
from fxfuzz.strategies.symbolic import draw_size_step, use_size
from hypothesis import strategies as st

MAX_DEPTH = 3
# Step kinds, repeated for weight; shrinking moves toward the first (a plain op).
_STEPS = ("op", "op", "op", "inplace", "grad", "grad", "autocast", "cond", "map")
_LEAF_STEPS = ("op", "op", "inplace")
# Export never hands the set-grad pass a wrap_with_set_grad_enabled call: tracing runs the
# HOP's body eagerly, so even a re-exported ``ep.module()`` arrives as plain toggles
# (tests/test_strategies_regions.py). Only a pass's output fed back in holds one.
_ADVERSARIAL_STEPS = _STEPS + ("wrapped", "tensor_attr")
# Steps on sizes (after the others: shrinking still reaches a plain op); a plain op in a
# graph without symbolic sizes, so a case's choices mean the same with and without them.
_SIZE_STEPS = ("size", "size", "size")


def draw_block(draw: st.DrawFn, s: State, depth: int) -> None:
    """A run of steps at nesting ``depth``; every region restores the modes it entered from
    (except where the adversarial domain decides otherwise)."""
    s.max_depth = max(s.max_depth, depth)
    kinds: tuple[str, ...] = _LEAF_STEPS if depth >= MAX_DEPTH else _ADVERSARIAL_STEPS if s.domain == "adversarial" else _STEPS
    kinds += _SIZE_STEPS
    # A "one more step?" choice before each step, rather than a count up front: the shrinker
    # then deletes any single step, not only the last ones.
    steps = 0
    while s.budget.left > 0 and draw(st.integers(0, 12 if depth == 0 else 3)) != 0:
        steps += 1
        s.budget.left -= 1
        kind = draw(st.sampled_from(kinds))
        if kind == "op" or (kind == "inplace" and not draw_inplace(draw, s)) or (kind == "size" and not s.builder.symbolic):
            draw_op(draw, s)
        elif kind == "grad":
            grad_region(draw, s, depth)
        elif kind == "autocast":
            autocast_region(draw, s, depth)
        elif kind == "cond":
            draw_cond(draw, s, depth + 1, draw_block)
        elif kind == "map":
            draw_map(draw, s, depth + 1, draw_block)
        elif kind == "wrapped":
            draw_wrapped(draw, s, depth + 1, draw_block)
        elif kind == "tensor_attr":
            draw_tensor_attr(draw, s)
        elif kind == "size":
            draw_size_step(draw, s)
    if steps == 0 and depth > 0:
        s.stats["region:empty"] += 1


def grad_region(draw: st.DrawFn, s: State, depth: int) -> None:
    """A block under a grad-mode toggle (``no_grad``, ``enable_grad`` or ``set_grad_enabled(b)``,
    possibly to the mode already on), closed by the toggle back (left open, rarely, in the
    adversarial domain)."""
    b = s.builder
    outer = b.grad_mode
    style = draw(st.sampled_from(["no_grad", "enable_grad", "set_grad_enabled"]))
    inner = {"no_grad": False, "enable_grad": True}.get(style, None)
    inner = draw(st.booleans()) if inner is None else inner
    enter = b.set_grad(inner)
    s.stats[f"region:{style}"] += 1
    s.stats[f"toggle:{'same' if inner == outer else 'flip'}"] += 1
    if rarely(draw, 4):
        # A decorated function called inside a block of the same mode: back-to-back toggles.
        b.set_grad(inner)
        s.stats["toggle:duplicate"] += 1
    sizes_before = len(s.sizes)
    # Drawn in static cases too, so that a case and its static twin (the shrinker's first
    # try) read the same choices the same way up to the first size step.
    if draw(st.booleans()) and b.symbolic:
        draw_size_step(draw, s)  # sizes are read inside grad blocks in real models, not only around them
    draw_block(draw, s, depth + 1)
    if s.domain == "adversarial" and rarely(draw, 4):
        s.stats["adversarial:unbalanced_toggle"] += 1
        return
    s.regions.append((enter, b.set_grad(outer)))
    if len(s.sizes) > sizes_before and draw(st.booleans()):
        # A size computed inside the region and used after it (``n = x.shape[0] * 2`` under
        # no_grad, ``z.view(n // 2, -1)`` after): the split makes it a SymInt output of the HOP.
        use_size(draw, s, s.sizes[sizes_before:])


def autocast_region(draw: st.DrawFn, s: State, depth: int) -> None:
    """A block under autocast (bfloat16 or float16, rarely disabled), entered and exited as
    export records it; in the adversarial domain a grad region may cross its end."""
    b = s.builder
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float16]))
    enabled = not rarely(draw, 4)
    enter = b.enter_autocast(dtype, enabled)
    s.stats[f"autocast:{str(dtype).removeprefix('torch.')}{'' if enabled else ':disabled'}"] += 1
    crossing = s.domain == "adversarial" and rarely(draw, 4)
    if crossing:
        # A grad region that starts inside the autocast region and ends after it.
        outer = b.grad_mode
        b.set_grad(not outer)
        s.stats["adversarial:crossing_regions"] += 1
    draw_block(draw, s, depth + 1)
    b.exit_autocast(enter)
    if crossing:
        b.set_grad(outer)
