"""The ``motif`` step kind (``fxfuzz.strategies.motifs``, ``ops.PATTERN_OPS``): units drawn
whole for generic passes, shrunk toward none, every overload they emit listed in
``ops.DRAWN_TARGETS`` and saved and loaded as a case; scalar twins (``x * 1`` beside
``x * 1.0``) catch a CSE that compares arguments by ``==`` in a short campaign, as they catch
torch's CSEPass (a known defect), while a CSE keyed by the arguments' text stays quiet."""

from __future__ import annotations

import json
import os

import pytest
import torch
from draws import GENERATE, draw
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.capture import from_module
from fxfuzz.core.contract import MEANING, REFINES
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_from_dict, case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.strategies import graph_cases
from fxfuzz.strategies.motifs import MOTIFS
from fxfuzz.strategies.ops import DRAWN_TARGETS, PATTERN_OPS, twins
from fxfuzz.strategies.regions import MOTIF
from hypothesis import HealthCheck, find, settings
from paths import HELPERS
from refines_campaigns import MUTANTS, examples_to_find
from torch import fx

FIXED_CSE = os.path.join(HELPERS, "fixed_cse.py") + ":fixed_cse"
TWIN_KINDS = {"meta_mismatch", "value_mismatch"}


@pytest.fixture(scope="module")
def drawn():
    """120 cases of a pass declaring only ``motif`` (seed 0): motif steps at their most frequent."""
    return draw(120, reacts_to=(MOTIF,))


def _calls(case) -> list[fx.Node]:
    return [
        n for m in case.gm.modules() if isinstance(m, fx.GraphModule) for n in m.graph.nodes if n.op == "call_function"
    ]


@pytest.mark.slow
def test_generic_passes_declare_motifs_and_the_units_are_drawn(drawn):
    assert MOTIF in MEANING.reacts_to and MOTIF in REFINES.reacts_to
    seen = {k.removeprefix("motif:") for c in drawn for k in c.features if k.startswith("motif:")}
    # Each unit under its own name, or its variants' (indexing's forms, split/cat or unbind/stack).
    variants = {"attention": {"attention", "sdpa"}, "split_cat": {"split_cat", "unbind_stack"}, "slice_assignment": {"slice_scatter", "slice_assign_inplace"},
                "indexing": {"index", "index_put", "scatter", "embedding", "bool_chain"}}  # fmt: skip
    missing = [name for name in MOTIFS if not (variants.get(name, {name}) & seen)]
    # Seed 0 under the suite's conftest draws split_cat rarely (0 of 160; other seeds drew 7 to 14 in
    # 100): each unit the sample lacks must still be drawn when asked for.
    assert len(missing) <= 1, (missing, sorted(seen))
    for name in missing:
        keys = {f"motif:{v}" for v in variants.get(name, {name})}
        find(  # drawn is all it asks: no shrinking
            graph_cases(reacts_to=(MOTIF,)),
            lambda c, keys=keys: bool(keys & set(c.features)),
            settings=settings(max_examples=500, **GENERATE),
        )
    targets = {n.target for c in drawn for n in _calls(c)}
    wanted = {torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.softmax.int, torch.ops.aten.conv2d.default,
              torch.ops.aten.batch_norm.default, torch.ops.aten.cat.default, torch.ops.aten.stack.default, torch.ops.aten.linear.default,
              torch.ops.aten.cumsum.default, torch.ops.aten.amax.default, torch.ops.aten.eq.Scalar}  # fmt: skip
    assert wanted <= targets, wanted - targets
    assert len({spec.target for spec in PATTERN_OPS} - targets) <= 3, {spec.target for spec in PATTERN_OPS} - targets


