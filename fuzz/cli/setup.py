"""What every command checks before any work: the pass, the baseline, writable folders, the
limits. Bad input raises UsageError (one line, exit status 2), never after a campaign."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.database import DatabaseSpec, check_reachable, parse_databases
from fxfuzz.campaign.limits import campaign_limits
from fxfuzz.core.choices import DEFAULT_DB
from fxfuzz.core.contract import check_domain
from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.known import load_known_files
from fxfuzz.core.passes import Pass, default_domain
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.report.folder import ReportFolder, default_report_dir, report_folder
from fxfuzz.strategies.custom import loading_ends, register_ops


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


def worker_logs(folder: ReportFolder) -> str:
    """The report folder's ``logs/``, where each worker writes ``worker<N>.log``."""
    return os.path.join(folder.work, "logs")


def check_survives(passes: Sequence[tuple[str, str]], ops: Sequence[str]) -> None:
    """UsageError (one line, exit 2) when loading one of ``passes`` (option, spec) or of the
    ``--op`` values ``ops`` would end this process (``fxfuzz.strategies.custom.loading_ends``)."""
    ended = loading_ends(passes, ops, "--op")
    if ended is not None:
        raise UsageError(ended)


@dataclass
class CampaignSetup:
    """What ``fxfuzz run`` checked and resolved before any work: the pass (its identity is the
    settings'), the known findings (with their reasons), the report folder and the settings."""

    pass_fn: Pass
    known: dict[str, str]
    folder: ReportFolder
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
    check_survives([("--pass", args.pass_spec)], args.ops)
    pass_fn, identity = resolve_pass(args.pass_spec, args.contract)  # this process's one load of it
    register_ops(args.ops, "--op")
    known = load_known_files(args.known)
    database = database_setup(args)
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
        identity=identity,
    )
    check_domain(pass_fn.contract, settings.domain)
    folder = report_folder(args.report_dir or default_report_dir())  # last: a refusal above leaves no folder behind
    return CampaignSetup(pass_fn, known, folder, settings)
