"""Generation levels: ``graph`` (generated FX graphs), ``program`` (random nn.Modules through
the real torch.export pipeline) and ``mixed`` (both, each with a share of the time budget).

A program-level example costs tens of graph-level ones (an export and eager runs under
each grad mode), so ``mixed`` splits the *budget*, not the examples: a split by examples
would spend nearly all the time on programs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.engine import ExampleCheck
from fxfuzz.campaign.protocol import Task
from fxfuzz.campaign.results import Bucket, CampaignResult, StopReason
from fxfuzz.campaign.supervisor import ParallelCampaign, run_parallel
from fxfuzz.core.choices import LEVELS
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.known import at_level, for_level
from fxfuzz.core.program import Program
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles.differential import Blame
from fxfuzz.oracles.program import check_program
from fxfuzz.strategies import module_programs
from hypothesis import strategies as st

# The program level's share of a mixed campaign's budget.
PROGRAM_SHARE = 0.5


def program_strategy(settings: CampaignSettings) -> st.SearchStrategy[Program]:
    """The program level's examples (a ``Task.strategy`` factory)."""
    return module_programs()


def program_check(blame: Blame, settings: CampaignSettings) -> ExampleCheck:
    """The program level's check (a ``Task.check`` factory): export with the pass in place,
    under both grad modes (``fxfuzz.oracles.program.check_program``)."""
    return functools.partial(check_program, share=settings.program_share)


def level_task(level: str) -> Task:
    """What a worker of one level (``graph`` or ``program``) draws and judges."""
    if level == "graph":
        return Task()
    if level == "program":
        return Task(
            check=f"{__name__}:program_check",
            strategy=f"{__name__}:program_strategy",
            form="fxfuzz.campaign.store:PROGRAM_FORM",
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


def merge_results(results: list[tuple[str, CampaignResult]], identity: PassIdentity | None = None) -> CampaignResult:
    """One CampaignResult of the pass ``identity`` from the per-level ones (buckets, notes,
    timelines end to end and workers' accounts together), with per-level counts in ``stats``: ``level:<name>:examples``, ``level:<name>:duration_ms`` and
    ``level:<name>:examples_per_s``."""
    merged = CampaignResult(identity=identity)
    for level, r in results:
        merged.timeline += [(round(t + merged.duration_s, 2), n + merged.examples) for t, n in r.timeline]
        merged.examples += r.examples
        merged.duration_s += r.duration_s
        merged.stats.update(r.stats)
        for note in r.notes:
            merged.note(note)
        merged.workers.add(r.workers)
        merged.stats[f"level:{level}:examples"] += r.examples
        merged.stats[f"level:{level}:duration_ms"] += round(r.duration_s * 1000)
        merged.buckets.merge({b.id: b for b in (_rekeyed(level, b) for b in r.buckets.values())})
    add_level_rates(merged.stats)
    # No level at all: run_levels was stopped before the first one.
    ends = [r.stopped_by for _, r in results] or [StopReason.STOPPED]
    merged.stopped_by = next((e for e in (StopReason.STOPPED, StopReason.BUDGET) if e in ends), ends[-1])
    return merged


@dataclass
class LevelsRun:
    """A campaign of one or more levels: the merged result (``merge_results``) and each level's
    own, by level."""

    result: CampaignResult
    levels: list[tuple[str, CampaignResult]]


def run_levels(
    settings: CampaignSettings,
    *,
    log_dir: str | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> LevelsRun:
    """Run the campaign of the settings' pass (``identity``) at ``settings.level`` in worker processes, as the graph
    level's (``fxfuzz.campaign.supervisor``: the pass never runs in this process, each example
    under ``settings.example_timeout_s``, a death judged and reported); ``mixed`` runs the graph
    level, then the program level, each for its share of the budget (time one level leaves
    unused passes to the next). ``settings.max_examples`` caps each level; once ``stop()`` turns
    true no further level starts. Known buckets are not shrunk, as in ``run_campaign``."""
    results: list[tuple[str, CampaignResult]] = []
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
        result = run_parallel(ParallelCampaign(level_settings, task, log_dir=log_dir), shown, stop)
        spent += result.duration_s
        results.append((name, result))
    return LevelsRun(merge_results(results, settings.identity), results)


def _progress_after(
    progress: Callable[[int, int, float], None],
    before: tuple[int, int, float],
    examples: int,
    buckets: int,
    elapsed: float,
) -> None:
    # A later level's counts and time start at zero: shown after the earlier levels'.
    progress(before[0] + examples, before[1] + buckets, before[2] + elapsed)
