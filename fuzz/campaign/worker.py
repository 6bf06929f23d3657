"""One worker process of a parallel campaign: forked from a warm interpreter (``forked_main``),
or, where that cannot be, a fresh one (``python -m fxfuzz.campaign.worker FD START``); see
``fxfuzz.campaign.supervisor``.

It reads its ``WorkerStart`` from the file ``START`` (and deletes it; see
``fxfuzz.campaign.protocol``), runs ``run_campaign`` on its share (or ``run_examples`` on a
named list, from where its predecessor died) and reports to the supervisor over the pipe
``FD``: each example, serialized, *before* the pass runs on it, then buckets and counts as they
change. A worker that replaces one that died on a generated example first runs that example
again; a ``Stop`` from the supervisor ends it. It ends itself when the supervisor dies.
Coverage, when asked for, starts before torch is imported, so the pass's module-level lines
count as covered (``fxfuzz`` and ``fxfuzz.campaign`` import nothing heavy).
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from fxfuzz.campaign.protocol import (
    Blaming,
    BucketFound,
    Counts,
    Done,
    ExampleName,
    Finished,
    Minimized,
    Note,
    Raised,
    Started,
    Task,
    WorkerMessage,
    WorkerStart,
)
from fxfuzz.core.cwd import import_from_cwd
from fxfuzz.core.internal import first_line

if TYPE_CHECKING:  # the store imports torch: a worker imports it only once coverage runs
    from fxfuzz.campaign.store import ExampleForm


def _factory(spec: str) -> Any:
    """The callable (or value) a ``pkg.module:name`` spec of the task names."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def example_form(task: Task) -> ExampleForm:
    """The ``ExampleForm`` of the examples ``task`` judges: the one it names, else graph cases'."""
    from fxfuzz.campaign.store import GRAPH_FORM

    return _factory(task.form) if task.form else GRAPH_FORM


def example_check(start: WorkerStart, blame: Callable[[bool], None]) -> Any:
    """The ExampleCheck this worker judges examples with: the task's factory's, which tells ``blame``
    whether the pass under test is running, or verify's under the settings."""
    if start.task.check is None:
        from fxfuzz.campaign.engine import verify_with

        return verify_with(start.settings)
    return _factory(start.task.check)(blame=blame, settings=start.settings, **start.task.check_args)


class _Reporter:
    """The worker's side of the pipe: each example sent, serialized, before it runs, counts
    after it, buckets as they change (each serialized by the engine, ``engine.sample``)."""

    def __init__(self, conn: Connection, judge: Any, cov: Any, form: Any) -> None:
        self.conn, self.judge, self.cov, self.form = conn, judge, cov, form
        self.cov_saved = time.monotonic()

    def send(self, message: WorkerMessage) -> None:
        self.conn.send(message)

    def check(self, case: Any, fn: Any) -> list:
        self.send(Started(self.form.to_data(case)))
        findings = self.judge(case, fn)
        self.send(Done())
        return findings

    def counts(self, result: Any) -> None:
        self.send(Counts(result.examples, {bid: b.count for bid, b in result.buckets.items()}, dict(result.stats)))

    def progress(self, result: Any, elapsed: float) -> None:
        self.counts(result)  # every example, so a worker that dies next loses no count
        now = time.monotonic()
        if self.cov is not None and now - self.cov_saved >= 5.0:
            self.cov_saved = now
            self.cov.save()  # a worker the pass kills later keeps the coverage gathered so far

    def on_bucket(self, b: Any) -> None:
        self.send(BucketFound(b.plain()))

    def on_minimized(self, b: Any) -> None:
        self.send(Minimized(b.id))

    def named(self, examples: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for name, case in examples:
            self.send(ExampleName(name))  # before Started: a death on it is reported by name
            yield name, case


# The modules worker_main imports (with those resolve_pass imports as it loads the pass), this
# one, and the modules of torch's that load only on first use and every worker's first example
# uses: the warm interpreter workers fork from imports them, and nothing else, once
# (tests/campaign/test_workers.py checks both).
PRELOAD = (
    __name__,
    "fxfuzz.campaign.database",
    "fxfuzz.campaign.engine",
    "fxfuzz.core.contract",
    "fxfuzz.core.identity",
    "fxfuzz.core.op_sources",
    "fxfuzz.core.passes",
    "fxfuzz.core.serialize",
    "fxfuzz.strategies.custom",
    "torch.export._trace",  # all of dynamo: export's checks and symbolic sizes need it
    "torch._decomp.decompositions_for_jvp",  # the forward-mode checks: 0.4 s of CPU in each worker
)


def worker_main(start: WorkerStart, conn: Connection, cov: Any) -> None:
    """Run one worker's share of the campaign, reporting to the parent over ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    from fxfuzz.campaign.database import open_database
    from fxfuzz.campaign.engine import Hooks, Subject, run_campaign, run_examples
    from fxfuzz.core.identity import resolve_pass
    from fxfuzz.core.op_sources import load_sources
    from fxfuzz.strategies.custom import register_first

    # Before the example to re-run is rebuilt: its operators then exist, defined by the spec.
    load_sources(start.op_sources)
    for specs in start.ops:
        register_first(specs)
    form = example_form(start.task)
    # The example the previous worker of this slot died on: run first, to see if it repeats.
    rerun = [form.from_data(start.rerun)] if start.rerun is not None else []
    # This process's one load of the pass, as the command resolved it (fxfuzz.core.identity).
    identity = start.settings.pass_identity()
    pass_fn, _ = resolve_pass(identity.spec, identity.given)
    report = _Reporter(conn, example_check(start, lambda on_pass: conn.send(Blaming(on_pass))), cov, form)
    hooks = Hooks(
        report.progress, conn.poll, report.on_bucket, report.on_minimized
    )  # any message from the parent means stop
    try:
        if start.task.examples:
            listed = _factory(start.task.examples)(**start.task.examples_args)[start.first :]
            result = run_examples(pass_fn, report.named(listed), report.check, hooks, form.codec)
        else:
            settings = dataclasses.replace(start.settings, budget_s=max(0.0, start.deadline - time.time()))
            db = open_database(settings.db, lambda text: report.send(Note(text))) if settings.db else None
            strategy = (
                _factory(start.task.strategy)(settings=start.settings, **start.task.strategy_args)
                if start.task.strategy
                else None
            )
            result = run_campaign(
                pass_fn,
                settings,
                database=db,
                hooks=hooks,
                subject=Subject(strategy, report.check, form.codec),
                rerun=rerun,
            )
    except Exception as e:
        # Said before dying of it, so that a restart the user sees is not taken for an outside
        # kill: fxfuzz's own error is kept apart from findings, never hidden.
        report.send(Raised(f"{type(e).__name__}: {first_line(e)}"))
        raise
    for text in result.notes:  # saved examples left out of the replay
        report.send(Note(text))
    if cov is not None:
        cov.stop()
        cov.save()
    report.counts(result)
    report.send(Finished(result.stopped_by))
    conn.close()


# prctl's option that has the kernel send a signal when the parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """End this process within a second or so of its parent ``parent``, even while a pass
    hangs: the supervisor, or the forkserver, which ends with the supervisor's process (see
    ``forked_main``). A worker lives in its own session, so nothing else would end it. On Linux the
    kernel kills it at once (``PR_SET_PDEATHSIG``); elsewhere, and should that fail, a watchdog
    thread sees the parent change."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)  # not sys.exit: that would end only this thread

    threading.Thread(target=watch, name="fxfuzz-parent-watchdog", daemon=True).start()


