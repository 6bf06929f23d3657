"""A multi-worker campaign survives a pass that kills its process or hangs, keeps the case
responsible, stops cleanly on SIGTERM with the whole report folder written, and the next
campaign replays the killing case first."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from broken_passes import DIES_IN_WORKERS
from fxfuzz.core.serialize import graph_targets

# Segfaults on graphs with an aten.neg node, hangs on graphs with aten.exp; otherwise the
# identity with no contract, so the only findings are the ones the workers must survive.
KILLER = """
import ctypes, time
import torch
from fxfuzz.core.contract import MEANING

def killer(gm, sig):
    targets = {n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes}
    if torch.ops.aten.neg.default in targets:
        ctypes.string_at(0)
    if torch.ops.aten.exp.default in targets:
        time.sleep(600)
    return gm, sig

killer.fxfuzz_contract = MEANING
"""


def _saved(db: str) -> int:
    return sum(len(files) for _, _, files in os.walk(db))


@pytest.mark.processes
def test_workers_survive_segfault_and_hang_stop_on_sigterm_and_replay(tmp_path, cli):
    pass_file = tmp_path / "killer.py"
    pass_file.write_text(KILLER)
    out, db = tmp_path / "report", str(tmp_path / "db")
    common = ["run", "--pass", f"{pass_file}:killer", "--db", db]
    proc = subprocess.Popen(
        # No examples through export's stages: run_decompositions makes one take seconds on a
        # loaded machine, and an example twice past the limit is a hang like the killer's.
        [
            sys.executable,
            "-m",
            "fxfuzz",
            *common,
            "--workers",
            "2",
            "--budget",
            "300",
            "--example-timeout",
            "5",
            "--stage-share",
            "0",
            "--report-dir",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The parent saves each killing case as soon as the worker dies: stop once two buckets
    # (segfault and hang) are saved, or after 240 s with what there is. The bound only ends the
    # wait: at load 8-10, with three xdist workers, 90 s once saw 25 examples and no killing case.
    deadline = time.monotonic() + 240
    while _saved(db) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout + stderr

    report = json.loads((out / "report.json").read_text())
    assert report["stopped_by"] == "interrupted" and report["workers"] == 2 and report["examples"] > 0
    kinds = {f["kind"]: f for f in report["findings"]}
    assert kinds and set(kinds) <= {"process_died", "hang"}, report["findings"]
    for f in report["findings"]:
        assert f["oracle"] == "crash" and not f["known"] and f["count"] >= 1
        # The parent got the case before the pass ran, so the killing graph is in the repro.
        assert f["repro"] and (out / f["repro"]).is_file()
        case = json.loads((out / f["repro"]).with_suffix(".json").read_text())["case"]
        # At any depth, as the killer looks (a cond or map inside another's subgraph included).
        assert {"aten::neg.default", "aten::exp.default"} & graph_targets(case["graph"])
    if "process_died" in kinds:
        assert kinds["process_died"]["details"]["exception"] == "SIGSEGV"
    for name in ("report.md", "report.html", "junit.xml"):
        assert (out / name).stat().st_size > 0
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == len(report["findings"])

    # The next campaign's first example is a saved killing case: one example, same bucket. Run
    # in this process: its workers, which replay the case, are processes all the same.
    again = cli(*common, "--max-examples", "1", "--example-timeout", "5", "--report-dir", str(tmp_path / "again"))
    assert again.returncode == 1, again.stdout + again.stderr
    second = json.loads((tmp_path / "again" / "report.json").read_text())
    replayed = {f["id"] for f in second["findings"]}
    assert second["examples"] == 1 and replayed and replayed <= {f["id"] for f in report["findings"]}


def _incomplete_run(tmp_path, cli, source: str, fn: str, words: str) -> dict:
    """Run a one-worker campaign against ``fn`` of ``source`` that must end incomplete: exit 3,
    one line with ``words`` and the worker's exit status, and report.json, report.md and
    junit.xml all saying so. Its report.json. The CLI runs in this process: what dies is the
    worker processes."""
    pass_file = tmp_path / "dies.py"
    pass_file.write_text(source)
    report_dir = tmp_path / "r"
    proc = cli(
        "run",
        "--pass",
        f"{pass_file}:{fn}",
        "--workers",
        "1",
        "--budget",
        "120",
        "--no-db",
        "--report-dir",
        str(report_dir),
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("fxfuzz: error:")]
    report = json.loads((report_dir / "report.json").read_text())
    reason = report["incomplete"]
    assert words in line and "exited with 7" in line and reason in line
    assert (
        "❌" in (report_dir / "report.md").read_text().splitlines()[0]
        and reason in (report_dir / "report.md").read_text()
    )
    suite = ET.parse(report_dir / "junit.xml").getroot().find("testsuite")
    assert suite.get("errors") == "1" and suite.find("testcase/error").get("message") == reason
    return report


@pytest.mark.processes
def test_a_campaign_whose_workers_cannot_start_fails_loudly(tmp_path, cli):
    assert _incomplete_run(tmp_path, cli, DIES_IN_WORKERS, "fine", "tested nothing")["examples"] == 0


# A few examples pass, then the pass segfaults; every worker started after that dies on
# start-up, so the example is never run again and the slot ends with a dead worker.
CRASHES_THEN_WORKERS_DIE = """
import ctypes, os, sys
from fxfuzz.core.contract import MEANING
MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crashed")
if sys.argv[0].endswith("worker.py") and os.path.exists(MARK):
    os._exit(7)
