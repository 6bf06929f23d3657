"""The ``fxfuzz`` command line: the only layer that prints to the terminal or exits.

Exit status: 0 nothing new found, 1 new findings (or regressions, or surviving mutants),
2 bad input (one line on stderr), 3 a campaign that did not test what it was asked to, 4 a
report folder that could not be written in full, 70 an internal error of fxfuzz (its traceback,
then one line), 128 + the signal for a run stopped early with nothing found. Each sub-command's
module is imported
only when it runs, so ``fxfuzz --help`` imports no torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from fxfuzz.campaign import warm
from fxfuzz.cli.args import device, fraction, integer, positive_float, positive_int, seconds_or_zero, shard, workers
from fxfuzz.cli.interrupt import Abandoned, exit_status
from fxfuzz.core.choices import (
    CONTRACT_NAMES,
    DEFAULT_DB,
    DOMAIN_CHOICES,
    LEVELS,
    OP_HELP,
    PASS_SPEC_HELP,
    contract_help,
    domain_help,
    pass_shape_help,
)
from fxfuzz.core.cwd import import_from_cwd
from fxfuzz.core.errors import FxfuzzError, UsageError
from fxfuzz.core.internal import EXIT_INTERNAL, InternalError, internal_line
from fxfuzz.core.settings import CampaignSettings

# Every campaign option's default: an option whose dest is a field of CampaignSettings reaches it
# by that name (CampaignSettings.from_options).
_DEFAULTS = CampaignSettings()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _op_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--op",
        dest="ops",
        action="append",
        default=[],
        metavar="SPEC",
        help=OP_HELP,
    )


def _contract_option(parser: argparse.ArgumentParser, whose: str = "the pass") -> None:
    parser.add_argument(
        "--contract",
        choices=CONTRACT_NAMES,
        default=None,  # the pass's own
        help=contract_help(whose),
    )


def _pass_shape_option(parser: argparse.ArgumentParser, whose: str = "the pass") -> None:
    parser.add_argument("--pass-shape", default=None, metavar="SHAPE", help=pass_shape_help(whose))


def _timeout_option(parser: argparse.ArgumentParser, hung: str) -> None:
    parser.add_argument(
        "--example-timeout",
        dest="example_timeout_s",
        type=positive_float,
        default=_DEFAULTS.example_timeout_s,
        help=f"seconds before {hung} (default {_DEFAULTS.example_timeout_s:g})",
    )


def _stage_share_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--stage-share",
        type=fraction,
        default=_DEFAULTS.stage_share,
        help=f"share of {what} also taken through torch.export's stages (module, decompositions, save/load, "
        f"unflatten; default {_DEFAULTS.stage_share}; 0 for none)",
    )


def _shrink_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-shrink-s",
        type=seconds_or_zero,
        default=_DEFAULTS.max_shrink_s,
        metavar="SECONDS",
        help=f"seconds minimizing each new bucket before its smallest example so far is kept, and as many again "
        f"reducing its graph (docs/repro.md); 0 keeps each bucket's first example (default {_DEFAULTS.max_shrink_s:g})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``fxfuzz`` argument parser: one sub-command per job, usage errors as one line and exit 2."""
    parser = _Parser(prog="fxfuzz", description="Fuzz PyTorch FX graph passes against semantic oracles.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a fuzz campaign against a pass")
    run.add_argument("--pass", dest="pass_spec", default="set_grad", help=PASS_SPEC_HELP)
    _pass_shape_option(run)
    run.add_argument(
        "--budget",
        type=positive_float,
        default=None,
        help="seconds to fuzz (default 60; none with --max-examples alone)",
    )
    run.add_argument("--max-examples", type=positive_int, default=None, help="stop after this many examples")
    run.add_argument("--seed", type=integer, default=_DEFAULTS.seed, help="campaign seed (same seed, same graphs)")
    run.add_argument(
        "--domain",
        choices=DOMAIN_CHOICES,
        default=None,
        help=domain_help("input space to draw from", "the registered pass's own, else export"),
    )
    run.add_argument("--report-dir", default=None, help="where to write the report (default: reports/<UTC time>/)")
    run.add_argument(
        "--level",
        choices=LEVELS,
        default=_DEFAULTS.level,
        help="generate graphs, nn.Module programs through torch.export, or both (mixed: half the budget each)",
    )
    run.add_argument(
        "--workers",
        type=workers,
        default=None,
        help="worker processes, or 'auto' for one per CPU (default auto; 1 at --level program|mixed)",
    )
    run.add_argument(
        "--shard",
        type=shard,
        default=_DEFAULTS.shard,
        metavar="K/N",
        help="run shard K of N: seeds no other shard draws (default 1/1)",
    )
    _timeout_option(run, "a pass counts as hung")
    run.add_argument(
        "--db",
        action="append",
        default=None,
        help=f"example database: a directory (default {DEFAULT_DB}), redis://host:port/db or github:OWNER/REPO (read only); repeat to share",
    )
    run.add_argument("--no-db", action="store_true", help="do not read or save examples between campaigns")
    run.add_argument(
        "--db-shared",
        default=None,
        metavar="OWNER/REPO",
        help="same as --db github:OWNER/REPO: replay the fxfuzz-db artifact CI publishes there",
    )
    run.add_argument(
        "--known",
        action="append",
        default=[],
        help="baseline of known finding buckets (text or JSON; see README); repeatable",
    )
    run.add_argument(
        "--device",
        type=device,
        default=_DEFAULTS.device,
        help="cpu, or cuda: also check on CUDA and CPU-vs-CUDA parity (default cpu)",
    )
    _stage_share_option(run, "examples")
    run.add_argument(
        "--program-share",
        type=fraction,
        default=_DEFAULTS.program_share,
        help=f"--level program|mixed: share of programs also checked after run_decompositions and save/load and at other sizes; default {_DEFAULTS.program_share}",
    )
    run.add_argument(
        "--coverage", action="store_true", help="measure line/branch coverage of the pass's source (slower)"
    )
    _shrink_option(run)
    _op_option(run)
    _contract_option(run)
    repro = sub.add_parser("repro", help="replay a repro (.py or .json): exit 1 while it fails, 0 once fixed")
    repro.add_argument("path", help="repros/<bucket>.py or .json from a report folder")
    repro.add_argument(
        "--pass", dest="pass_spec", default=None, help="replay against this pass instead of the recorded one"
    )
    repro.add_argument(
        "--full",
        action="store_true",
        help="run the complete standalone script of the repro (written for its .json, then run with this Python)",
    )
    _pass_shape_option(repro, "the pass --pass names")
    _timeout_option(repro, "the pass counts as hung")
    _op_option(repro)
    _contract_option(repro)
    reduce = sub.add_parser(
        "reduce", help="reduce your failing graph (a torch.export.save file or a repro .json) to a small repro"
    )
    reduce.add_argument("path", help="an ExportedProgram saved with torch.export.save (.pt2), or a repro .json")
    reduce.add_argument("--pass", dest="pass_spec", required=True, help="registered name, pkg.module:fn or file.py:fn")
    _pass_shape_option(reduce)
    reduce.add_argument(
        "--bucket", default=None, help="the finding to keep, by bucket id (default: the first the graph shows)"
    )
    reduce.add_argument("--out", default=".", help="folder to write repros/<bucket>.py and .json into (default .)")
    reduce.add_argument(
        "--max-steps", type=positive_int, default=None, help="candidates judged at most (default: no limit)"
    )
    reduce.add_argument(
        "--max-shrink-s",
        type=seconds_or_zero,
        default=600.0,
        metavar="SECONDS",
        help="seconds reducing at most; 0 for no limit (default 600)",
    )
    reduce.add_argument(
        "--device", type=device, default=_DEFAULTS.device, help="cpu, or cuda: judge on CUDA too (default cpu)"
    )
    _op_option(reduce)
    _contract_option(reduce)
    bench = sub.add_parser("bench", help="measure the pass, the harness loop per example and the worker speed-up")
    bench.add_argument("--json", action="store_true", help="end with one line of JSON holding every figure")
    bench.add_argument("--graphs", type=positive_int, default=200, help="cases in the seeded population (default 200)")
    bench.add_argument("--seed", type=integer, default=0, help="population seed (default 0)")
    bench.add_argument("--workers", type=workers, default=2, help="workers for the speed-up over one (default 2)")
    bench.add_argument("--pass", dest="pass_spec", default="set_grad", help=PASS_SPEC_HELP)
    _pass_shape_option(bench)
    _stage_share_option(bench, "examples")
    bench.add_argument(
        "--profile", action="store_true", help="also profile the loop (a second run) for its own time by area"
    )
    _op_option(bench)
    _contract_option(bench)
    gate = sub.add_parser("gate", help="fail when a candidate pass regresses against a baseline pass")
    gate.add_argument(
        "--candidate", required=True, help="the changed pass: registered name, pkg.module:fn or file.py:fn"
    )
    gate.add_argument("--baseline", default="set_grad", help="the pass it must not regress against (default set_grad)")
    _pass_shape_option(gate, "the candidate, and the baseline where it is pkg.module:fn or file.py:fn")
    limit = gate.add_mutually_exclusive_group()
    limit.add_argument(
        "--budget", type=positive_float, default=None, help="seconds in all, corpus included (default 60)"
    )
    limit.add_argument("--max-examples", type=positive_int, default=None, help="fresh cases (besides the corpus)")
    gate.add_argument(
        "--workers",
        type=workers,
        default=1,
        help="worker processes, or 'auto' (default 1: the corpus, then fresh cases; with more, one judges the corpus while the others draw fresh cases)",
    )
    _timeout_option(gate, "a case counts as hung, a crash regression")
    gate.add_argument("--seed", type=integer, default=_DEFAULTS.seed, help="seed of the fresh cases")
    gate.add_argument(
        "--domain",
        choices=DOMAIN_CHOICES,
        default=None,
        help=domain_help(
            "input space of the fresh cases",
            "both, the baseline's survival deciding what counts; aten for an aten-domain baseline",
        ),
    )
    gate.add_argument("--corpus", default=None, help="folder of saved .json cases/repros to replay first")
    gate.add_argument(
        "--known",
        action="append",
        default=[],
        help="baseline of bucket ids that are not regressions (text or JSON); repeatable",
    )
    _stage_share_option(gate, "cases")
    gate.add_argument("--report-dir", default=None, help="where to write the report (default: reports/<UTC time>/)")
    _shrink_option(gate)
    _op_option(gate)
    _contract_option(gate, "both the candidate and the baseline")
    mutate = sub.add_parser("mutate", help="measure the gate's kill rate on mutants of a pass's source")
    mutate.add_argument("--pass", dest="pass_spec", default="set_grad", help="registered pass whose source to mutate")
    mutate.add_argument("--budget-per-mutant", type=positive_float, default=60.0, help="gate seconds per mutant")
    mutate.add_argument(
        "--domain",
        choices=DOMAIN_CHOICES,
        default=None,
        help=domain_help("input space of the gate's fresh cases", "both; aten for an aten-domain pass"),
    )
    mutate.add_argument("--only", default=None, help="comma-separated mutant ids (default: all)")
    mutate.add_argument("--list", action="store_true", help="list the mutant ids and exit")
    mutate.add_argument("--out", default=None, help="write the mutation report (JSON) here")
    _op_option(mutate)
    _contract_option(mutate, "the mutants and the real pass")
    merge = sub.add_parser("merge", help="merge the report folders of a campaign's shards into one report")
    merge.add_argument("folders", nargs="+", metavar="DIR", help="report folders written by fxfuzz run")
    merge.add_argument(
        "--report-dir", default=None, help="where to write the merged report (default: reports/<UTC time>/)"
    )
    passes = sub.add_parser("passes", help="list the registered passes with their contract, domain and sources")
    passes.add_argument("--json", action="store_true", help="print them as a JSON list")
    return parser


