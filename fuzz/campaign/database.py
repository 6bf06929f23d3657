"""The example database a campaign saves failures in: a local directory, with any shared
databases behind it (Hypothesis's own classes): Redis, read and written by every shard of a
campaign, and the database a CI job publishes as a GitHub artifact, read only.

A shared database that goes away mid-campaign is dropped, once, with a note; the local
directory still holds everything found, so nothing is lost. Entries are data anyone with
the folder or the artifact may have written: each is read only as a regular file (or zip
member) of at most ``MAX_ENTRY_BYTES``, anything else left unread with a note, and each entry
is written whole or not at all (``fxfuzz.core.fileio``)."""

from __future__ import annotations

import os
import re
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import redis
from fxfuzz.core.errors import UsageError
from fxfuzz.core.fileio import is_temporary, read_bounded, size_text, write_atomic
from fxfuzz.core.serialize import MAX_CASE_BYTES
from fxfuzz.core.settings import DatabaseSpec, redact
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)
from hypothesis.errors import HypothesisWarning
from hypothesis.extra.redis import RedisExampleDatabase

SHARED_ARTIFACT = "fxfuzz-db"
# rediss:// is Redis over TLS (redis-py's SSLConnection; ssl_* query parameters set it up).
REDIS_PREFIXES = ("redis://", "rediss://")
GITHUB_PREFIX = "github:"
# Seconds a Redis call may block: a campaign must not stall on a dead server.
REDIS_TIMEOUT_S = 5.0
# An entry is one serialized example: as large as a repro may be.
MAX_ENTRY_BYTES = MAX_CASE_BYTES
# A GitHub repository as GitHub names one: the owner (a user or organization) letters, digits
# and single inner hyphens, up to 39; the repository letters, digits, ., - and _, up to 100,
# but not . or .. (which would make the API's URL a path of another resource).
_GITHUB_REPO = re.compile(r"[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")


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
            if not _GITHUB_REPO.fullmatch(value[len(GITHUB_PREFIX) :]):
                raise UsageError(
                    f"--db {value[:300]}: expected github:OWNER/REPO, a repository name as GitHub allows one"
                )
            shared.append(value)
        elif "://" in value:
            raise UsageError(
                f"--db {redact(value)}: not a directory, redis://host:port/db, rediss://host:port/db or github:OWNER/REPO"
            )
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
        client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        # redis-py hands a query parameter it does not know to the connection as a keyword, which
        # fails only when one is made: made here (no socket is opened) so a misspelt one is bad input.
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except (ValueError, TypeError) as e:  # TypeError: a parameter redis-py does not take
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        why = f"unknown query parameter {unknown[1]!r}" if unknown else _scrubbed(url, e)
        raise UsageError(f"--db {redact(url)}: {why}") from None
    return client


def check_reachable(spec: DatabaseSpec) -> None:
    """Before a campaign starts: ping every Redis database, and fetch every GitHub artifact
    database (into Hypothesis's cache, where the workers find it). An unreachable Redis, one
    that refuses the password, or an artifact that cannot be read (no access, no answer, not a
    zip) is bad input. A repository that has published no artifact yet (the first nightly has
    not run) is not: the campaign goes on, and the worker that reads it says so in a note."""
    for url in spec.shared:
        if url.startswith(REDIS_PREFIXES):
            try:
                redis_client(url).ping()
            except (redis.RedisError, OSError, ValueError) as e:  # ValueError: an ssl_* value TLS refuses
                raise UsageError(f"--db {redact(url)}: unreachable: {_scrubbed(url, e)}") from None
        else:
            artifact = ArtifactDatabase(url, lambda note: None)
            artifact.fetch(b"")
            if artifact.unreadable:
                raise UsageError(f"--db {url}: cannot be read: {artifact.unreadable}")


class CheckedDirectoryDatabase(DirectoryBasedExampleDatabase):
    """Hypothesis's directory database (same layout: a folder per key, a file per entry named
    by its hash), its entries read with ``read_bounded`` (a FIFO, a device, a link to one or an
    entry over ``MAX_ENTRY_BYTES`` is left unread, with a note) and written with
    ``write_atomic`` (a full disk leaves no empty or truncated entry; a note names it)."""

    def __init__(self, path: str, note: Callable[[str], None]) -> None:
        super().__init__(path)
        self.note = note

    def fetch(self, key: bytes) -> Iterator[bytes]:
        folder = self._key_path(key)
        try:
            names = sorted(os.listdir(folder))
        except OSError:  # no entry saved under this key yet
            return
        for name in names:
            if is_temporary(name):  # being written, or left by a write that was killed
                continue
            path = os.path.join(folder, name)
            try:
                yield read_bounded(path, MAX_ENTRY_BYTES)
            except FileNotFoundError:  # deleted meanwhile: another process kept a smaller example
                continue
            except OSError as e:
                self.note(f"left database entry {path} unread: {e.strerror or e}")

    def save(self, key: bytes, value: bytes) -> None:
        # Always written, even when an entry of that name exists: the name is the hash of what
        # should be in it, and an entry an older write left empty or cut short must be replaced.
        # Hypothesis's list of keys (for its change listeners, which fxfuzz does not use) is not kept.
        path = self._value_path(key, value)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(path), value)
        except OSError as e:
            self.note(
                f"could not save database entry {e.filename or path}: {e.strerror or e} (the finding is in the report all the same)"
            )


