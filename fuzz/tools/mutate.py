"""``fxfuzz mutate``: the harness's strength, measured as the share of mutants of the pass's
source that the gate kills (candidate: the mutant; baseline: the real pass).

A mutant is killed when the gate finds a regression (a crash counts: the real pass does not
crash on these cases) or when it hangs past its budget; it survives when the budget runs out
with no regression. Mutants listed in ``equivalent_mutants.txt`` were judged equivalent by
reading them (one line each: the id, then why no input can tell them apart) and are not run.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from fxfuzz.campaign.gate import StopGate, run_gate
from fxfuzz.campaign.results import Bucket
from fxfuzz.core.deadline import Overdue, alarm
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.tools.mutants import Mutant, load_pass_variant

EQUIVALENT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "equivalent_mutants.txt")


@dataclass
class MutantResult:
    id: str
    status: str  # killed | survived | equivalent
    time_s: float
    how: str  # the regression that killed it, "hang", or the reason it is equivalent
    description: str


# One application of a mutant taking this long is a hang (an endless loop, typically): torch's
# pass needs well under a second on any case the gate judges.
PASS_HANG_S = 10.0


def load_equivalent(path: str = EQUIVALENT_FILE) -> dict[str, str]:
    """Mutant id -> the one-line reason it was judged equivalent."""
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                mid, _, reason = line.partition(" ")
                out[mid] = reason.strip()
    return out


def run_mutant(
    mutant: Mutant,
    corpus: list,
    budget_s: float,
    seed_: int = 0,
    domain: str = "both",
    stop: Callable[[], bool] | None = None,
    pass_name: str = "set_grad",
    contract: str | None = None,
) -> MutantResult:
    """Gate one mutant of the registered pass ``pass_name`` against the real pass until the
    first regression or ``budget_s``, with fresh cases of ``domain``; ``stop()`` turning true
    ends the gate early (the mutant then reads as survived: the caller drops it)."""
    baseline, _ = resolve_pass(pass_name, contract)
    mutated = load_pass_variant(pass_name, mutant)
    kills: list[str] = []

    def candidate(gm: Any, sig: Any) -> tuple[Any, Any]:
        with alarm(PASS_HANG_S):
            return mutated(gm, sig)

    # Judged by the contract the real pass is held to: a wrapper alone would read as a pass
    # fxfuzz does not know (meaning), which no leftover toggle breaks.
    candidate.fxfuzz_contract = baseline.contract  # type: ignore[attr-defined]

    def killed(bucket: Bucket) -> None:
        kills.append(str(bucket.finding))
        raise StopGate

    start = time.monotonic()
    try:
        settings = CampaignSettings(budget_s=budget_s, seed=seed_, domain=domain)
        run_gate(candidate, baseline, corpus, settings, on_regression=killed, stop=stop)
    except StopGate:
        return MutantResult(mutant.id, "killed", time.monotonic() - start, kills[0], mutant.description)
    except Overdue:
        return MutantResult(mutant.id, "killed", time.monotonic() - start, "hang", mutant.description)
    return MutantResult(mutant.id, "survived", time.monotonic() - start, "", mutant.description)


def summarize(results: list[MutantResult]) -> dict[str, object]:
    """Counts, kill rate over the non-equivalent mutants, and the distribution of kill times
    (median, 90th percentile, max; each mutant's own is in its result)."""
    by = {s: [r for r in results if r.status == s] for s in ("killed", "survived", "equivalent")}
    judged = len(by["killed"]) + len(by["survived"])
    times = sorted(r.time_s for r in by["killed"])
    return {
        "mutants": len(results),
        **{s: len(v) for s, v in by.items()},
        "kill_rate": round(len(by["killed"]) / judged, 4) if judged else None,
        "kill_time_median_s": round(times[len(times) // 2], 2) if times else None,
        # Nearest rank: the kill time nine mutants in ten (of those killed) stay within.
        "kill_time_p90_s": round(times[math.ceil(0.9 * len(times)) - 1], 2) if times else None,
        "kill_time_max_s": round(times[-1], 2) if times else None,
        "survivors": [r.id for r in by["survived"]],
    }


def write_results(path: str, results: list[MutantResult], budget_s: float, domain: str) -> None:
    """The mutation report (JSON), replaced atomically so a stopped run leaves a whole file."""
    import torch

    data = {
        "torch_version": torch.__version__,
        "budget_per_mutant_s": budget_s,
        "domain": domain,
        "summary": summarize(results),
        "mutants": [asdict(r) for r in results],
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)
