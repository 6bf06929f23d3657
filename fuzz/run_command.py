"""``fxfuzz run`` and ``fxfuzz repro``: argument checking, the campaign, the report folder."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from .limits import campaign_limits
from .passes import PassFn, load_pass
from .report import Extras, default_report_dir, utc_now, write_all

DEFAULT_DB = os.path.join("reports", ".fxfuzz-db")  # reports/* is git-ignored


class CommandError(ValueError):
    """Bad input found after parsing (unreadable baseline, malformed repro): exit status 2."""


def writable_dir(path: str, option: str) -> str:
    """``path``, created if missing, once it is known to be writable: checked before a
    campaign starts, so no run ends with findings it cannot save."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CommandError(f"{option}: {path} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CommandError(f"{option}: cannot create {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CommandError(f"{option}: {path} is not writable")
    return path


@dataclass
class CampaignSetup:
    """What ``fxfuzz run`` checked and resolved before any work: the pass, the known
    findings, the report folder and the limits."""

    pass_fn: PassFn
    known: dict[str, str]
    report_dir: str
    budget_s: float
    max_examples: int


def campaign_setup(args: Any) -> CampaignSetup:
    """Load the pass and the baseline, make sure the database and report folder can be
    written, resolve the limits; bad input raises CommandError (one line, exit 2)."""
    from .known import KnownFileError, load_known

    pass_fn = load_pass(args.pass_spec)
    try:
        known = load_known(args.known) if args.known else {}
    except KnownFileError as e:
        raise CommandError(str(e)) from None
    if not args.no_db:
        writable_dir(args.db, "--db")
    report_dir = writable_dir(args.report_dir or default_report_dir(), "--report-dir")
    return CampaignSetup(pass_fn, known, report_dir, *campaign_limits(args.budget, args.max_examples))


def workers_arg(text: str) -> int:
    """``--workers``: a positive count, or ``auto`` for one per CPU this process may use."""
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    from .cli import _positive_int

    return _positive_int(text)


def run_command(args: argparse.Namespace) -> int:
    """Run a campaign in worker processes and write the whole report folder.
    Exit 0 when every finding is known (or none), 1 on new findings."""
    from .coverage_probe import coverage_targets, summarize
    from .progress import ProgressPrinter
    from .summary import print_summary
    from .workers import CampaignOptions, run_parallel, to_campaign_result

    if args.db_shared and not re.fullmatch(r"[\w.-]+/[\w.-]+", args.db_shared):
        raise CommandError(f"--db-shared expects OWNER/REPO, got {args.db_shared!r}")
    setup = campaign_setup(args)  # a bad spec or path fails here, before any worker starts
    # Off by default: tracing costs about 75% more CPU per example on Python 3.11 (README).
    targets = coverage_targets(args.pass_spec, setup.pass_fn) if args.coverage else []
    opts = CampaignOptions(
        pass_spec=args.pass_spec,
        budget_s=setup.budget_s,
        max_examples=setup.max_examples,
        seed=args.seed,
        domain=args.domain,
        workers=args.workers,
        example_timeout_s=args.example_timeout,
        db_path=None if args.no_db else args.db,
        db_shared=args.db_shared,
        device=args.device,
        known=frozenset(setup.known),
        coverage_include=[t.path for t in targets],
        log_dir=os.path.join(setup.report_dir, "logs"),
    )
    started = utc_now()
    progress = ProgressPrinter(setup.budget_s, setup.max_examples)
    parallel = run_parallel(opts, progress.update)
    progress.close()
    result = to_campaign_result(parallel)
    try:
        coverage = summarize(parallel.coverage_files, targets) if targets else {"enabled": False}
    except Exception as e:  # coverage is a figure about the run: never lose the findings for it
        coverage = {"enabled": True, "error": f"{type(e).__name__}: {e}"}
    extras = Extras(
        known=setup.known,
        coverage=coverage,
        timeline=parallel.timeline,
        workers={
            "restarts": parallel.restarts,
            "errors": parallel.worker_errors,
            "unserializable_examples": parallel.unserializable,
            "example_timeout_s": args.example_timeout,
            "database": opts.db_path,
        },
    )
    meta = {
        "pass": args.pass_spec,
        "domain": args.domain,
        "seed": args.seed,
        "workers": args.workers,
        "device": opts.device,
        "started": started,
    }
    report = write_all(result, meta, setup.report_dir, extras)
    print_summary(report, setup.report_dir)
    return 1 if report["new_findings"] else 0


def repro_command(args: argparse.Namespace) -> int:
    """Replay a repro (.py or .json) in a child process, so a pass that kills the process
    or hangs is still reported: exit 1 while it fails, 0 once fixed, 2 if malformed."""
    from .repro import load_repro
    from .serialize import SerializeError

    try:
        repro = load_repro(args.path)  # malformed files fail here, in one line
    except SerializeError as e:
        raise CommandError(str(e)) from None
    load_pass(args.pass_spec or repro.pass_spec)
    if repro.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CommandError(f"{args.path} was found with --device cuda, and torch sees no CUDA device here")
    code = "import sys; from fuzz.repro import replay; sys.exit(replay(sys.argv[1], sys.argv[2] or None))"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, args.path, args.pass_spec or ""], timeout=args.example_timeout
        )
    except subprocess.TimeoutExpired:
        print(f"fxfuzz repro: FAIL the pass did not return within {args.example_timeout:g}s")
        return 1
    if proc.returncode < 0:
        print(f"fxfuzz repro: FAIL the process running the pass was killed by {signal.Signals(-proc.returncode).name}")
        return 1
    return 1 if proc.returncode else 0
