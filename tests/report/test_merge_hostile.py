"""``fxfuzz merge`` takes shard report folders as untrusted input: it reads only inside them,
checks every field it uses, bounds what it reads and the shard split, and escapes what it
quotes. Bad input is one line and exit status 2, never a traceback, a hang or exit 1.

One real report folder (a tiny campaign of a pass whose exception message is hostile markdown)
is built once; the fuzz tests at the end mutate it.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.errors import FxfuzzError, ReportError
from fxfuzz.report import reader
from fxfuzz.report.folder import report_folder
from fxfuzz.report.issue import expected_behaviour
from fxfuzz.report.merge import load_inputs, merge_reports, write_merged
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from work import bounded

# A message that would be markup everywhere it is quoted: a code span, a table pipe, an HTML
# tag, a link, emphasis, an entity and a second line.
HOSTILE = "`x` | <img src=x onerror=alert(1)> [link](http://evil.example) **bold** &amp; end"
PASS = f"""
def crasher(gm, sig):
    raise ValueError({HOSTILE!r} + "\\n# heading on a second line")
"""
SECRET = "the secret contents of a file outside every input folder"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A report folder of a real 3-example campaign (one new bucket, with its repro), and
    the folder's report."""
    root = tmp_path_factory.mktemp("real")
    (root / "crasher.py").write_text(PASS)
    out = root / "report"
    # In this process, as the suite's shard campaigns run: the report folder is what the tests
    # need, not a process boundary around the CLI (its worker is a process all the same), and
    # a fresh interpreter cost seconds of torch imports.
    code = main(
        ["run", "--pass", f"{root / 'crasher.py'}:crasher", "--max-examples", "3", "--workers", "1", "--no-db",
         "--max-shrink-s", "0", "--shard", "1/2", "--report-dir", str(out)]
    )  # fmt: skip
    assert code == 1, (out / "report.md").read_text() if (out / "report.md").exists() else code
    return out, json.loads((out / "report.json").read_text())


def _folder(tmp_path, real, name="shard", **changes):
    """A copy of the real report folder, its report.json changed by ``changes``."""
    folder = tmp_path / name
    shutil.copytree(real[0], folder)
    report = {**copy.deepcopy(real[1]), **changes}
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def _secret(tmp_path):
    secret = tmp_path / "outside" / "secret.py"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text(SECRET)
    return secret


def _no_secret_in(folder):
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


# ------------------------------------------------------------------ reading only inside


@pytest.mark.processes
@pytest.mark.parametrize(
    "repro", ["{secret}", "../outside/secret.py", "repros/../../outside/secret.py", "repros/other.py", ""]
)
def test_a_repro_field_naming_another_file_is_refused_with_a_note(tmp_path, real, repro, capsys):
    secret = _secret(tmp_path)
    (row,) = real[1]["findings"]
    folder = _folder(tmp_path, real, findings=[{**row, "repro": repro.format(secret=secret)}])
    (folder / "repros" / "other.py").write_text("print('another file of the folder')")
    out = tmp_path / "out"
    assert main(["merge", str(folder), "--report-dir", str(out)]) == 1  # the bucket still counts
    merged = json.loads((out / "report.json").read_text())
    (finding,) = merged["findings"]
    assert finding["repro"] is None and not (out / "repros").exists()
    if repro:  # "" is no repro at all: nothing to say
        assert any("is not repros/" in e and "refused" in e for e in merged["repro_errors"]), merged["repro_errors"]
    _no_secret_in(out)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.processes
@pytest.mark.parametrize("link", ["file", "folder", "json"])
def test_a_repro_that_links_out_of_its_folder_is_never_copied(tmp_path, real, link):
    secret = _secret(tmp_path)
    folder = _folder(tmp_path, real)
    (row,) = real[1]["findings"]
    py = folder / row["repro"]
    if link == "file":
        py.unlink()
        py.symlink_to(secret)
    elif link == "folder":  # repros/ itself a link to a folder that holds a file of that name
        shutil.copy(secret, secret.parent / py.name)
        shutil.rmtree(folder / "repros")
        (folder / "repros").symlink_to(secret.parent)
    else:  # the .py is the folder's own; its .json sibling links out
        py.with_suffix(".json").unlink()
        py.with_suffix(".json").symlink_to(secret)
    out = tmp_path / "out"
    assert main(["merge", str(folder), "--report-dir", str(out)]) == 1
    merged = json.loads((out / "report.json").read_text())
    if link == "json":
        assert merged["findings"][0]["repro"] == row["repro"] and not (out / row["repro"]).with_suffix(".json").exists()
    else:
        assert merged["findings"][0]["repro"] is None
        assert any("is a link out of its folder" in e for e in merged["repro_errors"])
    _no_secret_in(out)


