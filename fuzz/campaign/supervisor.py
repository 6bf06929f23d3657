"""Parallel campaigns: one fresh interpreter per worker (``fxfuzz.campaign.worker``),
supervised by this process.

Each worker runs ``run_campaign`` with its own seed and reports over a pipe: it sends each
example, serialized, *before* running the pass on it, so when the pass kills the process
(segfault, abort) or never returns, the parent still holds the case responsible and
records it as a ``crash`` finding, then starts a replacement worker. Buckets and counts
stream to the parent as they change, so stopping or losing a worker loses nothing found.
Examples are judged by ``fxfuzz.oracles.verify``, or by the check a factory named in the options
builds in each worker (``fxfuzz gate`` judges a candidate against a baseline). Such a check
may tell the parent that the pass under test is not what is running (the gate's baseline is):
a death then is counted apart, not blamed on the pass. Instead of generated examples, one
worker may judge a named list once each, in order (the gate's corpus); a replacement worker
goes on after the example its predecessor died on.

Workers are fresh interpreters (``python -m fxfuzz.campaign.worker``, the spawn model) rather than forks: torch
does not survive fork reliably, and a fresh process can start coverage before torch is
imported, so the pass's module-level lines count as covered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any

from fxfuzz.campaign.database import open_database
from fxfuzz.campaign.engine import GRAPH_CASES, Bucket, CampaignResult, SavedFailures, bucket_id, database_key
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_from_dict, count_compute_nodes
from fxfuzz.oracles import Finding


@dataclass
class CampaignOptions:
    """What the parent needs to run a (possibly parallel) campaign."""

    pass_spec: str = "set_grad"
    budget_s: float = 60.0
    max_examples: int = 1_000_000
    seed: int = 0
    domain: str = "export"
    workers: int = 1
    example_timeout_s: float = 60.0
    db_path: str | None = None
    db_shared: str | None = None  # OWNER/REPO whose fxfuzz-db artifact is read too
    device: str = "cpu"  # oracles.verify's device: cuda adds CUDA runs and CPU/CUDA parity
    coverage_include: list[str] = field(default_factory=list)  # source files to measure; empty: off
    log_dir: str | None = None
    known: frozenset[str] = frozenset()  # baseline buckets: counted, not shrunk
    # "pkg.module:factory" whose factory(blame=..., **check_args) returns the Check each worker
    # judges an example with (the gate's candidate-vs-baseline judgement); None: oracles.verify.
    check: str | None = None
    check_args: dict[str, Any] = field(default_factory=dict)
    # "pkg.module:factory" whose factory(**examples_args) returns named examples [(name, example)]
    # to judge once each, whole, instead of generated ones (the budget bounds only restarts);
    # meant for one worker, since each worker judges them all.
    examples: str | None = None
    examples_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class BucketRecord:
    """The parent's view of a bucket: its finding, smallest serialized case and counts."""

    id: str
    finding: dict[str, Any]
    case: dict[str, Any] | None
    nodes: int
    source: str | None = None  # the name of the listed example it came from


@dataclass
class ParallelResult:
    """What the supervisor gathered; ``to_campaign_result`` turns it into a CampaignResult."""

    examples: int = 0
    duration_s: float = 0.0
    buckets: dict[str, BucketRecord] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    stats: Counter = field(default_factory=Counter)
    stopped_by: str = "max_examples"
    timeline: list[tuple[float, int]] = field(default_factory=list)
    restarts: int = 0
    coverage_files: list[str] = field(default_factory=list)
    coverage_dir: str | None = None  # the temp folder of coverage_files; the caller removes it
    unserializable: int = 0
    worker_errors: list[str] = field(default_factory=list)
    unblamed_deaths: int = 0  # examples a worker died on while its check said the pass was not running


# ---------------------------------------------------------------------------- parent side


@dataclass
class _Worker:
    index: int
    generation: int
    quota: int  # examples this worker slot may still run, over all its generations
    proc: subprocess.Popen
    conn: Connection
    started: float
    first: int = 0  # the index of its first listed example (CampaignOptions.examples)
    examples: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    inflight: dict[str, Any] | None = None
    inflight_since: float | None = None
    blamed: bool = True  # a death now is the pass's (see CampaignOptions.check)
    source: str | None = None  # the name of the listed example being judged
    finished: str | None = None


