"""Grad-mode and autocast regions drawn as a first-class shape.

``with torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled(b)`` (blocks or
decorators) all record ``_set_grad_enabled(mode)`` on entry and ``_set_grad_enabled(outer)``
on exit; ``torch.autocast`` records ``_enter_autocast``/``_exit_autocast``. Regions nest, may be
empty, and values cross their boundaries both ways because every step draws from one pool.
The adversarial domain also leaves regions unbalanced and lets grad and autocast regions cross.
"""

from __future__ import annotations

import torch
from fxfuzz.strategies.constants import draw_constant
from fxfuzz.strategies.effects import draw_effect
from fxfuzz.strategies.emit import draw_inplace, draw_op, draw_repeat, draw_tensor_attr, needs_grad
from fxfuzz.strategies.motifs import draw_motif, draw_random
from fxfuzz.strategies.state import State, Value, rarely
from fxfuzz.strategies.subgraphs import draw_cond, draw_map, draw_wrapped
from fxfuzz.strategies.symbolic import draw_size_step, use_size
from fxfuzz.strategies.tooled import TOOL_FORM, TORCH_LEVEL
from hypothesis import strategies as st

MAX_DEPTH = 3
# Step kinds, repeated for weight; shrinking moves toward the first (a plain op).
_STEPS = ("op", "op", "op", "inplace", "grad", "grad", "autocast", "cond", "map")
_LEAF_STEPS = ("op", "op", "inplace")
# Export never hands the set-grad pass a wrap_with_set_grad_enabled call: tracing runs the
# HOP's body eagerly, so even a re-exported ``ep.module()`` arrives as plain toggles
# (tests/strategies/test_strategies_regions.py). Only a pass's output fed back in holds one.
_ADVERSARIAL_STEPS = _STEPS + ("wrapped", "tensor_attr")
# Steps on sizes (after the others: shrinking still reaches a plain op); a plain op in a
# graph without symbolic sizes, so a case's choices mean the same with and without them.
_SIZE_STEPS = ("size", "size", "size")
# The kind of a pass that may move or merge computations across a grad toggle (an optimizing
# pass: CSE, DCE, scheduling, folding). Declared, generation baits it: a "repeat" step joins the
# steps (equal calls, maybe in two grad modes), a grad region that flips the mode may place a
# step on values from before it next to its toggles (``_bait``), and outputs may favour those
# values. Undeclared, none of this draws a choice, so every other pass keeps its cases.
ACROSS_TOGGLE = "across_toggle"
# The kind of a pass that lifts or folds tensor constants. Declared, constant steps join the
# steps (several per case, between the toggles); undeclared, none is drawn.
CONSTANT = "constant"
_CONSTANT_STEPS = ("constant", "constant")
# The kind of a pass that removes, merges or moves calls: effectful calls must all stay, in
# order (fxfuzz.strategies.effects). Declared, effect steps join the steps; undeclared, none.
EFFECT = "effect"
_EFFECT_STEPS = ("effect", "effect")
# The kind of a pass that may rewrite the subgraphs pattern passes match (attention, softmax
# chains, conv-bn-relu, split/cat...; fxfuzz.strategies.motifs). Declared, motif steps join the
# steps: a unit or one op of ops.PATTERN_OPS each; undeclared, none is drawn.
MOTIF = "motif"
_MOTIF_STEPS = ("motif",)
# The kind of a pass that removes, merges, moves or folds calls, random ones included: each
# random call advances the generator, so deleting, merging, reordering or freezing one is a
# change of meaning (the ``rng`` check). Declared, random steps join the top-level graph's
# steps; undeclared, none.
RANDOM = "random"
_RANDOM_STEPS = ("random",)
# The node kinds a pass may declare it reacts to (``Registered.reacts_to``): the step that draws
# one, and the prefix of the ``case.features`` key that counts one drawn anywhere in the case.
REACTION_STEPS = {
    "grad_toggle": ("grad", "toggle:"),
    "autocast": ("autocast", "autocast:"),
    "cond": ("cond", "hop:cond"),
    "map": ("map", "hop:map"),
    # Owed as a grad region, which baits where it flips the mode; counted by its bait steps.
    ACROSS_TOGGLE: ("grad", "bait:"),
    # Tensor constants read by get_attr and ops on them alone, as export traces them before
    # lifting (fxfuzz.strategies.constants): what constant lifting and folding passes rewrite.
    CONSTANT: ("constant", "constant:"),
    EFFECT: ("effect", "effect:"),
    MOTIF: ("motif", "motif:"),
    RANDOM: ("random", "random:"),
}
# Every node kind a pass may declare: those a step draws, the graph shapes torch's tools emit,
# drawn on the finished case, and the torch-level calls they record (fxfuzz.strategies.tooled).
NODE_KINDS = (*REACTION_STEPS, TOOL_FORM, TORCH_LEVEL)
# Kinds a block owes only where the pass declares nothing else: the generic contracts declare
# them beside the toggles, and owing them would take the place of the toggles they owed before.
_MIXED_IN = (MOTIF, RANDOM)
# The step ACROSS_TOGGLE adds, after the others (shrinking moves away from it, toward a plain op).
_BAIT_STEPS = ("repeat",)
# Steps the top-level block keeps for a declared kind it still owes: enough for the region to
# hold a step or two, so the pass has something to move, not only an empty toggle pair.
_OWED_STEPS = 3


