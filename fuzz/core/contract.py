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
- ``values``: how forward values are compared: ``exact`` (bitwise on CPU), ``approximate``
  (within the dtype's tolerance scaled by the graph's size: rewrites that reassociate float
  arithmetic) or ``quantized`` (within a bound from the quantization parameters the result
  holds); ``fxfuzz.oracles.bounds`` computes the last two. Integers and booleans stay exact.
- ``views``: whether aliasing, view strides and identity are judged (off for dialect passes
  that turn views into copies by design).
- ``idempotent``: whether the pass applied to its own result is judged (a quantizer quantizes
  what it quantized again, which no caller does).
- ``identity``: whether an output that aliases an input is judged for being that input itself
  or a tensor of its own (off on Inductor's forms: AOTAutograd's wrapper regenerates every
  output that aliases an input from its base, so which object the graph returned is unseen).
- ``domains``: the domains whose cases the contract can judge (empty: any); a campaign on
  another is refused with one line (``check_domain``).
- ``reacts_to``: the node kinds (``fxfuzz.strategies.regions.NODE_KINDS``) generation draws
  for a pass held to this contract that declares none of its own (``generation_kinds``). A
  generic pass (``meaning``, ``refines``) goes wrong where it moves or merges computations
  across a grad toggle, so both ask for toggles and for the bait next to them
  (``across_toggle``), where it rewrites the units pattern passes match (``motif``), and where
  it deletes, merges, reorders or freezes a random call (``random``), and on the graph shapes
  torch's own tools emit (``tool_form``: GraphModule children, pytree calling conventions,
  SymInt literals) and the torch-level calls they record (``torch_level``: ``torch.randn_like``,
  ``F.dropout``, drawn by the random step); ``post_grad`` asks for nothing (lowering has baked every toggle in
  before its passes see a graph, and its graphs run with grad off); ``set_grad`` and
  ``autocast`` ask for nothing: the passes they describe
  declare their kinds in their registry rows, and a stand-in held to them (a mutant, a gate
  candidate) keeps the mix it was measured on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from fxfuzz.core.choices import INDUCTOR_FORMS
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
    values: str = "exact"
    views: bool = True
    domains: tuple[str, ...] = ()
    idempotent: bool = True
    identity: bool = True


# How values are compared, from the strictest to the loosest: a pipeline's is its loosest part's.
VALUES = ("exact", "approximate", "quantized")


def union(contracts: Sequence[PassContract]) -> PassContract:
    """What a sequence of passes promises: the calls any of them removes and the HOPs any of
    them adds, and behaviour and internals as the weakest of them does. Meaning then
    refinement is a refinement, not meaning (one that may raise less, composed with one that
    keeps every raise, may raise less), so a pipeline refines as soon as one of its passes
    does; and its internals are judged only where every pass promises them (set_grad's form
    is no promise about what DCE then leaves, an unused submodule); its result is
    differentiated only where every pass's is, its values compared as its loosest part's,
    views judged only where every part judges them, on the domains every part accepts."""
    return PassContract(
        "+".join(c.name for c in contracts),
        tuple(dict.fromkeys(t for c in contracts for t in c.eliminates)),
        tuple(dict.fromkeys(h for c in contracts for h in c.hops)),
        all(c.internals for c in contracts),
        any(c.refines for c in contracts),
        all(c.differentiated for c in contracts),
        tuple(dict.fromkeys(k for c in contracts for k in c.reacts_to)),
        max((c.values for c in contracts), key=VALUES.index),
        all(c.views for c in contracts),
        _common_domains([c.domains for c in contracts]),
        all(c.idempotent for c in contracts),
        all(c.identity for c in contracts),
    )


