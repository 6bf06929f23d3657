"""``fxfuzz repro``: replay a repro (.py or .json) in a child process, so a pass that kills
the process or hangs is still reported, and a .py runs nowhere else. Exit 1 while it fails,
0 once fixed, 2 if malformed, 70 where fxfuzz's own code failed checking it.

The child reports on a pipe of its own: ``loaded`` once the repro is read, then ``verdict N``
(or ``error MESSAGE``, or ``internal MESSAGE`` for an error of fxfuzz's own). Its exit status
is never the verdict: a repro file that exits when loaded must not read as fixed."""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile

from fxfuzz.campaign import warm
from fxfuzz.cli.setup import check_survives
from fxfuzz.core.deadline import load_within
from fxfuzz.core.errors import FxfuzzError, SerializeError, UntrustedError, UsageError
from fxfuzz.core.identity import PassIdentity, resolve_pass
from fxfuzz.core.internal import EXIT_INTERNAL, InternalError, internal_line
from fxfuzz.repro.files import (
    graph_repro_source,
    held_to,
    load_repro,
    read_json,
    recorded_pass,
    replayed,
    repro_stem,
    trusted_pass,
)
from fxfuzz.strategies.custom import register_ops


def command(args: argparse.Namespace) -> int:
    """Check the repro and its pass here (one-line errors, without running the file), then
    replay it in a child."""
    check_survives([], args.ops)
    register_ops(args.ops, "--op")  # before the case is read: its operators must exist
    path = replayed(args.path)  # a short program is replayed through its .json
    spec, device = load_within(
        args.example_timeout_s, recorded_pass, path
    )  # malformed or untrusted files fail here, in one line
    pass_spec = args.pass_spec or trusted_pass(spec, path)
    check_survives([("--pass" if args.pass_spec else f"{args.path}: pass", pass_spec)], [])
    _, identity = resolve_pass(pass_spec, args.contract)  # a bad spec fails here, in one line
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"{args.path} was found with --device cuda, and torch sees no CUDA device here")
    if args.full:
        return _run_full(path, identity, args)
    reports, code = _replay_in_child(path, pass_spec, args.contract, args.ops, args.example_timeout_s)
    if code == -signal.SIGINT:
        # Ctrl-C reaches the whole process group, and the child dies of it by default: that is
        # this command interrupted, not a finding, even where this process has not yet raised
        # its own KeyboardInterrupt (on a loaded machine the child's death was seen first).
        raise KeyboardInterrupt
    if reports and reports[-1].startswith("error "):
        raise SerializeError(reports[-1].removeprefix("error "))
    if reports and reports[-1].startswith("internal "):
        print(internal_line(reports[-1].removeprefix("internal ")), file=sys.stderr)
        return EXIT_INTERNAL
    if reports and reports[-1].startswith("verdict "):
        return int(reports[-1].removeprefix("verdict "))
    how = (
        f"did not return within {args.example_timeout_s:g}s" if code is None
        else f"was killed by {signal.Signals(-code).name}" if code < 0
        else f"exited with status {code}"
    )  # fmt: skip
    if "loaded" not in reports:
        raise SerializeError(f"{args.path} is not a working fxfuzz repro: the process loading it {how}")
    print(f"fxfuzz repro: FAIL the process running the pass {how}")
    return 1


