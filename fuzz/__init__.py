"""fuzz: pass loading, the campaign driver and the CLI. Entry points: ``load_pass``, ``run_campaign``."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Loaded on first use: pytest imports ``fuzz.pytest_plugin`` (and so this package) into every
# test run, which must not import torch unless --fxfuzz-pass is given.
_EXPORTS = {
    "CampaignResult": "campaign",
    "run_campaign": "campaign",
    "PassSpecError": "passes",
    "load_pass": "passes",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
