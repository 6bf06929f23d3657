"""SIGINT, SIGTERM and SIGHUP stop every long-running command early: it ends promptly, writes
its whole report for what ran, exits 1 if it found something and 128 + the signal otherwise,
and prints no traceback. A second signal abandons the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fxfuzz.cli.interrupt import Abandoned, StopSignals
from fxfuzz.core.identity import identify
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.repro.files import repro_document, write_repro
from handmade import no_grad_region_case

# The identity (no contract, so nothing to find) or torch's real pass (so a gate finds no
# regression against it), each appending a line to a file per call: the tests' sign that
# the command is judging examples.
COUNTED = """
import os
import time
from fxfuzz.core.contract import MEANING
from fxfuzz.core.passes import load_pass

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls")
real = load_pass("set_grad")


def _count():
    with open(MARK, "a") as fh:
        fh.write("call\\n")


def identity(gm, sig):
    _count()
    return gm, sig


identity.fxfuzz_contract = MEANING


def real_pass(gm, sig):
    _count()
    return real(gm, sig)


def hangs(gm, sig):
    _count()
    time.sleep(600)
"""

# A signal this long after the command judged its first examples must have ended it.
PROMPT_S = 60


def _start(tmp_path, *args: str) -> subprocess.Popen:
    (tmp_path / "counted.py").write_text(COUNTED)
    return subprocess.Popen(
        [sys.executable, "-m", "fxfuzz", *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )  # fmt: skip


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_after_calls(proc: subprocess.Popen, mark, sig: int, calls: int = 3) -> tuple[str, str]:
    """Wait until the pass ran ``calls`` times (or the command ended), send ``sig``; the
    command's output. A command still running ``PROMPT_S`` after the signal (its budget is
    600 s) fails the test with TimeoutExpired: the wait is the bound, nothing is timed."""
    while proc.poll() is None and not (mark.exists() and len(mark.read_text().splitlines()) >= calls):
        time.sleep(0.1)  # a file, not an event: polled
    assert proc.poll() is None, "the command ended before the signal: " + "".join(proc.communicate())
    proc.send_signal(sig)
    return proc.communicate(timeout=PROMPT_S)


@pytest.mark.processes
@pytest.mark.parametrize(
    ("level", "sig"),
    [("program", signal.SIGINT), ("mixed", signal.SIGTERM), ("graph", signal.SIGHUP)],
)
def test_a_signal_stops_a_campaign_at_every_level_with_its_report(tmp_path, level, sig):
    report_dir = tmp_path / "r"
    proc = _start(
        tmp_path, "run", "--level", level, "--pass", "counted.py:identity", "--budget", "600", "--no-db",
        "--report-dir", str(report_dir),
    )  # fmt: skip
    out, err = _stop_after_calls(proc, tmp_path / "calls", sig)
    assert "Traceback" not in err, err
    report = json.loads((report_dir / "report.json").read_text())
    assert report["stopped_by"] == "interrupted" and report["examples"] > 0, out + err
    assert report["incomplete"] is None
    assert proc.returncode == (1 if report["new_findings"] else 128 + sig), out + err
    for name in ("report.md", "report.html", "junit.xml"):
        assert (report_dir / name).stat().st_size > 0


@pytest.mark.processes
def test_sigterm_ends_a_program_level_run_whose_pass_hangs_with_its_report(tmp_path):
    """The pass runs in a worker, not in this process: a pass that never returns does not keep
    the command from stopping (its worker gets its grace, then is killed)."""
    report_dir = tmp_path / "r"
    proc = _start(
        tmp_path, "run", "--level", "program", "--pass", "counted.py:hangs", "--budget", "600", "--example-timeout", "600",
        "--no-db", "--report-dir", str(report_dir),
    )  # fmt: skip
    out, err = _stop_after_calls(proc, tmp_path / "calls", signal.SIGTERM, calls=1)
    assert "Traceback" not in err, err
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    report = json.loads((report_dir / "report.json").read_text())
    assert report["stopped_by"] == "interrupted" and not report["findings"]


@pytest.mark.processes
def test_a_signal_stops_the_gate_with_its_report(tmp_path):
    report_dir = tmp_path / "r"
    proc = _start(
        tmp_path, "gate", "--candidate", "counted.py:real_pass", "--budget", "600", "--report-dir", str(report_dir)
    )
    out, err = _stop_after_calls(proc, tmp_path / "calls", signal.SIGINT)
    assert "Traceback" not in err, err
    assert proc.returncode == 128 + signal.SIGINT, out + err
    assert "stopped early by SIGINT" in out
    report = json.loads((report_dir / "report.json").read_text())
    assert report["stopped_by"] == "interrupted" and report["corpus_cases"] > 0 and not report["findings"]


@pytest.mark.processes
def test_a_signal_stops_mutate_keeping_the_mutants_judged(tmp_path):
    # The first is killed on the corpus; the second survives export-domain cases (it changes
    # only graphs with tensor attributes), so its gate would run for the whole budget.
    only = "replace_set_grad_with_hop_pass._is_set_grad_enabled_node:22:remove:0,utils.node_inline_:860:remove:20"
    out_file = tmp_path / "mutants.json"
    proc = _start(
        tmp_path, "mutate", "--only", only, "--domain", "export", "--budget-per-mutant", "600", "--out", str(out_file)
    )
    first = proc.stdout.readline()  # the first mutant's verdict line
    assert first.startswith("[1/2] killed"), first + "".join(proc.communicate())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=PROMPT_S)
    assert "Traceback" not in err, err
    assert proc.returncode == 128 + signal.SIGINT, out + err
    assert "stopped early by SIGINT after 1 of 2 mutants" in out
    assert [m["status"] for m in json.loads(out_file.read_text())["mutants"]] == ["killed"]


def test_a_second_signal_abandons_the_run_and_nohup_is_respected():
    old_int = signal.getsignal(signal.SIGINT)
    old_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as stop:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # nohup: hangups stay ignored
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop() and stop.signum == signal.SIGTERM
            with pytest.raises(Abandoned):
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is old_int  # restored on exit
    finally:
        signal.signal(signal.SIGHUP, old_hup)


@pytest.mark.processes
def test_ctrl_c_during_a_replay_ends_it_in_one_line_with_no_child_left(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: fxfuzz repro and its replay child."""
    case = no_grad_region_case()
    finding = {"oracle": "crash", "kind": "k", "message": "m", "details": {}}
    py = write_repro(str(tmp_path / "repros"), repro_document("b", finding, case_to_dict(case), identify("set_grad")))
    proc = _start(tmp_path, "repro", py, "--pass", "counted.py:hangs")
    while proc.poll() is None and not (tmp_path / "calls").exists():
        time.sleep(0.1)  # a file, not an event: polled
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=PROMPT_S)
    assert proc.returncode == 128 + signal.SIGINT and err == "fxfuzz: interrupted\n", out + err
    # Nothing of the group is left running: the replay child died of the Ctrl-C, and the warm
    # interpreter it forked from (and multiprocessing's resource tracker) end with fxfuzz, a
    # moment after it. A child left running (Ctrl-C blocked, say) would stay for minutes.
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid):
        assert time.monotonic() < deadline, "a process of fxfuzz repro's group is still running"
        time.sleep(0.1)
