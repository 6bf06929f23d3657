"""fxfuzz: property-based verification and fuzzing of PyTorch FX graph passes.

Sub-packages, in the order data flows (each imports only the ones before it):
``fxfuzz.core`` (the case model, FX helpers, errors, the pass registry), ``fxfuzz.strategies``
and ``fxfuzz.oracles`` (side by side), ``fxfuzz.campaign``, ``fxfuzz.report`` and
``fxfuzz.repro``, ``fxfuzz.tools``, and ``fxfuzz.cli`` on top.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Loaded on first use: pytest imports ``fxfuzz.pytest_plugin`` (and so this package) into every
# test run, and ``fxfuzz --help`` and the campaign's worker boot must not import torch either.
_EXPORTS = {
    "CampaignResult": "fxfuzz.campaign.results",
    "CampaignSettings": "fxfuzz.core.settings",
    "Hooks": "fxfuzz.campaign.engine",
    "StopReason": "fxfuzz.campaign.results",
    "Subject": "fxfuzz.campaign.engine",
    "run_campaign": "fxfuzz.campaign.engine",
    "FxfuzzError": "fxfuzz.core.errors",
    "Pass": "fxfuzz.core.passes",
    "PassSpecError": "fxfuzz.core.errors",
    "load_pass": "fxfuzz.core.passes",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