def _run_full(path: str, identity: PassIdentity, args: argparse.Namespace) -> int:
    """``--full``: the complete standalone script (``graph_repro_source``) of the repro, written
    for its .json with the trusted pass and ``--contract`` (``identity``), run with this Python as
    ``python <bucket>.py`` would run it; its exit status. A full .py is run as written. The
    operators of a user's source the case names are imported by the script, so each must be
    one this run was given with ``--op``: a .json never makes fxfuzz import what it names."""
    if not path.endswith(".json"):
        if args.pass_spec or args.contract:
            raise UsageError(f"--full runs {path} as written; give its .json to run it against --pass or --contract")
        return subprocess.run([sys.executable, path], check=False).returncode
    from fxfuzz.core.op_sources import FXFUZZ_SOURCE  # noqa: PLC0415  (torch: imported once the replay is decided)

    doc = load_within(args.example_timeout_s, read_json, path)
    user = {s for s in doc["case"].get("custom_ops", {}).values() if s != FXFUZZ_SOURCE}
    if not user <= set(args.ops):
        raise UntrustedError(
            f"{path} names {', '.join(sorted(user))[:300]} for its operators: the full script imports them, "
            "so give each with --op"
        )
    # Judged as the replay judges: the pass's own contract unless --contract says otherwise.
    doc = {k: v for k, v in doc.items() if k != "contract"} | held_to(identity)
    with tempfile.TemporaryDirectory(prefix="fxfuzz-full-") as tmp:
        script = os.path.join(tmp, repro_stem(str(doc.get("bucket", "repro"))) + ".py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(graph_repro_source(doc))
        return subprocess.run([sys.executable, script], check=False).returncode


def _replay_in_child(
    path: str, pass_spec: str, contract: str | None, ops: list[str], timeout_s: float
) -> tuple[list[str], int | None]:
    """The child's reports and its exit status (None: killed, as it took more than ``timeout_s``
    to load the repro or, once loaded, to run the pass, which then counts as hung); the child
    loads the ``--op`` values ``ops`` first and holds the pass to ``contract`` (None: the pass's
    own, whatever the repro records). It is forked from the warm interpreter campaign workers
    fork from (``fxfuzz.campaign.warm``), so it imports nothing that interpreter has."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as reports:
        proc = warm.spawn(_child_main, (path, pass_spec, contract or "", warm.Fd(write_fd), ops), "fxfuzz-repro")
        os.close(write_fd)  # the child holds the only writer: EOF once it is gone
        try:
            # Loading the file and running the pass each have ``timeout_s``.
            ready = select.select([reports], [], [], timeout_s)[0]
            first = reports.readline() if ready else ""  # loaded, an error, or EOF: the child died loading the file
            proc.join(timeout_s if first == "loaded\n" else None if ready else 0)
            code = proc.exitcode  # None: still running, so timed out
        finally:
            if proc.exitcode is None:  # timed out, or this process was interrupted: the child goes too
                proc.kill()
                proc.join()
        return (first + reports.read()).splitlines(), code


def _child_main(path: str, pass_spec: str, contract: str, report: warm.Fd, ops: list[str]) -> None:
    """The replay child, where a Ctrl-C ends it quietly (the parent says so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(replay(path, pass_spec, contract, report.fd, ops))


def replay(path: str, pass_spec: str, contract: str, report_fd: int, ops: list[str]) -> int:
    """Verify the repro's case against ``pass_spec`` held to ``contract`` (empty: the pass's
    own, whatever the repro records): 1 while it fails, 0 once fixed; each step reported on
    ``report_fd``. ``ops`` are the ``--op`` values, loaded first."""
    from fxfuzz.oracles import verify  # noqa: PLC0415  (torch, in the child only)
    from fxfuzz.oracles.downstream import stages_forced  # noqa: PLC0415

    with os.fdopen(report_fd, "w", buffering=1) as report:
        try:
            register_ops(ops, "--op")
            repro = load_repro(path)
            report.write("loaded\n")
            # The contract a repro records is its writer's word, not a verdict: it is judged
            # under the pass's own unless this command's --contract says otherwise.
            pass_fn, _ = resolve_pass(pass_spec, contract or None)
        except FxfuzzError as e:
            report.write(f"error {str(e).replace(chr(10), ' ')}\n")
            return 2
        if not contract and repro.contract not in (None, pass_fn.contract.name):
            print(
                f"fxfuzz repro: note: recorded under --contract {repro.contract}; judged under {pass_fn.contract.name}, "
                f"the pass's own (give --contract {repro.contract} to judge as recorded)"
            )
        try:
            # Every check, the export stages a campaign runs on a share of cases included: a
            # minimized case need not hash into the share its finding was made in.
            with stages_forced():
                findings = verify(repro.case, pass_fn, device=repro.device)
        except InternalError as e:  # fxfuzz's own bug: no verdict on the pass
            print(e.details, end="", file=sys.stderr)
            report.write(f"internal {str(e).replace(chr(10), ' ')}\n")
            return EXIT_INTERNAL
        print(f"fxfuzz repro: recorded finding: {repro.finding.get('message', '')}")
        for f in findings:
            print(f"fxfuzz repro: FAIL {f}")
        if not findings:
            print("fxfuzz repro: every check passes (fixed)")
        status = 1 if findings else 0
        report.write(f"verdict {status}\n")
    return status
