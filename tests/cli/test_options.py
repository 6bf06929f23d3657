"""The choices, defaults and help of the options the CLI and the pytest plugin share come from
one source (``fxfuzz.core.choices``): every domain and contract is offered and explained by both."""

from __future__ import annotations

import argparse

from fxfuzz import pytest_plugin
from fxfuzz.cli.main import build_parser
from fxfuzz.core.choices import (
    CONTRACT_MEANINGS,
    CONTRACT_NAMES,
    DOMAIN_CHOICES,
    DOMAIN_MEANINGS,
    OP_HELP,
    PASS_SHAPES,
    PASS_SPEC_HELP,
)
from fxfuzz.core.contract import CONTRACTS


class _Group:
    """What the plugin's ``pytest_addoption`` declares, by option name."""

    def __init__(self) -> None:
        self.options: dict[str, dict] = {}

    def getgroup(self, *args):
        return self

    def addoption(self, name, **kwargs):
        self.options[name] = kwargs


def _plugin() -> dict[str, dict]:
    group = _Group()
    pytest_plugin.pytest_addoption(group)  # type: ignore[arg-type]
    return group.options


def _cli(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {s: a for a in sub.choices[command]._actions for s in a.option_strings}


def test_every_choice_is_explained_once():
    from fxfuzz.core.shapes import GIVEN_SHAPES

    assert tuple(PASS_SHAPES) == tuple(GIVEN_SHAPES)
    assert tuple(DOMAIN_MEANINGS) == DOMAIN_CHOICES
    assert tuple(CONTRACT_MEANINGS) == CONTRACT_NAMES == tuple(CONTRACTS)


def test_the_cli_and_the_plugin_offer_the_same_choices_with_the_same_help():
    plugin, run = _plugin(), _cli("run")
    assert plugin["--fxfuzz-domain"]["choices"] == run["--domain"].choices == DOMAIN_CHOICES
    assert plugin["--fxfuzz-contract"]["choices"] == run["--contract"].choices == CONTRACT_NAMES
    assert plugin["--fxfuzz-contract"]["default"] is run["--contract"].default is None  # the pass's own
    assert plugin["--fxfuzz-op"]["help"] == run["--op"].help == OP_HELP
    assert PASS_SPEC_HELP in plugin["--fxfuzz-pass"]["help"] and run["--pass"].help == PASS_SPEC_HELP
    # A name may be both (functional: a domain and a contract): each table is its option's.
    for option, meanings in (("domain", DOMAIN_MEANINGS), ("contract", CONTRACT_MEANINGS)):
        for name, meaning in meanings.items():
            assert f"{name} ({meaning})" in plugin[f"--fxfuzz-{option}"]["help"]
            assert f"{name} ({meaning})" in run[f"--{option}"].help


def test_every_command_that_loads_a_pass_offers_pass_shape_with_the_same_shapes():
    offered = [_cli(c)["--pass-shape"].help for c in ("run", "reduce", "bench", "gate", "repro")]
    offered.append(_plugin()["--fxfuzz-pass-shape"]["help"])
    for name, given in PASS_SHAPES.items():
        assert all(f"{name} {given}" in help for help in offered)
