"""One worker process of a parallel campaign (``python -m fxfuzz.campaign.worker FD CONFIG``).

It runs ``run_campaign`` on its share (or ``run_examples`` on a named list, from where its
predecessor died) and reports to the supervisor over the pipe ``FD``: each example,
serialized, *before* the pass runs on it, then buckets and counts as they change. A worker
that replaces one that died on a generated example first reads that example from the pipe
and runs it again; any later message from the supervisor means stop. It ends itself when the
supervisor dies. Coverage, when asked for, starts before torch is imported, so the pass's
module-level lines count as covered (``fxfuzz`` and ``fxfuzz.campaign`` import nothing
heavy).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from fxfuzz.core.cwd import import_from_cwd


def _serialize(case: Any) -> dict[str, Any] | None:
    from fxfuzz.core.serialize import case_to_dict

    try:
        return case_to_dict(case)
    except Exception:  # an example type the serializer does not know: fuzz on, unsaved
        return None


def _factory(spec: str) -> Any:
    """The callable a ``pkg.module:name`` spec of the options names."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def judgement(cfg: dict[str, Any], blame: Callable[[bool], None]) -> Any:
    """The Check this worker judges examples with: the configured factory's, which tells
    ``blame`` whether the pass under test is running, or verify's."""
    if cfg["check"] is None:
        from fxfuzz.oracles import verify

        return lambda case, fn: verify(case, fn, device=cfg["device"])
    return _factory(cfg["check"])(blame=blame, **cfg["check_args"])


def worker_main(cfg: dict[str, Any], fd: int, cov: Any) -> None:
    """Run one worker's share of the campaign, reporting to the parent over ``fd``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    from fxfuzz.campaign.database import DatabaseSpec, open_database
    from fxfuzz.campaign.engine import run_campaign, run_examples
    from fxfuzz.core.op_sources import load_sources
    from fxfuzz.core.passes import load_pass
    from fxfuzz.core.serialize import case_from_dict
    from fxfuzz.oracles.stages import set_stage_share
    from fxfuzz.strategies.custom import register_first

    # Before the example to re-run is read: its operators then exist, defined by the spec.
    load_sources(cfg["op_sources"])
    for specs in cfg["ops"]:
        register_first(specs)
    conn = Connection(fd)
    # The example the previous worker of this slot died on: run first, to see if it repeats.
    rerun = [case_from_dict(conn.recv()[1])] if cfg["rerun"] else []
    pass_fn = load_pass(cfg["pass"])
    set_stage_share(cfg["stage_share"])
    judge = judgement(cfg, lambda on_pass: conn.send(("blame", on_pass)))
    sent: dict[str, Any] = {"case": None, "data": None, "saved": time.monotonic()}

    def data_of(case: Any) -> dict[str, Any] | None:
        if sent["case"] is not case:  # the bucket hook asks for the case just run: reuse it
            sent["case"], sent["data"] = case, _serialize(case)
        return sent["data"]

    def check(case: Any, fn: Any) -> list:
        conn.send(("start", data_of(case)))
        findings = judge(case, fn)
        conn.send(("done", None))
        return findings

    def snapshot(result: Any) -> None:
        counts = {bid: b.count for bid, b in result.buckets.items()}
        conn.send(("progress", {"examples": result.examples, "stats": dict(result.stats), "counts": counts}))

    def progress(result: Any, elapsed: float) -> None:
        snapshot(result)  # every example, so a worker that dies next loses no count
        now = time.monotonic()
        if cov is not None and now - sent["saved"] >= 5.0:
            sent["saved"] = now
            cov.save()  # a worker the pass kills later keeps the coverage gathered so far

    def on_bucket(b: Any) -> None:
        data = data_of(b.case)
        conn.send(("bucket", {"id": b.id, "finding": b.finding.to_dict(), "case": data, "nodes": b.graph_nodes}))

    def note(text: str) -> None:
        conn.send(("note", text))

    def named(examples: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for name, case in examples:
            conn.send(("source", name))  # before "start": a death on it is reported by name
            yield name, case

    if cfg["examples"]:
        listed = _factory(cfg["examples"])(**cfg["examples_args"])[cfg["first"] :]
        result = run_examples(pass_fn, named(listed), check=check, progress=progress, stop=conn.poll, on_bucket=on_bucket)
    else:
        db = open_database(DatabaseSpec(cfg["db"]["local"], tuple(cfg["db"]["shared"])), note) if cfg["db"] else None
        result = run_campaign(
            pass_fn,
            budget_s=max(0.0, cfg["deadline"] - time.time()),
            max_examples=cfg["max_examples"],
            seed_=cfg["seed"],
            domain=cfg["domain"],
            database=db,
            progress=progress,
            check=check,
            stop=conn.poll,  # any message from the parent means stop
            on_bucket=on_bucket,
            replay_saved=cfg["replay_saved"],
            known=frozenset(cfg["known"]),
            rerun=rerun,
            max_shrink_s=cfg["max_shrink_s"],
        )
    for text in result.notes:  # saved examples left out of the replay
        note(text)
    if cov is not None:
        cov.stop()
        cov.save()
    snapshot(result)
    conn.send(("finished", result.stopped_by))
    conn.close()


# prctl's option that has the kernel send a signal when the parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """End this process within a second or so of the supervisor ``parent``, even while a pass
    hangs: a worker lives in its own session, so nothing else would end it. On Linux the
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


if __name__ == "__main__":
    _cfg = json.loads(sys.argv[2])
    die_with_parent(_cfg["parent"])
    import_from_cwd()
    _cov = None
    if _cfg["coverage_include"]:
        import coverage

        _cov = coverage.Coverage(data_file=_cfg["coverage_file"], branch=True, include=_cfg["coverage_include"])
        _cov.start()
    worker_main(_cfg, int(sys.argv[1]), _cov)
