"""A user's custom operators in worker processes: ``--op`` on the commands, the specs the
supervisor hands every worker, and the registrations it refuses rather than drop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import user_ops
from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor, run_parallel
from fxfuzz.cli.main import main
from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import identify
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.strategies import register_op
from fxfuzz.strategies.custom import op_specs, unregister_op
from paths import HELPERS, ROOT


@pytest.mark.processes
def test_run_with_op_draws_it_in_two_workers_and_its_finding_replays_in_a_fresh_process(tmp_path):
    report_dir = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "run", "--pass", "tests/helpers/user_ops.py:only_refuses_scale", "--op", "tests/helpers/user_ops.py:SCALE",
         "--workers", "2", "--max-examples", "40", "--no-db", "--max-shrink-s", "0", "--report-dir", str(report_dir)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert report["ops"] == ["tests/helpers/user_ops.py:SCALE"]
    assert report["stats"].get("op:userops::scale", 0) > 0, report["stats"]
    [found] = [f for f in report["findings"] if "userops::scale reached the pass" in f["message"]]
    replay = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "repro", str(report_dir / found["repro"])],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    # Exit 1: the repro still fails, its operator defined from the case's own record.
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "userops::scale reached the pass" in replay.stdout + replay.stderr


@pytest.mark.processes
def test_run_parallel_hands_the_operators_registered_in_python_to_its_workers():
    entry = register_op(user_ops.SCALE)  # by object: its spec is the module attribute holding it
    try:
        settings = CampaignSettings(workers=2, max_examples=40, budget_s=300, identity=identify("identity"))
        result = run_parallel(ParallelCampaign(settings))
    finally:
        unregister_op(entry.name)
    assert not result.workers.errors, result.workers.errors
    assert result.stats.get("op:userops::scale", 0) > 0, result.stats


@pytest.mark.processes
def test_a_worker_restarted_after_a_death_draws_the_operator_again():
    source = os.path.join(HELPERS, "user_ops.py")
    entry = register_op(f"{source}:SCALE")
    try:
        # Seed 1: 3 deaths in the first 10 examples (7 in 40, at twice the time).
        pass_ = identify(f"{source}:segfaults_on_scale")
        settings = CampaignSettings(seed=1, workers=1, max_examples=10, budget_s=300, identity=pass_)
        result = run_parallel(ParallelCampaign(settings))
    finally:
        unregister_op(entry.name)
    # The first worker dies on an example calling the operator, its replacement on that
    # example again (a crash); a second death needs a later worker to draw it anew.
    [crash] = [bid for bid in result.buckets if bid.startswith("crash-process_died")]
    assert result.buckets[crash].count >= 2, (result.buckets, result.workers.errors)


@pytest.mark.processes
def test_a_registration_no_worker_can_rebuild_is_refused_not_dropped():
    # Constraints given as live objects: a worker process has no spec to register it from.
    entry = register_op(torch.ops.userops.scale, arguments=user_ops._factor)
    try:
        with pytest.raises(UsageError, match="userops::scale.*register it by spec"):
            Supervisor(ParallelCampaign(CampaignSettings(workers=2, identity=identify("identity"))))
    finally:
        unregister_op(entry.name)


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--max-examples", "1"],
        ["gate", "--candidate", "identity", "--max-examples", "1"],
        ["mutate", "--list"],
        ["bench"],
    ],
)
def test_a_bad_op_spec_is_one_line_and_exit_2(command, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main([*command, "--op", "tests/helpers/user_ops.py:SCALE", "--op", "tests/helpers/user_ops.py:NO_SUCH"]) == 2
    assert capsys.readouterr().err == "fxfuzz: error: --op: tests/helpers/user_ops.py has no attribute 'NO_SUCH'\n"
    assert op_specs() == []  # all or none: the good spec before it left the op table too
