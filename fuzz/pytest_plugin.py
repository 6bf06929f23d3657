"""pytest plugin: ``pytest --fxfuzz-pass SPEC`` adds fxfuzz's equivalence properties for the
pass SPEC to the user's own test run; the ``fxfuzz_pass`` fixture hands the loaded pass to
the user's tests.

Inert without ``--fxfuzz-pass``: no item is added, torch is not imported, and the only side
effect is that the Hypothesis profiles ``ci`` and ``nightly`` exist (registered at import, so
before any conftest, which may redefine them, and before ``--hypothesis-profile`` loads one).
The properties use whatever Hypothesis profile is loaded, so ``--hypothesis-profile nightly``
runs them longer.

Properties: ``fxfuzz::generated_graphs`` on generated graph cases (of ``--fxfuzz-domain``) and
``fxfuzz::corpus[<module>]`` on what torch.export hands the pass for each built-in corpus
module. Each fails where the pass regresses against ``--fxfuzz-baseline`` (torch's own pass by
default, which itself has findings on some of these cases), or with ``--fxfuzz-baseline none``
on every finding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from fxfuzz.core.choices import (
    CONTRACT_NAMES,
    DOMAIN_CHOICES,
    OP_HELP,
    PASS_SPEC_HELP,
    contract_help,
    domain_help,
    pass_shape_help,
)
from fxfuzz.core.settings import CampaignSettings
from hypothesis import HealthCheck, settings

# Graph cases are slow to build next to Hypothesis's defaults, so no deadline and no
# too_slow health check; "ci" replays the same examples on every run, "nightly" explores.
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
# "ci" extends Hypothesis's own built-in "ci" profile (which it loads by itself on CI).
settings.register_profile(
    "ci", settings.get_profile("ci"), deadline=None, derandomize=True, suppress_health_check=_SLOW
)
settings.register_profile("nightly", deadline=None, max_examples=2000, suppress_health_check=_SLOW)

_OPTION = "--fxfuzz-pass"
# The names of the operators this session's --fxfuzz-op added to the op table.
_OPS_KEY = pytest.StashKey[list]()
# Option -> the pass it names, loaded once per session (``_loaded_pass``).
_PASSES_KEY = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's command-line options (``--fxfuzz-pass`` and the rest)."""
    group = parser.getgroup("fxfuzz", "fxfuzz: property tests of an FX graph pass")
    group.addoption(
        _OPTION,
        dest="fxfuzz_pass",
        default=None,
        metavar="SPEC",
        help=f"run fxfuzz's equivalence properties against this pass ({PASS_SPEC_HELP})",
    )
    group.addoption(
        "--fxfuzz-pass-shape",
        dest="fxfuzz_pass_shape",
        default=None,
        metavar="SHAPE",
        help=pass_shape_help("the pass, and the baseline where it is pkg.module:fn or file.py:fn"),
    )
    group.addoption(
        "--fxfuzz-baseline",
        dest="fxfuzz_baseline",
        default="set_grad",
        metavar="SPEC",
        help="fail only where the pass regresses against this one (default: torch's set_grad; 'none': on every finding)",
    )
    group.addoption(
        "--fxfuzz-op",
        dest="fxfuzz_ops",
        action="append",
        default=[],
        metavar="SPEC",
        help=OP_HELP,
    )
    group.addoption(
        "--fxfuzz-contract",
        dest="fxfuzz_contract",
        default=None,  # the pass's own
        choices=CONTRACT_NAMES,
        help=contract_help("the pass and the baseline"),
    )
    group.addoption(
        "--fxfuzz-domain",
        dest="fxfuzz_domain",
        default=None,
        choices=DOMAIN_CHOICES,
        help=domain_help("input space of the generated graphs", "the registered pass's own, else export"),
    )


class PropertyItem(pytest.Item):
    """One fxfuzz property of the pass, run as a Hypothesis test under the loaded profile."""

    def __init__(self, *, prop: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prop = prop

    def runtest(self) -> None:
        self.prop()

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)  # the findings and the falsifying case say it all
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int, str]:
        return "fxfuzz", 0, self.name


def _assert_clean(findings: list[Any], case: Any) -> None:
    assert not findings, "\n".join(["fxfuzz findings:", *map(str, findings), "on the case:", str(case)])


def _assert_holds(pass_fn: Any, baseline: Any, case: Any) -> None:
    """Every finding of the pass, or with a baseline only its regressions against it."""
    from fxfuzz.oracles import verify
    from fxfuzz.oracles.differential import regressions

    _assert_clean(verify(case, pass_fn) if baseline is None else regressions(case, pass_fn, baseline), case)


def _corpus_property(pass_fn: Any, baseline: Any, entry: Any) -> None:
    from fxfuzz.strategies.corpus import capture

    for ambient in (True, False):
        _assert_holds(pass_fn, baseline, capture(entry, ambient))


