import os
import subprocess
import sys

import pytest
from fxfuzz.core.reproducible import reproducible_draws
from hypothesis import HealthCheck, settings

# The shared helpers (tests/helpers) are imported by name from test modules in every folder.
HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers")
sys.path.insert(0, HELPERS)
from redis_server import redis_url  # noqa: E402, F401  (a fixture for every folder)

# Graph cases are slow to build next to Hypothesis's defaults; the oracles have no deadline.
settings.register_profile(
    "fxfuzz-tests",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    derandomize=True,
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fxfuzz-tests")
settings.load_profile(PROFILE)
# The suite's seeded samples draw the same cases whichever test modules an xdist worker
# imported first (fxfuzz.core.reproducible), as campaigns do; held for the whole session. The
# context manager is kept: a dropped one is closed by the garbage collector, which runs its
# exit and unpins the draws at once (so they were, until 2026-11-26).
_REPRODUCIBLE_DRAWS = reproducible_draws()
_REPRODUCIBLE_DRAWS.__enter__()


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one xdist worker more than the cores. A fair share of the suite waits on
    other processes (campaign and gate workers, hang timeouts, Redis, fresh interpreters), and
    one worker per core left the cores idle a quarter of the wall time. xdist's
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Tests that share a module- or session-scoped fixture of the suite's own run on one
    xdist worker (``--dist loadgroup``, pyproject.toml): spread over three workers, each built
    the fixture again, and those fixtures draw hundreds of cases or run whole campaigns (the
    strategies' 300-case sample was built three times, 30-40 s each). A test already in a
    group keeps it."""
    for item in items:
        if item.get_closest_marker("xdist_group") or not hasattr(item, "_fixtureinfo"):
            continue
        shared = sorted(
            defs[-1].baseid if defs[-1].scope == "module" else name
            for name, defs in item._fixtureinfo.name2fixturedefs.items()
            # baseid "" is a plugin's fixture (pytest's own tmp_path_factory): not built here.
            if defs and defs[-1].scope in ("module", "session") and defs[-1].baseid
        )
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
    # The longest first (slow, then those that start processes): xdist hands work out in
    # collection order (``--no-loadscope-reorder``, pyproject.toml), and a minute-long test
    # handed out last keeps one core busy alone at the end of the run.
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.get_closest_marker("processes") is None))


@pytest.fixture
def refused(capsys):
    """``refused(argv)`` runs ``fxfuzz`` in this process on arguments it must refuse and returns
    its error line, after checking exit status 2 and that stderr holds that one line alone."""
    from fxfuzz.cli.main import main

    def run(argv):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fxfuzz: error:"), lines
        return lines[0]

    return run


@pytest.fixture
def cli(capsys):
    """``cli(*args)`` runs ``fxfuzz`` in this process and returns its exit status and output as
    a CompletedProcess: for tests that need no process boundary around the CLI (a fresh
    interpreter costs seconds of torch imports); the workers a campaign or gate starts are
    processes all the same."""
    from fxfuzz.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["fxfuzz", *args], code, out.out, out.err)

    return run


@pytest.fixture(autouse=True)
def _profile_restored(request):
    """In-process pytester sessions given ``--hypothesis-profile`` load that profile for the
    whole process: every later test would draw under it (the suite's seeded samples changed
    with the order xdist happened to run tests in)."""
    yield
    if "pytester" in request.fixturenames:
        settings.load_profile(PROFILE)


@pytest.fixture(scope="session")
def shard_campaigns(tmp_path_factory):
    """Two small real campaigns of one broken pass, run as two shards would be (shards 2/2 and
    1/2), with findings: both list the saved-tensors bucket as known; the first folder holds it
    and new buckets, the second it alone. Returns the two folders and that id."""
    # Imported here: conftest is loaded by every test run, most of which need no torch.
    from fxfuzz.campaign.engine import bucket_id
    from fxfuzz.oracles import Finding

    root = tmp_path_factory.mktemp("shards")
    known_id = bucket_id(Finding("gradients", "saved_tensors_mismatch", ""))
    (root / "known.txt").write_text(f"{known_id} accepted in this test\n")
    spec = os.path.join(HELPERS, "broken_passes.py") + ":drops_toggles"
    # Seed 7 (generation is the same in every process: fxfuzz.core.reproducible): shard 2/2
    # draws the saved-tensors bucket and new ones, shard 1/2 the saved-tensors bucket alone.
    # No minimizing: what these folders are for (merging, issue texts) needs buckets, not small
    # ones, and shrinking was four fifths of their time.
    known = ["--seed", "7", "--known", str(root / "known.txt"), "--max-shrink-s", "0"]
    # One after the other in this process: what the folders are for needs no process boundary
    # around the CLI (its worker is a process all the same), and each fresh interpreter cost
    # seconds of torch imports.
    from fxfuzz.cli.main import main

    codes = [
        main(["run", "--pass", spec, "--workers", "1", "--max-examples", "30", "--no-db",
              "--report-dir", str(root / name), *known, "--shard", shard])
        for name, shard in (("a", "2/2"), ("b", "1/2"))
    ]  # fmt: skip
    # New findings in a (exit 1); in b only the known bucket (exit 0).
    assert codes == [1, 0], [
        (root / name / "report.md").read_text() for name in "ab" if (root / name / "report.md").exists()
    ]
    return root / "a", root / "b", known_id
