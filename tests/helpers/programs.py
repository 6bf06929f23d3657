"""Runs a repro's plain-torch program as ``python program.py`` would, for the tests that check
what it exits with: each program in a process of its own, forked from one interpreter per test
process that has imported torch and nothing else. A fresh interpreter per program spent two to
five seconds of CPU importing torch, 33 times in tests/repro/test_short_repros.py alone; a fork
after that import gives the program the same process a fresh one has once its own
``import torch`` line has run, and nothing any other program did."""

from __future__ import annotations

import atexit
import json
import signal
import subprocess
import sys

# The driver: reads one request a line ({"path", "cwd", "timeout"}), forks, runs the program
# in the child as ``python path`` runs it (sys.argv, sys.path[0], __main__, the exit status of
# SystemExit or of an uncaught exception), and answers with its status (minus the signal that
# ended it, SIGALRM where it ran past its timeout) and output.
DRIVER = r"""
import json, os, runpy, signal, sys, tempfile, traceback
import torch

def child(path, cwd, out, err, timeout):
    signal.alarm(timeout)  # SIGALRM's default ends a program still running then
    os.dup2(out, 1); os.dup2(err, 2)
    os.chdir(cwd)
    sys.argv = [path]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    try:
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            child(req["path"], req["cwd"], out.fileno(), err.fileno(), req["timeout"])
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.seek(0); err.seek(0)
        answer = {"code": code, "stdout": out.read().decode(errors="replace"), "stderr": err.read().decode(errors="replace")}
    sys.stdout.write(json.dumps(answer) + "\n"); sys.stdout.flush()
"""

_driver: subprocess.Popen | None = None


def run_program(path: str, cwd: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python path`` run in ``cwd``: its exit status, stdout and stderr (a program still
    running after ``timeout`` seconds is killed, and the test fails)."""
    global _driver
    if _driver is None or _driver.poll() is not None:
        _driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        atexit.register(_stop, _driver)
    assert _driver.stdin is not None and _driver.stdout is not None
    _driver.stdin.write(json.dumps({"path": str(path), "cwd": str(cwd), "timeout": timeout}) + "\n")
    _driver.stdin.flush()
    answer = json.loads(_driver.stdout.readline())
    assert answer["code"] != -signal.SIGALRM, f"{path} ran past {timeout} s"
    return subprocess.CompletedProcess([sys.executable, str(path)], answer["code"], answer["stdout"], answer["stderr"])


def _stop(driver: subprocess.Popen) -> None:
    """The driver ends at the end of its input; waited for, so no process outlives the test's."""
    assert driver.stdin is not None
    driver.stdin.close()
    driver.wait(timeout=60)