class ArtifactDatabase(GitHubArtifactDatabase):
    """Hypothesis's GitHub artifact database (``github:OWNER/REPO``, artifact ``fxfuzz-db``),
    each entry's size checked in the zip before it is decompressed and read with that bound,
    and what Hypothesis only warns of (no artifact, no access, a corrupt zip, an expired one
    used in its place) said in a note, so it reaches the summary and report.json rather than a
    worker's log. Read through ``ReadOnlyDatabase``."""

    def __init__(self, url: str, note: Callable[[str], None]) -> None:
        owner, _, repo = url[len(GITHUB_PREFIX) :].partition("/")
        super().__init__(owner, repo, artifact_name=SHARED_ARTIFACT)
        self.url, self.note = url, note
        self.unreadable: str | None = None  # why the artifact could not be read, once it could not

    def fetch(self, key: bytes) -> Iterable[bytes]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", HypothesisWarning)
            try:
                entries = list(self._entries(key))
            except (OSError, ValueError, KeyError, TypeError, EOFError, zlib.error) as e:  # BadZipFile is a ValueError
                # A listing or zip unlike what Hypothesis expects: the rest of the artifact is not read.
                self._disabled, entries = True, []
                self.unreadable = f"{type(e).__name__}: {e}"
                self.note(
                    f"the shared database {self.url} cannot be read ({self.unreadable}); the campaign went on without it"
                )
        said = [str(w.message).strip() for w in caught if issubclass(w.category, HypothesisWarning)]
        # Hypothesis disables the database after its warnings. It found no artifact at all (not
        # an error: none is published yet) when that was its only word and it got no zip.
        if said and self._disabled and not (len(said) == 1 and self._artifact is None):
            self.unreadable = self.unreadable or " ".join(said)
        if said:  # one note of all it said: the same words from every worker, said once
            gone = "; the campaign went on without its saved failures" if self._disabled else ""
            self.note(f"the shared database {self.url}: {' '.join(said)}{gone}")
        return entries

    def _entries(self, key: bytes) -> Iterator[bytes]:
        # The attributes Hypothesis's own fetch reads, which reads each member whole.
        if not self._initialized and not self._disabled:
            self._initialize_db()
        if self._disabled or self._artifact is None or self._access_cache is None:
            return
        with zipfile.ZipFile(self._artifact) as zf:
            for member in sorted(self._access_cache.get(self._key_path(key), ())):
                info, data = zf.getinfo(member.as_posix()), b""
                if info.file_size <= MAX_ENTRY_BYTES:  # what the zip says, before decompressing any
                    with zf.open(info) as fh:
                        data = fh.read(MAX_ENTRY_BYTES + 1)  # and read within the bound: a zip may lie
                if info.file_size > MAX_ENTRY_BYTES or len(data) > MAX_ENTRY_BYTES:
                    self.note(f"left entry {member} of {self.url} unread: larger than {size_text(MAX_ENTRY_BYTES)}")
                    continue
                yield data


class FallibleDatabase(ExampleDatabase):
    """A shared database that may fail: its first error turns it off for the rest of the
    campaign and calls ``on_lost`` once, so the campaign goes on with the others."""

    def __init__(
        self, db: ExampleDatabase, name: str, errors: tuple[type[BaseException], ...], on_lost: Callable[[str], None]
    ) -> None:
        super().__init__()
        self.db, self.name, self.errors, self.on_lost = db, name, errors, on_lost
        self.lost: str | None = None

    def _fail(self, e: BaseException) -> None:
        self.lost = f"{type(e).__name__}: {e}"
        # The same words from every worker, so the campaign says it once.
        self.on_lost(
            f"the shared database {self.name} became unreachable; went on with the local one, which holds all found"
        )

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


def _shared(url: str, note: Callable[[str], None]) -> ExampleDatabase:
    if url.startswith(REDIS_PREFIXES):
        return FallibleDatabase(RedisExampleDatabase(redis_client(url)), redact(url), (redis.RedisError, OSError), note)
    return ReadOnlyDatabase(ArtifactDatabase(url, note))


def open_database(spec: DatabaseSpec, note: Callable[[str], None]) -> ExampleDatabase:
    """``spec.local`` read and written, in front of every shared database. ``note`` hears, in
    one line each, of what the user must learn from the summary and report.json: a shared
    database that fails or cannot be read, an entry left unread, an entry that could not be
    saved."""
    local = CheckedDirectoryDatabase(spec.local, note)
    if not spec.shared:
        return local
    return MultiplexedDatabase(local, *(_shared(url, note) for url in spec.shared))
