"""Finding: one failed check, as plain data that can be saved, printed and bucketed."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Oracle(enum.StrEnum):
    """Every oracle a finding may name, in the order the checks run: the pass's own crash
    first, then the rows of the table of checks (``fxfuzz.oracles.checks.CHECKS``, which names
    its oracles from here; tests/oracles/test_checks_table.py keeps the two in step)."""

    CRASH = "crash"
    STRUCTURE = "structure"
    SIGNATURE = "signature"
    EQUIVALENCE = "equivalence"
    GRADIENTS = "gradients"
    EFFECTS = "effects"
    RNG = "rng"
    DOWNSTREAM = "downstream"
    IDEMPOTENCE = "idempotence"


ORACLES: tuple[str, ...] = tuple(o.value for o in Oracle)


@dataclass
class Finding:
    """What an oracle saw: ``oracle`` is one of ``Oracle``'s values, ``kind`` a short stable code.

    ``details["key"]``, where an oracle sets it, tells defects of one kind apart and joins the
    bucket id: which way a difference goes (a gradient lost or one that appeared) is two defects,
    not one."""

    oracle: str
    kind: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.oracle not in ORACLES:
            raise ValueError(f"unknown oracle {self.oracle!r}; expected one of {ORACLES}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"[{self.oracle}/{self.kind}] {self.message}"
