"""Files fxfuzz reads that someone else may have written (baselines, database entries, repros,
corpus files, shard reports) are refused unread unless they are regular files within their
bound, without blocking on a FIFO or reading a device or a sparse GiB; files fxfuzz writes
(repros, database entries) are whole or absent after a full disk, and the error names the file
that failed; a database named on the command line that cannot be read is an error or a note,
never a worker-log line only (issue 48, items 2, 6 and 8)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import urllib.error
import urllib.request
import zipfile

import pytest
from fxfuzz.campaign import database as database_mod
from fxfuzz.campaign.database import (
    ArtifactDatabase,
    CheckedDirectoryDatabase,
    check_reachable,
    open_database,
    parse_databases,
)
from fxfuzz.campaign.store import GRAPH_CASES, SavedFailures
from fxfuzz.core import fileio
from fxfuzz.core.fileio import RefusedFile, read_bounded, write_atomic
from fxfuzz.core.identity import identify
from fxfuzz.core.settings import DatabaseSpec
from fxfuzz.repro.files import load_repro, repro_document, write_repro
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

GIB = 1 << 30
KEY = b"some key"


@pytest.fixture
def reads(monkeypatch):
    """The files ``read_bounded`` reads from, as /proc names them: a refused one must not be
    read at all."""
    files = []
    real = os.read
    monkeypatch.setattr(
        fileio.os, "read", lambda fd, n: files.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd, n)
    )
    return files


def _hostile(folder, kind: str, suffix: str = "") -> str:
    """A path in ``folder`` naming a file no reader may read: a FIFO (no writer: opening it
    blocks), a link to /dev/zero (never ends), a sparse GiB, a directory."""
    path = os.path.join(folder, kind + suffix)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(GIB)
    else:
        os.mkdir(path)
    return path


HOSTILE = ["fifo", "dev-zero", "sparse", "directory"]


# ---------------------------------------------------------------------------- the helpers


@pytest.mark.parametrize("kind", HOSTILE)
def test_read_bounded_refuses_what_is_not_a_small_regular_file_unread(tmp_path, kind, reads):
    path = _hostile(tmp_path, kind)
    with pytest.raises(RefusedFile) as e:
        read_bounded(path, 64 << 20)
    assert reads == [] and e.value.filename == path
    assert e.value.strerror == (
        "larger than 64 MiB (1073741824 bytes)"
        if kind == "sparse"
        else f"not a regular file ({'a FIFO' if kind == 'fifo' else 'a character device' if kind == 'dev-zero' else 'a directory'})"
    )


def test_read_bounded_reads_a_regular_file_and_a_link_to_one_whole(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 200_000)
    os.symlink(tmp_path / "f", tmp_path / "link")
    assert read_bounded(str(tmp_path / "link"), 200_000) == b"x" * 200_000
    with pytest.raises(RefusedFile, match="larger than 199999 bytes"):
        read_bounded(str(tmp_path / "f"), 199_999)


def test_read_bounded_stops_at_its_bound_when_the_file_grows(tmp_path, monkeypatch):
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 10)
    real = os.read

    def grows(fd, n):  # the file grows by 100 bytes between fstat and each read
        with open(path, "ab") as fh:
            fh.write(b"y" * 100)
        return real(fd, n)

    monkeypatch.setattr(fileio.os, "read", grows)
    with pytest.raises(RefusedFile, match="grew past 1000 bytes while read"):
        read_bounded(str(path), 1000)


@contextlib.contextmanager
def full_disk(monkeypatch, fail_fsync=False):
    """Every os.write into a file fills the disk: the first writes half of what it is given,
    the next raises ENOSPC (or, with ``fail_fsync``, every write goes in and the flush fails,
    as on a file system that reserves blocks late)."""
    real_write = os.write
    started: set[int] = set()

    def write(fd, data):
        if fail_fsync or not os.path.isfile(f"/proc/self/fd/{fd}"):
            return real_write(fd, data)
        if fd in started:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        started.add(fd)
        return real_write(fd, bytes(data[: max(1, len(data) // 2)]))

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "write", write)
    if fail_fsync:
        monkeypatch.setattr(fileio.os, "fsync", fsync)
    yield
    monkeypatch.undo()


@pytest.mark.parametrize("fail_fsync", [False, True], ids=["write", "fsync"])
def test_write_atomic_on_a_full_disk_leaves_the_old_file_or_none_and_names_it(tmp_path, monkeypatch, fail_fsync):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text("whole")
    for path in (old, new):
        with full_disk(monkeypatch, fail_fsync), pytest.raises(OSError) as e:
            write_atomic(str(path), "x" * 10_000)
        assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert old.read_text() == "whole" and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]  # no temporary file left
    write_atomic(str(new), "x" * 10_000)  # the disk freed: written whole
    assert new.read_text() == "x" * 10_000


# ---------------------------------------------------------------------------- repros


def _repro_doc():
    from fxfuzz.core.serialize import case_to_dict
    from handmade import pytree_case

    finding = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
    return repro_document("equivalence-value_mismatch-1", finding, case_to_dict(pytree_case()), identify("set_grad"))


def test_repros_on_a_full_disk_are_whole_or_absent_and_the_error_names_the_file(tmp_path, monkeypatch):
    doc = _repro_doc()
    with full_disk(monkeypatch), pytest.raises(OSError) as e:
        write_repro(str(tmp_path), doc)
    # The .json is written first: it is the one named, and neither file is left behind.
    assert e.value.filename == str(tmp_path / "equivalence-value_mismatch-1.json") and e.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
    py = write_repro(str(tmp_path), doc)
    assert load_repro(py).case.compute_nodes() == load_repro(py.removesuffix(".py") + ".json").case.compute_nodes() > 0


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("suffix", [".json", ".py"])
def test_a_repro_that_is_not_a_small_regular_file_is_one_line(tmp_path, kind, suffix, reads, refused):
    path = _hostile(tmp_path, kind, suffix)
    line = refused(["repro", path])
    assert path in line and ("not a regular file" in line or "larger than 64 MiB" in line) and reads == []


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_gate_corpus_skips_hostile_files_with_a_note(tmp_path, kind, reads):
    from fxfuzz.repro.files import saved_cases

    _hostile(tmp_path, kind, ".json")
    corpus = saved_cases(str(tmp_path), 60)
    assert corpus.cases == [] and reads == []
    if kind != "directory":  # os.walk lists a directory as one, not as a file
        (note,) = corpus.unloadable
        assert note.startswith("skipped corpus file (kept): ") and (
            "not a regular file" in note or "larger than" in note
        )


# ---------------------------------------------------------------------------- --known


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_known_file_that_is_not_a_small_regular_file_is_one_line(tmp_path, kind, reads, refused):
    path = _hostile(tmp_path, kind)
    line = refused(["run", "--pass", "identity", "--known", path, "--no-db", "--report-dir", str(tmp_path / "r")])
    assert f"cannot read known-findings file {path}: " in line and reads == []


# ---------------------------------------------------------------------------- the directory database


def _entry_folder(db: CheckedDirectoryDatabase) -> str:
    db.save(KEY, b"good")
    return str(db._key_path(KEY))


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_database_entry_is_left_unread_with_a_note(tmp_path, kind, reads):
    notes: list[str] = []
    db = CheckedDirectoryDatabase(str(tmp_path), notes.append)
    folder = _entry_folder(db)
    path = _hostile(folder, kind)
    assert list(db.fetch(KEY)) == [b"good"] and set(reads) == {str(db._value_path(KEY, b"good"))}
    assert notes == [
        f"left database entry {path} unread: "
        + ("larger than 64 MiB (1073741824 bytes)" if kind == "sparse" else notes[0].split("unread: ")[1])
    ]
    assert "not a regular file" in notes[0] or kind == "sparse"
    assert os.path.lexists(path)  # left where it is: fxfuzz did not write it


def test_a_database_entry_is_whole_or_absent_on_a_full_disk(tmp_path, monkeypatch):
    notes: list[str] = []
    db = CheckedDirectoryDatabase(str(tmp_path), notes.append)
    with full_disk(monkeypatch):
        db.save(KEY, b"x" * 1000)
    entry = db._value_path(KEY, b"x" * 1000)
    assert not os.listdir(entry.parent)  # no empty, truncated or temporary entry
    assert notes == [
        f"could not save database entry {entry}: No space left on device (the finding is in the report all the same)"
    ]
    # An entry an older write cut short is replaced whole by the next save of its value.
    entry.write_bytes(b"")
    db.save(KEY, b"x" * 1000)
    assert list(db.fetch(KEY)) == [b"x" * 1000]


def test_temporary_files_of_an_interrupted_save_are_not_entries(tmp_path):
    db = CheckedDirectoryDatabase(str(tmp_path), lambda note: None)
    folder = _entry_folder(db)
    (db._key_path(KEY) / ".0123.abcdef.tmp").write_bytes(b"half")
    assert list(db.fetch(KEY)) == [b"good"] and len(os.listdir(folder)) == 2


def test_a_campaign_notes_a_hostile_entry_in_its_result(tmp_path):
    """The notes reach the campaign's result, which the summary and report.json print."""
    from fxfuzz.campaign.engine import run_campaign
    from fxfuzz.campaign.store import database_key
    from fxfuzz.core.passes import load_pass
    from fxfuzz.core.settings import CampaignSettings

    pass_fn = load_pass("identity")
    settings = CampaignSettings(max_examples=1, db=DatabaseSpec(str(tmp_path)))
    key = database_key(pass_fn, settings.domain) + b".fxfuzz-failures"
    folder = CheckedDirectoryDatabase(str(tmp_path), lambda note: None)._key_path(key)
    folder.mkdir(parents=True)
    path = _hostile(folder, "fifo")
    result = run_campaign(pass_fn, settings)
    assert f"left database entry {path} unread: not a regular file (a FIFO)" in result.notes


