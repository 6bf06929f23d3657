"""Parallel campaigns: one fresh interpreter per worker (``fxfuzz.campaign.worker``),
supervised by this process.

Each worker runs ``run_campaign`` with its own seed and reports over a pipe: it sends each
example, serialized, *before* running the pass on it, so when the process dies (segfault,
abort) or the pass never returns, the parent still holds the case responsible. A death is
blamed on the pass only if it repeats: the replacement worker runs that example first, and
only if it dies on it too is the case recorded as a ``crash`` finding; a death it does not
repeat (an outside kill: the OOM killer, ``kill -9``) counts as a restart. An example that
runs past its time limit is judged the same way, so one slow only on a loaded machine is
not a hang. Buckets and counts
stream to the parent as they change, so stopping or losing a worker loses nothing found.
Examples are judged by ``fxfuzz.oracles.verify``, or by the check a factory named in the task
builds in each worker (``fxfuzz gate`` judges a candidate against a baseline). Such a check
may tell the parent that the pass under test is not what is running (the gate's baseline is):
a death then is counted apart, not blamed on the pass. Instead of generated examples, one
worker may judge a named list once each, in order (the gate's corpus); a replacement worker
goes on after the example its predecessor died on.

Each worker would otherwise import torch and fxfuzz afresh, seconds of CPU: workers are forked
from a warm interpreter (``fxfuzz.campaign.warm``), which has imported the worker's modules and
run nothing else, so no torch thread pool or op state is forked. ``forked_main`` makes each
fork what a fresh ``python -P -m fxfuzz.campaign.worker`` process of the supervisor would be:
its own session, the supervisor's environment, directory and signal mask, output to its log,
the current directory last on ``sys.path``, exit statuses read the same (the forkserver passes
them on). A campaign that measures coverage starts fresh interpreters instead
(``subprocess.Popen``): coverage must start before torch is imported, so the pass's
module-level lines count as covered, and a warm interpreter has imported them.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any

from fxfuzz.campaign import warm, worker
from fxfuzz.campaign.database import open_database
from fxfuzz.campaign.engine import bucket_id
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
    Stop,
    Task,
    WorkerMessage,
    WorkerStart,
)
from fxfuzz.campaign.results import Bucket, CampaignResult, Sample, Size, StopReason
from fxfuzz.campaign.store import Codec, ExampleForm, SavedFailures
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.op_sources import named_sources
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.strategies.custom import op_specs


@dataclass(frozen=True)
class ParallelCampaign:
    """A campaign in worker processes: the settings (the pass's ``identity``, which each worker
    loads the pass from; ``workers`` of them, ``example_timeout_s`` each example, ``db`` their
    database), what each worker judges, where their logs go (``worker{first_log + index}.log``),
    and the source files whose coverage they measure (empty: none)."""

    settings: CampaignSettings
    task: Task = Task()
    log_dir: str | None = None
    coverage_include: tuple[str, ...] = ()
    # The gate runs its corpus worker (slot 0) beside the others: theirs start at 1.
    first_log: int = 0

    def __post_init__(self) -> None:
        self.settings.pass_identity()  # refused here, not in every worker


# ---------------------------------------------------------------------------- parent side


@dataclass
class _Death:
    """A worker's death on an example, which its replacement runs first to see if it repeats."""

    case: dict[str, Any]
    how: str  # "was killed by SIGKILL", "exited with status 3"


class WorkerState(enum.Enum):
    """Where a worker is, which decides what its exit means (``Supervisor._exited``)."""

    STARTING = "starting"  # no example begun: a death now is fxfuzz's or the environment's
    JUDGING = "judging"  # an example in flight: a death now is judged (a crash, or a re-run)
    BETWEEN = "between"  # between examples: a death now blames nothing, the slot restarts
    FAILED = "failed"  # said it is dying of fxfuzz's own error: its exit is no finding
    FINISHED = "finished"  # said its campaign ended: its exit is the end


@dataclass
class _Worker:
    index: int
    generation: int
    quota: int  # examples this worker slot may still run, over all its generations
    proc: subprocess.Popen | Forked
    conn: Connection
    started: float
    first: int = 0  # the index of its first listed example (Task.examples)
    state: WorkerState = WorkerState.STARTING
    examples: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    # The example in flight (JUDGING), serialized (None: it could not be), and since when.
    case: dict[str, Any] | None = None
    since: float = 0.0
    blamed: bool = True  # a death now is the pass's (see Task.check)
    source: str | None = None  # the name of the listed example being judged
    rerun: _Death | None = None  # the predecessor's death this worker runs the example of first
    stop_sent: bool = False