def _common_domains(each: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The domains every contract accepts (an empty tuple accepts any)."""
    limited = [d for d in each if d]
    if not limited:
        return ()
    # Where they share none, the first one's: a pipeline judged nowhere is never run.
    return tuple(d for d in limited[0] if all(d in other for other in limited)) or limited[0]


def _autocast_targets() -> tuple[Any, ...]:
    amp = torch.amp.autocast_mode
    return tuple(getattr(amp, n) for n in ("_enter_autocast", "_exit_autocast") if hasattr(amp, n))


# Where generic passes go wrong (module docstring): toggles, and bait next to them; the units
# pattern passes rewrite; random calls, which no pass may delete, merge, reorder or freeze; the
# graph shapes torch's tools emit.
_GENERIC = ("grad_toggle", "across_toggle", "motif", "random", "tool_form", "torch_level")
# The same for a pass its callers hand ATen graphs alone (export's and Inductor's folders, export's
# constant lifting): torch-level calls are no graph it is given.
ATEN_GENERIC = tuple(k for k in _GENERIC if k != "torch_level")
MEANING = PassContract("meaning", internals=False, reacts_to=_GENERIC)
REFINES = PassContract("refines", internals=False, refines=True, reacts_to=_GENERIC)
# Refinement of a graph no one differentiates: Inductor's post-grad passes (module docstring).
# Their graphs hold no grad toggle (lowering baked each in): a case that holds one, run with
# grad off as these graphs run, shows what no post-grad graph can (a toggle restoring the mode
# it was traced under leaves grad on), so only the aten domain's cases are judged.
POST_GRAD = PassContract("post_grad", internals=False, refines=True, differentiated=False, domains=("aten",))
# Refinement with values within a tolerance scaled by the graph: rewrites that reassociate
# float arithmetic (Inductor's attention and partial-softmax rewrites, binary folding, pad_mm).
APPROXIMATES = PassContract("approximates", internals=False, refines=True, values="approximate", reacts_to=_GENERIC)
# Quantization for inference (pt2e's convert): run as a model is served, without autograd;
# values within a bound from the result's quantization parameters; raises, structure and
# ordered effects as exact as ever, aliasing too; never applied to its own result.
QUANTIZES = PassContract("quantizes", internals=False, differentiated=False, values="quantized", idempotent=False)
# Dialect passes (Edge's view -> view_copy): values and effects, not aliasing, strides or
# identity; where the original raised (a backward an in-place update refused, which a copy
# no longer shares) the result may do otherwise, as under refines. Values within rounding: a
# copy has other strides than the view it replaces, and a reduction over it adds up in
# another order.
FUNCTIONAL = PassContract(
    "functional", internals=False, refines=True, values="approximate", views=False, reacts_to=_GENERIC
)
SET_GRAD = PassContract("set_grad", (torch._C._set_grad_enabled,), (torch.ops.higher_order.wrap_with_set_grad_enabled,))
_AUTOCAST_HOP = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
AUTOCAST = PassContract("autocast", _autocast_targets(), (_AUTOCAST_HOP,) if _AUTOCAST_HOP is not None else ())
CONTRACTS = {c.name: c for c in (MEANING, REFINES, POST_GRAD, APPROXIMATES, QUANTIZES, FUNCTIONAL, SET_GRAD, AUTOCAST)}


def on_form(contract: PassContract, domain: str) -> PassContract:
    """``contract`` on the terms of the graphs of ``domain``: Inductor's forms are never
    differentiated again (its inference and frozen graphs run without grad, and its joint
    graph computes the gradients as outputs), so their graphs are judged undifferentiated,
    whatever else the contract promises; and the identity of an output aliasing an input is
    not theirs to keep (``identity``: AOTAutograd regenerates such outputs from their base)."""
    if domain in INDUCTOR_FORMS and (contract.differentiated or contract.identity):
        return dataclasses.replace(contract, differentiated=False, identity=False)
    return contract


def contract_option(name: str | None) -> PassContract | None:
    """The contract a ``--contract`` value names; None when none was given (the pass's own)."""
    return None if name is None else contract_by_name(name)


# Why a contract judges only the graphs of a domain, by that domain (``PassContract.domains``).
_ONLY_ON = {
    "aten": "it judges graphs without grad toggles, run with grad off as Inductor runs them",
    "inductor_joint": "its pass takes AOTAutograd's joint graphs (primals and tangents in, outputs and gradients out)",
}


def check_domain(contract: PassContract, domain: str) -> None:
    """UsageError with one line where ``contract`` cannot judge ``domain``'s cases (``domains``)."""
    if contract.domains and domain not in contract.domains:
        raise UsageError(
            f"contract {contract.name} cannot judge --domain {domain}: {_ONLY_ON[contract.domains[0]]}; "
            f"use --domain {' or '.join(contract.domains)}"
        )


def contract_by_name(name: str) -> PassContract:
    """The contract ``--contract NAME`` names; UsageError with one line for any other name."""
    if name not in CONTRACTS:
        raise UsageError(f"unknown contract {name!r}: expected one of {', '.join(CONTRACTS)}")
    return CONTRACTS[name]
