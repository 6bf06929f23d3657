"""Every fixed set-grad defect of torch put back (tests/helpers/historical_passes.py) is rejected by a
default-settings `fxfuzz gate` within 30 s (docs/gate-and-mutation.md#historical-defects)."""

from __future__ import annotations

import json
import os

import historical_passes as hp
import pytest
from fxfuzz.tools.mutants import SourceEdit, load_pass_variant
from paths import HELPERS


@pytest.mark.processes
@pytest.mark.parametrize("name", sorted(hp.EDITS))
def test_default_gate_rejects_the_historical_defect(name, tmp_path, cli):
    spec = os.path.join(HELPERS, "historical_passes.py") + ":" + name
    # Default baseline (set_grad), domain (both) and workers; one fresh case, not minimized, keeps
    # the test short: each defect shows on the corpus (and the gate stops at the first
    # regression, which a fresh case judged alongside may show first). How fast is for
    # ``fxfuzz bench`` and docs/benchmark.md to say, not a timed test.
    r = cli("gate", "--candidate", spec, "--max-examples", "1", "--max-shrink-s", "0", "--report-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["baseline"], report["domain"]) == ("set_grad", "both")
    assert any("REGRESSION" in line for line in r.stdout.splitlines()), r.stdout


def test_an_edit_that_does_not_match_the_installed_source_is_refused():
    edit = SourceEdit(
        hp.EDITS["pr125133_output_names_not_synced"].module,
        "_sequential_split_and_maybe_inline_subgraphs_helper",
        "no such text",
        "",
    )
    with pytest.raises(ValueError, match="does not match the installed source"):
        load_pass_variant("set_grad", edit)
