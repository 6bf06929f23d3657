"""The node kinds a pass declares (``fxfuzz_reacts_to``) reach generation whatever the pass's
shape: a ``gm -> gm`` or ``graph -> graph`` function, a PassBase, a PassManager and a pipeline
of them, and a campaign then finds a pass broken on those kinds and stays quiet on a right one."""

from __future__ import annotations

import os

import pytest
from fxfuzz import run_campaign
from fxfuzz.campaign.engine import Hooks
from fxfuzz.core.passes import generation_kinds, load_pass
from fxfuzz.core.settings import CampaignSettings
from paths import HELPERS

SHAPED = os.path.join(HELPERS, "shaped_passes.py")
# The kinds the refines contract draws without a declaration: a declared kind comes first.
DECLARED = ("effect",)


@pytest.mark.parametrize(
    "name",
    [
        "drops_unread_calls",
        "graph_eliminates_dead_code",
        "EliminatesDeadCode",
        "DEAD_CODE_MANAGER",
        "eliminates_dead_code+graph_eliminates_dead_code",
    ],
)
def test_a_declared_kind_reaches_generation_whatever_the_shape(name):
    spec = "+".join(f"{SHAPED}:{part}" for part in name.split("+"))
    assert generation_kinds(load_pass(spec))[: len(DECLARED)] == DECLARED


def test_a_pass_that_declares_nothing_draws_its_contracts_kinds():
    assert "effect" not in generation_kinds(load_pass(f"{SHAPED}:module_identity"))


def _found(name: str, max_examples: int) -> tuple[int, int]:
    """(examples run, buckets found) of an in-process campaign of the shaped pass ``name``,
    stopped at its first finding."""
    found: list = []
    result = run_campaign(
        load_pass(f"{SHAPED}:{name}"),
        CampaignSettings(budget_s=300, max_examples=max_examples, seed=0, max_shrink_s=0),
        hooks=Hooks(stop=lambda: bool(found), on_bucket=found.append),
    )
    return result.examples, len(found)


def test_a_gm_to_gm_dce_that_deletes_effectful_calls_is_found():
    assert _found("drops_unread_calls", 200)[1] == 1


def test_torch_fx_dce_as_a_gm_to_gm_pass_declaring_effects_is_quiet():
    assert _found("eliminates_dead_code", 60) == (60, 0)
