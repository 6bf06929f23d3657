"""The pytest plugin, run in-process with pytester: inert without --fxfuzz-pass, failing on a
broken pass, passing on the real one, under the Hypothesis profile the user picks."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import settings
from paths import HELPERS

pytest_plugins = ["pytester"]

BROKEN = os.path.join(HELPERS, "broken_passes.py") + ":drops_toggles"
SHAPED = os.path.join(HELPERS, "shaped_passes.py")

# "tiny" does not shrink: the tests ask whether a property fails, not how small its case gets
# (a shrink of a generated case took two minutes of the suite).
CONFTEST = """
from hypothesis import Phase, settings
settings.register_profile("tiny", max_examples=3, deadline=None, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.generate])
"""

USER_TEST = """
def test_users_own(fxfuzz_pass):
    assert callable(fxfuzz_pass)
"""


@pytest.fixture(scope="module")
def torch_warm():
    """Import everything the properties use before pytester snapshots sys.modules: its
    in-process runs drop modules imported inside them, and torch cannot import twice."""
    import broken_passes  # noqa: F401  (executed twice, it would register its operators twice)
    from fxfuzz.core.passes import load_pass
    from fxfuzz.oracles import verify
    from fxfuzz.strategies.corpus import corpus_cases

    real = load_pass("set_grad")
    for _, case in corpus_cases():
        verify(case, real)


@pytest.fixture
def user_suite(pytester, torch_warm):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_user=USER_TEST)
    profile = getattr(settings, "_current_profile", None)
    yield pytester
    # The inner run loads its profile process-wide; give the outer suite its own back.
    if profile:
        settings.load_profile(profile)


@pytest.mark.processes
def test_loading_the_plugin_imports_no_torch():
    """pytest loads the plugin into every run of every suite where fxfuzz is installed."""
    import subprocess
    import sys

    code = "import fuzz.pytest_plugin, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.slow
def test_inert_without_the_option(user_suite):
    result = user_suite.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)


@pytest.mark.slow
def test_broken_pass_fails_the_properties(user_suite):
    result = user_suite.runpytest_inprocess(
        "--fxfuzz-pass", BROKEN, "--hypothesis-profile", "tiny", "-p", "no:cacheprovider"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1 and outcomes.get("passed", 0) >= 1  # the user's own test passes
    result.stdout.fnmatch_lines(["*FAILED*fxfuzz::corpus?nested_grad_blocks?*"])


@pytest.mark.processes
def test_the_pass_is_loaded_once_for_the_items_and_the_fixture(user_suite, tmp_path, monkeypatch):
    """The items and ``fxfuzz_pass`` share one load of the pass (``fxfuzz.core.identity``):
    this process loads it once, as does the fork that checks its loading ends nothing."""
    loads = tmp_path / "loads"
    monkeypatch.setenv("FXFUZZ_TEST_LOADS", str(loads))
    counted = os.path.join(HELPERS, "counted_passes.py") + ":Counted"
    result = user_suite.runpytest_inprocess("--fxfuzz-pass", counted, "-k", "users_own", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    per_process = Counter(loads.read_text().split())
    assert per_process[str(os.getpid())] == 1 and set(per_process.values()) == {1}, per_process


@pytest.mark.slow
def test_real_pass_passes_the_properties(user_suite):
    result = user_suite.runpytest_inprocess(
        "--fxfuzz-pass", "set_grad", "--hypothesis-profile", "tiny", "-p", "no:cacheprovider"
    )
    from fxfuzz.strategies.corpus import MODULES

    result.assert_outcomes(passed=1 + 1 + len(MODULES))  # the user's test, generated graphs, each module


def test_baselines_own_defect_on_a_generated_graph_is_no_regression():
    """The failure once seen in a full run: the generated-graphs property shrank to this
    graph, on which torch's pass corrupts ``add.users`` (README known finding 2). The
    plugin then judged generated graphs by every finding (before commit cde1c57); judged
    against the baseline, torch's pass against itself, it is no regression."""
    import torch
    from fxfuzz.core.case import GraphCase
    from fxfuzz.core.passes import load_pass
    from fxfuzz.pytest_plugin import _assert_holds
    from fxfuzz.strategies.builder import GraphBuilder
    from torch.export.graph_signature import InputKind

    aten = torch.ops.aten
    b = GraphBuilder(grad_mode=False)
    x = b.placeholder("arg0_1", torch.tensor([1.0, 2.0]), InputKind.USER_INPUT)
    add = b.call(aten.add.Tensor, [x, x])
    b.call(aten.add.Tensor, [add, add])
    b.set_grad(False)
    b.set_grad(False)
    gm, sig = b.finish([add])
    case = GraphCase(gm, sig, tuple(b.inputs), ambient_grad=False)
    real = load_pass("set_grad")
    with pytest.raises(AssertionError, match="def_use_inconsistent"):
        _assert_holds(real, None, case)
    _assert_holds(real, real, case)


