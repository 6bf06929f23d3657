"""A report folder that cannot be written in full (a full disk, simulated by making every
write under it fail with ENOSPC): the summary is still printed, what can be written is, and
the exit status is 4, never 1 (which CI reads as new findings in a report it would upload)."""

from __future__ import annotations

import builtins
import contextlib
import errno
import json
import os
import re

import pytest
from fxfuzz.cli import run as run_cli
from fxfuzz.cli.main import main
from fxfuzz.report.folder import write_documents
from fxfuzz.report.schema import Report

CRASHER = "def crasher(gm, sig):\n    raise ValueError('planted')\n"
_OPEN = builtins.open
_WRITE = os.write


@contextlib.contextmanager
def full_disk(root, only=None):
    """Every open for writing under ``root`` (or of the files named ``only``) fails as on a
    full disk, and so does every os.write into a file there after its first, which writes half
    of what it is given (a file cut short, as a disk filling up leaves it); reading works."""

    def hit(path):
        name = os.path.basename(path).removeprefix(".").split(".tmp")[0]  # write_atomic's temporary names too
        return path.startswith(os.path.abspath(root)) and (
            only is None or name in only or name.rsplit(".", 1)[0] in only
        )

    def failing_open(file, mode="r", *args, **kwargs):
        path = os.path.abspath(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else ""
        if hit(path) and any(c in mode for c in "wax+"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _OPEN(file, mode, *args, **kwargs)

    started: set[int] = set()

    def failing_write(fd, data):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if not hit(path):
            return _WRITE(fd, data)
        if fd in started:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        started.add(fd)
        return _WRITE(fd, bytes(data[: max(1, len(data) // 2)]))

    builtins.open, os.write = failing_open, failing_write
    try:
        yield
    finally:
        builtins.open, os.write = _OPEN, _WRITE


def _report():
    row = {"id": "x-y-1", "oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}, "count": 1,
           "known": False, "known_reason": None, "repro": None, "issue": "issues/x-y-1.md", "graph_nodes": 1,
           "graph_hash": "h", "ambient_grad": True, "graph_code": "pass"}  # fmt: skip
    return Report.from_data({"schema": 2, "tool": "fxfuzz", "version": "0", "torch_version": "2", "pass": "p", "contract": "meaning", "domain": "export",
            "seed": 0, "workers": 1, "started": "", "duration_s": 1.0, "examples": 1, "examples_per_s": 1.0,
            "stopped_by": "budget", "incomplete": None, "new_findings": 1, "findings": [row],
            "coverage": {"enabled": False}, "stats": {}, "timeline": [], "workers_detail": {}, "repro_errors": []})  # fmt: skip


def test_every_document_is_tried_whatever_failed_before_it(tmp_path):
    with full_disk(tmp_path, only={"report.json", "report.html"}):
        unwritten = write_documents(_report(), str(tmp_path))
    assert unwritten == ["report.json: No space left on device", "report.html: No space left on device"]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["junit.xml", "report.md", "x-y-1.md"]


@pytest.fixture
def crasher(tmp_path):
    (tmp_path / "crasher.py").write_text(CRASHER)
    return ["run", "--pass", f"{tmp_path / 'crasher.py'}:crasher", "--max-examples", "2", "--workers", "1",
            "--no-db", "--max-shrink-s", "0"]  # fmt: skip


@pytest.mark.processes
def test_a_run_whose_disk_fills_up_prints_its_summary_and_exits_4(tmp_path, crasher, monkeypatch, capsys):
    out = tmp_path / "report"
    write_all = run_cli.write_all

    def then_full(*args, **kwargs):  # the disk fills up while the campaign runs
        with full_disk(tmp_path):  # the report is written beside its folder, then moved there
            return write_all(*args, **kwargs)

    monkeypatch.setattr(run_cli, "write_all", then_full)
    assert main([*crasher, "--report-dir", str(out)]) == run_cli.EXIT_REPORT_UNWRITTEN == 4
    captured = capsys.readouterr()
    # The summary names the finding although nothing of the report could be written ...
    assert "crash-pass_raised-" in captured.out and "planted" in captured.out and "report written" not in captured.out
    # ... and one line says what is missing; no traceback.
    (line,) = [x for x in captured.err.splitlines() if x.startswith("fxfuzz: error:")]
    assert (
        f"the report in {out} is incomplete: could not write" in line and "report.json: No space left on device" in line
    )
    assert "Traceback" not in captured.err
    # The repro's .json is written first and fails first: the line names it, not its .py, and
    # neither is left cut short (nor any temporary file).
    assert re.search(r"repros/crash-pass_raised-\w+\.json: No space left on device", line), line
    assert not (out / "report.json").exists() and not list(out.rglob("*.tmp")) and not list(out.rglob("repros/*"))


def test_a_disk_full_before_the_run_is_one_line_and_exit_2(tmp_path, crasher, refused, monkeypatch):
    out = tmp_path / "report"
    out.mkdir()

    def no_space(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(os, "mkdir", no_space)  # not even the folder the report is written in
    assert f"--report-dir: cannot create a folder in {tmp_path}: No space left on device" in refused(
        [*crasher, "--report-dir", str(out)]
    )


def test_a_merge_whose_disk_fills_up_exits_4(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    write_documents(_report(), str(tmp_path / "a"))
    out = tmp_path / "out"
    with full_disk(tmp_path, only={"report.md"}):
        assert main(["merge", str(tmp_path / "a"), "--report-dir", str(out)]) == 4
    assert json.loads((out / "report.json").read_text())["new_findings"] == 1  # the rest was written
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1]
        == f"fxfuzz: error: the report in {out} is incomplete: could not write report.md: No space left on device"
    )


@pytest.mark.processes
def test_a_gate_whose_disk_fills_up_exits_4(tmp_path, monkeypatch, capsys):
    from fxfuzz.cli import gate as gate_cli

    out = tmp_path / "report"
    write_all = gate_cli.write_all

    def then_full(*args, **kwargs):
        with full_disk(tmp_path):
            return write_all(*args, **kwargs)

    monkeypatch.setattr(gate_cli, "write_all", then_full)
    argv = ["gate", "--candidate", "identity", "--max-examples", "1", "--max-shrink-s", "0", "--report-dir", str(out)]
    assert main(argv) == 4
    captured = capsys.readouterr()
    # The regressions are printed although none of the report could be written.
    assert "corpus cases in" in captured.out and "REGRESSION" in captured.out and "report written" not in captured.out
    (line,) = [x for x in captured.err.splitlines() if x.startswith("fxfuzz: error:")]
    assert "report.json: No space left on device" in line and "Traceback" not in captured.err
