"""``fxfuzz reduce``: reduce a user's failing graph (an ExportedProgram saved with
``torch.export.save``, or a repro ``.json``) while the same finding holds, and write its repro
as a campaign does. Exit 1 when a finding was reduced and written, 0 when the graph shows
none, 2 on bad input."""

from __future__ import annotations

import argparse
import time

from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.pt2 import load_exported
from fxfuzz.repro.files import load_repro
from fxfuzz.repro.reduce import reduce_finding, settings_for
from fxfuzz.strategies.custom import register_ops


def command(args: argparse.Namespace) -> int:
    register_ops(args.ops, "--op")  # before the case is read: its operators must exist
    pass_fn, identity = resolve_pass(args.pass_spec, args.contract)  # a bad spec fails here, in one line
    if args.path.endswith(".json"):
        case = load_repro(args.path).case
    elif args.path.endswith((".pt2", ".pt", ".zip")):
        case = load_exported(args.path)
    else:
        raise UsageError(
            f"{args.path}: expected an ExportedProgram saved with torch.export.save (.pt2) or a repro .json"
        )
    deadline = time.monotonic() + args.max_shrink_s if args.max_shrink_s > 0 else None
    reduced = reduce_finding(
        case,
        pass_fn,
        settings_for(identity, args.device),
        args.out,
        args.bucket,
        args.max_steps,
        deadline,
    )
    if reduced is None:
        print(f"fxfuzz reduce: {args.pass_spec} passes every check on {args.path}: nothing to reduce")
        return 0
    r = reduced.reduction
    print(f"fxfuzz reduce: {reduced.finding}")
    print(
        f"fxfuzz reduce: {reduced.nodes_before} compute nodes -> {r.case.compute_nodes()} "
        f"({r.judged} candidates judged, {r.accepted} kept, ended at {'a fixed point' if r.stopped_by == 'fixed point' else 'its limit'})"
    )
    print(f"fxfuzz reduce: repro {reduced.path} (and its .json); replay it with fxfuzz repro")
    return 1
