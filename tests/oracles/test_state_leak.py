"""Process-wide state a pass leaves changed (``fxfuzz.oracles.execute.PassState``) is put
back after every call of the pass and reported as ``equivalence/state_leak``: fires on a pass
leaving each kind of state changed, quiet on torch's passes and the identity."""

from __future__ import annotations

import broken_passes as bp
import handmade as hm
import pytest
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.passes import REGISTRY, load_pass
from fxfuzz.oracles import verify
from fxfuzz.oracles.execute import PassState


def _leaks(findings):
    return [f for f in findings if f.kind == "state_leak"]


@pytest.mark.parametrize("state", sorted(bp.LEAKS))
def test_a_pass_leaving_state_changed_is_a_finding_and_the_state_is_put_back(state):
    before = PassState.read()
    findings = verify(hm.no_grad_region_case(), bp.leaks(state))
    leaks = _leaks(findings)
    # The first call, and the second application of the idempotence check: one bucket.
    assert leaks and {(f.oracle, tuple(f.details["state"])) for f in leaks} == {("equivalence", (state,))}, findings
    assert len({bucket_id(f) for f in leaks}) == 1
    assert PassState.read().changed(before) == []
    # Nothing else: every check ran under the state the pass found.
    assert {f.kind for f in findings} == {"state_leak"}, findings


def test_each_kind_of_state_left_changed_is_its_own_bucket():
    ids = {state: bucket_id(_leaks(verify(hm.no_grad_region_case(), bp.leaks(state)))[0]) for state in bp.LEAKS}
    assert len(set(ids.values())) == len(ids), ids


def test_a_pass_that_raises_after_a_leak_has_the_state_put_back():
    before = PassState.read()
    [f] = verify(hm.no_grad_region_case(), bp.leaks_then_raises)
    assert (f.oracle, f.kind) == ("crash", "pass_raised")
    assert PassState.read().changed(before) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REGISTRY))
def test_torchs_passes_and_the_identity_leave_no_state_changed(name):
    """Every registered pass (torch's, and the identity) on the handmade cases under both
    grad modes; the suite's other tests run them on drawn cases, where a leak would also
    show as a finding their assertions do not expect."""
    pass_fn = load_pass(name)
    for make in (hm.no_grad_region_case, hm.random_op_case, hm.buffer_update_case):
        for ambient in (True, False):
            assert hm.unknown(_leaks(verify(make(ambient), pass_fn, stage_share=0)), name) == [], (
                name,
                make.__name__,
                ambient,
            )
