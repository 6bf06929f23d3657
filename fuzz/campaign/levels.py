"""Generation levels: ``graph`` (generated FX graphs), ``program`` (random nn.Modules through
the real torch.export pipeline) and ``mixed`` (both, each with a share of the time budget).

A program-level example costs tens of graph-level ones (an export and eager runs under
each grad mode), so ``mixed`` splits the *budget*, not the examples: a split by examples
would spend nearly all the time on programs.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.engine import Bucket, CampaignResult, Check, Codec, ExampleForm, StopReason
from fxfuzz.campaign.protocol import Task
from fxfuzz.campaign.supervisor import ParallelCampaign, ParallelResult, run_parallel, to_campaign_result
from fxfuzz.campaign.worker import example_form
from fxfuzz.core.choices import LEVELS
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.known import at_level, for_level
from fxfuzz.core.program import _TYPES, PROGRAM_OPS, SIZE_OPS, Program, from_data, module_source, to_data
from fxfuzz.core.serialize import MAX_ELEMENTS, check_json_bounds, json_data
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles.differential import Blame
from fxfuzz.oracles.program import check_program
from fxfuzz.strategies import module_programs
from fxfuzz.strategies.programs import UPDATE_METHODS
from hypothesis import strategies as st

# The program level's share of a mixed campaign's budget.
PROGRAM_SHARE = 0.5


def _program_dumps(program: Any) -> bytes:
    return json.dumps(to_data(program)).encode()


# A program is rendered to Python source and run, so a saved one is checked field by field
# first: every string pasted into the source is a name of the program (a local, ``self.<name>``)
# or a number, never one of Python's builtins or the source's own globals; the choices below
# come from their tables; sizes are bounded. Nothing else can reach the source.
_PROGRAM_NAME = re.compile(r"(?:self\.)?(?!__)[A-Za-z_][A-Za-z0-9_]{0,63}|-?[0-9]{1,6}(?:\.[0-9]{1,6})?")
_RESERVED_NAMES = frozenset(dir(builtins)) | {"torch", "nn", "_t", "self", "n"}
_PROGRAM_CHOICES: dict[str, frozenset[Any]] = {
    "op": frozenset(PROGRAM_OPS) | frozenset(SIZE_OPS),
    "ctx": frozenset({"no_grad", "enable_grad", "set_grad_enabled"}),
    "decorator": frozenset({None, "no_grad", "enable_grad"}),
    "kind": frozenset({"param", "buffer", "const"}),
    "method": frozenset(UPDATE_METHODS),
    "type": frozenset(_TYPES),
}
_OUTPUT_KINDS = {"var": 2, "none": 1, "const": 2, "dict": 2}
_MAX_DIM = 4096


def _program_name(v: Any) -> None:
    if not isinstance(v, str) or not _PROGRAM_NAME.fullmatch(v) or v.removeprefix("self.") in _RESERVED_NAMES:
        raise UntrustedError(
            f"a saved program holds {str(v)[:80]!r} where a name of the program belongs (a local or self.<name>)"
        )


def _check_output(item: Any) -> None:
    if not isinstance(item, list) or not item or _OUTPUT_KINDS.get(item[0]) != len(item):
        raise SerializeError(f"a saved program's output {str(item)[:80]} is not (var|none|const|dict, ...)")
    if item[0] == "var":
        _program_name(item[1])
    elif item[0] == "const" and type(item[1]) is not int:
        raise SerializeError("a saved program's constant output is an integer")
    elif item[0] == "dict":
        for pair in item[1] if isinstance(item[1], list) else [None]:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and len(pair[0]) < 100):
                raise SerializeError("a saved program's dict output is a list of [key, name]")
            _program_name(pair[1])


def check_program_data(d: Any) -> None:
    """SerializeError unless ``d`` (``to_data`` of a Program, from a database) holds only what a
    generated program holds: see ``_PROGRAM_NAME`` and ``_PROGRAM_CHOICES``."""
    check_json_bounds(d)
    pending = [("", d)]
    while pending:
        key, v = pending.pop()
        if key in _PROGRAM_CHOICES:
            if not (v is None or isinstance(v, str)) or v not in _PROGRAM_CHOICES[key]:
                raise SerializeError(
                    f"a saved program's {key} {str(v)[:80]!r} is not one of {sorted(map(str, _PROGRAM_CHOICES[key]))}"
                )
        elif key == "outputs":
            for item in v if isinstance(v, list) else [None]:
                _check_output(item)
        elif key in ("features", "domain"):
            if not isinstance(v, (dict, str)):
                raise SerializeError(f"a saved program's {key} is malformed")
        elif isinstance(v, dict):
            pending.extend(v.items())
        elif isinstance(v, list):
            pending.extend((key, x) for x in v)
        elif isinstance(v, str):
            _program_name(v)
        elif type(v) is int and abs(v) > 2**31:
            raise SerializeError(f"a saved program's {key} {v} is out of bounds")
        elif v is not None and not isinstance(v, (bool, int)):
            raise SerializeError(f"a saved program's {key} holds a {type(v).__name__}")


def _program_loads(raw: bytes) -> Any:
    data = json_data(raw)
    try:
        check_program_data(data)
        program = from_data(data)
        if not isinstance(program, Program) or not all(type(n) is int and 1 <= n <= _MAX_DIM for n in program.shape):
            raise SerializeError("not a saved program (a Program with sizes of 1 to 4096)")
        largest = max([*program.shape[:1], program.dim_max or 0, *program.other_sizes()], default=1)
        if math.prod(program.shape[1:]) * largest > MAX_ELEMENTS or len(program.shape) > 8:
            raise SerializeError(f"a saved program's inputs exceed {MAX_ELEMENTS} elements")
        ast.parse(module_source(program))
    except SerializeError:
        raise
    except Exception as e:  # the data's shape made checking or rendering fail: malformed, one line
        raise SerializeError(f"malformed saved program: {type(e).__name__}: {str(e)[:200]}") from None
    return program


# How a program-level failure is kept in the example database, to replay first next time.
PROGRAMS = Codec(_program_dumps, _program_loads)


def _program_from_data(data: dict[str, Any]) -> Program:
    return _program_loads(json.dumps(data).encode())


# How a program crosses between a worker and the supervisor (checked as a saved one is).
PROGRAM_FORM = ExampleForm(to_data, _program_from_data, lambda data: from_data(data).compute_nodes(), PROGRAMS)


def program_strategy(settings: CampaignSettings) -> st.SearchStrategy[Program]:
    """The program level's examples (a ``Task.strategy`` factory)."""
    return module_programs()


