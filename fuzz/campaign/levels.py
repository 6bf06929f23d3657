"""Generation levels: ``graph`` (generated FX graphs), ``program`` (random nn.Modules through
the real torch.export pipeline) and ``mixed`` (both, each with a share of the time budget).

A program-level example costs tens of graph-level ones (two exports and eager runs under
each grad mode), so ``mixed`` splits the *budget*, not the examples: a split by examples
would spend nearly all the time on programs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, MutableMapping
from typing import Any

from fxfuzz.campaign.engine import GRAPH_CASES, Bucket, CampaignResult, Check, Codec, Progress, run_campaign
from fxfuzz.core.choices import DEFAULT_MAX_SHRINK_S, LEVELS
from fxfuzz.core.known import at_level, for_level
from fxfuzz.core.passes import PassFn
from fxfuzz.core.program import from_data, to_data
from fxfuzz.oracles import verify
from fxfuzz.oracles.program import check_program
from fxfuzz.strategies import graph_cases, module_programs
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

# The program level's share of a mixed campaign's budget.
PROGRAM_SHARE = 0.5


def _program_dumps(program: Any) -> bytes:
    return json.dumps(to_data(program)).encode()


def _program_loads(raw: bytes) -> Any:
    return from_data(json.loads(raw))


# How a program-level failure is kept in the example database, to replay first next time.
PROGRAMS = Codec(_program_dumps, _program_loads)


def level_strategy(level: str, domain: str = "export") -> tuple[st.SearchStrategy[Any], Check, Codec]:
    """The strategy, the check and the database codec of one level (``graph`` or ``program``)."""
    if level == "graph":
        return graph_cases(domain=domain), verify, GRAPH_CASES
    if level == "program":
        return module_programs(), check_program, PROGRAMS
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
    ends = [r.stopped_by for _, r in results] or ["stopped"]
    merged.stopped_by = next((e for e in ("stopped", "budget") if e in ends), ends[-1])
    return merged


def run_levels(
    pass_fn: PassFn,
    level: str = "graph",
    *,
    budget_s: float = 60.0,
    max_examples: int = 1_000_000,
    seed_: int = 0,
    domain: str = "export",
    database: ExampleDatabase | None = None,
    progress: Progress | None = None,
    on_level: Callable[[str, CampaignResult], None] | None = None,
    stop: Callable[[], bool] | None = None,
    known: frozenset[str] = frozenset(),
    max_shrink_s: float = DEFAULT_MAX_SHRINK_S,
) -> CampaignResult:
    """Run ``pass_fn``'s campaign at ``level``; ``mixed`` runs the graph level, then the
    program level, each for its share of ``budget_s`` (time one level leaves unused passes
    to the next). ``max_examples`` caps each level; once ``stop()`` turns true no further
    example or level runs. Buckets in ``known`` are not shrunk, as in ``run_campaign``."""
    results: list[tuple[str, CampaignResult]] = []
    planned = spent = 0.0
    for name, share in budget_plan(level, budget_s):
        if stop is not None and stop():
            break
        planned += share
        strategy, check, codec = level_strategy(name, domain)
        r = run_campaign(
            pass_fn,
            budget_s=max(planned - spent, 0.001),
            max_examples=max_examples,
            seed_=seed_,
            # Keeps each level's saved examples apart in the database.
            domain=domain if name == "graph" else f"{domain}:{name}",
            database=database,
            progress=progress,
            strategy=strategy,
            check=check,
            codec=codec,
            stop=stop,
            known=for_level(known, name),
            max_shrink_s=max_shrink_s,
        )
        spent += r.duration_s
        results.append((name, r))
        if on_level:
            on_level(name, r)
    return merge_results(results)


