"""``fxfuzz repro``: replay a repro (.py or .json) in a child process, so a pass that kills
the process or hangs is still reported. Exit 1 while it fails, 0 once fixed, 2 if malformed."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

from fxfuzz.core.errors import UsageError
from fxfuzz.core.passes import load_pass
from fxfuzz.repro.files import load_repro


def command(args: argparse.Namespace) -> int:
    """Check the repro and its pass here (one-line errors), then replay it in a child."""
    repro = load_repro(args.path)  # malformed files fail here, in one line
    load_pass(args.pass_spec or repro.pass_spec)
    if repro.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"{args.path} was found with --device cuda, and torch sees no CUDA device here")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fxfuzz.cli.repro", args.path, args.pass_spec or ""], timeout=args.example_timeout
        )
    except subprocess.TimeoutExpired:
        print(f"fxfuzz repro: FAIL the pass did not return within {args.example_timeout:g}s")
        return 1
    if proc.returncode < 0:
        print(f"fxfuzz repro: FAIL the process running the pass was killed by {signal.Signals(-proc.returncode).name}")
        return 1
    return 1 if proc.returncode else 0


def replay(path: str, pass_spec: str | None = None) -> int:
    """Verify the repro's case against its pass (or ``pass_spec``): 1 while it fails, 0 once fixed."""
    from fxfuzz.oracles import verify  # noqa: PLC0415  (torch, in the child only)

    repro = load_repro(path)
    findings = verify(repro.case, load_pass(pass_spec or repro.pass_spec), device=repro.device)
    print(f"fxfuzz repro: recorded finding: {repro.finding.get('message', '')}")
    for f in findings:
        print(f"fxfuzz repro: FAIL {f}")
    if not findings:
        print("fxfuzz repro: every check passes (fixed)")
    return 1 if findings else 0


if __name__ == "__main__":  # the child ``command`` starts
    sys.exit(replay(sys.argv[1], sys.argv[2] or None))