class Supervisor:
    """Starts, watches and restarts workers, and merges what they report into one
    ``CampaignResult``. With coverage on, ``coverage_files`` are the workers' data files, in
    the temporary folder ``coverage_dir``, which the caller removes."""

    def __init__(self, campaign: ParallelCampaign) -> None:
        self.campaign, self.settings = campaign, campaign.settings
        self.result = CampaignResult(identity=campaign.settings.identity)
        self.deadline = time.time() + self.settings.budget_s
        self.start = time.monotonic()
        self.workers: list[_Worker] = []
        self.closed: list[_Worker] = []  # workers whose counts are final
        self.stop_requested = False
        # Only with coverage on: an empty folder per campaign would pile up in the temp dir.
        self.coverage_dir = tempfile.mkdtemp(prefix="fxfuzz-cov-") if campaign.coverage_include else None
        self.coverage_files: list[str] = []
        self.form = worker.example_form(campaign.task)
        self.saved = _saved_failures(campaign, self.form.codec, self._note)
        # Every worker, restarts included, registers the user operators of this process's
        # op table before drawing; one it cannot rebuild is refused here, not left out.
        self.ops = op_specs()
        # Each worker's start, one file (0600) in this folder (0700), which only this user can
        # read; the worker deletes its file once read, ``run`` the folder at the end.
        self.start_dir = tempfile.mkdtemp(prefix="fxfuzz-workers-")

    # -- starting
    def _spawn(self, index: int, generation: int, quota: int, rerun: _Death | None = None, first: int = 0) -> _Worker:
        parent, child = Pipe()
        cov_file = None
        if self.coverage_dir:
            cov_file = os.path.join(self.coverage_dir, f".coverage.w{index}g{generation}")
            self.coverage_files.append(cov_file)
        settings = dataclasses.replace(
            self.settings,
            seed=worker_seed(self.settings.seed, self.settings.shard, index, generation),
            max_examples=quota,
            # Saved failures replay once, in the first worker: a replacement worker must not
            # replay the example that just killed its predecessor.
            replay_saved=self.settings.replay_saved and index == 0 and generation == 0,
        )
        start = WorkerStart(
            settings,
            self.campaign.task,
            self.ops,
            self.deadline,
            os.getpid(),
            first,
            # A listed example is run again by starting the list at it.
            rerun.case if rerun is not None and not self.campaign.task.examples else None,
            list(self.campaign.coverage_include),
            cov_file,
            named_sources(),
        )
        start_file = os.path.join(self.start_dir, f"w{index}g{generation}.json")
        start.write(start_file)
        log = None
        if self.campaign.log_dir:
            os.makedirs(self.campaign.log_dir, exist_ok=True)
            log = worker_log(self.campaign.log_dir, self.campaign.first_log + index)
        proc = (
            _popen(child, start_file, log) if self.coverage_dir or not warm.AVAILABLE else _fork(child, start_file, log)
        )
        child.close()
        return _Worker(index, generation, quota, proc, parent, time.monotonic(), first, rerun=rerun)

    # -- merging
    def _on_message(self, w: _Worker, message: WorkerMessage) -> None:
        match message:
            case Started(case):
                w.state, w.case, w.since, w.blamed = WorkerState.JUDGING, case, time.monotonic(), True
                if case is None:
                    self.result.workers.unserializable += 1
            case Blaming(on_pass):
                w.blamed = on_pass
            case ExampleName(name):
                w.source = name
            case Done():
                w.state, w.case = WorkerState.BETWEEN, None
                if w.rerun is not None:  # the example its predecessor died on ran through
                    self.result.workers.unrepeated_deaths.append(
                        f"worker {w.index} {w.rerun.how} on an example a fresh worker then ran without dying"
                    )
                    w.rerun = None
            case Counts(examples, counts, stats):
                w.examples, w.counts, w.stats = examples, counts, stats
            case BucketFound(bucket):
                # Not one more example: the counts come with Counts.
                self.result.buckets.add(dataclasses.replace(bucket, count=0))
            case Minimized(bid):
                self.result.minimized.add(bid)
            case Finished():
                w.state = WorkerState.FINISHED
            case Note(text):
                self._note(text)
            case Raised(text):
                log = (
                    worker_log(self.campaign.log_dir, self.campaign.first_log + w.index)
                    if self.campaign.log_dir
                    else None
                )
                where = f"; its traceback is in {log}" if log else ""
                error = f"worker {w.index} raised {text}{where}"
                if error not in self.result.workers.internal_errors:  # the same error on every example: said once
                    self.result.workers.internal_errors.append(error)
                if w.state is WorkerState.JUDGING:
                    w.examples += 1  # its example ran; fxfuzz, not the pass, failed on it: not run again
                w.state, w.since, w.rerun = WorkerState.FAILED, time.monotonic(), None

    def _note(self, text: str) -> None:
        self.result.note(text)

    def _exited(self, w: _Worker, code: int) -> None:
        """Judge a worker's exit: done, a death to re-run, a crash finding or a start-up failure."""
        how = _how_it_ended(code)
        if w.state is WorkerState.FINISHED:
            self._retire(w)
        elif w.state is WorkerState.FAILED:
            self._failed(w)
        elif w.state is WorkerState.STARTING:
            # Died before any example: fxfuzz's or the environment's fault, not the pass's.
            self.result.workers.errors.append(f"worker {w.index} exited with {code} before its first example")
            self._retire(w)
        elif w.state is WorkerState.BETWEEN:  # nothing the pass ran on to blame
            self.result.workers.unrepeated_deaths.append(f"worker {w.index} {how} between examples")
            self._retire(w)
            self._replace(w)
        else:
            self._settle_death(w, _death_finding(code), how)

    def _failed(self, w: _Worker) -> None:
        """A worker that died of fxfuzz's own error (``Raised``): blamed on nothing, and not
        replaced: a bug of fxfuzz's would only repeat, each restart costing a start, and the
        campaign ends with exit 70 whatever more its slot would draw (``INTERNAL_ERROR``)."""
        self._retire(w)

    def _settle_death(self, w: _Worker, finding: Finding, how: str) -> None:
        """A death during an example (an exit, or a kill past the example timeout): settled now,
        or judged by the replacement, which runs the example again first."""
        if not w.blamed or w.rerun is not None or w.case is None:
            # Settled now, with no re-run: the check said the pass under test was not running
            # (_died counts it, blames nothing), or the death repeated on the example its
            # predecessor died on, or that example could not be serialized to be run again.
            self._died(w, finding)
        else:
            # An example slow only on a loaded machine runs through in the replacement and is
            # counted as a restart, as an outside kill is, not as a hang.
            self._retire(w)
            self._replace(w, _Death(w.case, how))

    def _died(self, w: _Worker, finding: Finding) -> None:
        """Record the example a worker died on as a crash finding (unless its check said the
        pass was not running, when it is only counted), then replace the worker."""
        w.examples += 1  # the fatal example ran, too
        if not w.blamed:
            self.result.workers.excused_deaths += 1
        else:
            bid = self._record_crash(finding, w.case, w.source)
            w.counts = dict(w.counts)
            w.counts[bid] = w.counts.get(bid, 0) + 1
        w.rerun = None  # settled: it repeated, or it was not the pass's
        self._retire(w)
        self._replace(w)

    def _record_crash(self, f: Finding, case: dict[str, Any] | None, source: str | None) -> str:
        """Offer a crash and its example to the report and save the example (the next campaign
        replays it first); return its bucket id."""
        bid = bucket_id(f)
        example = _sample(self.form, case) if case is not None else None
        self.result.buckets.add(Bucket(bid, f, example, 0, source))
        if self.saved is not None and example is not None:
            self.saved.keep(bid, example.raw, example.size.nodes)
        return bid

    def _replace(self, w: _Worker, death: _Death | None = None) -> None:
        """Start the next generation of ``w``'s slot with what is left of its quota; one that
        runs a death's example again starts whatever the budget, so a death is always judged."""
        quota = w.quota - w.examples
        if death is not None or (quota > 0 and time.time() < self.deadline and not self.stop_requested):
            self.result.workers.restarts += 1
            self.workers.append(self._spawn(w.index, w.generation + 1, quota, death, w.first + w.examples))

    def _retire(self, w: _Worker) -> None:
        if w.rerun is not None:
            self.result.workers.errors.append(
                f"worker {w.index} {w.rerun.how} on an example its replacement ended before running again"
            )
        self.workers.remove(w)
        self.closed.append(w)
        w.conn.close()

    def _totals(self) -> tuple[int, Counter, Counter]:
        examples, counts, stats = 0, Counter[str](), Counter[str]()
        for w in self.workers + self.closed:
            examples += w.examples
            counts.update(w.counts)
            stats.update(w.stats)
        return examples, counts, stats

    # -- the loop
    def run(self, progress: Any = None, stop: Callable[[], bool] | None = None) -> CampaignResult:
        """Run the campaign to its limits, or until ``stop()`` turns true (the workers get 5 s to
        stop, then are killed; what they sent is kept)."""
        n = self.settings.workers
        for i in range(n):
            quota = self.settings.max_examples // n + (1 if i < self.settings.max_examples % n else 0)
            if quota:
                self.workers.append(self._spawn(i, 0, quota))
        last_sample = -1.0
        stop_sent_at: float | None = None
        try:
            while self.workers:
                self._poll(0.2)
                self.stop_requested = self.stop_requested or (stop is not None and stop())
                now = time.monotonic()
                self._check_health(now)
                if self.stop_requested:
                    stop_sent_at = now if stop_sent_at is None else stop_sent_at
                    for w in self.workers:
                        if not w.stop_sent:  # a worker started since is told too
                            self._send_stop(w)
                    for w in [w for w in self.workers if self._grace_over(w, now, stop_sent_at)]:
                        self._kill(w)  # did not stop in time: what it sent is kept
                        self._retire(w)
                if now - last_sample >= 1.0:
                    last_sample = now
                    self._sample(progress)
        finally:
            for w in list(self.workers):
                self._kill(w)
                self._retire(w)
            shutil.rmtree(self.start_dir, ignore_errors=True)  # the starts of workers that never read them
        self._sample(progress)
        r = self.result
        r.duration_s = time.monotonic() - self.start
        if self.stop_requested:
            r.stopped_by = StopReason.INTERRUPTED
        elif self._ended_slots(WorkerState.FAILED):
            r.stopped_by = StopReason.INTERNAL_ERROR
        elif self._ended_slots(WorkerState.STARTING):
            r.stopped_by = StopReason.WORKERS_LOST
        else:
            r.stopped_by = StopReason.EXAMPLES if r.examples >= self.settings.max_examples else StopReason.BUDGET
        return r

    def _ended_slots(self, state: WorkerState) -> list[int]:
        """Worker slots whose last process ended in ``state``: ``STARTING``, it died before its
        first example (a restart that cannot start is not restarted again); ``FAILED``, it died
        of fxfuzz's own error. Either way the campaign ran short of what was asked, whatever
        its counts say."""
        last: dict[int, _Worker] = {}
        for w in self.closed:
            if w.index not in last or w.generation > last[w.index].generation:
                last[w.index] = w
        return [i for i, w in last.items() if w.state is state]

    def _poll(self, timeout: float) -> None:
        conns = {w.conn: w for w in self.workers}
        for conn in wait(list(conns), timeout):
            w = conns[conn]  # type: ignore[index]
            try:
                while w.conn.poll():
                    self._on_message(w, w.conn.recv())
            except (EOFError, OSError):
                pass  # the worker is gone; _check_health decides what that means

    def _grace_over(self, w: _Worker, now: float, stop_sent_at: float) -> bool:
        """Whether a stopping worker has had its time: 5 s, and a worker running its
        predecessor's fatal example again also a start and that example's time limit."""
        if w.rerun is None:
            return now - stop_sent_at > 5.0
        return now - max(stop_sent_at, w.started) > 5.0 + self.settings.example_timeout_s

    def _check_health(self, now: float) -> None:
        for w in list(self.workers):
            code = w.proc.poll()
            if code is not None:
                self._poll_one(w)
                self._exited(w, code)
            elif (
                w.state in (WorkerState.JUDGING, WorkerState.FAILED) and now - w.since > self.settings.example_timeout_s
            ):
                self._kill(w)  # a failed worker that does not end (a thread the pass left) ends here
                if w.state is WorkerState.FAILED:
                    self._failed(w)
                else:
                    self._settle_death(
                        w, self._hang_finding(), f"did not return within {self.settings.example_timeout_s:g}s"
                    )

    def _hang_finding(self) -> Finding:
        return Finding(
            "crash",
            "hang",
            f"the pass did not return within {self.settings.example_timeout_s:g}s",
            {"exception": "Timeout", "frame": "<unknown>"},
        )

    def _poll_one(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                self._on_message(w, w.conn.recv())
        except (EOFError, OSError):
            pass

    def _send_stop(self, w: _Worker) -> None:
        w.stop_sent = True
        try:
            w.conn.send(Stop())
        except OSError:
            pass

    @staticmethod
    def _kill(w: _Worker) -> None:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()

    def _sample(self, progress: Any) -> None:
        examples, counts, stats = self._totals()
        r = self.result
        r.examples, r.stats = examples, stats
        r.buckets.recount(counts)
        elapsed = time.monotonic() - self.start
        r.timeline.append((round(elapsed, 2), examples))
        if progress is not None:
            progress(examples, len(r.buckets), elapsed)


def _popen(conn: Connection, start_file: str, log: str | None) -> subprocess.Popen:
    """A worker in a fresh interpreter."""
    with open(log, "a") if log is not None else open(os.devnull, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", worker.__name__, str(conn.fileno()), start_file],  # -P: see import_from_cwd
            pass_fds=[conn.fileno()],
            stdout=out,
            stderr=out,
            start_new_session=True,  # a Ctrl-C at the terminal reaches only the parent
        )


@dataclass
class Forked:
    """A worker forked by the forkserver, read as ``subprocess.Popen`` reads a child: its exit
    status (the forkserver's waitpid, negative for a signal), and a kill."""

    process: multiprocessing.process.BaseProcess

    def poll(self) -> int | None:
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()

    def wait(self) -> int | None:
        self.process.join()
        return self.process.exitcode


def _fork(conn: Connection, start_file: str, log: str | None) -> Forked:
    """A worker forked from the warm interpreter (``fxfuzz.campaign.warm``), started with it if
    it is not running yet."""
    with warm.starting() as (environ, mask):
        around = worker.Surroundings(environ, os.getcwd(), mask, log)
        process = warm.context().Process(
            target=worker.forked_main, args=(start_file, conn, around), name="fxfuzz-worker"
        )
        process.start()
    return Forked(process)


def worker_log(log_dir: str, index: int) -> str:
    """The log of worker slot ``index``, which each of its restarts appends to."""
    return os.path.join(log_dir, f"worker{index}.log")


def _saved_failures(campaign: ParallelCampaign, codec: Codec, on_lost: Callable[[str], None]) -> SavedFailures | None:
    """The store workers save minimized failures in (through ``codec``), for the examples that
    kill a worker."""
    settings = campaign.settings
    if settings.db is None:
        return None
    key = settings.pass_identity().database_key(settings.domain)
    return SavedFailures(open_database(settings.db, on_lost), key, codec)


def _sample(form: ExampleForm, data: dict[str, Any]) -> Sample:
    """An example a worker died on, sent serialized (``data``), as plain data: rebuilt here,
    the only example this process rebuilds, for what the report shows of it."""
    raw = json.dumps(data).encode()  # the bytes its form's codec writes: what the database keeps
    try:
        return Sample.of(form.from_data(data), raw, form.codec.level)
    except SerializeError:  # keep the finding and its data even if the example will not rebuild
        return Sample(Size.of(form.nodes(data), raw), None, None, None, form.codec.level, raw)


def worker_seed(seed: int, shard: tuple[int, int], index: int, generation: int) -> int:
    """The seed of one worker process: a different one for every shard, worker slot and
    restart of a campaign seed, so no two of them draw the same stream of examples, and
    the same one on every rerun of that campaign."""
    k, n = shard
    digest = hashlib.sha256(f"fxfuzz:{seed}:{k}/{n}:{index}:{generation}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _signal_name(code: int) -> str:
    """What ended a process, from its exit status: ``SIGSEGV`` or ``exit 3``."""
    if code >= 0:
        return f"exit {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _how_it_ended(code: int) -> str:
    return f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"


def _death_finding(code: int) -> Finding:
    return Finding(
        "crash",
        "process_died",
        f"the worker process {_how_it_ended(code)} while running the pass",
        {"exception": _signal_name(code), "frame": "<native>"},
    )


def run_parallel(
    campaign: ParallelCampaign, progress: Any = None, stop: Callable[[], bool] | None = None
) -> CampaignResult:
    """Run the campaign in ``settings.workers`` processes until its limits or ``stop()`` (the
    caller owns the signals: ``fxfuzz.cli`` turns SIGINT, SIGTERM and SIGHUP into ``stop``)."""
    return Supervisor(campaign).run(progress, stop)