# ---------------------------------------------------------------------------- the GitHub artifact database


@pytest.fixture
def hypothesis_home(tmp_path):
    """Hypothesis's storage folder (where it caches downloaded artifacts) in ``tmp_path``."""
    before = storage_directory(intent_to_write=False).home_directory
    set_hypothesis_home_dir(tmp_path / ".hypothesis")
    yield
    set_hypothesis_home_dir(before)


def _zip(entries: dict[bytes, list[bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for key, values in entries.items():
            for i, value in enumerate(values):
                zf.writestr(f"{ArtifactDatabase._key_path(key)}/{i:016x}", value)
    return out.getvalue()


def github(monkeypatch, artifact: bytes | None = None, status: int | None = None) -> None:
    """GitHub's API as urllib sees it: the artifact list (with ``artifact`` as fxfuzz-db, or
    none) and its download, or an HTTP ``status`` error for every request."""

    def urlopen(request):
        if status is not None:
            raise urllib.error.HTTPError(request.full_url, status, "refused", {}, None)  # type: ignore[arg-type]
        if request.full_url.endswith("/actions/artifacts"):
            listed = [
                {"name": "fxfuzz-db", "created_at": "2026-11-27T00:00:00Z", "archive_download_url": "https://x/zip"}
            ]
            return contextlib.nullcontext(
                io.BytesIO(json.dumps({"artifacts": listed if artifact is not None else []}).encode())
            )
        return contextlib.nullcontext(io.BytesIO(artifact or b""))

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)


def test_an_artifact_that_cannot_be_read_is_exit_2_at_start(tmp_path, monkeypatch, hypothesis_home, refused):
    argv = [
        "run",
        "--pass",
        "identity",
        "--db-shared",
        "octo/repo",
        "--db",
        str(tmp_path / "db"),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    github(monkeypatch, status=401)
    assert "--db github:octo/repo: cannot be read: Authorization failed" in refused(argv)
    github(monkeypatch, artifact=b"not a zip")
    assert "--db github:octo/repo: cannot be read: The downloaded artifact from GitHub is invalid" in refused(argv)


def test_a_repository_with_no_artifact_yet_is_a_note_not_an_error(monkeypatch, hypothesis_home):
    github(monkeypatch)  # the nightly has not published one yet
    spec = parse_databases(["github:octo/repo"], "local")
    check_reachable(spec)  # not bad input
    notes: list[str] = []
    db = open_database(DatabaseSpec("local-db", spec.shared), notes.append)
    assert list(db.fetch(KEY)) == []
    assert notes == [
        "the shared database github:octo/repo: Couldn't acquire a new or existing artifact. Disabling database.; the campaign went on without its saved failures"
    ]


def test_artifact_entries_are_read_within_their_bound(monkeypatch, hypothesis_home):
    monkeypatch.setattr(database_mod, "MAX_ENTRY_BYTES", 1000)
    github(monkeypatch, artifact=_zip({KEY: [b"small", b"\0" * 100_000]}))  # the second inflates 100-fold
    notes: list[str] = []
    db = ArtifactDatabase("github:octo/repo", notes.append)
    assert db.fetch(KEY) == [b"small"] and db.unreadable is None
    (note,) = notes
    assert note.startswith(f"left entry {ArtifactDatabase._key_path(KEY)}") and note.endswith(
        "of github:octo/repo unread: larger than 1000 bytes"
    )


def test_the_start_check_caches_the_artifact_for_the_workers(monkeypatch, hypothesis_home):
    github(monkeypatch, artifact=_zip({KEY: [b"saved"]}))
    check_reachable(parse_databases(["github:octo/repo"], "local"))
    github(monkeypatch, status=500)  # a worker's own download would fail: it reads the cache
    notes: list[str] = []
    assert ArtifactDatabase("github:octo/repo", notes.append).fetch(KEY) == [b"saved"] and notes == []


def test_a_saved_failure_of_the_artifact_replays(monkeypatch, hypothesis_home, tmp_path):
    """The entries an artifact yields are what SavedFailures loads: the bounded read keeps them whole."""
    from fxfuzz.campaign.store import database_key
    from fxfuzz.core.passes import load_pass

    key = database_key(load_pass("identity"), "export") + b".fxfuzz-failures"
    raw = GRAPH_CASES.dumps(load_repro(write_repro(str(tmp_path), _repro_doc()).removesuffix(".py") + ".json").case)
    github(monkeypatch, artifact=_zip({key: [raw]}))
    store = SavedFailures(
        open_database(DatabaseSpec(str(tmp_path / "db"), ("github:octo/repo",)), print),
        database_key(load_pass("identity"), "export"),
        GRAPH_CASES,
    )
    ((loaded, _),) = store.saved()
    assert loaded == raw


# ---------------------------------------------------------------------------- command-line checks


@pytest.mark.parametrize("value", ["../x", "a/..", "-a/b", "a/b/c", "a b/c", "owner/" + "r" * 101])
def test_db_shared_takes_only_a_repository_name_github_allows(tmp_path, value, refused):
    line = refused(["run", "--pass", "identity", f"--db-shared={value}", "--report-dir", str(tmp_path / "r")])
    assert "expected github:OWNER/REPO" in line


def test_more_workers_than_the_machine_runs_is_one_line(tmp_path, refused):
    from fxfuzz.cli.args import WORKERS_PER_CPU, auto_workers

    line = refused(["run", "--pass", "identity", "--workers", "1000", "--no-db", "--report-dir", str(tmp_path / "r")])
    assert f"1000 workers on {auto_workers()} CPU(s): at most {WORKERS_PER_CPU * auto_workers()}" in line


def test_a_report_states_the_workers_that_ran(tmp_path):
    from fxfuzz.cli.main import build_parser
    from fxfuzz.cli.setup import campaign_setup

    args = build_parser().parse_args(
        [
            "run",
            "--pass",
            "identity",
            "--workers",
            "2",
            "--max-examples",
            "1",
            "--no-db",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )
    assert campaign_setup(args, args.workers).settings.workers == 1  # one example: one worker gets a share


def test_a_redis_database_that_goes_away_is_a_note_beside_a_checked_local_one(tmp_path):
    notes: list[str] = []
    db = open_database(
        DatabaseSpec(str(tmp_path), ("redis://127.0.0.1:1/0",)), notes.append
    )  # nothing listens on port 1
    db.save(KEY, b"kept")
    assert list(db.fetch(KEY)) == [b"kept"]  # the local directory holds it
    assert notes == [
        "the shared database redis://127.0.0.1:1/0 became unreachable; went on with the local one, which holds all found"
    ]


def test_an_artifact_a_worker_cannot_read_is_a_note_not_a_log_line(monkeypatch, hypothesis_home, recwarn):
    github(monkeypatch, status=401)  # e.g. the token expired after the start check
    notes: list[str] = []
    db = ArtifactDatabase("github:octo/repo", notes.append)
    assert db.fetch(KEY) == [] and db.unreadable
    (note,) = notes
    assert note.startswith("the shared database github:octo/repo: Authorization failed") and note.endswith(
        "the campaign went on without its saved failures"
    )
    assert not [w for w in recwarn if "artifact" in str(w.message)]  # nothing left for a log only
