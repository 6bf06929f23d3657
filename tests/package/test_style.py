"""The code is checked and formatted by ruff, as pyproject.toml configures it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ROOT


@pytest.mark.processes
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=" ".join)
def test_ruff(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
