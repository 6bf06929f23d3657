"""The example database a campaign saves failures in: a local directory, optionally backed
by the database a CI job publishes as a GitHub artifact (Hypothesis's own classes)."""

from __future__ import annotations

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

SHARED_ARTIFACT = "fxfuzz-db"


def open_database(path: str, shared: str | None = None) -> ExampleDatabase:
    """``path`` read and written; ``shared`` (``OWNER/REPO``) read only, from the latest
    ``fxfuzz-db`` artifact of that repository's workflows (needs ``GITHUB_TOKEN``)."""
    local = DirectoryBasedExampleDatabase(path)
    if not shared:
        return local
    owner, _, repo = shared.partition("/")
    remote = GitHubArtifactDatabase(owner, repo, artifact_name=SHARED_ARTIFACT)
    return MultiplexedDatabase(local, ReadOnlyDatabase(remote))