@pytest.mark.processes
def test_a_repro_that_is_a_fifo_is_skipped_without_blocking(tmp_path, real, monkeypatch):
    """The FIFO is refused from its status alone: merge never opens it (an open with no
    writer waits for one, for ever). Every open of this process is watched, ``open`` and
    ``os.open``, and one of the FIFO fails the test at once instead of blocking. With the
    status check in ``inside_problem`` removed the test fails too: the merge ends with an
    error (shutil's own refusal to copy a FIFO) instead of skipping that repro."""
    folder = _folder(tmp_path, real)
    (row,) = real[1]["findings"]
    fifo = folder / row["repro"]
    fifo.unlink()
    os.mkfifo(fifo)
    opened = []

    def watched(real_open):
        def open_(path, *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(path) == str(fifo):
                opened.append(path)
                raise AssertionError(f"merge opened the FIFO {path}")
            return real_open(path, *args, **kwargs)

        return open_

    monkeypatch.setattr("builtins.open", watched(open))
    monkeypatch.setattr(os, "open", watched(os.open))
    code = main(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    assert not opened and code == 1
    merged = json.loads((tmp_path / "out" / "report.json").read_text())
    assert any("is not a regular file" in e for e in merged["repro_errors"])


@pytest.mark.processes
def test_a_report_json_that_links_out_of_its_folder_is_refused(tmp_path, real, refused):
    folder = _folder(tmp_path, real)
    outside = tmp_path / "outside.json"
    outside.write_text((folder / "report.json").read_text())
    (folder / "report.json").unlink()
    (folder / "report.json").symlink_to(outside)
    assert "report.json is a link out of its folder" in refused(
        ["merge", str(folder), "--report-dir", str(tmp_path / "out")]
    )


# ------------------------------------------------------------------ every field checked

MALFORMED = [
    ("stats", {"op:sin": "3"}), ("stats", {"op:sin": -1}), ("stats", [1]),
    ("timeline", [[1.0]]), ("timeline", "x"), ("timeline", [[1.0, -1]]), ("timeline", [["a", 1]]),
    ("workers", -1), ("workers", "2"), ("workers", True),
    ("workers_detail", {"restarts": "x"}), ("workers_detail", {"errors": [1]}), ("workers_detail", [1]),
    ("workers_detail", {"notes": "x"}), ("workers_detail", {"unrepeated_deaths": None}),
    ("coverage", {"enabled": True}), ("coverage", {"enabled": "yes"}), ("coverage", [1]),
    ("coverage", {"enabled": True, "files": [{}], "lines": {"covered": 1, "total": 1, "percent": 1.0},
                  "branches": {"covered": 1, "total": 1, "percent": 1.0}}),
    ("merged_from", [{"path": 1, "shard": None, "seed": 0, "examples": 1}]), ("merged_from", "x"), ("merged_from", [{}]),
    ("findings", [1]), ("findings", {"a": 1}), ("examples", 2**60), ("examples", 1.5), ("duration_s", -1),
    ("seed", "zero"), ("seed", {"a": 1}), ("shard", 5), ("incomplete", 3), ("repro_errors", [1]),
    ("ops", "x"), ("started", 5), ("python_version", 3), ("schema", "2"),
    ("contract", "post_grad\n<b>x</b>"), ("contract", None), ("pass", "p" * (reader.MAX_NAME + 1)),
    ("torch_version", "2" * (reader.MAX_NAME + 1)), ("settings", {"db": {"shared": [{"deep": 1}]}}), ("settings", [1]),
    ("settings", {"x" * (reader.MAX_NAME + 1): 1}), ("stats", {"x" * (reader.MAX_NAME + 1): 1}),
    ("workers_detail", {"database": [[1]]}), ("contract_source", 1), ("max_shrink_s", -1),
]  # fmt: skip


@pytest.mark.processes
@pytest.mark.parametrize("key, value", MALFORMED)
def test_a_malformed_field_is_one_line_and_exit_2(tmp_path, real, key, value, refused):
    folder = _folder(tmp_path, real, **{key: value})
    line = refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    assert f"field {key!r}" in line or "a finding is not an object" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.processes
@pytest.mark.parametrize(
    "key, value",
    [("id", "../../etc/passwd"), pytest.param("id", "x" * 300, id="id-too-long"), ("id", 3), ("count", -2), ("details", [1]), ("known", "no"),
     ("graph_nodes", 2.5), ("message", None), ("repro", 7), ("domain", 3)],
)  # fmt: skip
def test_a_malformed_finding_is_one_line_and_exit_2(tmp_path, real, key, value, refused):
    (row,) = real[1]["findings"]
    folder = _folder(tmp_path, real, findings=[{**row, key: value}])
    assert f"malformed field {key!r}" in refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "text, needle",
    [
        pytest.param('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested deeper", id="past-the-parsers-recursion"),
        pytest.param("[" * 40 + "]" * 40, "nested deeper", id="40-deep"),
        pytest.param('{"tool": "fxfuzz", "examples": 1' + "0" * 5000 + "}", "not readable as JSON", id="5001-digits"),
        ('{"tool": "fxfuzz", "duration_s": NaN}', "not readable as JSON"),
        ('{"tool": "fxfuzz", "duration_s": Infinity}', "not readable as JSON"),
        ('{"tool": "fxfuzz", "duration_s": 1e999}', "not readable as JSON"),
        ('{"tool": "fxfuzz", "pass": "\\ud800"}', "lone UTF-16 surrogate"),
        ("\xff\xfe", "not readable as JSON"),
    ],
)
def test_absurd_json_is_refused_in_one_line(tmp_path, text, needle, refused):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "report.json").write_text(text, encoding="latin-1" if text.startswith("\xff") else "utf-8")
    assert needle in refused(["merge", str(tmp_path / "in"), "--report-dir", str(tmp_path / "out")])


@pytest.mark.processes
def test_deep_details_are_refused(tmp_path, real, refused):
    (row,) = real[1]["findings"]
    deep: dict = {}
    for _ in range(reader.MAX_DEPTH):
        deep = {"d": deep}
    folder = _folder(tmp_path, real, findings=[{**row, "details": deep}])
    assert "nested deeper than 32 levels" in refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])