CALLS = []

def crashes_later(gm, sig):
    CALLS.append(1)
    if len(CALLS) > 4:
        open(MARK, "w").close()
        ctypes.string_at(0)
    return gm, sig

crashes_later.fxfuzz_contract = MEANING
"""


@pytest.mark.processes
def test_a_campaign_whose_restarted_workers_keep_dying_fails_loudly(tmp_path, cli):
    """Some examples ran, then no worker could start again: the campaign did not run its
    budget, so it is no verdict on the pass, whatever it found."""
    report = _incomplete_run(tmp_path, cli, CRASHES_THEN_WORKERS_DIE, "crashes_later", "kept dying")
    assert report["stopped_by"] == "workers_lost" and report["examples"] >= 1


@pytest.mark.processes
def test_a_campaign_leaves_no_coverage_folder_behind(tmp_path, monkeypatch):
    from fxfuzz.cli import main

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    for extra in ([], ["--coverage"]):
        main(
            ["run", "--pass", "identity", "--max-examples", "2", "--no-db", "--report-dir", str(tmp_path / "r"), *extra]
        )
        assert not list((tmp_path / "tmp").glob("fxfuzz-cov-*")), extra


@pytest.mark.processes
def test_a_campaign_starts_its_workers_under_a_tmpdir_too_long_for_a_socket(tmp_path, monkeypatch):
    """multiprocessing makes the forkserver's socket folder in TMPDIR, once per process, and a
    socket path holds 107 bytes at most: the folder goes where the path fits."""
    import tempfile
    from multiprocessing import process

    from fxfuzz.campaign import warm
    from fxfuzz.cli import main

    long = tmp_path / ("t" * 90)
    long.mkdir()
    warm.stop()  # the forkserver this process runs, if any: the campaign starts a fresh one
    monkeypatch.delitem(process.current_process()._config, "tempdir", raising=False)
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    argv = ["run", "--pass", "identity", "--max-examples", "1", "--no-db", "--report-dir", str(tmp_path / "r")]
    try:
        assert main(argv) == 0
    finally:
        warm.stop()  # its socket folder is this test's: the next campaign starts its own


@pytest.mark.processes
def test_the_supervisor_keeps_the_smallest_example_a_worker_died_on(tmp_path):
    """Deaths of one bucket come in any order; the database keeps the smallest example."""
    from fxfuzz.campaign.database import DatabaseSpec
    from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor
    from fxfuzz.core.identity import identify
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.core.settings import CampaignSettings
    from fxfuzz.oracles import Finding
    from handmade import no_grad_region_case, view_output_case

    small, large = case_to_dict(view_output_case()), case_to_dict(no_grad_region_case())
    settings = CampaignSettings(db=DatabaseSpec(str(tmp_path / "db")), identity=identify("identity"))
    sup = Supervisor(ParallelCampaign(settings))
    died = Finding("crash", "process_died", "planted", {"exception": "SIGSEGV", "frame": "<native>"})
    for case in (small, large):
        bid = sup._record_crash(died, case, None)
    assert [raw for raw, _ in sup.saved.saved()] == [json.dumps(small).encode()]
    assert sup.result.buckets[bid].example.data() == small


class PidPipe:
    """A FIFO the worker processes of a test's pass write their pid to: the test awaits it
    with select instead of polling. The test holds a write end too, so that the read end
    never sees end-of-file between writers."""

    def __init__(self, path: str) -> None:
        os.mkfifo(path)
        self.path, self.buffer = path, b""
        self.read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.write_fd = os.open(path, os.O_WRONLY)

    def next_pid(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("no worker reached the pass")
            self.buffer += os.read(self.read_fd, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return int(line)

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


# Writes the worker's pid to a FIFO from inside the pass; {behaviour} then runs. Only in
# worker processes: the CLI process loads (and may call) the pass too.
SIGNALLING_PASS = """
import os, signal, sys, time
from fxfuzz.core.contract import MEANING

