"""The table of checks (``fxfuzz.oracles.checks.CHECKS``): every row is named once, names the
oracles of ``Oracle`` and runs them in ``Oracle``'s order."""

from __future__ import annotations

from fxfuzz.oracles import ORACLES, Oracle
from fxfuzz.oracles.checks import CHECKS, PASS_ORACLE


def test_each_row_is_named_once_and_names_oracles_of_the_enum():
    assert len({row.name for row in CHECKS}) == len(CHECKS)
    assert all(isinstance(o, Oracle) for row in CHECKS for o in row.oracles)


def test_the_oracles_run_in_the_order_the_enum_lists_them():
    """The pass's own crash first, then each oracle where its first row runs: the order reports
    list oracles in."""
    assert ORACLES == tuple(dict.fromkeys((PASS_ORACLE, *(o for row in CHECKS for o in row.oracles))))


def test_every_oracle_has_a_row_or_is_the_passs_crash():
    named = {o for row in CHECKS for o in row.oracles} | {PASS_ORACLE}
    assert named == set(Oracle)
