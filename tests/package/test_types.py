"""The package type-checks: mypy, configured in pyproject.toml, on the whole of ``fxfuzz``.

Static tools find ``fxfuzz`` through ``.typeroot/fxfuzz``, a committed tree of symlinks that
spells the import names (docs/layout.md, "Static types"). mypy's cache lives in the system's
temporary folder, one per checkout: a cold run analyses torch too, a later one takes seconds.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import paths
import pytest

ROOT = Path(paths.ROOT)
LINKS = ROOT / ".typeroot" / "fxfuzz"
CACHE = Path(tempfile.gettempdir()) / f"fxfuzz-mypy-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"

# One worker runs them in turn: they share the cache, and the first run fills it.
pytestmark = pytest.mark.xdist_group("mypy")


def _mypy(*targets: str) -> subprocess.CompletedProcess[str]:
    """mypy with the project's configuration; no target: the packages it names (fxfuzz)."""
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(CACHE), "--no-color-output", *targets]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_link_tree_spells_the_package() -> None:
    """.typeroot/fxfuzz holds one link per entry of fuzz/, plus strategies/ and oracles/."""
    expected = {p.name: p for p in (ROOT / "fuzz").iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}
    expected.update(strategies=ROOT / "strategies", oracles=ROOT / "oracles")
    found = {p.name: p for p in LINKS.iterdir()}
    missing = [
        f"ln -s {os.path.relpath(expected[n], LINKS)} .typeroot/fxfuzz/{n}" for n in sorted(set(expected) - set(found))
    ]
    assert not missing, "static tools would not see these parts of fxfuzz; run: " + " && ".join(missing)
    assert not set(found) - set(expected), f"links to nothing in fuzz/: {sorted(set(found) - set(expected))}"
    for name, link in found.items():
        assert link.is_symlink() and link.resolve() == expected[name].resolve(), (
            f".typeroot/fxfuzz/{name} must link to {expected[name]}"
        )


@pytest.mark.processes
def test_package_has_no_type_errors() -> None:
    run = _mypy()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


PROBE = """\
from fxfuzz.core.case import GraphCase

wrong: int = GraphCase
unused = 1  # type: ignore[attr-defined]
bare: str = 1  # type: ignore
"""


@pytest.mark.processes
def test_checker_resolves_fxfuzz_and_enforces_ignore_codes(tmp_path: Path) -> None:
    """A file outside the package, as an editor's checker sees it: ``fxfuzz.core.case``
    resolves (GraphCase has its real type, not Any), and an unused or code-less
    ``# type: ignore`` is an error."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = _mypy(str(probe)).stdout
    assert "import-not-found" not in out and "import-untyped" not in out, out
    assert 'probe.py:3: error: Incompatible types in assignment (expression has type "type[GraphCase]"' in out, out
    assert 'probe.py:4: error: Unused "type: ignore" comment' in out, out
    assert 'probe.py:5: error: "type: ignore" comment without error code' in out, out