class Supervisor:
    """Starts, watches and restarts workers, and merges what they report."""

    def __init__(self, opts: CampaignOptions) -> None:
        self.opts = opts
        self.result = ParallelResult()
        self.deadline = time.time() + opts.budget_s
        self.start = time.monotonic()
        self.workers: list[_Worker] = []
        self.closed: list[_Worker] = []  # workers whose counts are final
        self.stop_requested = False
        # Only with coverage on: an empty folder per campaign would pile up in the temp dir.
        self.cov_dir = tempfile.mkdtemp(prefix="fxfuzz-cov-") if opts.coverage_include else None
        self.result.coverage_dir = self.cov_dir
        self.logs: list[Any] = []
        self.saved = _saved_failures(opts)

    # -- starting
    def _spawn(self, index: int, generation: int, quota: int, first: int = 0) -> _Worker:
        parent, child = Pipe()
        cov_file = None
        if self.cov_dir:
            cov_file = os.path.join(self.cov_dir, f".coverage.w{index}g{generation}")
            self.result.coverage_files.append(cov_file)
        cfg = {
            "pass": self.opts.pass_spec,
            "domain": self.opts.domain,
            # Distinct seeds per worker and per restart, reproducible from the campaign seed.
            "seed": self.opts.seed * 1_009 + index * 101 + generation,
            "max_examples": quota,
            "deadline": self.deadline,
            "db": self.opts.db_path,
            "db_shared": self.opts.db_shared,
            "device": self.opts.device,
            "coverage_include": self.opts.coverage_include,
            "coverage_file": cov_file,
            # Saved failures replay once, in the first worker: a replacement worker must not
            # replay the example that just killed its predecessor.
            "replay_saved": index == 0 and generation == 0,
            "known": sorted(self.opts.known),
            "check": self.opts.check,
            "check_args": self.opts.check_args,
            "examples": self.opts.examples,
            "examples_args": self.opts.examples_args,
            "first": first,
        }
        log = subprocess.DEVNULL
        if self.opts.log_dir:
            os.makedirs(self.opts.log_dir, exist_ok=True)
            log = open(os.path.join(self.opts.log_dir, f"worker{index}.log"), "a")
            self.logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "fxfuzz.campaign.worker", str(child.fileno()), json.dumps(cfg)],
            pass_fds=[child.fileno()],
            stdout=log,
            stderr=log,
            start_new_session=True,  # a Ctrl-C at the terminal reaches only the parent
        )
        child.close()
        return _Worker(index, generation, quota, proc, parent, time.monotonic(), first)

    # -- merging
    def _on_message(self, w: _Worker, kind: str, data: Any) -> None:
        if kind == "start":
            w.inflight, w.inflight_since, w.blamed = data, time.monotonic(), True
            if data is None:
                self.result.unserializable += 1
        elif kind == "blame":
            w.blamed = data
        elif kind == "source":
            w.source = data
        elif kind == "done":
            w.inflight, w.inflight_since = None, None
        elif kind == "progress":
            w.examples, w.counts, w.stats = data["examples"], data["counts"], data["stats"]
        elif kind == "bucket":
            self._offer(data["id"], data["finding"], data["case"], data["nodes"], w.source)
        elif kind == "finished":
            w.finished = data

    def _offer(
        self, bid: str, finding: dict[str, Any], case: dict[str, Any] | None, nodes: int, source: str | None
    ) -> None:
        """Keep the smallest serialized example of each bucket, whichever worker found it."""
        old = self.result.buckets.get(bid)
        if old is None or (case is not None and (old.case is None or nodes < old.nodes)):
            self.result.buckets[bid] = BucketRecord(bid, finding, case, nodes, source)

    def _died(self, w: _Worker, finding: dict[str, Any]) -> None:
        """Record the example a worker died on as a crash finding (unless its check said the
        pass was not running, when it is only counted), then replace the worker."""
        w.examples += 1  # the fatal example ran, too
        case = w.inflight
        if not w.blamed:
            self.result.unblamed_deaths += 1
        else:
            f = Finding(**finding)
            bid = bucket_id(f)
            self._offer(bid, f.to_dict(), case, count_compute_nodes(case["graph"]) if case else 0, w.source)
            if self.saved is not None and case is not None:
                self.saved.keep(bid, json.dumps(case).encode())  # the next campaign replays it first
            w.counts = dict(w.counts)
            w.counts[bid] = w.counts.get(bid, 0) + 1
        self._retire(w)
        quota = w.quota - w.examples
        if quota > 0 and time.time() < self.deadline and not self.stop_requested:
            self.result.restarts += 1
            self.workers.append(self._spawn(w.index, w.generation + 1, quota, w.first + w.examples))

    def _retire(self, w: _Worker) -> None:
        self.workers.remove(w)
        self.closed.append(w)
        w.conn.close()

    def _totals(self) -> tuple[int, Counter, Counter]:
        examples, counts, stats = 0, Counter(), Counter()
        for w in self.workers + self.closed:
            examples += w.examples
            counts.update(w.counts)
            stats.update(w.stats)
        return examples, counts, stats

    # -- the loop
    def run(self, progress: Any = None) -> ParallelResult:
        n = self.opts.workers
        for i in range(n):
            quota = self.opts.max_examples // n + (1 if i < self.opts.max_examples % n else 0)
            if quota:
                self.workers.append(self._spawn(i, 0, quota))
        last_sample = -1.0
        stop_sent_at: float | None = None
        try:
            while self.workers:
                self._poll(0.2)
                now = time.monotonic()
                self._check_health(now)
                if self.stop_requested and stop_sent_at is None:
                    stop_sent_at = now
                    for w in self.workers:
                        self._send_stop(w)
                if stop_sent_at is not None and now - stop_sent_at > 5.0:
                    for w in list(self.workers):  # did not stop in time: what it sent is kept
                        self._kill(w)
                        self._retire(w)
                if now - last_sample >= 1.0:
                    last_sample = now
                    self._sample(progress)
        finally:
            for w in list(self.workers):
                self._kill(w)
                self._retire(w)
            for log in self.logs:
                log.close()
        self._sample(progress)
        r = self.result
        r.duration_s = time.monotonic() - self.start
        if self.stop_requested:
            r.stopped_by = "interrupted"
        else:
            r.stopped_by = "max_examples" if r.examples >= self.opts.max_examples else "budget"
        return r

    def _poll(self, timeout: float) -> None:
        conns = {w.conn: w for w in self.workers}
        for conn in wait(list(conns), timeout):
            w = conns[conn]  # type: ignore[index]
            try:
                while conn.poll():
                    self._on_message(w, *conn.recv())
            except (EOFError, OSError):
                pass  # the worker is gone; _check_health decides what that means

    def _check_health(self, now: float) -> None:
        for w in list(self.workers):
            code = w.proc.poll()
            if code is not None:
                self._poll_one(w)
                if w.inflight is not None:
                    self._died(w, _death_finding(code))
                else:
                    if w.finished is None:  # died outside any example: fxfuzz's fault, not the pass's
                        self.result.worker_errors.append(f"worker {w.index} exited with {code} between examples")
                    self._retire(w)
            elif w.inflight_since is not None and now - w.inflight_since > self.opts.example_timeout_s:
                self._kill(w)
                self._died(
                    w,
                    {
                        "oracle": "crash",
                        "kind": "hang",
                        "message": f"the pass did not return within {self.opts.example_timeout_s:g}s",
                        "details": {"exception": "Timeout", "frame": "<unknown>"},
                    },
                )

    def _poll_one(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                self._on_message(w, *w.conn.recv())
        except (EOFError, OSError):
            pass

    def _send_stop(self, w: _Worker) -> None:
        try:
            w.conn.send(("stop", None))
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
        r.examples, r.counts, r.stats = examples, counts, stats
        elapsed = time.monotonic() - self.start
        r.timeline.append((round(elapsed, 2), examples))
        if progress is not None:
            progress(examples, len(r.buckets), elapsed)

    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True


def _saved_failures(opts: CampaignOptions) -> Any:
    """The store workers save minimized failures in, for the examples that kill a worker."""
    if not opts.db_path:
        return None
    key = database_key(load_pass(opts.pass_spec), opts.domain)
    return SavedFailures(open_database(opts.db_path), key, GRAPH_CASES)


def _death_finding(code: int) -> dict[str, Any]:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"killed by {name}"
    else:
        name, how = f"exit {code}", f"exited with status {code}"
    return {
        "oracle": "crash",
        "kind": "process_died",
        "message": f"the worker process was {how} while running the pass",
        "details": {"exception": name, "frame": "<native>"},
    }


def run_parallel(opts: CampaignOptions, progress: Any = None) -> ParallelResult:
    """Run the campaign in ``opts.workers`` processes; SIGINT/SIGTERM stop it cleanly."""
    sup = Supervisor(opts)
    old = {s: signal.signal(s, sup.request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return sup.run(progress)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def to_campaign_result(r: ParallelResult) -> Any:
    """The merged run as a CampaignResult, each bucket's example deserialized."""
    buckets = {}
    for bid, rec in r.buckets.items():
        try:
            case = case_from_dict(rec.case) if rec.case is not None else None
        except SerializeError:  # keep the finding (and its data) even if the graph will not rebuild
            case = None
        buckets[bid] = Bucket(bid, Finding(**rec.finding), case, max(1, r.counts.get(bid, 0)), rec.case, rec.source)
    return CampaignResult(r.examples, r.duration_s, buckets, r.stats, r.stopped_by)