@pytest.mark.processes
def test_files_and_lists_are_bounded(tmp_path, real, refused, monkeypatch):
    folder = _folder(tmp_path, real, timeline=[[0.0, 0]] * 5001)
    monkeypatch.setattr(reader, "MAX_ITEMS", 5000)
    assert "malformed field 'timeline'" in refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 100)
    assert "larger than" in refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    # A repro over the bound is dropped with a note; its bucket still counts.
    folder = _folder(tmp_path, real, "big-repro")
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", (folder / "report.json").stat().st_size)
    (row,) = real[1]["findings"]
    (folder / row["repro"]).write_text("#" * (folder / "report.json").stat().st_size + "\n")
    assert main(["merge", str(folder), "--report-dir", str(tmp_path / "out")]) == 1
    assert any(
        "is larger than" in e for e in json.loads((tmp_path / "out" / "report.json").read_text())["repro_errors"]
    )


@pytest.mark.processes
@pytest.mark.parametrize("source", ["default", "given"])
def test_a_shard_without_a_contract_is_one_line_and_exit_2(tmp_path, real, source, refused):
    """The probe: a shard without ``contract`` (its ``contract_source`` saying ``default``) made
    report.md raise KeyError: a traceback and exit 1, which CI reads as new findings."""
    report = {k: v for k, v in real[1].items() if k != "contract"}
    folder = _folder(tmp_path, real, contract_source=source)
    (folder / "report.json").write_text(json.dumps({**report, "contract_source": source}))
    assert "missing or malformed field 'contract'" in refused(
        ["merge", str(folder), "--report-dir", str(tmp_path / "out")]
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.processes
def test_shards_held_to_different_contracts_are_not_merged(tmp_path, real, refused):
    a, b = _folder(tmp_path, real, "a", shard="1/2"), _folder(tmp_path, real, "b", shard="2/2", contract="refines")
    assert "different contract (meaning vs refines)" in refused(
        ["merge", str(a), str(b), "--report-dir", str(tmp_path / "out")]
    )


@pytest.mark.processes
def test_fields_a_merge_does_not_check_are_not_carried(tmp_path, real, capsys):
    """A shard's ``baseline`` (which issue texts quote), unknown top-level, finding and
    workers_detail fields: dropped as the shard is read, so none reaches the merged report.json,
    its documents or its issue texts."""
    (row,) = real[1]["findings"]
    evil = "<script>alert(1)</script> ![i](http://carried.example/i.png)"
    folder = _folder(
        tmp_path, real, baseline=evil, candidate=evil, extra={"x": evil},
        findings=[{**row, "extra": evil}], workers_detail={**real[1]["workers_detail"], "extra": evil},
    )  # fmt: skip
    assert main(["merge", str(folder), "--report-dir", str(tmp_path / "out")]) == 1
    merged = json.loads((tmp_path / "out" / "report.json").read_text())
    assert not {"baseline", "candidate", "extra"} & set(merged) and "extra" not in merged["findings"][0]
    assert "extra" not in merged["workers_detail"] and merged["settings"] == real[1]["settings"]
    for path in (tmp_path / "out").rglob("*"):
        assert path.is_dir() or "carried.example" not in path.read_text(), path


def _without_code_spans(markdown: str) -> str:
    """``markdown`` with its code spans removed, as CommonMark reads them: a run of n backticks
    not escaped by a backslash opens one, the next run of exactly n closes it."""
    out, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\":
            out.append(markdown[i : i + 2])
            i += 2
            continue
        run = re.match(r"`+", markdown[i:])
        if run:
            n = len(run.group())
            close = re.compile(rf"(?<!`)`{{{n}}}(?!`)").search(markdown, i + n)
            if close:
                i = close.end()
                continue
            out.append(run.group())
            i += n
            continue
        out.append(markdown[i])
        i += 1
    return "".join(out)


MARKUP = "x` ![i](http://evil.example/i.png) <img src=x> [l](http://evil.example) <b>t</b> `y"


@pytest.mark.processes
@pytest.mark.parametrize("field", ["oracle", "kind", "pass", "torch_version", "version", "device", "python_version"])
def test_a_backtick_in_a_shard_field_opens_no_markup_in_the_issue_text(tmp_path, real, field):
    """The probe: an oracle fxfuzz has no sentence for is quoted in the issue text's expected
    behaviour; its backtick closed the code span there, so the image, link and tags after it
    rendered. Each field the issue text quotes, with backticks: outside code spans no link,
    image or tag is left unescaped."""
    (row,) = real[1]["findings"]
    finding = {**row, field: MARKUP} if field in row else row
    folder = _folder(tmp_path, real, findings=[finding], **({} if field in row else {field: MARKUP}))
    assert main(["merge", str(folder), "--report-dir", str(tmp_path / "out")]) == 1
    issue = _without_code_spans((tmp_path / "out" / row["issue"]).read_text())
    for fence in re.findall(r"(?ms)^(`{3,})[a-z]*\n.*?^\1$", issue):  # fenced blocks: raw text
        assert fence
    prose = re.sub(r"(?ms)^(`{3,})[a-z]*\n.*?^\1$", "", issue)
    assert not re.search(r"(?<!\\)(!\[|\]\(|<img|<b>)", prose), prose


def test_expected_behaviour_quotes_an_unknown_oracle_in_one_code_span():
    sentence = expected_behaviour(MARKUP, "k")
    assert not re.search(r"(?<!\\)(!\[|\]\(|<img|<b>)", _without_code_spans(sentence)), sentence


# ------------------------------------------------------------------ bounded output


@pytest.mark.processes
def test_long_text_is_cut_with_a_note(tmp_path, real):
    (row,) = real[1]["findings"]
    long = "<&`" * reader.MAX_TEXT
    folder = _folder(
        tmp_path, real, incomplete=long, repro_errors=[long],
        findings=[{**row, "message": long, "known_reason": None, "graph_code": "x" * (reader.MAX_CODE + 5), "details": {"ambient_grad": True, "x": long}}],
    )  # fmt: skip
    main(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    merged = json.loads((tmp_path / "out" / "report.json").read_text())
    (f,) = merged["findings"]
    cut = f"[... {len(long) - reader.MAX_TEXT} more characters cut by fxfuzz merge]"
    assert f["message"] == long[: reader.MAX_TEXT] + " " + cut and merged["incomplete"].endswith(cut)
    assert merged["repro_errors"][0].endswith(cut)
    assert f["graph_code"].endswith("[... 5 more characters cut by fxfuzz merge]")
    assert f["details"]["ambient_grad"] is True and "cut by fxfuzz merge" in f["details"]["cut"]


def _shards(tmp_path, real, shards, per_shard):
    (row,) = real[1]["findings"]
    return [
        _folder(tmp_path, real, f"s{k}-of-{shards}", shard=f"{k}/{shards}", findings=[
            {**row, "id": f"crash-pass_raised-{k:02x}{i:06x}", "repro": None, "message": "<&`" * 1000} for i in range(per_shard)
        ])
        for k in range(1, shards + 1)
    ]  # fmt: skip


@pytest.mark.processes
def test_the_documents_for_people_stay_bounded_however_many_findings(tmp_path, real):
    """The probe's four 57 MiB shards, scaled down (the work is bounded, not timed): report.json
    lists every bucket, while report.md, report.html, junit.xml and issues/ show the first
    ``SHOWN`` and say how many more there are, so they are as large for four shards as for two."""
    from fxfuzz.report.limits import SHOWN

    sizes = {}
    for shards in (2, 4):
        out = tmp_path / f"out{shards}"
        assert main(["merge", *map(str, _shards(tmp_path, real, shards, SHOWN)), "--report-dir", str(out)]) == 1
        merged = json.loads((out / "report.json").read_text())
        assert len(merged["findings"]) == merged["new_findings"] == shards * SHOWN
        assert len(os.listdir(out / "issues")) == SHOWN == sum(1 for f in merged["findings"] if f["issue"])
        more = (
            f"{(shards - 1) * SHOWN} more finding bucket(s) ({(shards - 1) * SHOWN} new) are listed only in report.json"
        )
        assert more in (out / "report.md").read_text() and more in (out / "report.html").read_text()
        suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
        assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
            str(SHOWN + 2),
            str(SHOWN + 1),
            "0",
        )
        sizes[shards] = [(out / name).stat().st_size for name in ("report.md", "report.html", "junit.xml")]
    assert all(abs(a - b) < 200 for a, b in zip(sizes[2], sizes[4])), sizes  # the note's digits and shard list differ


# ------------------------------------------------------------------ the shard split


@pytest.mark.parametrize("split", ["1/100000000000", "1/1025", "1/" + "9" * 5000, "²/3"])
def test_run_refuses_absurd_splits(split, refused):
    assert "--shard" in refused(["run", "--shard", split])


def test_the_largest_split_is_taken():
    from fxfuzz.cli.args import shard

    assert shard("1024/1024") == (1024, 1024)


# Calls a merge may make per shard its inputs list (each entry read and checked: about 80),
# and for the rest of its inputs (about 12,000): counting each entry against each other would
# be thousands of calls per entry.
CALLS_PER_SHARD_LISTED, CALLS_PER_MERGE = 100, 50_000


@pytest.mark.processes
def test_merge_refuses_absurd_splits_at_once(tmp_path, real, refused):
    folder = _folder(tmp_path, real, shard="1/100000000000")
    line = refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    assert "malformed shard '1/100000000000'" in line and "more than fxfuzz takes (1024)" in line
    # A merged input listing the same shard many times: refused in work linear in the entries
    # (a quadratic count over them failed here, stopped at the bound). Counted on 10,000
    # entries, as counting slows each call tenfold; the reader's most, MAX_ITEMS, run plain.
    many = 10_000
    entries = [{"path": "p", "shard": "1/1024", "seed": 0, "examples": 1}] * many
    folder = _folder(tmp_path, real, "some", merged_from=entries)
    with bounded(calls=CALLS_PER_SHARD_LISTED * many + CALLS_PER_MERGE):
        line = refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])
    assert "shard 1/1024 is given twice" in line
    entries = [{"path": "p", "shard": "1/1024", "seed": 0, "examples": 1}] * reader.MAX_ITEMS
    folder = _folder(tmp_path, real, "many", merged_from=entries)
    assert "shard 1/1024 is given twice" in refused(["merge", str(folder), "--report-dir", str(tmp_path / "out")])


