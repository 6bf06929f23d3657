"""Argument types of the ``fxfuzz`` command line: each turns bad text into a one-line error."""

from __future__ import annotations

import argparse
import os

from fxfuzz.core.choices import DEVICES


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def device(text: str) -> str:
    """``--device``: cpu, or cuda when this machine has a usable CUDA device."""
    if text not in DEVICES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DEVICES)}, got {text!r}")
    if text == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"cuda requested but torch {torch.__version__} sees no CUDA device")
    return text


def workers(text: str) -> int:
    """``--workers``: a positive count, or ``auto`` for one per CPU this process may use."""
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return positive_int(text)
