"""Finding: one failed check, as plain data that can be saved, printed and bucketed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any



def oracles() -> tuple[str, ...]:
    """Every oracle a finding may name: those of the table of checks, in the order they run.
    Read when asked, not at import: the table's checks make findings, so import this module."""
    from fxfuzz.oracles.checks import ORACLES

    return ORACLES


def __getattr__(name: str) -> object:
    # ``ORACLES`` as a module attribute, for whoever reads it from here (PEP 562).
    if name == "ORACLES":
        return oracles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Finding:
    """What an oracle saw: ``oracle`` is one of ``oracles()``, ``kind`` a short stable code.

    ``details["key"]``, where an oracle sets it, tells defects of one kind apart and joins the
    bucket id: which way a difference goes (a gradient lost or one that appeared) is two defects,
    not one."""

    oracle: str
    kind: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.oracle not in oracles():
            raise ValueError(f"unknown oracle {self.oracle!r}; expected one of {oracles()}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"[{self.oracle}/{self.kind}] {self.message}"
