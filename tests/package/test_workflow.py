"""The CI workflow: it parses, the nightly is a matrix of shards covering the whole split, one
merge job follows them, and its merge step (run here as the workflow runs it) merges real
shard reports and fails on new findings."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from paths import ROOT

WORKFLOW = os.path.join(ROOT, ".github", "workflows", "fxfuzz.yml")
CAMPAIGN = 'fxfuzz "${args[@]}"'  # what the campaign steps run

# The shard campaigns (a session fixture) are built once, in one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("shard_campaigns")


@pytest.fixture(scope="module")
def jobs():
    with open(WORKFLOW) as fh:
        workflow = yaml.safe_load(fh)
    # YAML 1.1 reads the bare key `on` as True.
    triggers = workflow.get("on", workflow.get(True))
    assert {"pull_request", "schedule", "workflow_dispatch"} <= triggers.keys()
    return workflow["jobs"]


def _step(job, needle):
    (step,) = [s for s in job["steps"] if needle in s.get("run", "")]
    return step


def test_nightly_shards_cover_the_split_and_share_the_database(jobs):
    shard = jobs["shard"]
    assert "pull_request" in shard["if"] and "!=" in shard["if"]
    values = shard["strategy"]["matrix"]["shard"]
    run = _step(shard, CAMPAIGN)["run"]
    # Each matrix value, put where the workflow puts it, gives one --shard K/N.
    flags = {re.search(r"--shard \"?(\d+/\d+)", run.replace("${{ matrix.shard }}", str(v)))[1] for v in values}
    n = len(values)
    assert n >= 2 and flags == {f"{k}/{n}" for k in range(1, n + 1)}
    assert "--db-shared" in run and '--db "$FXFUZZ_REDIS_URL"' in run and "--workers auto" in run
    uploads = {
        s["with"]["name"]: s["with"]["path"]
        for s in shard["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact")
    }
    assert uploads == {
        "fxfuzz-report-shard-${{ matrix.shard }}": "fxfuzz-report",
        "fxfuzz-db-shard-${{ matrix.shard }}": ".fxfuzz-db",
    }


def test_one_merge_job_follows_the_shards_and_publishes_one_report_and_database(jobs):
    merge = jobs["merge"]
    assert merge["needs"] == "shard" and "always()" in merge["if"] and "strategy" not in merge
    downloads = {
        s["with"]["pattern"]: s["with"]
        for s in merge["steps"]
        if s.get("uses", "").startswith("actions/download-artifact")
    }
    assert downloads["fxfuzz-report-shard-*"]["merge-multiple"] is False
    assert downloads["fxfuzz-db-shard-*"]["merge-multiple"] is True  # one folder: the union
    uploads = {
        s["with"]["name"]: s["with"]["path"]
        for s in merge["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact")
    }
    assert uploads == {
        "fxfuzz-report-${{ github.run_id }}": "fxfuzz-report",
        "fxfuzz-db": downloads["fxfuzz-db-shard-*"]["path"],
    }
    # Pull requests keep one short campaign of their own.
    campaign = jobs["campaign"]
    assert campaign["if"] == "github.event_name == 'pull_request'" and "strategy" not in campaign
    assert "--shard" not in _step(campaign, CAMPAIGN)["run"]


def _run_merge_step(jobs, cwd, summary):
    """The merge job's merge step, run by bash with the runner's options from the checkout's
    root (``cwd``, holding a link to .github), with ``fxfuzz`` on PATH."""
    os.symlink(os.path.join(ROOT, ".github"), cwd / ".github")
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    step = _step(jobs["merge"], "fxfuzz-merge.sh")
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.processes
def test_the_merge_step_merges_the_shard_reports_and_fails_on_new_findings(jobs, shard_campaigns, tmp_path):
    a, b, _ = shard_campaigns
    reports = tmp_path / "shard-reports"
    shutil.copytree(a, reports / "fxfuzz-report-shard-1")
    shutil.copytree(b, reports / "fxfuzz-report-shard-2")
    (reports / "fxfuzz-report-shard-3" / "logs").mkdir(parents=True)  # a shard that wrote no report
    r = _run_merge_step(jobs, tmp_path, tmp_path / "summary.md")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "fxfuzz-report-shard-3 holds no report.json" in r.stderr
    merged = json.loads((tmp_path / "fxfuzz-report" / "report.json").read_text())
    inputs = [json.loads((f / "report.json").read_text()) for f in (a, b)]
    assert merged["examples"] == sum(i["examples"] for i in inputs)
    assert {f["id"] for f in merged["findings"]} == {f["id"] for i in inputs for f in i["findings"]}
    assert merged["new_findings"] >= 1
    assert (tmp_path / "summary.md").read_text() == (tmp_path / "fxfuzz-report" / "report.md").read_text()


@pytest.mark.processes
def test_the_merge_step_takes_a_single_shard_extracted_in_place(jobs, shard_campaigns, tmp_path):
    # download-artifact extracts a lone matching artifact into the path itself.
    a, _, _ = shard_campaigns
    shutil.copytree(a, tmp_path / "shard-reports")
    r = _run_merge_step(jobs, tmp_path, tmp_path / "summary.md")
    assert r.returncode == 1, r.stdout + r.stderr
    merged = json.loads((tmp_path / "fxfuzz-report" / "report.json").read_text())
    assert merged["merged_from"] == [{"path": "shard-reports", "shard": "2/2", "seed": 7, "examples": 30}]
