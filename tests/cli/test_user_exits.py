"""A pass or an ``--op`` source that ends the process (``sys.exit``, ``SystemExit``, a
``KeyboardInterrupt`` it raises, ``os._exit``) never makes a command read green: as it loads, it
is one line and exit 2 for every command that loads one; while the pass runs, it is a finding,
at the program level too; a real Ctrl-C stays an interrupt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.errors import PassSpecError
from fxfuzz.core.identity import identify
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.core.user_code import exits_refused
from fxfuzz.repro.files import repro_document, write_repro
from handmade import no_grad_region_case

ENDS = ["sys.exit(0)", "raise SystemExit(3)", "raise KeyboardInterrupt", "os._exit(0)"]


def _ends(tmp_path, at_import: str = "", in_pass: str = "return gm, sig") -> None:
    (tmp_path / "ends.py").write_text(f"import os, sys\n{at_import}\n\ndef p(gm, sig):\n    {in_pass}\n")


@pytest.mark.processes  # the loading is tried in a fork first
@pytest.mark.parametrize("body", ENDS)
def test_a_pass_or_op_that_ends_the_process_as_it_loads_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, body):
    _ends(tmp_path, at_import=body)
    monkeypatch.chdir(tmp_path)
    finding = {"oracle": "crash", "kind": "k", "message": "m"}
    py = write_repro(
        str(tmp_path / "repros"),
        repro_document("b", finding, case_to_dict(no_grad_region_case()), identify("set_grad")),
    )
    commands = [
        ["run", "--pass", "ends.py:p", "--no-db", "--max-examples", "1"],
        ["run", "--level", "program", "--op", "ends.py", "--no-db", "--max-examples", "1"],
        ["gate", "--candidate", "ends.py:p", "--max-examples", "1"],
        ["repro", py[:-3] + ".json", "--pass", "ends.py:p"],
        ["bench", "--pass", "ends.py:p", "--graphs", "1"],
        ["mutate", "--op", "ends.py", "--list"],
    ]
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fxfuzz: error:") and "ends.py" in err[0], (argv, err)
    assert not (tmp_path / "reports").exists()  # nothing ran, so nothing was reported


@pytest.mark.processes
def test_a_pass_that_calls_os_exit_as_it_loads_never_ends_fxfuzz_green(tmp_path):
    """The real command's status, not main()'s: os._exit cannot be caught, only kept out."""
    _ends(tmp_path, at_import="os._exit(0)")
    proc = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "run", "--pass", "ends.py:p", "--no-db", "--max-examples", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "fxfuzz: error: --pass ends.py:p: loading it ended the process (it exited with status 0) before fxfuzz could run anything"
    )


def test_a_keyboard_interrupt_the_code_raises_is_refused_and_a_real_ctrl_c_is_not():
    with pytest.raises(PassSpecError, match=r"^x raised KeyboardInterrupt as it was loaded"):
        with exits_refused("x", PassSpecError):
            raise KeyboardInterrupt
    with pytest.raises(PassSpecError, match=r"^x raised SystemExit\(3\)"):
        with exits_refused("x", PassSpecError):
            sys.exit(3)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):  # nested, as loading a pass nests its guards
        with exits_refused("x", PassSpecError), exits_refused("y", PassSpecError):
            signal.raise_signal(signal.SIGINT)  # a Ctrl-C: the handler runs before this returns
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.processes
@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("sys.exit(0)", "process_died"),
        ("os._exit(0)", "process_died"),
        ("raise KeyboardInterrupt", "process_died"),
        ("while True: pass", "hang"),
    ],
)
def test_a_program_level_pass_that_ends_or_hangs_its_process_is_a_finding(tmp_path, body, kind):
    """The program level runs the pass in a worker, as the graph level does: the example that
    ended it is run again, then reported, whatever the status it chose."""
    _ends(tmp_path, in_pass=body)
    out = tmp_path / "r"
    argv = [
        "run",
        "--level",
        "program",
        "--pass",
        f"{tmp_path}/ends.py:p",
        "--no-db",
        "--max-examples",
        "1",
        "--example-timeout",
        "5",
    ]
    assert main([*argv, "--report-dir", str(out)]) == 1
    report = json.loads((out / "report.json").read_text())
    (finding,) = report["findings"]
    assert finding["id"].startswith(f"program-crash-{kind}-") and finding["repro"], finding
    assert report["workers_detail"]["restarts"] >= 1 and report["incomplete"] is None
