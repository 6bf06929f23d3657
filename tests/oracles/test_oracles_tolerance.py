"""The value-comparison policy: bitwise on one CPU, per-dtype tolerance across devices."""

from __future__ import annotations

import pytest
import torch
from fxfuzz.oracles.tolerance import TOLERANCES, max_abs_diff, same_values


def test_exact_is_bitwise_up_to_nan_payloads():
    a = torch.tensor([1.0, float("nan"), float("inf"), -0.0])
    assert same_values(a, a.clone())
    assert not same_values(a, torch.tensor([1.0, float("nan"), float("inf"), 0.0])), "the sign of zero is observable"
    assert not same_values(a, a + torch.tensor([1e-7, 0.0, 0.0, 0.0]))


@pytest.mark.parametrize("dtype", sorted(TOLERANCES, key=str))
def test_tolerance_accepts_rounding_and_rejects_real_differences(dtype):
    rtol, _ = TOLERANCES[dtype]
    a = torch.tensor([1.0, 2.0, -3.0], dtype=dtype)
    assert same_values(a, a * (1 + rtol / 2), exact=False)
    assert not same_values(a, a * 1.1, exact=False)


def test_integers_and_booleans_are_always_exact():
    a = torch.tensor([1, 2, 3])
    assert not same_values(a, a + torch.tensor([0, 0, 1]), exact=False)
    assert same_values(torch.tensor([True, False]), torch.tensor([True, False]), exact=False)


def test_metadata_must_match():
    assert not same_values(torch.zeros(2), torch.zeros(3))
    assert not same_values(torch.zeros(2), torch.zeros(2, dtype=torch.float64))


def test_complex_values_compare_both_parts():
    a = torch.tensor([1 + 2j])
    assert same_values(a, a.clone()) and not same_values(a, torch.tensor([1 - 2j]))


def test_max_abs_diff_for_messages():
    assert max_abs_diff(torch.tensor([1.0, float("nan")]), torch.tensor([1.5, float("nan")])) == 0.5
    assert max_abs_diff(torch.tensor([float("nan")]), torch.tensor([0.0])) == float("inf")
