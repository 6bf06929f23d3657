"""The example database a campaign saves failures in: a local directory, with any shared
databases behind it (Hypothesis's own classes): Redis, read and written by every shard of a
campaign, and the database a CI job publishes as a GitHub artifact, read only.

A shared database that goes away mid-campaign is dropped, once, with a note; the local
directory still holds everything found, so nothing is lost."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
from fxfuzz.core.errors import UsageError
from fxfuzz.core.settings import DatabaseSpec, redact
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)
from hypothesis.extra.redis import RedisExampleDatabase

SHARED_ARTIFACT = "fxfuzz-db"
# rediss:// is Redis over TLS (redis-py's SSLConnection; ssl_* query parameters set it up).
REDIS_PREFIXES = ("redis://", "rediss://")
GITHUB_PREFIX = "github:"
# Seconds a Redis call may block: a campaign must not stall on a dead server.
REDIS_TIMEOUT_S = 5.0


def parse_databases(values: Sequence[str], default_local: str) -> DatabaseSpec:
    """The ``--db`` values as a spec: at most one directory (``default_local`` when none) and
    any number of shared databases; malformed ones raise UsageError."""
    local: str | None = None
    shared: list[str] = []
    for value in values:
        if value.startswith(REDIS_PREFIXES):
            redis_client(value)  # a malformed URL fails here, in one line
            shared.append(value)
        elif value.startswith(GITHUB_PREFIX):
            if not re.fullmatch(r"[\w.-]+/[\w.-]+", value[len(GITHUB_PREFIX) :]):
                raise UsageError(f"--db {value}: expected github:OWNER/REPO")
            shared.append(value)
        elif "://" in value:
            raise UsageError(f"--db {redact(value)}: not a directory, redis://host:port/db, rediss://host:port/db or github:OWNER/REPO")
        elif local is not None and local != value:
            raise UsageError(f"--db names two directories ({local}, {value}): give one local directory")
        else:
            local = value
    return DatabaseSpec(local or default_local, tuple(dict.fromkeys(shared)))


def _password(url: str) -> str | None:
    try:
        return redis.connection.parse_url(url).get("password")
    except ValueError:
        return None


def _scrubbed(url: str, e: BaseException) -> str:
    """``e``'s message without ``url``'s password, should the error quote it."""
    message, password = str(e), _password(url)
    return message.replace(password, "***") if password else message


def redis_client(url: str) -> redis.Redis:
    """A Redis client for ``url`` with short timeouts; UsageError if the URL is malformed."""
    try:
        return redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
    except (ValueError, TypeError) as e:  # TypeError: an ssl_* parameter redis-py does not take
        raise UsageError(f"--db {redact(url)}: {_scrubbed(url, e)}") from None


def check_reachable(spec: DatabaseSpec) -> None:
    """Ping every Redis database before a campaign starts: an unreachable one, or one that
    refuses the password, is bad input."""
    for url in spec.shared:
        if url.startswith(REDIS_PREFIXES):
            try:
                redis_client(url).ping()
            except (redis.RedisError, OSError, ValueError) as e:  # ValueError: an ssl_* value TLS refuses
                raise UsageError(f"--db {redact(url)}: unreachable: {_scrubbed(url, e)}") from None


class FallibleDatabase(ExampleDatabase):
    """A shared database that may fail: its first error turns it off for the rest of the
    campaign and calls ``on_lost`` once, so the campaign goes on with the others."""

    def __init__(self, db: ExampleDatabase, name: str, errors: tuple[type[BaseException], ...], on_lost: Callable[[str], None]) -> None:
        super().__init__()
        self.db, self.name, self.errors, self.on_lost = db, name, errors, on_lost
        self.lost: str | None = None

    def _fail(self, e: BaseException) -> None:
        self.lost = f"{type(e).__name__}: {e}"
        # The same words from every worker, so the campaign says it once.
        self.on_lost(f"the shared database {self.name} became unreachable; went on with the local one, which holds all found")

    def _call(self, method: Callable[..., Any], *args: bytes) -> Any:
        """``method(*args)`` while the database answers; None once it has failed."""
        if self.lost is None:
            try:
                return method(*args)
            except self.errors as e:
                self._fail(e)
        return None

    def save(self, key: bytes, value: bytes) -> None:
        self._call(self.db.save, key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call(self.db.delete, key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        # Read whole, so a failure cannot strike mid-iteration.
        return self._call(lambda k: list(self.db.fetch(k)), key) or []

def _shared(url: str, on_lost: Callable[[str], None]) -> ExampleDatabase:
    if url.startswith(REDIS_PREFIXES):
        return FallibleDatabase(RedisExampleDatabase(redis_client(url)), redact(url), (redis.RedisError, OSError), on_lost)
    owner, _, repo = url[len(GITHUB_PREFIX) :].partition("/")
    # Hypothesis's artifact database already turns its own download failures into warnings.
    return ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo, artifact_name=SHARED_ARTIFACT))


def open_database(spec: DatabaseSpec, on_lost: Callable[[str], None] = lambda note: None) -> ExampleDatabase:
    """``spec.local`` read and written, in front of every shared database (``on_lost`` hears
    of a shared one that fails)."""
    local = DirectoryBasedExampleDatabase(spec.local)
    if not spec.shared:
        return local
    return MultiplexedDatabase(local, *(_shared(url, on_lost) for url in spec.shared))
