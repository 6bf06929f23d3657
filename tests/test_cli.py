"""The fxfuzz command line: exit statuses, one-line errors, and the report it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def fxfuzz(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fuzz.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_run_real_pass_writes_report(tmp_path):
    """The real pass of torch 2.13.0 has known findings (fxfuzz-known.txt): the campaign
    counts them, marks them known and stays green; anything else it finds fails this test."""
    r = fxfuzz(
        "run", "--budget", "300", "--max-examples", "30", "--no-db",
        "--known", os.path.join(ROOT, "fxfuzz-known.txt"), "--report-dir", str(tmp_path),
    )
    report = json.loads((tmp_path / "report.json").read_text())
    new = [f["id"] + ": " + f["message"] for f in report["findings"] if not f["known"]]
    assert r.returncode == 0 and not new, "\n".join(new) or r.stderr
    assert report["examples"] == 30
    assert report["pass"] == "set_grad"
    assert report["torch_version"].startswith("2.")


def test_broken_pass_is_reported_with_exit_1(tmp_path):
    spec = os.path.join(HERE, "broken_passes.py") + ":drops_toggles"
    r = fxfuzz("run", "--pass", spec, "--budget", "60", "--max-examples", "400", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert any(f["oracle"] == "equivalence" for f in report["findings"])


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--pass", "no_such_module:fn"], "no_such_module"),
        (["run", "--pass", "fuzz.passes:nothing_here"], "nothing_here"),
        (["run", "--pass", "fuzz.passes:REGISTRY"], "not a callable"),
        (["run", "--pass", "fuzz.passes:load_pass.__doc__"], "not a callable"),
        (["run", "--pass", "strategies.case:clone_input"], "(gm, graph_signature)"),
        (["run", "--pass", "/no/such/file.py:fn"], "not found"),
        (["run", "--pass", "bogus"], "unknown pass"),
        (["run", "--budget", "0"], "--budget"),
        (["run", "--budget", "soon"], "--budget"),
        (["run", "--max-examples", "-3"], "--max-examples"),
        (["run", "--domain", "nowhere"], "--domain"),
        (["frobnicate"], "invalid choice"),
        (["run", "--workers", "many"], "--workers"),
        (["run", "--workers", "0"], "--workers"),
        (["run", "--known", "/no/such/known.txt"], "known"),
        (["run", "--db-shared", "not-a-repo"], "OWNER/REPO"),
        (["repro", "/no/such/repro.py"], "no such file"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args, needle):
    r = fxfuzz(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr
