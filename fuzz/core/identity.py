"""The pass under test as one serialisable value, resolved once per process.

A command (``fxfuzz run``, ``gate``, ``reduce``, the pytest plugin) names a pass and, with
``--contract``, what to hold it to. ``resolve_pass`` is the one place where that name and that
option become a loaded ``Pass`` and its ``PassIdentity``: the command's process calls it once;
each worker process calls it once more, with what the identity says, to have the callable. The
identity then travels as plain data where the pass itself cannot: in the campaign's settings
(``CampaignSettings.identity``), so in every worker's start message and in report.json's
``settings``; on the campaign's result, to the repro writer, which reads the contract from it
instead of loading the pass again; and into the database key (``PassIdentity.database_key``),
which the supervisor computes without loading anything. The value imports nothing heavy (the
settings, which the pytest plugin reads without torch, carry it); ``resolve_pass`` imports the
loader when called.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fxfuzz.core.choices import CONTRACT_SOURCES

if TYPE_CHECKING:
    from fxfuzz.core.passes import Pass


@dataclass(frozen=True)
class PassIdentity:
    """What a loaded pass is, as JSON-able data (``to_data``/``from_data``).

    ``spec``: what the user named (a registered name, an import spec or a pipeline of them);
    ``target``: the import spec it resolved to (the database is keyed by it); ``given``: the
    ``--contract`` name asked for (None: the pass's own); ``contract``: the name of the contract
    it is held to, and ``contract_source`` where that came from
    (``fxfuzz.core.choices.CONTRACT_SOURCES``); ``refines`` and ``differentiated``: what that
    contract says of raises and gradients (what a standalone repro judges by); ``eliminates``:
    the qualified names of the calls the contract says must be gone from the result.
    """

    spec: str
    target: str
    given: str | None
    contract: str
    contract_source: str
    refines: bool
    differentiated: bool
    eliminates: tuple[str, ...] = ()

    @property
    def key_name(self) -> str:
        """The name the database keys this pass's examples by: that of its import spec, as
        loaded passes were keyed before fxfuzz became one package, so databases written then
        keep replaying."""
        return f"fuzz.passes:{self.target}"

    def database_key(self, domain: str) -> bytes:
        """Where a campaign of this pass on ``domain`` keeps its examples (``store_key``)."""
        return store_key(self.key_name, domain)

    def to_data(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "target": self.target,
            "given": self.given,
            "contract": self.contract,
            "contract_source": self.contract_source,
            "refines": self.refines,
            "differentiated": self.differentiated,
            "eliminates": list(self.eliminates),
        }

    @classmethod
    def from_data(cls, data: Any) -> PassIdentity:
        """``to_data`` read back; ValueError, one line, for anything else (report.json is read
        as untrusted input)."""
        if not isinstance(data, dict):
            raise ValueError("a pass identity is an object")
        for name in ("spec", "target", "contract", "contract_source"):
            if not isinstance(data.get(name), str):
                raise ValueError(f"a pass identity's {name!r} is a string")
        if data.get("contract_source") not in CONTRACT_SOURCES:
            raise ValueError(f"a pass identity's 'contract_source' is one of {', '.join(CONTRACT_SOURCES)}")
        if data.get("given") is not None and not isinstance(data["given"], str):
            raise ValueError("a pass identity's 'given' is a contract name or null")
        for name in ("refines", "differentiated"):
            if not isinstance(data.get(name), bool):
                raise ValueError(f"a pass identity's {name!r} is true or false")
        eliminates = data.get("eliminates")
        if not isinstance(eliminates, list) or not all(isinstance(e, str) for e in eliminates):
            raise ValueError("a pass identity's 'eliminates' is a list of names")
        return cls(
            data["spec"],
            data["target"],
            data["given"],
            data["contract"],
            data["contract_source"],
            data["refines"],
            data["differentiated"],
            tuple(eliminates),
        )


def store_key(name: str, domain: str) -> bytes:
    """The database key of the examples of the pass keyed as ``name`` on ``domain``."""
    return hashlib.sha384(f"fxfuzz|{name}|{domain}".encode()).digest()


def identity_of(pass_fn: Pass, given: str | None = None) -> PassIdentity:
    """The identity of ``pass_fn``, loaded with the ``--contract`` name ``given``."""
    from fxfuzz.core.serialize import target_name

    contract = pass_fn.contract
    return PassIdentity(
        pass_fn.spec,
        pass_fn.target,
        given,
        contract.name,
        pass_fn.contract_source,
        contract.refines,
        contract.differentiated,
        tuple(target_name(t) for t in contract.eliminates),
    )


def resolve_pass(spec: str, contract: str | None = None) -> tuple[Pass, PassIdentity]:
    """The pass ``spec`` names held to the contract named ``contract`` (``--contract``; None:
    its own), and its identity. UsageError or PassSpecError, one line, for a bad name or spec.
    Called once per process: by the command, and by each worker with its identity's
    ``spec`` and ``given``."""
    from fxfuzz.core import passes
    from fxfuzz.core.contract import contract_option

    pass_fn = passes.load_pass(spec, contract_option(contract))
    return pass_fn, identity_of(pass_fn, contract)


def identify(spec: str, contract: str | None = None) -> PassIdentity:
    """The identity alone of the pass ``spec`` names (``resolve_pass``)."""
    return resolve_pass(spec, contract)[1]