def run_worker(start: WorkerStart, conn: Connection, parent: int) -> None:
    """Live no longer than the process ``parent``, measure coverage if asked, run the worker."""
    die_with_parent(parent)
    import_from_cwd()
    cov = None
    if start.coverage_include:
        import coverage

        cov = coverage.Coverage(data_file=start.coverage_file, branch=True, include=start.coverage_include)
        cov.start()
    worker_main(start, conn, cov)


@dataclasses.dataclass(frozen=True)
class Surroundings:
    """What a child started by ``subprocess.Popen`` gets from its parent, and one forked from
    the warm interpreter must be given: its environment, directory and blocked signals, where
    a worker's output goes (None: nowhere)."""

    environ: dict[str, str]
    cwd: str
    sigmask: frozenset[int]
    log: str | None


def forked_main(start_file: str, conn: Connection, around: Surroundings) -> None:
    """A worker forked from the warm interpreter (``multiprocessing``'s forkserver), made what
    ``python -P -m fxfuzz.campaign.worker`` started as the supervisor does would be, then run."""
    parent = os.getppid()  # the forkserver
    os.setsid()  # as start_new_session: a Ctrl-C at the terminal reaches only the supervisor
    # The forkserver's "alive" pipe, which every process it forks holds: held by the
    # supervisor's process alone, the forkserver ends with it, and this worker with the
    # forkserver, its parent (die_with_parent).
    from multiprocessing import forkserver

    server = forkserver._forkserver
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    out = os.open(around.log or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    adopt(around, out, out)
    os.close(out)
    sys.argv = [__file__, str(conn.fileno()), start_file]  # what a pass sees in a fresh worker
    run_worker(WorkerStart.take(start_file), conn, parent)


def adopt(around: Surroundings, stdout: int, stderr: int) -> None:
    """Make this fork of the warm interpreter take ``around`` from the process that asked for
    it, and write its output to the descriptors ``stdout`` and ``stderr``."""
    signal.pthread_sigmask(signal.SIG_SETMASK, around.sigmask)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.environ.clear()
    os.environ.update(around.environ)
    tempfile.tempdir = None  # read again from this environment
    os.chdir(around.cwd)


if __name__ == "__main__":
    _start = WorkerStart.take(sys.argv[2])
    run_worker(_start, Connection(int(sys.argv[1])), _start.parent)