def _properties(pass_fn: Any, baseline: Any, domain: str = "export") -> dict[str, Callable[[], None]]:
    """Name -> property: generated graph cases of ``domain``, then each built-in corpus module
    (real torch.export output)."""
    from fxfuzz.core.passes import generation_ambient
    from fxfuzz.core.reproducible import reproducible_draws
    from fxfuzz.strategies import graph_cases
    from fxfuzz.strategies.corpus import MODULES
    from hypothesis import given

    @given(graph_cases(domain=domain, ambient=generation_ambient(pass_fn)))
    def on_drawn(case: Any) -> None:
        _assert_holds(pass_fn, baseline, case)

    def generated_graphs() -> None:
        with reproducible_draws():  # the same cases whatever the user's suite imported
            on_drawn()

    props: dict[str, Callable[[], None]] = {"generated_graphs": generated_graphs}
    for entry in MODULES:
        props[f"corpus[{entry.name}]"] = functools.partial(_corpus_property, pass_fn, baseline, entry)
    return props


def _loaded_pass(config: pytest.Config, option: str = "fxfuzz_pass") -> Any:
    """The pass ``option`` names held to ``--fxfuzz-contract``, resolved once per session
    (``fxfuzz.core.identity.resolve_pass``): the items and the fixture share it."""
    loaded = config.stash.setdefault(_PASSES_KEY, {})
    if option not in loaded:
        loaded[option] = _resolved(config, option)
    return loaded[option]


def _resolved(config: pytest.Config, option: str) -> Any:
    from fxfuzz.core.errors import PassSpecError, UsageError
    from fxfuzz.core.identity import resolve_pass

    try:
        return resolve_pass(_shaped(config, option), config.getoption("fxfuzz_contract"))[0]
    except PassSpecError as e:
        raise pytest.UsageError(f"--{option.replace('_', '-')}: {e}") from None
    except UsageError as e:
        raise pytest.UsageError(f"--fxfuzz-contract: {e}") from None


def _shaped(config: pytest.Config, option: str) -> str:
    """The spec ``option`` names, with ``--fxfuzz-pass-shape`` carried in it as ``fxfuzz gate``
    carries ``--pass-shape``: the pass's always, the baseline's where it is an import spec."""
    from fxfuzz.core.passes import shapeable, with_shape

    spec, shape = config.getoption(option), config.getoption("fxfuzz_pass_shape")
    if shape is None or (option == "fxfuzz_baseline" and not shapeable(spec)):
        return str(spec)
    return with_shape(spec, shape)


def _domain(config: pytest.Config, pass_fn: Any) -> str:
    from fxfuzz.core.contract import check_domain
    from fxfuzz.core.errors import UsageError
    from fxfuzz.core.passes import contract_of, default_domain

    domain = str(config.getoption("fxfuzz_domain") or default_domain(pass_fn, CampaignSettings.domain))
    try:
        check_domain(contract_of(pass_fn), domain)
    except UsageError as e:
        raise pytest.UsageError(f"--fxfuzz-domain: {e}") from None
    return domain


def _check_survives(config: pytest.Config) -> None:
    """A pass or ``--fxfuzz-op`` whose loading would end the process (``os._exit``) is a usage
    error, never a pytest run that ends with the status it chose
    (``fxfuzz.strategies.custom.loading_ends``)."""
    from fxfuzz.strategies.custom import loading_ends

    passes = [(f"--{o.replace('_', '-')}", config.getoption(o)) for o in ("fxfuzz_pass", "fxfuzz_baseline")]
    ended = loading_ends([(o, s) for o, s in passes if s != "none"], config.getoption("fxfuzz_ops"), "--fxfuzz-op")
    if ended is not None:
        raise pytest.UsageError(ended)


def _register_ops(config: pytest.Config) -> None:
    """Add each ``--fxfuzz-op`` to the op table for this session (``pytest_unconfigure``
    takes them out again: pytester runs sessions in one process)."""
    from fxfuzz.core.errors import UsageError
    from fxfuzz.strategies.custom import register_ops

    try:
        added = register_ops(config.getoption("fxfuzz_ops"), "--fxfuzz-op")
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[_OPS_KEY] = [spec.name for spec in added]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Take this session's ``--fxfuzz-op`` operators out of the op table."""
    names = config.stash.get(_OPS_KEY, [])
    if names:
        from fxfuzz.strategies.custom import unregister_op

        for name in names:
            unregister_op(name)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--fxfuzz-pass``, add the generated-graph and corpus property items."""
    if config.getoption("fxfuzz_pass") is None:
        return
    _check_survives(config)
    baseline = None if config.getoption("fxfuzz_baseline") == "none" else _loaded_pass(config, "fxfuzz_baseline")
    _register_ops(config)
    pass_fn = _loaded_pass(config)
    props = _properties(pass_fn, baseline, _domain(config, pass_fn))
    for name, prop in props.items():
        items.append(PropertyItem.from_parent(session, name=f"fxfuzz::{name}", prop=prop))


@pytest.fixture
def fxfuzz_pass(request: pytest.FixtureRequest) -> Any:
    """The pass given with ``--fxfuzz-pass`` (the test is skipped without it)."""
    if request.config.getoption("fxfuzz_pass") is None:
        pytest.skip(f"no {_OPTION} given")
    return _loaded_pass(request.config)
