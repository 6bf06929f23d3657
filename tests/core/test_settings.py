"""One CampaignSettings value: its defaults are the command line's, it reaches every worker
whole and through no command line (no size limit, no password in ``ps``), and it is written
whole into report.json."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import stat

import broken_passes as bp
import fxfuzz
import handmade as hm
import pytest
from fxfuzz.campaign import supervisor
from fxfuzz.campaign.engine import Subject, run_campaign
from fxfuzz.campaign.protocol import Task, WorkerStart
from fxfuzz.campaign.results import StopReason
from fxfuzz.campaign.supervisor import ParallelCampaign, run_parallel
from fxfuzz.cli.main import build_parser
from fxfuzz.core.identity import PassIdentity, identify
from fxfuzz.core.settings import CampaignSettings, DatabaseSpec
from hypothesis import strategies as st

PASSWORD = "s3cret-redis-pw"
# Nothing listens on port 1: the workers' shared database is lost at its first use, with a note.
REDIS = f"redis://:{PASSWORD}@127.0.0.1:1/0"


def test_the_public_run_campaign_takes_the_pass_the_settings_and_at_most_four_hooks():
    params = list(inspect.signature(fxfuzz.run_campaign).parameters)
    assert params[:2] == ["pass_fn", "settings"] and len(params) <= 6, params


def test_the_command_lines_defaults_are_the_settings_defaults():
    """Every option named like a field reaches it (CampaignSettings.from_options), and what the
    command line leaves alone is the settings' default."""
    parser = build_parser()
    for argv in (["run"], ["gate", "--candidate", "identity"]):
        args = parser.parse_args(argv)
        got = CampaignSettings.from_options(args, budget_s=1.0, max_examples=2, known=frozenset(), workers=1)
        assert dataclasses.replace(got, domain="export") == CampaignSettings(budget_s=1.0, max_examples=2), argv
    args = parser.parse_args(
        [
            "run",
            "--seed",
            "7",
            "--stage-share",
            "0.5",
            "--max-shrink-s",
            "0",
            "--example-timeout",
            "9",
            "--shard",
            "2/3",
        ]
    )
    got = CampaignSettings.from_options(args, known=frozenset(), db=None)
    assert (got.seed, got.stage_share, got.max_shrink_s, got.example_timeout_s, got.shard) == (7, 0.5, 0.0, 9.0, (2, 3))


def test_settings_travel_as_data_exactly_and_reach_reports_without_passwords():
    held = PassIdentity("p.py:f", "p.py:f", "refines", "refines", "given", True, True, ("aten::add.Tensor",))
    settings = CampaignSettings(
        seed=3, known=frozenset({"a", "b"}), shard=(2, 5), db=DatabaseSpec("db", (REDIS,)), identity=held
    )
    assert CampaignSettings.from_data(json.loads(json.dumps(settings.to_data()))) == settings
    form = settings.report_form()
    report = json.dumps(form)
    assert PASSWORD not in report and "redis://:***@127.0.0.1:1/0" in report
    assert "identity" not in form  # report.json records it once, beside the settings


def test_the_stage_share_is_a_setting_of_the_campaign_not_of_the_process():
    """Each campaign judges with its own share, one after the other in one process: every
    example through the stages (a pass whose every result torch.export.save refuses shows),
    or none (it does not)."""
    case = hm.no_grad_region_case(ambient=True)
    found = {}
    for share in (1.0, 0.0, 1.0):
        settings = CampaignSettings(budget_s=600, max_examples=1, max_shrink_s=0, stage_share=share)
        result = run_campaign(bp.unsaveable, settings, subject=Subject(strategy=st.just(case)))
        found.setdefault(share, []).append(sorted(b.finding.kind for b in result.buckets.values()))
    assert found == {1.0: [["save_load_raised"]] * 2, 0.0: [[]]}, found


@pytest.mark.processes
def test_a_worker_gets_its_start_through_a_private_file_not_its_command_line(tmp_path, monkeypatch):
    """100,000 known ids (some 3 MB, far past the kernel's 128 KiB for one argument) and a
    Redis password reach the workers; neither is on any worker's command line (read from
    /proc while it runs), each start file is the user's alone and is gone once read."""
    known = frozenset(f"crash-planted-{i:08x}" for i in range(100_000))
    seen: list[dict[str, object]] = []
    real_fork = supervisor._fork

    def fork(conn, start, log):
        proc = real_fork(conn, start, log)
        folder = os.path.dirname(start)
        with open(f"/proc/{proc.process.pid}/cmdline", "rb") as fh:
            cmdline = fh.read().decode()
        seen.append(
            {
                "cmdline": cmdline,
                "argv": start,  # all a forked worker is handed besides its pipe and surroundings
                "file_mode": stat.S_IMODE(os.stat(start).st_mode) if os.path.exists(start) else None,
                "folder_mode": stat.S_IMODE(os.stat(folder).st_mode),
                "folder": folder,
            }
        )
        return proc

    monkeypatch.setattr(supervisor, "_fork", fork)
    settings = CampaignSettings(
        max_examples=2, budget_s=300, workers=2, known=known, db=DatabaseSpec(str(tmp_path / "db"), (REDIS,))
    )
    result = run_parallel(ParallelCampaign(dataclasses.replace(settings, identity=identify("identity"))))
    assert result.examples == 2 and not result.workers.errors and result.stopped_by == StopReason.EXAMPLES, result
    assert len(seen) == 2
    for s in seen:
        assert PASSWORD not in s["cmdline"] + s["argv"] and "crash-planted" not in s["cmdline"] + s["argv"]
        # The ids alone are 3 MB. What is there is the forkserver's own command line (its
        # preloaded modules and sys.path), as long as the paths of the checkout and the venv and
        # the folders test modules put on sys.path make it: 1,003 bytes on CI's clone once.
        assert len(s["cmdline"]) < 16 * 1024
        assert s["file_mode"] in (0o600, None)  # None: the worker had already read (and deleted) it
        assert s["folder_mode"] == 0o700
        assert not os.path.exists(s["folder"])  # removed with whatever a worker left unread


def test_a_worker_start_is_read_back_whole_and_then_deleted(tmp_path):
    settings = CampaignSettings(known=frozenset({"x"}), identity=identify("identity"))
    start = WorkerStart(settings, Task("m:f", {"a": 1}), [], 1.5, 42, rerun={"graph": []})
    path = str(tmp_path / "start.json")
    start.write(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert WorkerStart.take(path) == start and not os.path.exists(path)


@pytest.mark.processes
def test_run_with_a_known_file_of_100000_ids_and_workers(tmp_path, cli):
    """End to end: the baseline reaches the workers and report.json records the settings whole."""
    known = tmp_path / "known.txt"
    known.write_text("".join(f"crash-planted-{i:08x}\n" for i in range(100_000)))
    out = tmp_path / "report"
    r = cli(
        "run", "--pass", "identity", "--workers", "2", "--max-examples", "4", "--no-db",
        "--known", str(known), "--report-dir", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["examples"] == 4 and report["stopped_by"] == "max_examples"
    assert len(report["settings"]["known"]) == 100_000 and report["settings"]["workers"] == 2
    assert report["shard"] == "1/1" and report["settings"]["shard"] == [1, 1]
