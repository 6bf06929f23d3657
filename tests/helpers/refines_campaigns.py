"""A short in-process campaign held to ``refines``, for the tests that show a generic pass broken
on purpose is found within so many examples while the real one draws nothing."""

from __future__ import annotations

import os

from fxfuzz.campaign.engine import Hooks, run_campaign
from fxfuzz.core.contract import REFINES
from fxfuzz.core.passes import load_pass
from fxfuzz.core.settings import CampaignSettings
from paths import HELPERS

MUTANTS = os.path.join(HELPERS, "mutant_passes.py")


def examples_to_find(
    spec: str, kinds: set[str], max_examples: int, seed: int, domain: str = "export"
) -> tuple[int, set[str]]:
    """Examples run before ``spec`` drew a finding of ``kinds`` in an in-process campaign held
    to refines on ``domain`` (0: none), and every bucket it drew."""
    found = []
    result = run_campaign(
        load_pass(spec, REFINES),
        CampaignSettings(budget_s=300, max_examples=max_examples, seed=seed, max_shrink_s=0, domain=domain),
        hooks=Hooks(stop=lambda: bool(found), on_bucket=lambda b: found.append(b) if b.finding.kind in kinds else None),
    )
    return (result.examples if found else 0), set(result.buckets)
