"""What a pass promises beyond preserving meaning, e.g. that no grad toggle survives it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from fxfuzz.core.errors import UsageError


@dataclass(frozen=True)
class PassContract:
    """``eliminates``: call targets that must not appear anywhere in the pass's output;
    ``hops``: the higher-order ops the pass introduces (each call checked for well-formedness)."""

    name: str
    eliminates: tuple[Any, ...] = ()
    hops: tuple[Any, ...] = ()


def union(contracts: Sequence[PassContract]) -> PassContract:
    """What a sequence of passes promises: everything any of them promises."""
    return PassContract(
        "+".join(c.name for c in contracts),
        tuple(dict.fromkeys(t for c in contracts for t in c.eliminates)),
        tuple(dict.fromkeys(h for c in contracts for h in c.hops)),
    )


def _autocast_targets() -> tuple[Any, ...]:
    amp = torch.amp.autocast_mode
    return tuple(getattr(amp, n) for n in ("_enter_autocast", "_exit_autocast") if hasattr(amp, n))


SET_GRAD = PassContract(
    "set_grad", (torch._C._set_grad_enabled,), (torch.ops.higher_order.wrap_with_set_grad_enabled,)
)
_AUTOCAST_HOP = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
AUTOCAST = PassContract("autocast", _autocast_targets(), (_AUTOCAST_HOP,) if _AUTOCAST_HOP is not None else ())
NONE = PassContract("none")

# Contracts by the name ``CampaignSettings.contract`` gives.
CONTRACTS = {c.name: c for c in (SET_GRAD, AUTOCAST, NONE)}


def contract_named(name: str) -> PassContract:
    """The contract called ``name``; UsageError naming the choices for any other name."""
    if name not in CONTRACTS:
        raise UsageError(f"unknown contract {name!r}; expected one of {', '.join(CONTRACTS)}")
    return CONTRACTS[name]
