"""What a standalone repro needs to judge its finding as the campaign did: the contract."""

from __future__ import annotations

from typing import Any


def judged_contract(doc: dict[str, Any]) -> dict[str, Any]:
    """The contract a repro document's pass was held to, as plain data for the standalone
    check: the ``--contract`` name given (None: the pass's own), and whether it refines and
    whether its result is differentiated, as the document recorded them from the pass's
    identity (``fxfuzz.repro.files.repro_document``): no pass is loaded to write a repro."""
    return {"given": doc.get("contract"), "refines": doc["refines"], "differentiated": doc["differentiated"]}