def program_check(blame: Blame, settings: CampaignSettings) -> Check:
    """The program level's check (a ``Task.check`` factory): export with the pass in place,
    under both grad modes (``fxfuzz.oracles.program.check_program``)."""
    return functools.partial(check_program, share=settings.program_share)


def level_task(level: str) -> Task:
    """What a worker of one level (``graph`` or ``program``) draws and judges."""
    if level == "graph":
        return Task()
    if level == "program":
        return Task(
            check=f"{__name__}:program_check", strategy=f"{__name__}:program_strategy", form=f"{__name__}:PROGRAM_FORM"
        )
    raise ValueError(f"unknown level {level!r}; expected graph or program")


def budget_plan(level: str, budget_s: float) -> list[tuple[str, float]]:
    """(level, seconds) for each level a campaign of ``level`` runs, in order."""
    if level == "mixed":
        return [("graph", budget_s * (1 - PROGRAM_SHARE)), ("program", budget_s * PROGRAM_SHARE)]
    if level in LEVELS:
        return [(level, budget_s)]
    raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")


def _rekeyed(level: str, bucket: Bucket) -> Bucket:
    # A program-level bucket's example is a Program, not a graph: its own id keeps it apart
    # from the graph-level bucket of the same oracle and kind.
    return dataclasses.replace(bucket, id=at_level(level, bucket.id))


