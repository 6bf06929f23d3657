"""Finding: one failed check, as plain data that can be saved, printed and bucketed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ORACLES = ("crash", "structure", "signature", "equivalence", "gradients", "idempotence", "downstream")


@dataclass
class Finding:
    """What an oracle saw: ``oracle`` is one of ORACLES, ``kind`` a short stable code.

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