IN_WORKER = sys.argv[0].endswith("worker.py")

def tell(path):
    with open(path, "w") as fh:
        fh.write(f"{{os.getpid()}}\\n")

def the_pass(gm, sig):
{behaviour}
    return gm, sig

the_pass.fxfuzz_contract = MEANING
"""


def _signalling_pass(tmp_path, behaviour: str) -> tuple[str, PidPipe]:
    """A pass file whose body runs ``behaviour`` (with ``FIFO`` and ``MARK`` paths
    substituted) and the pipe its workers' pids arrive on."""
    pipe = PidPipe(str(tmp_path / "pids"))
    body = behaviour.replace("FIFO", repr(pipe.path)).replace("MARK", repr(str(tmp_path / "mark")))
    path = tmp_path / "signalling.py"
    path.write_text(SIGNALLING_PASS.format(behaviour=body))
    return f"{path}:the_pass", pipe


def _run(spec: str, out, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fxfuzz", "run", "--pass", spec, "--no-db", "--report-dir", str(out), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# The first worker to claim MARK stays in the pass until the test kills it from outside; every
# other call, the same example run again included, returns at once: a correct pass.
SLOW_ONCE = """
    if IN_WORKER:
        try:
            os.close(os.open(MARK, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return gm, sig
        tell(FIFO)
        while True:
            time.sleep(1)
"""


@pytest.mark.processes
def test_a_worker_killed_from_outside_is_restarted_and_is_no_finding(tmp_path):
    spec, pipe = _signalling_pass(tmp_path, SLOW_ONCE)
    out = tmp_path / "report"
    proc = _run(spec, out, "--workers", "2", "--max-examples", "12", "--budget", "300")
    try:
        os.kill(pipe.next_pid(timeout=120), signal.SIGKILL)  # as the OOM killer would
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        pipe.close()
        proc.kill()
    assert proc.returncode == 0, stdout + stderr
    report = json.loads((out / "report.json").read_text())
    assert report["findings"] == [] and report["examples"] == 12, report
    detail = report["workers_detail"]
    assert detail["restarts"] == 1 and detail["errors"] == []
    (death,) = detail["unrepeated_deaths"]
    assert "killed by SIGKILL" in death and "fresh worker then ran without dying" in death
    assert f"fxfuzz: restarted a worker, not a finding: {death}" in stdout


@pytest.mark.processes
def test_a_pass_that_segfaults_is_still_a_finding(tmp_path):
    """The fresh worker dies on the same example too: the death is the pass's."""
    path = tmp_path / "segfaults.py"
    path.write_text(SIGNALLING_PASS.format(behaviour="    if IN_WORKER:\n        os.kill(os.getpid(), signal.SIGSEGV)"))
    out = tmp_path / "report"
    proc = _run(f"{path}:the_pass", out, "--workers", "1", "--max-examples", "1", "--budget", "300")
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 1, stdout + stderr
    report = json.loads((out / "report.json").read_text())
    (finding,) = report["findings"]
    assert (finding["oracle"], finding["kind"], finding["details"]["exception"]) == ("crash", "process_died", "SIGSEGV")
    assert finding["repro"] and report["examples"] == 1
    assert report["workers_detail"]["restarts"] == 1 and report["workers_detail"]["unrepeated_deaths"] == []


@pytest.mark.processes
def test_a_worker_killed_between_examples_is_restarted_and_is_no_finding(monkeypatch):
    """No example was running: nothing to blame, the slot restarts with what is left of its
    share. (Outside a pass the moment of a kill cannot be aimed at, so the worker here is a
    real SIGKILLed process under a hand-made record of one that ran 3 of its 10 examples.)"""
    from multiprocessing.connection import Pipe

    from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor, WorkerState, _Worker
    from fxfuzz.core.identity import identify
    from fxfuzz.core.settings import CampaignSettings

    sup = Supervisor(ParallelCampaign(CampaignSettings(max_examples=10, identity=identify("identity"))))
    spawned: list[tuple] = []
    monkeypatch.setattr(sup, "_spawn", lambda *args: spawned.append(args))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    proc.kill()
    proc.wait()
    w = _Worker(0, 0, 10, proc, Pipe()[0], time.monotonic(), state=WorkerState.BETWEEN, examples=3)
    sup.workers.append(w)
    sup._exited(w, proc.returncode)
    assert spawned == [(0, 1, 7, None, 3)] and sup.result.workers.restarts == 1  # 3: where a listed share would go on
    assert sup.result.workers.unrepeated_deaths == ["worker 0 was killed by SIGKILL between examples"]
    assert not sup.result.buckets and not sup.result.workers.errors


HANGS = """
    if IN_WORKER:
        tell(FIFO)
        while True:
            time.sleep(1)
"""


def _gone_within(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` (not a child of this one) ends within ``timeout`` seconds."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="awaits the workers' end through pidfd_open (Linux)")
def test_workers_die_with_their_supervisor(tmp_path):
    spec, pipe = _signalling_pass(tmp_path, HANGS)
    proc = _run(spec, tmp_path / "report", "--workers", "2", "--budget", "300", "--example-timeout", "300")
    workers: list[int] = []
    try:
        workers = [pipe.next_pid(timeout=120) for _ in range(2)]  # both hang inside the pass
        proc.kill()
        proc.wait()
        # A bound on the wait, not the claim (a worker that outlives the supervisor never
        # ends): 10 s once fell short at load 8-10 with three xdist workers.
        assert [pid for pid in workers if not _gone_within(pid, 30.0)] == []
    finally:
        pipe.close()
        proc.kill()
        for pid in workers:  # what outlived the supervisor, when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_warm_interpreter_only_imports_what_worker_main_does():
    """Workers fork from an interpreter that imported ``PRELOAD``: every module worker_main
    imports is among them (else each worker imports it again), and importing them runs no
    torch op (forking after torch started its thread pools could hang the workers)."""
    import ast
    import inspect

    from fxfuzz.campaign import worker

    body = ast.parse(inspect.getsource(worker.worker_main))
    imported = {node.module for node in ast.walk(body) if isinstance(node, ast.ImportFrom)}
    assert imported and imported <= set(worker.PRELOAD), imported - set(worker.PRELOAD)
    script = f"""
import importlib, json, torch
from torch.utils._python_dispatch import TorchDispatchMode

ops = []

class Record(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ops.append(str(func))
        return func(*args, **(kwargs or {{}}))

with Record():
    for name in {worker.PRELOAD!r}:
        importlib.import_module(name)
    torch.zeros(1) + 1  # the recorder records
print(json.dumps(ops))
"""
    r = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == ["aten.zeros.default", "aten.add.Tensor"]


# Tells, from inside the pass in a worker, what the worker was started with.
REPORTS_SURROUNDINGS = """
import json, os, signal, sys, tempfile
from fxfuzz.core.contract import MEANING

def the_pass(gm, sig):
    if sys.argv[0].endswith("worker.py"):
        with open(os.environ["FXFUZZ_TEST_OUT"], "w") as fh:
            json.dump({"session_leader": os.getsid(0) == os.getpid(), "cwd": os.getcwd(), "tmp": tempfile.gettempdir(),
                       "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))}, fh)
        print("from the worker")
    return gm, sig

the_pass.fxfuzz_contract = MEANING
"""


def test_a_worker_has_the_surroundings_of_its_start_not_of_the_warm_interpreters(tmp_path, monkeypatch):
    """Two campaigns in one process, the second from another directory, environment and
    temporary folder: its worker, forked from the interpreter the first one started, lives in
    the second's, in a session of its own, its output appended to its log."""
    from fxfuzz.campaign.supervisor import ParallelCampaign, run_parallel
    from fxfuzz.core.identity import identify
    from fxfuzz.core.settings import CampaignSettings

    (tmp_path / "surroundings.py").write_text(REPORTS_SURROUNDINGS)
    pass_ = identify(f"{tmp_path / 'surroundings.py'}:the_pass")
    settings = CampaignSettings(max_examples=1, budget_s=300, workers=1, db=None, identity=pass_)
    lines = []
    for name in ("first", "second"):
        here = tmp_path / name
        (here / "tmp").mkdir(parents=True)
        monkeypatch.chdir(here)
        monkeypatch.setenv("FXFUZZ_TEST_OUT", str(here / "out.json"))
        monkeypatch.setenv("TMPDIR", str(here / "tmp"))
        result = run_parallel(ParallelCampaign(settings, log_dir=str(tmp_path / "logs")))
        assert result.examples == 1 and not result.workers.errors, result
        seen = json.loads((here / "out.json").read_text())
        assert seen == {"session_leader": True, "cwd": str(here), "tmp": str(here / "tmp"), "blocked": []}, seen
        lines.append((tmp_path / "logs" / "worker0.log").read_text().count("from the worker\n"))
    assert 0 < lines[0] and lines[1] == 2 * lines[0], lines  # one example each: the same calls


def test_workers_forked_from_two_threads_at_once_leave_the_environment_as_it_was(monkeypatch):
    """The gate starts its corpus worker and the others from two threads. Each start sets
    PYTHONSAFEPATH for the forkserver's own start and puts back what it found: overlapping,
    the second would find the first's value and leave it behind for every later child
    process of this one (a ``python -c`` that can no longer import from its directory)."""
    import multiprocessing
    import threading

    from fxfuzz.campaign import supervisor

    class SlowStart:  # stands in for the forkserver's Process: the start takes a while
        def __init__(self, **kwargs):
            pass

        def start(self):
            time.sleep(0.3)

    monkeypatch.setattr(type(multiprocessing.get_context("forkserver")), "Process", SlowStart)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    threads = [threading.Thread(target=supervisor._fork, args=(None, "start.json", None)) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert "PYTHONSAFEPATH" not in os.environ


@pytest.mark.processes
def test_an_error_outside_the_pass_is_said_with_its_log_and_is_no_finding(tmp_path):
    """A worker dying of an exception raised outside the pass (generation, the engine, a check's
    InternalError) says so before it dies: the user is told it was fxfuzz's own error and where
    its traceback is, never a finding, and the slot is not restarted into the same error."""
    from fxfuzz.campaign.protocol import Task
    from fxfuzz.campaign.supervisor import ParallelCampaign, run_parallel
    from fxfuzz.core.identity import identify
    from fxfuzz.core.settings import CampaignSettings

    campaign = ParallelCampaign(
        CampaignSettings(workers=1, max_examples=2, budget_s=120, identity=identify("identity")),
        Task(strategy="broken_passes:raising_cases"),
        log_dir=str(tmp_path),
    )
    result = run_parallel(campaign)
    assert not result.buckets and result.stopped_by == "internal_error"
    (error,) = result.workers.internal_errors
    log = tmp_path / "worker0.log"
    assert "raised ValueError: planted in generation" in error and f"its traceback is in {log}" in error, error
    assert "ValueError: planted in generation" in log.read_text()


@pytest.mark.parametrize(
    "argv, warms",
    [
        (["run", "--max-examples", "1"], True),
        (["gate", "--candidate", "set_grad"], True),
        (["run", "--level", "program"], True),
        (["run", "--coverage"], False),  # fresh interpreters: coverage starts before torch
        (["repro", "x.json"], True),  # its replay child forks from it
        (["mutate", "--list"], False),
    ],
)
def test_the_cli_starts_the_warm_interpreter_before_the_command_imports_torch(monkeypatch, argv, warms):
    """So the forkserver's imports run beside the command's own, not after them; only for
    commands that fork workers, or a replay child, from it."""
    import importlib

    cli_main = importlib.import_module("fxfuzz.cli.main")  # the module: fxfuzz.cli.main is also its function
    events: list[str] = []

    class Imports:  # stands in for importlib in fxfuzz.cli.main: the command's module
        @staticmethod
        def import_module(name):
            events.append("import")

            class Command:
                @staticmethod
                def command(args):
                    return 0

            return Command

    monkeypatch.setattr(cli_main.warm, "start", lambda: events.append("start") or False)
    monkeypatch.setattr(cli_main, "importlib", Imports)
    assert cli_main.main(argv) == 0
    assert events == (["start", "import"] if warms else ["import"])


def test_a_command_failing_before_its_workers_leaves_no_warm_interpreter_behind(monkeypatch, tmp_path):
    """The warm interpreter the CLI started for a run is ended when the run fails on bad input:
    else it would go on importing torch for seconds after fxfuzz said no. One it found running
    is left alone (this process's campaigns share it)."""
    from multiprocessing import forkserver

    from fxfuzz.cli.main import main

    server = forkserver.ForkServer()  # this test's own, with nothing to preload: quick to start
    monkeypatch.setattr(forkserver, "_forkserver", server)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--pass", "no_such_module_here:fn", "--no-db"]) == 2
    assert server._forkserver_pid is None  # stopped, and reaped
    server.ensure_running()
    pid = server._forkserver_pid
    try:
        assert main(["run", "--pass", "no_such_module_here:fn", "--no-db"]) == 2
        assert server._forkserver_pid == pid and os.waitpid(pid, os.WNOHANG) == (0, 0)
    finally:
        server._stop()


def _write_where(path):
    with open(path, "w") as out:
        json.dump({"cwd": os.getcwd(), "mark": os.environ.get("FXFUZZ_TEST_MARK")}, out)


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "fresh"])
def test_a_spawned_child_takes_the_callers_directory_and_environment(tmp_path, monkeypatch, forkserver):
    """``warm.spawn`` (repro's replay child, bench's workers) gives the child what the caller has
    now, whether it forks from the warm interpreter or, where there is none, starts afresh."""
    from fxfuzz.campaign import warm

    monkeypatch.setattr(warm, "AVAILABLE", forkserver and warm.AVAILABLE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FXFUZZ_TEST_MARK", "here")
    child = warm.spawn(_write_where, (str(tmp_path / "where.json"),), "fxfuzz-test")
    child.join(300)
    assert child.exitcode == 0
    assert json.loads((tmp_path / "where.json").read_text()) == {"cwd": str(tmp_path), "mark": "here"}
