"""Argument types of the ``fxfuzz`` command line: each turns bad text into a one-line error."""

from __future__ import annotations

import argparse
import os

from fxfuzz.core.choices import DEVICES
from fxfuzz.core.errors import UsageError
from fxfuzz.core.shards import parse_shard


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def seconds_or_zero(text: str) -> float:
    """A finite number of seconds, 0 included (``--max-shrink-s 0``: no minimizing)."""
    value = _number(text)
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, 0 or more, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A share between 0 and 1."""
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1, got {text!r}")
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


def auto_workers() -> int:
    """One worker per CPU this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# Workers past this many per CPU only share the CPUs (each one is CPU-bound) while each holds
# its own torch in memory: such a count is a mistake, never a faster campaign.
WORKERS_PER_CPU = 4


def workers(text: str) -> int:
    """``--workers``: a positive count of at most ``WORKERS_PER_CPU`` per CPU this process may
    use, or ``auto`` for one per CPU."""
    count, cpus = (auto_workers() if text == "auto" else positive_int(text)), auto_workers()
    if count > WORKERS_PER_CPU * cpus:
        raise argparse.ArgumentTypeError(
            f"{count} workers on {cpus} CPU(s): at most {WORKERS_PER_CPU * cpus} ({WORKERS_PER_CPU} per CPU this process may use)"
        )
    return count


def shard(text: str) -> tuple[int, int]:
    """``--shard K/N``: shard K (1-based) of N, N at most ``MAX_SHARDS``."""
    try:
        return parse_shard(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
