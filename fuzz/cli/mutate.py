"""``fxfuzz mutate``: run every mutant (or ``--only``), print one line each and a summary.
Exit 1 when a non-equivalent mutant survives, 0 when all were killed (128 + the signal when
a signal stopped it early with none surviving)."""

from __future__ import annotations

import argparse
import json
import os
import signal

from fxfuzz.cli.interrupt import StopSignals, verdict_status
from fxfuzz.cli.setup import check_survives, writable_dir
from fxfuzz.core.errors import UsageError
from fxfuzz.core.passes import REGISTRY, default_domain, load_pass
from fxfuzz.strategies.corpus import gate_corpus
from fxfuzz.strategies.custom import register_ops
from fxfuzz.tools.mutants import enumerate_mutants
from fxfuzz.tools.mutate import MutantResult, load_equivalent, run_mutant, summarize, write_results


def command(a: argparse.Namespace) -> int:
    """Mutants one by one, each judged by a gate against the real pass."""
    mutable = [name for name, row in REGISTRY.items() if any(s.mutate for s in row.sources)]
    if a.pass_spec not in mutable:
        raise UsageError(
            f"mutate knows the source of the registered passes {', '.join(mutable)} only, not {a.pass_spec!r}"
        )
    if a.out:  # written after every mutant: a bad path must fail now, not an hour in
        if os.path.isdir(a.out):
            raise UsageError(f"--out: {a.out} is a directory; give the path of the JSON file to write")
        writable_dir(os.path.dirname(a.out) or ".", "--out")
    check_survives([], a.ops)  # the pass is a registered one: none of the user's code
    register_ops(a.ops, "--op")  # the gates run in this process
    mutants = enumerate_mutants(a.pass_spec)
    if a.list:
        for m in mutants:
            print(f"{m.id}\t{m.description}")
        return 0
    if a.only:
        wanted = a.only.split(",")
        unknown = sorted(set(wanted) - {m.id for m in mutants})
        if unknown:
            raise UsageError(f"--only: no mutant {unknown[0]!r} (see fxfuzz mutate --list)")
        mutants = [m for m in mutants if m.id in wanted]
    equivalent = load_equivalent()
    domain = a.domain or default_domain(load_pass(a.pass_spec), "both")
    results = []
    with StopSignals() as stop:
        corpus = gate_corpus()
        for i, m in enumerate(mutants, 1):
            if stop():
                break
            if m.id in equivalent:
                r = MutantResult(m.id, "equivalent", 0.0, equivalent[m.id], m.description)
            else:
                r = run_mutant(
                    m, corpus, a.budget_per_mutant, domain=domain, stop=stop, pass_name=a.pass_spec, contract=a.contract
                )
            if r.status == "survived" and stop():  # its gate was cut short: no verdict
                break
            results.append(r)
            print(
                f"[{i}/{len(mutants)}] {r.status:10s} {r.time_s:6.1f}s {r.id}  ({r.description}) {r.how[:100]}",
                flush=True,
            )
            if a.out:
                write_results(a.out, results, a.budget_per_mutant, domain)
    if stop.signum is not None:
        print(
            f"fxfuzz mutate: stopped early by {signal.Signals(stop.signum).name} after {len(results)} of {len(mutants)} mutants"
        )
    summary = summarize(results)
    print(f"fxfuzz mutate: {json.dumps(summary)}")
    return verdict_status(bool(summary["survived"]), stop.signum)