def draw_block(draw: st.DrawFn, s: State, depth: int) -> None:
    """A run of steps at nesting ``depth``; every region restores the modes it entered from
    (except where the adversarial domain decides otherwise).

    At the top level of a case for a pass that declares the node kinds it reacts to
    (``s.reacts_to``), nine cases in ten owe one: if none was drawn by the block's end, a step
    drawing one ends it (its own steps may be none). Owing shrinks to owing, so a failure that
    needs no such node shrinks to a case that still ends with one, empty; a pass that declares
    nothing draws no extra choice and keeps the mix of steps as it was."""
    s.max_depth = max(s.max_depth, depth)
    kinds: tuple[str, ...] = (
        _LEAF_STEPS if depth >= MAX_DEPTH else _ADVERSARIAL_STEPS if s.domain == "adversarial" else _STEPS
    )
    if ACROSS_TOGGLE in s.reacts_to and depth < MAX_DEPTH:
        kinds += _BAIT_STEPS
    if CONSTANT in s.reacts_to:
        kinds += _CONSTANT_STEPS
    if EFFECT in s.reacts_to:
        kinds += _EFFECT_STEPS
    if MOTIF in s.reacts_to:
        kinds += _MOTIF_STEPS
    if RANDOM in s.reacts_to:
        kinds += _RANDOM_STEPS
    kinds += _SIZE_STEPS
    # Owing is the simplest choice: Hypothesis extends the first tens of cases of a run with
    # each choice's simplest value, and a short gate or campaign runs little else.
    owed = depth == 0 and bool(s.reacts_to) and not rarely(draw, 10)
    owable = _owable(s)
    # A "one more step?" choice before each step, rather than a count up front: the shrinker
    # then deletes any single step, not only the last ones.
    steps = 0
    while (
        s.budget.left > (_OWED_STEPS if owed and not reacted(s, owable) else 0)
        and draw(st.integers(0, 12 if depth == 0 else 3)) != 0
    ):
        steps += 1
        s.budget.left -= 1
        _step(draw, s, depth, draw(st.sampled_from(kinds)))
    if owed and not reacted(s, owable):
        s.budget.left -= 1
        _step(draw, s, depth, REACTION_STEPS[draw(st.sampled_from(owable))][0])
    if steps == 0 and depth > 0:
        s.stats["region:empty"] += 1


def _owable(s: State) -> tuple[str, ...]:
    """The kinds a block owes: those declared, less the mixed-in ones where others are."""
    return tuple(k for k in s.reacts_to if k not in _MIXED_IN) or s.reacts_to


def reacted(s: State, kinds: tuple[str, ...]) -> bool:
    """Has the case drawn a node of one of ``kinds`` anywhere (subgraphs included)?"""
    prefixes = tuple(REACTION_STEPS[k][1] for k in kinds)
    return any(key.startswith(prefixes) for key in s.stats)


def _step(draw: st.DrawFn, s: State, depth: int, kind: str) -> None:
    if (
        kind == "op"
        or (kind == "inplace" and not draw_inplace(draw, s))
        or (kind == "size" and not s.builder.symbolic)
        or (kind == "repeat" and not draw_repeat(draw, s, s.pool))
    ):
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
    elif kind == "constant":
        draw_constant(draw, s)
    elif kind == "effect":
        draw_effect(draw, s)
    elif kind == "motif":
        draw_motif(draw, s)
    elif kind == "random":
        draw_random(draw, s)


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
    # Bait only where the mode flips: across a toggle to the same mode, moving or merging is sound.
    before = list(s.pool) if inner != outer and ACROSS_TOGGLE in s.reacts_to else None
    _bait(draw, s, before, "after_toggle")
    sizes_before = len(s.sizes)
    # Drawn in static cases too, so that a case and its static twin (the shrinker's first
    # try) read the same choices the same way up to the first size step.
    if draw(st.booleans()) and b.symbolic:
        draw_size_step(draw, s)  # sizes are read inside grad blocks in real models, not only around them
    draw_block(draw, s, depth + 1)
    _bait(draw, s, before, "before_toggle")
    if s.domain == "adversarial" and rarely(draw, 4):
        s.stats["adversarial:unbalanced_toggle"] += 1
        return
    s.regions.append((enter, b.set_grad(outer)))
    if len(s.sizes) > sizes_before and draw(st.booleans()):
        # A size computed inside the region and used after it (``n = x.shape[0] * 2`` under
        # no_grad, ``z.view(n // 2, -1)`` after): the split makes it a SymInt output of the HOP.
        use_size(draw, s, s.sizes[sizes_before:])


# What a grad region may place next to its toggles; shrinking moves toward the first (nothing).
_BAITS = ("none", "none", "repeat", "op")


def _bait(draw: st.DrawFn, s: State, before: list[Value] | None, where: str) -> None:
    """Maybe a step next to a toggle whose operands all predate the region (``before``; None
    where the mode does not flip or the pass does not react to ACROSS_TOGGLE: no choice): a call
    repeated from there (equal calls in two grad modes: CSE bait) or a new op, on values needing
    grad where there are any (an op a scheduling pass may move across the toggle, changing its
    grad mode). Random steps rarely land there: a region's last node is often a getitem, a
    nested toggle or nothing, and its operands come from inside."""
    if before is None:
        return
    kind = draw(st.sampled_from(_BAITS))
    if kind == "none":
        return
    s.stats[f"bait:{where}"] += 1
    drawn = len(s.pool)
    if not (kind == "repeat" and draw_repeat(draw, s, before)):
        draw_op(draw, s, [v for v in before if needs_grad(v.node)] or before)
    s.baits += s.pool[drawn:]


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
