"""Calls of an operator with an ORDERED side effect (``fxfuzz::logged``, registered as
``aten::_print`` is) in pre-dispatch graphs, as torch.export traces them before lowering: a
plain call per call in the source, each taking a tensor and returning a copy of it, whose
result is used or not (kept only for its effect). ``Node.is_impure()`` says True for them.

Lowering (the ``aten`` domain) threads an effect token through such calls; before it, nothing
in the graph orders them but their place. Only a pass that declares the kind ``effect``
(``Registered.reacts_to``: one that removes, merges or moves calls) gets these cases; the
``effects`` check (``fxfuzz.oracles.effects``) compares the calls each execution makes.
"""

from __future__ import annotations

import torch
from fxfuzz.core import custom_ops  # noqa: F401  (registers fxfuzz::logged)
from fxfuzz.strategies.emit import draw_op
from fxfuzz.strategies.state import State, Value, pick
from hypothesis import strategies as st

EFFECTFUL = torch.ops.fxfuzz.logged.default
# What an effect step draws; shrinking moves toward the first: a call nothing reads, one whose
# result later steps may read, or the same call twice in a row (equal calls: CSE bait).
_KINDS = ("unused", "used", "twice")


def draw_effect(draw: st.DrawFn, s: State) -> None:
    """One effect step in the top-level graph, where export keeps such calls in place (a HOP
    body draws a plain op instead: torch.cond and map refuse effectful bodies)."""
    # Floating values only: the operator's fake kernel keeps the dtype, its real one (x * 1)
    # promotes a bool.
    floats = [v for v in s.pool if v.node.meta["val"].dtype.is_floating_point]
    if not s.builder.input_specs or not floats:
        draw_op(draw, s)
        return
    kind = draw(st.sampled_from(_KINDS))
    value = pick(draw, floats)
    for _ in range(2 if kind == "twice" else 1):
        call = s.builder.try_call(EFFECTFUL, [value.node])
        if call is None:
            s.stats["unfit:effect"] += 1
            draw_op(draw, s)
            return
        if kind != "unused":
            s.pool.append(Value(call))
    s.stats[f"effect:{kind}"] += 1
