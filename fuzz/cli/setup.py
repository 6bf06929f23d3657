"""What every command checks before any work: the pass, the baseline, writable folders, the
limits. Bad input raises UsageError (one line, exit status 2), never after a campaign."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.database import DatabaseSpec, check_reachable, parse_databases
from fxfuzz.campaign.limits import campaign_limits
from fxfuzz.campaign.supervisor import worker_log
from fxfuzz.core.choices import DEFAULT_DB
from fxfuzz.core.contract import check_domain, contract_option
from fxfuzz.core.errors import UsageError
from fxfuzz.core.known import load_known_files
from fxfuzz.core.passes import Pass, default_domain, load_pass
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.folder import clear_earlier_run, default_report_dir, record_written
from fxfuzz.strategies.custom import register_ops


def writable_dir(path: str, option: str) -> str:
    """``path``, created if missing, once it is known to be writable: checked before a
    campaign starts, so no run ends with findings it cannot save."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option}: {path} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{option}: cannot create {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: {path} is not writable")
    return path


def report_folder(path: str) -> str:
    """``--report-dir``, writable and cleared of what an earlier run wrote there."""
    writable_dir(path, "--report-dir")
    clear_earlier_run(path)
    return path


def worker_logs(report_dir: str, workers: int) -> str:
    """The report folder's ``logs/`` for ``workers`` worker slots, their logs listed as fxfuzz's."""
    logs = os.path.join(report_dir, "logs")
    try:
        record_written(report_dir, [os.path.relpath(worker_log(logs, i), report_dir) for i in range(workers)])
    except OSError as e:  # a full disk before any work: bad input, not a run that lost its report
        raise UsageError(f"--report-dir: cannot write into {report_dir}: {e.strerror or e}") from None
    return logs


@dataclass
class CampaignSetup:
    """What ``fxfuzz run`` checked and resolved before any work: the pass, the known
    findings (with their reasons), the report folder and the settings."""

    pass_fn: Pass
    known: dict[str, str]
    report_dir: str
    settings: CampaignSettings


def database_setup(args: Any) -> DatabaseSpec | None:
    """The ``--db`` (and ``--db-shared``) databases, the local one writable and every Redis one
    answering, or None with ``--no-db``."""
    if args.no_db:
        return None
    shared = [f"github:{args.db_shared}"] if args.db_shared else []
    spec = parse_databases([*(args.db or []), *shared], DEFAULT_DB)
    writable_dir(spec.local, "--db")
    check_reachable(spec)
    return spec


def campaign_setup(args: Any, workers: int) -> CampaignSetup:
    """Load the pass and the baseline, make sure the database and report folder can be
    written, resolve the limits and the settings of a campaign in ``workers`` processes; bad
    input raises UsageError (one line, exit 2)."""
    pass_fn = load_pass(args.pass_spec, contract_option(args.contract))
    register_ops(args.ops, "--op")
    known = load_known_files(args.known)
    database = database_setup(args)
    report_dir = report_folder(args.report_dir or default_report_dir())
    budget_s, max_examples = campaign_limits(args.budget, args.max_examples)
    settings = CampaignSettings.from_options(
        args,
        budget_s=budget_s,
        max_examples=max_examples,
        known=frozenset(known),
        db=database,
        # The workers that run: one per example at most (the others would get no share), so the
        # report never states more than ran.
        workers=min(workers, max_examples),
        domain=args.domain or default_domain(pass_fn, CampaignSettings.domain),
    )
    check_domain(pass_fn.contract, settings.domain)
    return CampaignSetup(pass_fn, known, report_dir, settings)


