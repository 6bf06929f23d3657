"""How long a campaign runs: a time budget, a number of examples, or both (first one wins)."""

from __future__ import annotations

from fxfuzz.core.settings import DEFAULT_BUDGET_S, NO_EXAMPLE_LIMIT, NO_TIME_LIMIT_S

__all__ = ["DEFAULT_BUDGET_S", "NO_EXAMPLE_LIMIT", "NO_TIME_LIMIT_S", "campaign_limits"]


def campaign_limits(budget_s: float | None, max_examples: int | None) -> tuple[float, int]:
    """(seconds, examples) from ``--budget`` and ``--max-examples``: ``--max-examples`` alone
    means that many examples however long they take; neither means 60 seconds."""
    if budget_s is None:
        budget_s = NO_TIME_LIMIT_S if max_examples else DEFAULT_BUDGET_S
    return budget_s, max_examples or NO_EXAMPLE_LIMIT
