"""One campaign's settings as one frozen value, every default defined here once.

The command line builds it (``CampaignSettings.from_options``: every field whose name a parsed
option carries, and the pass's identity, resolved once), passes it whole through the gate, the
levels and the supervisor to each worker (as JSON, ``to_data``/``from_data``), and writes it
whole into report.json's meta (``report_form``, Redis passwords left out). Torch-free, so
``fxfuzz --help`` and the pytest plugin can read the defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from fxfuzz.core.choices import DEFAULT_PROGRAM_SHARE, DEFAULT_STAGE_SHARE
from fxfuzz.core.identity import PassIdentity

# ``--budget`` alone, or neither limit: seconds a campaign runs.
DEFAULT_BUDGET_S = 60.0
# A limit that never binds: ``--max-examples`` alone runs that many examples however long.
NO_TIME_LIMIT_S = 1e9
NO_EXAMPLE_LIMIT = 1_000_000


@dataclass(frozen=True)
class DatabaseSpec:
    """Where examples live: ``local`` (a directory, always written first) and ``shared``
    (``redis://`` and ``rediss://`` URLs, read and written; ``github:OWNER/REPO``, read only)."""

    local: str
    shared: tuple[str, ...] = ()


@dataclass(frozen=True)
class CampaignSettings:
    """What a campaign is asked to do; the pass and the hooks a caller plugs in travel apart."""

    budget_s: float = DEFAULT_BUDGET_S
    max_examples: int = NO_EXAMPLE_LIMIT
    seed: int = 0
    domain: str = "export"  # the commands default to the pass's own (fxfuzz.core.passes.default_domain)
    level: str = "graph"
    # Seconds minimizing one new bucket before its smallest example so far is kept; 0 keeps
    # each bucket's first example (a quick CI job that needs the verdict, not small repros).
    max_shrink_s: float = 60.0
    stage_share: float = DEFAULT_STAGE_SHARE  # share of examples also taken through export's stages
    program_share: float = DEFAULT_PROGRAM_SHARE  # share of programs also checked after later stages, at other sizes
    device: str = "cpu"  # verify's device: cuda adds CUDA runs and CPU/CUDA parity
    workers: int = 1
    example_timeout_s: float = 60.0  # seconds before a pass counts as hung (worker processes only)
    # The pass under test as the command resolved it (fxfuzz.core.identity): its spec, the
    # --contract given, the contract it is held to. Required by campaigns in worker processes,
    # which load the pass from it; None for a caller of run_campaign with its own callable,
    # held to that callable's own contract.
    identity: PassIdentity | None = None
    shard: tuple[int, int] = (1, 1)  # (K, N): shard K of N, seeds apart from the other shards'
    known: frozenset[str] = frozenset()  # baseline buckets: counted, not shrunk
    coverage: bool = False  # measure line and branch coverage of the pass's source (workers only)
    db: DatabaseSpec | None = None  # None: examples are neither read nor saved
    # Run the database's saved failures first; in a parallel campaign only the first worker does.
    replay_saved: bool = True

    def pass_identity(self) -> PassIdentity:
        """``identity``, which a campaign in worker processes needs: they load the pass from it."""
        if self.identity is None:
            raise ValueError("a campaign in worker processes needs CampaignSettings.identity: the pass they load")
        return self.identity

    @classmethod
    def from_options(cls, options: object, **resolved: Any) -> CampaignSettings:
        """Settings from parsed options: ``resolved`` values first (what needed checking or
        reading), then every option named like a field, then the defaults."""
        values = {f.name: getattr(options, f.name) for f in dataclasses.fields(cls) if hasattr(options, f.name)}
        return cls(**{**values, **resolved})

    def to_data(self) -> dict[str, Any]:
        """The settings as JSON data, exactly (``from_data`` reads them back)."""
        data = dataclasses.asdict(self)
        data["known"] = sorted(self.known)
        data["identity"] = None if self.identity is None else self.identity.to_data()
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> CampaignSettings:
        db, identity = data["db"], data["identity"]
        return cls(
            **{
                **data,
                "shard": tuple(data["shard"]),
                "known": frozenset(data["known"]),
                "db": None if db is None else DatabaseSpec(db["local"], tuple(db["shared"])),
                "identity": None if identity is None else PassIdentity.from_data(identity),
            }
        )

    def report_form(self) -> dict[str, Any]:
        """``to_data`` as report.json records it: Redis passwords left out, and the pass's
        identity, which report.json records once, beside (from the campaign's result)."""
        data = self.to_data()
        del data["identity"]
        if self.db is not None:
            data["db"] = {"local": self.db.local, "shared": [redact(url) for url in self.db.shared]}
        return data


def redact(url: str) -> str:
    """``url`` with its password (``user:PASSWORD@`` or ``?password=``, as redis-py reads
    them) replaced by ``***``, for reports and messages."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not even a URL: nothing of it is shown
        return url.partition(":")[0] + ":(malformed URL)"
    # The last @ ends the user part, as for urllib and redis-py: a password may hold an @.
    user, at, host = parts.netloc.rpartition("@")
    if at and ":" in user:
        user = user.partition(":")[0] + ":***"
    query = "&".join(
        f"{k}={'***' if unquote(k).lower() == 'password' else v}" if eq else k
        for k, eq, v in (item.partition("=") for item in parts.query.split("&") if parts.query)
    )
    return parts._replace(netloc=user + at + host, query=query).geturl()