def add_level_rates(stats: MutableMapping[str, Any]) -> None:
    """Set each level's ``level:<name>:examples_per_s`` from its ``examples`` and
    ``duration_ms`` counters: a rate is derived, never summed."""
    for key in [k for k in stats if k.startswith("level:") and k.endswith(":duration_ms")]:
        prefix, ms = key.removesuffix(":duration_ms"), stats[key]
        stats[f"{prefix}:examples_per_s"] = round(stats[f"{prefix}:examples"] * 1000 / ms, 2) if ms else 0


def merge_results(results: list[tuple[str, CampaignResult]]) -> CampaignResult:
    """One CampaignResult from the per-level ones, with per-level counts in ``stats``:
    ``level:<name>:examples``, ``level:<name>:duration_ms`` and ``level:<name>:examples_per_s``."""
    merged = CampaignResult()
    for level, r in results:
        merged.examples += r.examples
        merged.duration_s += r.duration_s
        merged.stats.update(r.stats)
        merged.notes.extend(r.notes)
        merged.stats[f"level:{level}:examples"] += r.examples
        merged.stats[f"level:{level}:duration_ms"] += round(r.duration_s * 1000)
        for b in r.buckets.values():
            b = _rekeyed(level, b)
            if b.id in merged.buckets:
                merged.buckets[b.id].count += b.count
            else:
                merged.buckets[b.id] = b
    add_level_rates(merged.stats)
    # No level at all: run_levels was stopped before the first one.
    ends = [r.stopped_by for _, r in results] or [StopReason.STOPPED]
    merged.stopped_by = next((e for e in (StopReason.STOPPED, StopReason.BUDGET) if e in ends), ends[-1])
    return merged


@dataclass
class LevelsRun:
    """A campaign of one or more levels: the merged result (``merge_results``) and each level's
    workers' own account, by level (restarts, deaths, errors, notes)."""

    result: CampaignResult
    workers: list[tuple[str, ParallelResult]]


def run_levels(
    pass_spec: str,
    settings: CampaignSettings,
    *,
    log_dir: str | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> LevelsRun:
    """Run the campaign of ``pass_spec`` at ``settings.level`` in worker processes, as the graph
    level's (``fxfuzz.campaign.supervisor``: the pass never runs in this process, each example
    under ``settings.example_timeout_s``, a death judged and reported); ``mixed`` runs the graph
    level, then the program level, each for its share of the budget (time one level leaves
    unused passes to the next). ``settings.max_examples`` caps each level; once ``stop()`` turns
    true no further level starts. Known buckets are not shrunk, as in ``run_campaign``."""
    results: list[tuple[str, CampaignResult]] = []
    workers: list[tuple[str, ParallelResult]] = []
    planned = spent = 0.0
    for name, share in budget_plan(settings.level, settings.budget_s):
        if stop is not None and stop():
            break
        planned += share
        level_settings = dataclasses.replace(
            settings,
            level=name,
            budget_s=max(planned - spent, 0.001),
            # Keeps each level's saved examples apart in the database.
            domain=settings.domain if name == "graph" else f"{settings.domain}:{name}",
            known=for_level(settings.known, name),
        )
        task = level_task(name)
        before = (sum(r.examples for _, r in results), sum(len(r.buckets) for _, r in results), spent)
        shown = None if progress is None else functools.partial(_progress_after, progress, before)
        parallel = run_parallel(ParallelCampaign(pass_spec, level_settings, task, log_dir=log_dir), shown, stop)
        spent += parallel.duration_s
        results.append((name, to_campaign_result(parallel, example_form(task))))
        workers.append((name, parallel))
    return LevelsRun(merge_results(results), workers)


def _progress_after(
    progress: Callable[[int, int, float], None],
    before: tuple[int, int, float],
    examples: int,
    buckets: int,
    elapsed: float,
) -> None:
    # A later level's counts and time start at zero: shown after the earlier levels'.
    progress(before[0] + examples, before[1] + buckets, before[2] + elapsed)