@pytest.mark.slow
def test_plugin_registers_ci_and_nightly_profiles(user_suite):
    user_suite.makepyfile(
        test_profile="""
from hypothesis import settings
def test_nightly_loaded():
    assert settings.default.max_examples == 2000 and settings.default.deadline is None
"""
    )
    result = user_suite.runpytest_inprocess(
        "--hypothesis-profile", "nightly", "-p", "no:cacheprovider", "test_profile.py"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_without_baseline_every_finding_fails(user_suite):
    result = user_suite.runpytest_inprocess(
        "--fxfuzz-pass",
        BROKEN,
        "--fxfuzz-baseline",
        "none",
        "--hypothesis-profile",
        "tiny",
        "-p",
        "no:cacheprovider",
        "-k",
        "nested",
    )
    result.assert_outcomes(failed=1)


REFUSES_ADVERSARIAL = BROKEN.replace(":drops_toggles", ":refuses_adversarial_graphs")


@pytest.mark.slow
def test_domain_option_reaches_the_generated_graphs(user_suite):
    # No shrinking: the test asks whether an adversarial case fails, not how small it gets.
    user_suite.makeconftest(
        CONFTEST + 'settings.register_profile("adv", max_examples=40, deadline=None, derandomize=True, database=None, '
        "phases=[Phase.generate])\n"
    )
    args = [
        "--fxfuzz-pass",
        REFUSES_ADVERSARIAL,
        "--hypothesis-profile",
        "adv",
        "-p",
        "no:cacheprovider",
        "-k",
        "generated",
    ]
    user_suite.runpytest_inprocess(*args).assert_outcomes(passed=1)
    user_suite.runpytest_inprocess(*args, "--fxfuzz-domain", "adversarial").assert_outcomes(failed=1)
    bad = user_suite.runpytest_inprocess(*args, "--fxfuzz-domain", "nonsense")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--fxfuzz-domain*nonsense*"])


@pytest.mark.slow
def test_bad_spec_is_a_usage_error(user_suite):
    result = user_suite.runpytest_inprocess("--fxfuzz-pass", "no_such_module:fn", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fxfuzz-pass*no_such_module*"])


@pytest.mark.processes  # the loading is tried in a fork first
@pytest.mark.parametrize("body", ["sys.exit(0)", "os._exit(0)"])
def test_a_pass_that_ends_the_process_as_it_loads_is_a_usage_error(user_suite, body):
    """Never a pytest run that ends with the status the pass chose (0: green, nothing run)."""
    user_suite.makepyfile(ends=f"import os, sys\n{body}\ndef p(gm, sig):\n    return gm, sig\n")
    result = user_suite.runpytest_inprocess("--fxfuzz-pass", "ends.py:p", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ends.py:p*"])


@pytest.mark.slow
def test_pipeline_specs_reach_the_plugin(user_suite):
    """A pipeline (#16) is a pass spec like any other: a broken first part fails the properties
    through the pipeline, and torch's own set_grad+autocast judged against itself passes."""
    broken = user_suite.runpytest_inprocess(
        "--fxfuzz-pass", f"{BROKEN}+autocast", "--hypothesis-profile", "tiny", "-p", "no:cacheprovider", "-k", "nested"
    )
    broken.assert_outcomes(failed=1)
    real = user_suite.runpytest_inprocess(
        "--fxfuzz-pass", "set_grad+autocast", "--fxfuzz-baseline", "set_grad+autocast", "--hypothesis-profile", "tiny",
        "-p", "no:cacheprovider", "-k", "nested or generated",
    )  # fmt: skip
    real.assert_outcomes(passed=2)


def test_pass_shape_option_reaches_the_plugin(user_suite):
    """``sorts_nodes(g)`` takes a Graph under a module's name: misread, it crashes on the case;
    called as --fxfuzz-pass-shape graph says, it passes; an unknown shape is a usage error."""
    args = ["--fxfuzz-pass", f"{SHAPED}:sorts_nodes", "--fxfuzz-baseline", "none", "--hypothesis-profile", "tiny"]
    args += ["-p", "no:cacheprovider", "-k", "nested"]
    user_suite.runpytest_inprocess(*args).assert_outcomes(failed=1)
    user_suite.runpytest_inprocess(*args, "--fxfuzz-pass-shape", "graph").assert_outcomes(passed=1)
    bad = user_suite.runpytest_inprocess(*args, "--fxfuzz-pass-shape", "cube")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*unknown pass shape 'cube'*"])