# sub-command -> module of fxfuzz.cli whose ``command(args)`` runs it
COMMANDS = {
    "run": "run",
    "repro": "repro",
    "reduce": "reduce",
    "gate": "gate",
    "mutate": "mutate",
    "bench": "bench",
    "merge": "merge",
    "passes": "passes",
}
# Sub-commands that fork workers, or a replay child, from the warm interpreter, by their
# arguments (a coverage run starts fresh interpreters). It
# is started before the command's module imports torch, so that the two import at once: about
# 4 s less before the first example on 2 cores (docs/benchmark.md).
FORKS = {"run": lambda a: not a.coverage, "gate": lambda a: True, "repro": lambda a: True}


def _shaped(args: argparse.Namespace) -> None:
    """The specs ``--pass-shape`` applies to, with the shape carried in them: so it reaches
    workers, reports and repros. Gate's baseline takes it where it is an import spec (the
    candidate's earlier version); a registered one is called as its row says."""
    from fxfuzz.core.passes import shapeable, with_shape

    if args.command == "gate":
        args.candidate = with_shape(args.candidate, args.pass_shape)
        if shapeable(args.baseline):
            args.baseline = with_shape(args.baseline, args.pass_shape)
        return
    if args.pass_spec is None:  # repro without --pass: the recorded pass keeps its recorded shape
        raise UsageError("--pass-shape says how to call the pass --pass names: give --pass too")
    args.pass_spec = with_shape(args.pass_spec, args.pass_shape)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``fxfuzz``: run the sub-command; bad input is one line on stderr and exit 2."""
    import_from_cwd()
    try:
        args = build_parser().parse_args(argv)
        warmed = warm.AVAILABLE and FORKS.get(args.command, lambda a: False)(args) and warm.start()
        try:
            module = importlib.import_module(f"fxfuzz.cli.{COMMANDS[args.command]}")
            if getattr(args, "pass_shape", None) is not None:
                _shaped(args)
            return module.command(args)
        except BaseException:
            if warmed:  # no worker forked from it, or none left: nothing stays behind importing torch
                warm.stop()
            raise
    except FxfuzzError as e:
        print(f"fxfuzz: error: {e}", file=sys.stderr)
        return 2
    except InternalError as e:
        print(e.details, end="", file=sys.stderr)
        print(internal_line(str(e)), file=sys.stderr)
        return EXIT_INTERNAL
    except Abandoned as e:
        print(f"fxfuzz: stopped by a second {signal.Signals(e.signum).name}: no report written", file=sys.stderr)
        return exit_status(e.signum)
    except KeyboardInterrupt:  # Ctrl-C before the run started (or in a command that runs no campaign)
        print("fxfuzz: interrupted", file=sys.stderr)
        return exit_status(signal.SIGINT)
    except BrokenPipeError:  # the reader of stdout left (``fxfuzz passes | head``): exit as SIGPIPE would
        # Python flushes stdout again at exit, which would fail on the closed pipe once more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exit_status(signal.SIGPIPE)
