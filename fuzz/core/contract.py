"""What a pass promises beyond preserving meaning, e.g. that no grad toggle survives it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class PassContract:
    """``eliminates``: call targets that must not appear anywhere in the pass's output;
    ``hop``: the higher-order op the pass introduces (counted by the idempotence check)."""

    name: str
    eliminates: tuple[Any, ...] = ()
    hop: Any = None


def _autocast_targets() -> tuple[Any, ...]:
    amp = torch.amp.autocast_mode
    return tuple(getattr(amp, n) for n in ("_enter_autocast", "_exit_autocast") if hasattr(amp, n))


SET_GRAD = PassContract(
    "set_grad", (torch._C._set_grad_enabled,), torch.ops.higher_order.wrap_with_set_grad_enabled
)
AUTOCAST = PassContract("autocast", _autocast_targets(), getattr(torch.ops.higher_order, "wrap_with_autocast", None))
NONE = PassContract("none")
