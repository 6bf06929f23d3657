"""What a pass promises, which selects the checks that judge it (``fxfuzz.oracles.checks``).

Every contract judges observable behaviour: outputs, aliasing, in-place effects, requires_grad
and grad_fn presence, gradients of both orders, forward mode, what the result does downstream
and the process state it leaves. Beyond that a contract says:

- ``internals``: whether what users cannot observe is judged too (node and spec names,
  submodules left unused, what is saved for backward, export's metadata checks, higher-order
  ops added by a second application). A pass that promises a graph of a given form, as
  export's own passes do, is held to it; an optimizing or user pass is not.
- ``refines``: refinement in Alive2's sense. Where the original raised the result may do
  anything: succeed (it may save less for backward, so an in-place update between forward
  and backward that made the original's backward refuse may now go through) or raise another
  error; never the other way round: wherever the original succeeds, the result's observables
  are equal.
- ``differentiated``: whether the result is differentiated after the pass. Inductor's post-grad
  passes run after AOTAutograd has split forward and backward: their graphs run with grad
  mode off on tensors that do not require grad, and nothing differentiates them again (nor
  runs them on forward-mode duals). A contract that says so judges both graphs run that way
  (``GraphCase.undifferentiated``): what autograd would record, save or compute is no
  observable of theirs: the gradient checks are not judged, while values, aliasing, in-place
  effects and ordered effects are, as ever.
- ``eliminates`` and ``hops``: call targets that must be gone from the output, and the
  higher-order ops the pass introduces (each call checked for well-formedness).
- ``reacts_to``: the node kinds (``fxfuzz.strategies.regions.REACTION_STEPS``) generation draws
  for a pass held to this contract that declares none of its own (``generation_kinds``). A
  generic pass (``meaning``, ``refines``) goes wrong where it moves or merges computations
  across a grad toggle, so both ask for toggles and for the bait next to them
  (``across_toggle``), where it rewrites the units pattern passes match (``motif``), and where
  it deletes, merges, reorders or freezes a random call (``random``); ``post_grad`` asks for nothing (lowering has baked every toggle in
  before its passes see a graph, and its graphs run with grad off); ``set_grad`` and
  ``autocast`` ask for nothing: the passes they describe
  declare their kinds in their registry rows, and a stand-in held to them (a mutant, a gate
  candidate) keeps the mix it was measured on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from fxfuzz.core.errors import UsageError


@dataclass(frozen=True)
class PassContract:
    """What a pass promises (module docstring); ``name`` is how ``--contract`` spells it."""

    name: str
    eliminates: tuple[Any, ...] = ()
    hops: tuple[Any, ...] = ()
    internals: bool = True
    refines: bool = False
    differentiated: bool = True
    reacts_to: tuple[str, ...] = ()


def union(contracts: Sequence[PassContract]) -> PassContract:
    """What a sequence of passes promises: the calls any of them removes and the HOPs any of
    them adds, and behaviour and internals as the weakest of them does. Meaning then
    refinement is a refinement, not meaning (one that may raise less, composed with one that
    keeps every raise, may raise less), so a pipeline refines as soon as one of its passes
    does; and its internals are judged only where every pass promises them (set_grad's form
    is no promise about what DCE then leaves, an unused submodule); its result is
    differentiated only where every pass's is."""
    return PassContract(
        "+".join(c.name for c in contracts),
        tuple(dict.fromkeys(t for c in contracts for t in c.eliminates)),
        tuple(dict.fromkeys(h for c in contracts for h in c.hops)),
        all(c.internals for c in contracts),
        any(c.refines for c in contracts),
        all(c.differentiated for c in contracts),
        tuple(dict.fromkeys(k for c in contracts for k in c.reacts_to)),
    )


def _autocast_targets() -> tuple[Any, ...]:
    amp = torch.amp.autocast_mode
    return tuple(getattr(amp, n) for n in ("_enter_autocast", "_exit_autocast") if hasattr(amp, n))


# Where generic passes go wrong (module docstring): toggles, and bait next to them; the units
# pattern passes rewrite; random calls, which no pass may delete, merge, reorder or freeze.
_GENERIC = ("grad_toggle", "across_toggle", "motif", "random")
MEANING = PassContract("meaning", internals=False, reacts_to=_GENERIC)
REFINES = PassContract("refines", internals=False, refines=True, reacts_to=_GENERIC)
# Refinement of a graph no one differentiates: Inductor's post-grad passes (module docstring).
POST_GRAD = PassContract("post_grad", internals=False, refines=True, differentiated=False)
SET_GRAD = PassContract(
    "set_grad", (torch._C._set_grad_enabled,), (torch.ops.higher_order.wrap_with_set_grad_enabled,)
)
_AUTOCAST_HOP = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
AUTOCAST = PassContract("autocast", _autocast_targets(), (_AUTOCAST_HOP,) if _AUTOCAST_HOP is not None else ())
CONTRACTS = {c.name: c for c in (MEANING, REFINES, POST_GRAD, SET_GRAD, AUTOCAST)}


def contract_option(name: str | None) -> PassContract | None:
    """The contract a ``--contract`` value names; None when none was given (the pass's own)."""
    return None if name is None else contract_by_name(name)


def contract_by_name(name: str) -> PassContract:
    """The contract ``--contract NAME`` names; UsageError with one line for any other name."""
    if name not in CONTRACTS:
        raise UsageError(f"unknown contract {name!r}: expected one of {', '.join(CONTRACTS)}")
    return CONTRACTS[name]