@pytest.mark.processes
def test_merge_names_the_missing_shards_of_the_largest_split(tmp_path, real, capsys):
    folder = _folder(tmp_path, real, shard="3/1024")
    assert main(["merge", str(folder), "--report-dir", str(tmp_path / "out")]) == 1
    missing = capsys.readouterr().err.split("no report from shard(s) ")[1].split(", ")
    assert len(missing) == 1023 and "3/1024" not in missing


# ------------------------------------------------------------------ deleting nothing it did not write


def _tree(root):
    """Every path under ``root`` with its bytes (None for a folder), links not followed."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.processes
@pytest.mark.parametrize("listed", ["notes/todo.txt\n.git/config\n../outside/x\n", "report.json\nrepros/x.py\n"])
def test_a_file_list_in_the_output_folder_decides_nothing(tmp_path, real, listed, refused):
    """The probe: a --report-dir holding a ``.fxfuzz-files`` list that names the user's files,
    a repository's config and a file outside. fxfuzz reads no file list: the folder is not
    empty, so the merge refuses (exit 2, one line) and nothing anywhere is removed or changed."""
    a1, a2 = _folder(tmp_path, real, "a1", shard="1/2"), _folder(tmp_path, real, "a2", shard="2/2")
    victim = tmp_path / "victim"
    for name in ("notes/todo.txt", ".git/config", "report.json", "repros/x.py"):
        (victim / name).parent.mkdir(parents=True, exist_ok=True)
        (victim / name).write_text(f"the user's {name}")
    (victim / ".fxfuzz-files").write_text(listed)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x").write_text("outside")
    before = _tree(tmp_path)
    line = refused(["merge", str(a1), str(a2), "--report-dir", str(victim)])
    assert f"--report-dir: {victim} is not empty" in line
    assert _tree(tmp_path) == before


@pytest.mark.processes
def test_a_file_list_in_a_shard_folder_is_never_read(tmp_path, real):
    """A shard's own ``.fxfuzz-files`` (an artifact anyone could edit) names files beside the
    output folder: the merge writes its new folder and leaves every other path as it was."""
    a1 = _folder(tmp_path, real, "a1")
    (a1 / ".fxfuzz-files").write_text("../keep.txt\n../out/../keep.txt\n")
    (tmp_path / "keep.txt").write_text("kept")
    before = _tree(tmp_path)
    assert main(["merge", str(a1), "--report-dir", str(tmp_path / "out")]) == 1
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before
    assert ".fxfuzz-files" not in os.listdir(tmp_path / "out")


# ------------------------------------------------------------------ what is quoted is escaped


@pytest.mark.processes
def test_a_real_reports_documents_escape_the_hostile_message(real):
    folder, report = real
    (row,) = report["findings"]
    assert HOSTILE in row["message"]  # the data keeps the message as it was
    md = (folder / "report.md").read_text()
    (line,) = [x for x in md.splitlines() if x.startswith(f"| `{row['id']}`")]
    # Seven cells, whatever pipes the message holds; no raw tag, link or code span from it.
    assert line.replace("\\|", "").count("|") == 8
    assert "\\<img src=x onerror=alert(1)\\>" in md and "\\[link\\](http" in md and "\\`x\\`" in md
    unescaped = md.replace("\\<", "").replace("\\]", "")
    assert "<img" not in unescaped and "](http://evil" not in unescaped
    issue = (folder / row["issue"]).read_text()
    title = issue.splitlines()[0]
    assert "\\<img" in title and "\\[link\\]" in title and "<img" not in title.replace("\\<img", "")
    html = (folder / "report.html").read_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    ET.parse(folder / "junit.xml")


@pytest.mark.processes
def test_hostile_fields_of_a_shard_report_are_escaped_in_the_merged_documents(tmp_path, real, capsys):
    (row,) = real[1]["findings"]
    hostile = {"pass": "p` <b>x</b> | y", "torch_version": "<script>1</script>", "stopped_by": "**a**|b",
               "incomplete": "\x1b[31m <u>red</u> | `x`\n# h"}  # fmt: skip
    folder = _folder(tmp_path, real, **hostile, findings=[{**row, "kind": "<b>k</b>|x", "oracle": "o`o"}])
    out = tmp_path / "out"
    assert main(["merge", str(folder), "--report-dir", str(out)]) == 3  # incomplete input: incomplete merge
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.endswith("?[31m <u>red</u> | `x` # h")  # one line, the escape sequence defused
    md = (out / "report.md").read_text()
    assert "`` p` <b>x</b> | y ``" in md  # a code span longer than the backticks inside: no tag there
    md = md.replace("`` p` <b>x</b> | y ``", "")
    assert "<b>" not in md and "<script>" not in md and "<u>" not in md and "\n# h" not in md
    html = (out / "report.html").read_text()
    assert "<b>" not in html and "<script>" not in html and "<u>" not in html
    ET.parse(out / "junit.xml")  # the escape character is replaced: still XML
    issue = (out / "issues" / f"{row['id']}.md").read_text()
    assert "<script>" not in issue and "| torch | \\<script\\>1\\</script\\> |" in issue


# ------------------------------------------------------------------ fuzzing the loader

HOSTILE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), st.sampled_from(["/etc/passwd", "../x", "repros/../../x.py", "1/100000000000", "\\ud800"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)  # fmt: skip


@st.composite
def mutated(draw, report):
    """``report`` with one to three values somewhere in it replaced, keys dropped or added."""
    report = copy.deepcopy(report)
    for _ in range(draw(st.integers(1, 3))):
        node = report
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            action = draw(st.sampled_from(["replace", "drop", "add"]))
            if action == "drop" and isinstance(node, dict):
                del node[key]
            elif action == "add" and isinstance(node, dict):
                node[draw(st.text(max_size=8))] = draw(HOSTILE_VALUES)
            else:
                node[key] = draw(HOSTILE_VALUES)
            break
    return report


def _merge_in_process(folders, out):
    """``fxfuzz merge`` in this process: its exit status and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(["merge", *map(str, folders), "--report-dir", str(out)])
    return status, err.getvalue()


_FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.mark.processes
@_FUZZ
@given(data=st.data())
def test_mutated_real_reports_merge_or_are_refused_in_one_line(tmp_path_factory, real, data):
    tmp = tmp_path_factory.mktemp("fuzz")
    other = _folder(tmp, real, "other", shard="2/2")
    report = data.draw(mutated(real[1]))
    folder = tmp / "mutated"
    shutil.copytree(real[0], folder)
    (folder / "report.json").write_text(json.dumps(report))
    status, err = _merge_in_process([folder, other], tmp / "out")
    if status == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("fxfuzz: error: "), err
    else:
        assert status in (0, 1, 3) and "Traceback" not in err, err
        merged = json.loads((tmp / "out" / "report.json").read_text())
        for f in merged["findings"]:  # every repro copied is the inputs' own
            if f["repro"]:
                assert (tmp / "out" / f["repro"]).read_bytes() == (real[0] / f["repro"]).read_bytes()


@pytest.mark.processes
@_FUZZ
@given(data=st.data())
def test_damaged_report_files_merge_or_are_refused(tmp_path_factory, real, data):
    """Bytes cut, dropped or overwritten anywhere in a real report.json: the loader answers
    with a report or one ReportError."""
    text = (real[0] / "report.json").read_bytes()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    damaged = text[:start] + data.draw(st.binary(max_size=8)) + text[end:]
    folder = tmp_path_factory.mktemp("damaged")
    (folder / "report.json").write_bytes(damaged)
    try:
        inputs = load_inputs([str(folder)], str(folder / "out"))
        merged = merge_reports(inputs)
    except FxfuzzError as e:
        assert isinstance(e, ReportError) and "\n" not in str(e)
        return
    assert write_merged(merged, report_folder(str(folder / "out"))).unwritten == []
