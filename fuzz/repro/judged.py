"""What a standalone repro needs to judge its finding as the campaign did: the contract."""

from __future__ import annotations

from typing import Any

from fxfuzz.core.contract import contract_option
from fxfuzz.core.errors import PassSpecError, SerializeError
from fxfuzz.core.passes import load_pass


def judged_contract(doc: dict[str, Any]) -> dict[str, Any]:
    """The contract a repro document's pass was held to, as plain data for the standalone
    check: the ``--contract`` name given (None: the pass's own), and whether it refines and
    whether its result is differentiated."""
    try:
        contract = load_pass(doc["pass"], contract_option(doc.get("contract"))).contract
    except PassSpecError as e:  # a document naming no pass this process can load has no repro
        raise SerializeError(f"repro of {doc.get('bucket')!r}: {e}") from None
    return {"given": doc.get("contract"), "refines": contract.refines, "differentiated": contract.differentiated}