@pytest.mark.slow
def test_every_overload_drawn_is_listed(drawn):
    """``ops.DRAWN_TARGETS`` holds every ATen overload op and motif steps call, what the
    saved-case format may derive its allowlist from; the other steps' own are named here."""
    aten = torch.ops.aten
    other_steps = {aten._assert_tensor_metadata.default, aten.sym_size.int, aten.new_zeros.default, aten.reshape.default,
                   aten.gt.Scalar, aten.lift_fresh_copy.default, aten.detach_.default}  # fmt: skip
    stray = {
        n.target
        for c in drawn
        for n in _calls(c)
        if isinstance(n.target, torch._ops.OpOverload)
        and n.target.namespace == "aten"
        and n.target not in DRAWN_TARGETS
    }
    assert not stray - other_steps, stray - other_steps


@pytest.mark.slow
def test_cases_with_motifs_save_and_load(drawn):
    """As a repro's .json holds them: JSON text, read back to the same code, the identity
    quiet on what was read."""
    with_units = [c for c in drawn if any(k.startswith("motif:") for k in c.features)][:12]
    assert with_units
    for case in with_units:
        loaded = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
        assert loaded.code() == case.code()
        assert verify(loaded, load_pass("identity")) == []


@pytest.mark.slow
def test_a_failure_needing_no_unit_shrinks_to_a_case_without_one():
    """For a generic pass (motif mixed in, not owed); a pass declaring ``motif`` alone owes
    one, and its shrunk cases keep one pattern op, as the set-grad pass's keep a toggle pair."""
    case = find(
        graph_cases(reacts_to=MEANING.reacts_to),
        lambda c: any(n.target is torch.ops.aten.sin.default for n in c.gm.graph.nodes),
        settings=settings(max_examples=300, database=None, deadline=None, suppress_health_check=list(HealthCheck)),
    )
    assert not [k for k in case.features if k.startswith("motif:")], case.features


def test_scalar_twins():
    assert set(twins(1)) == {1.0} and set(map(repr, twins(0.0))) == {"-0.0", "0"}
    assert twins(2) == () and twins(torch.ones(1)) == ()


class Twins(torch.nn.Module):
    def forward(self, x, y):
        return x * 1, x * 1.0, y * 0.0, y * -0.0


def test_csepass_merges_calls_whose_scalars_are_equal_but_not_the_same():
    """CSEPass compares a call's arguments with ``==``: ``x * 1`` (int64) and ``x * 1.0``
    (float32) become one call, so do ``y * 0.0`` and ``y * -0.0`` (docs/known/cse.txt)."""
    case = from_module(Twins(), (torch.arange(3), torch.randn(3)))
    found = {bucket_id(f): f.kind for f in verify(case, load_pass("cse"))}
    assert TWIN_KINDS <= set(found.values()), found
    assert set(found) <= set(load_known("docs/known/cse.txt")), found
    assert verify(case, load_pass(FIXED_CSE, REFINES)) == []


@pytest.mark.slow
def test_a_campaign_finds_a_cse_that_merges_twins_and_not_the_cse_keyed_by_text():
    """In-process, one process, held to refines (drawn with its kinds), stopping at the first
    finding of a kind only a merge of twins gives. Measured 2026-11-28 on the export domain,
    once outlining left equal and random calls at the top level (its choices shift the draws):
    seed 4 after 63 examples of 150, seed 1 at the 150th, seeds 0, 2 and 3 none in 150 (with
    the tool forms' first outlining: seed 0 after 36; before the tool forms: seed 1 after 13):
    twins returned side by side in the top-level graph are still rare, so the seed is the one
    measured, not a claim for any seed. tests/helpers/fixed_cse.py, a
    functional-dialect CSE, runs on the functional domain: it merges the repeats as well (their
    outputs, both returned, now share storage: ``aliasing_mismatch``, observable) but never twins."""
    examples, _ = examples_to_find(f"{MUTANTS}:cse_merging_twins", TWIN_KINDS, 150, 4)
    assert 0 < examples
    examples, buckets = examples_to_find(FIXED_CSE, TWIN_KINDS, 80, 1, "functional")
    assert examples == 0 and not [b for b in buckets if not b.startswith("equivalence-aliasing_mismatch")], buckets
