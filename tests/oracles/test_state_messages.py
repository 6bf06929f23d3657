"""A process-state finding names what differs (grad mode after the call: on, expected off), not
the whole state with its dispatch-key sets."""

from __future__ import annotations

import broken_passes as bp
import handmade as hm
import pytest
from fxfuzz.core.contract import MEANING
from fxfuzz.oracles import verify


@pytest.mark.parametrize(
    "broken, kind, says",
    [
        (bp.leaks_grad_mode, "grad_mode_leak", "grad mode after the call: off, expected on"),
        (bp.leaks_autocast, "autocast_state_leak", "autocast on cpu after the call: on "),
        (bp.leaks_dispatch_keys, "dispatch_state_leak", "dispatch keys after the call: included"),
    ],
)
def test_a_state_finding_names_only_what_differs(broken, kind, says):
    (f,) = [f for f in verify(hm.no_grad_region_case(True), broken, contract=MEANING) if f.kind == kind]
    assert f.message.startswith(says), f.message
    if kind != "dispatch_state_leak":
        assert "dispatch keys" not in f.message
    assert f.details["expected"] != f.details["got"]  # the whole states stay in the details


def test_a_pass_leaving_state_changed_is_told_what_differs():
    """The pass's own call: each part of the state it left changed, with its value after the
    call and the one expected (the bucket still keys on the names alone)."""
    import torch

    threads = torch.get_num_threads()
    expected = {
        "grad mode": "grad mode after the call: off, expected on",
        "default dtype": "default dtype after the call: float64, expected float32",
        "thread count": f"thread count after the call: {threads + 1}, expected {threads}",
        "random generator state": "the CPU random generator after the call: advanced or reseeded, expected as it was",
    }
    for state, says in expected.items():
        (f,) = [f for f in verify(hm.no_grad_region_case(True), bp.leaks(state)) if f.kind == "state_leak"][:1]
        assert f.message == f"the pass left process-wide state changed: {says}", f.message
        assert f.details["state"] == [state]
