"""fxfuzz installed from its wheel into a fresh virtual environment outside the checkout: it
tells its own code by its package (``fxfuzz.core.internal``), so there an error of fxfuzz's own
is exit 70 and never a finding, and the bucket ids are the editable install's.

One wheel, one environment. The environment reuses this one's dependencies (torch is large)
through a ``.pth`` line naming this environment's site-packages: Python adds that folder to
``sys.path`` without running the ``.pth`` files inside it, so the editable install's import
hook stays out, and ``fxfuzz`` is the wheel's. Built from a copy of the sources, so setuptools
writes no ``build/`` folder into the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import paths
import pytest

ROOT = Path(paths.ROOT)
HELPER_DIR = Path(paths.HELPERS)

# Bucket ids of seeded graph cases under passes whose crash sites differ by install if fxfuzz's
# frames are told by folder: a C function (no frame of its own, so the site is what is left
# once fxfuzz's frames are dropped) and torch's set-grad pass (crashes inside torch).
BUCKET_IDS = """
import json, operator, sys
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.passes import load_pass
from fxfuzz.core.reproducible import reproducible_draws
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, Phase, given, settings

passes = [load_pass("set_grad"), operator.truediv]  # a C function as a pass: its error is its own
ids = []

@settings(max_examples=6, database=None, derandomize=True, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(graph_cases(domain="both"))
def judge(case):
    ids.append([sorted(bucket_id(f) for f in verify(case, p, stage_share=0)) for p in passes])

with reproducible_draws():
    judge()
print(json.dumps({"fxfuzz": __import__("fxfuzz").__file__, "ids": ids}))
"""


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)


def _wheel_env(tmp: Path) -> Path:
    """A fresh virtual environment in ``tmp`` holding fxfuzz's wheel; its interpreter's path."""
    src = tmp / "src"
    for part in ("fuzz", "strategies", "oracles"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # Offline where setuptools is here already (Python 3.11's venv has it); else pip fetches it.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp / "dist"), str(src)], tmp
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp / "dist").glob("fxfuzz-*.whl")
    env = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(env)], tmp)
    assert made.returncode == 0, made.stderr
    python = env / "bin" / "python"
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp,
    )
    assert installed.returncode == 0, installed.stderr
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


@pytest.mark.processes
def test_the_wheel_runs_a_campaign_blames_its_own_errors_and_buckets_as_the_editable_install(tmp_path):
    wheel_env = _wheel_env(tmp_path)
    work = tmp_path / "outside"  # no checkout here: nothing on sys.path but the environments
    work.mkdir()
    fxfuzz = wheel_env.parent / "fxfuzz"
    # The README's campaign, bounded by examples rather than seconds (a loaded machine may not
    # start a worker within a short budget): every bucket it meets is known.
    argv = [
        "run",
        "--max-examples",
        "4",
        "--max-shrink-s",
        "0",
        "--workers",
        "1",
        "--no-db",
        "--known",
        str(ROOT / "fxfuzz-known.txt"),
    ]
    run = _run([str(fxfuzz), *argv, "--report-dir", "r1"], work)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((work / "r1" / "report.json").read_text())
    assert report["examples"] == 4 and not report["new_findings"]

    # An error of fxfuzz's own, planted by a pass module (outside the checkout) that patches
    # fxfuzz's installed code when a worker imports it: exit 70, no finding.
    shutil.copy(HELPER_DIR / "planted_bug.py", work / "planted_bug.py")
    planted = _run(
        [
            str(fxfuzz),
            "run",
            "--pass",
            "planted_bug.py:identity",
            "--max-examples",
            "2",
            "--workers",
            "1",
            "--no-db",
            "--report-dir",
            "r2",
        ],
        work,
    )
    assert planted.returncode == 70, planted.stdout + planted.stderr
    report = json.loads((work / "r2" / "report.json").read_text())
    assert report["findings"] == [] and "KeyError: 'no_such_stage'" in report["workers_detail"]["internal_errors"][0]

    (work / "bucket_ids.py").write_text(BUCKET_IDS)
    wheel = json.loads(_run([str(wheel_env), "bucket_ids.py"], work).stdout)
    editable = json.loads(_run([sys.executable, "bucket_ids.py"], work).stdout)
    site = os.path.dirname(os.path.dirname(wheel["fxfuzz"]))
    assert site.startswith(str(wheel_env.parent.parent)) and editable["fxfuzz"].startswith(str(ROOT))
    assert wheel["ids"] == editable["ids"] and any(ids for per_case in wheel["ids"] for ids in per_case)
