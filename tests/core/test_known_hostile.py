"""``--known`` files are often someone else's (a CI artifact, an old report): large ones load
in linear work, absurd ones are one KnownFileError, and mutated real ones never raise anything else."""

from __future__ import annotations

import json

import pytest
from fxfuzz.core import known as known_mod
from fxfuzz.core.errors import KnownFileError
from fxfuzz.core.known import load_known
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from work import bounded

# Ids as fxfuzz makes them: <oracle>-<kind>-<16 hex digits>, some device- or level-prefixed.
IDS = [f"equivalence-{'cuda:' if i % 7 == 0 else ''}value_mismatch-{i:016x}" for i in range(100_000)]


def _baselines(folder, ids):
    text = folder / "known.txt"
    text.write_text(
        "# the nightly's baseline\n" + "".join(f"{bid} accepted upstream (issue {i})\n" for i, bid in enumerate(ids))
    )
    as_json = folder / "known.json"
    as_json.write_text(json.dumps({"known": [{"id": bid, "reason": "r"} for bid in ids]}))
    return text, as_json


# Calls one id may cost the loader (Python functions and built-ins: 7 for a line of text, 10 for
# a JSON entry), and what reading a file costs whatever its length.
CALLS_PER_ID, CALLS_PER_FILE = 12, 1000


def test_a_baseline_of_100000_ids_loads_in_linear_work(tmp_path):
    """Loading costs a bounded number of calls per id: no quadratic work however long the
    baseline (a check of each id against those before it, in Python, made 20,000 ids cost
    200 million calls: stopped at the bound, it failed here). Counted on 20,000 ids, as the
    count slows each call tenfold; the 100,000 are loaded plain."""
    small = IDS[:20_000]
    for path in _baselines(tmp_path, small):
        with bounded(calls=CALLS_PER_ID * len(small) + CALLS_PER_FILE):
            loaded = load_known(str(path))
        assert len(loaded) == len(small)
    for path in _baselines(tmp_path, IDS):
        loaded = load_known(str(path))
        assert len(loaded) == 100_000 and loaded[IDS[-1]]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("x" * 10_000_000, "a line of 10000000 characters (at most 4096)"),
        ("a" * 201 + "\n", "not a bucket id: 'aaaaaaaaaaaa...aaaaaaaaaaaaa'"),
        ("../../etc/passwd\n", "not a bucket id"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than Python's parser goes"),
        ('["a-b-1", 1' + "0" * 5000 + "]", "is not valid JSON"),
        ('{"known": [{"id": "a-b-1", "reason": {"nested": 1}}]}', "the reason of a-b-1 is not a string"),
        ('{"known": [{"id": "a-b-1", "reason": "' + "r" * 5000 + '"}]}', "at most 4096 characters"),
        ('{"known": [["a-b-1"]]}', "not a bucket id"),
    ],
    ids=["long-line", "long-id", "path", "deep-json", "huge-int", "dict-reason", "long-reason", "list-entry"],
)
def test_absurd_baselines_are_one_short_line(tmp_path, text, needle):
    path = tmp_path / "known"
    path.write_text(text)
    with pytest.raises(KnownFileError) as e:
        load_known(str(path))
    assert needle in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


def test_size_and_count_are_bounded(tmp_path, monkeypatch):
    path = tmp_path / "known.txt"
    path.write_text("a-b-1\na-b-2\na-b-3\n")
    monkeypatch.setattr(known_mod, "MAX_KNOWN_IDS", 2)
    with pytest.raises(KnownFileError, match="more than 2 bucket ids"):
        load_known(str(path))
    monkeypatch.setattr(known_mod, "MAX_KNOWN_BYTES", 8)
    with pytest.raises(KnownFileError, match="larger than"):
        load_known(str(path))


def test_a_known_file_that_is_binary_or_a_directory_is_refused(tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(KnownFileError, match="cannot read"):
        load_known(str(tmp_path / "bin"))
    with pytest.raises(KnownFileError, match="cannot read"):
        load_known(str(tmp_path))  # a directory


REAL = ("# baseline\n" + "".join(f"{bid}\treason {i}\n" for i, bid in enumerate(IDS[:20]))).encode()
REAL_JSON = json.dumps({"findings": [{"id": bid, "count": 1} for bid in IDS[:20]]}).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from([REAL, REAL_JSON]), data=st.data())
def test_mutated_real_baselines_load_or_are_one_known_file_error(tmp_path, base, data):
    start = data.draw(st.integers(0, len(base)))
    end = data.draw(st.integers(start, min(len(base), start + 30)))
    text = (
        base[:start]
        + data.draw(st.binary(max_size=12) | st.sampled_from([b"\n", b"#", b"[", b"{", b'"', b"\t"]))
        + base[end:]
    )
    (tmp_path / "known").write_bytes(text)
    try:
        loaded = load_known(str(tmp_path / "known"))
    except KnownFileError as e:
        assert "\n" not in str(e)
        return
    assert all(known_mod.is_bucket_id(k) and isinstance(v, str) for k, v in loaded.items())
