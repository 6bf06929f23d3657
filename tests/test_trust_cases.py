"""Saved cases are data (issue 33): a repro, a gate corpus file or a database entry that asks
for code (an operator source, a dotted call target, a callable argument, a size expression
that Python would evaluate, a pass file) runs none of it and ends in one line or a note; the
entry is kept; the user can allow an operator source with ``--op``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import pytest
import redis
from fxfuzz.campaign.engine import GRAPH_CASES, Subject, database_key, run_campaign
from fxfuzz.campaign.levels import PROGRAMS
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.passes import load_pass
from fxfuzz.core.program import to_data
from fxfuzz.core.rebuild import SizeExpressionError, parse_size
from fxfuzz.core.serialize import case_from_dict, case_to_dict, resolve_target
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.repro.files import repro_document, saved_cases
from fxfuzz.strategies import module_programs
from handmade import no_grad_region_case
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.extra.redis import RedisExampleDatabase
from test_custom_ops import CUSTOM_PROGRAM
from test_shards import needs_redis, redis_url  # noqa: F401  (a fixture)

TESTS = os.path.dirname(os.path.abspath(__file__))
FINDING = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
IDENTITY = load_pass("identity")


def _case() -> dict:
    return json.loads(json.dumps(case_to_dict(no_grad_region_case(ambient=True))))


def _node(case: dict, target: str) -> dict:
    return next(n for n in case["graph"]["nodes"] if n["target"] == target)


def _channels(tmp_path) -> dict[str, tuple[dict, str]]:
    """Channel -> (a case asking for code through it, what its refusal names). Running any of
    that code would create ``tmp_path/marker``."""
    marker = tmp_path / "marker"
    touch = f"open({str(marker)!r}, 'w').close()\n"
    (tmp_path / "evil_ops.py").write_text(touch)
    (tmp_path / "evil_ops_module.py").write_text(touch)
    channels = {}
    case = _case()
    case["custom_ops"] = {"evilns::op": str(tmp_path / "evil_ops.py")}
    channels["custom_ops_file"] = (case, "--op")
    case = _case()
    case["custom_ops"] = {"evilns::op": "evil_ops_module"}
    channels["custom_ops_module"] = (case, "--op evil_ops_module")
    case = _case()
    node = _node(case, "aten::sin.default")
    node["target"], node["args"] = "os.system", {"tuple": [f"touch {marker}"]}
    channels["dotted_target"] = (case, "'os.system'")
    case = _case()
    node = _node(case, "aten::sin.default")
    node["target"], node["args"] = "builtins.exec", {"tuple": [touch]}
    channels["builtin_target"] = (case, "'builtins.exec'")
    case = _case()
    node = _node(case, "aten::add.Tensor")
    node["kwargs"] = {"dict": [["alpha", {"callable": "os.system"}]]}
    channels["callable_argument"] = (case, "'os.system'")
    case = _case()
    node = _node(case, "aten::sin.default")
    node["val"]["tensor"]["shape"] = [{"sym": f"__import__('os').system('touch {marker}')"}]
    channels["size_expression"] = (case, "size expression")
    return channels


def _write_repro(path, case: dict, pass_spec: str = "set_grad") -> str:
    doc = repro_document("r", FINDING, case, "set_grad")
    doc["pass"] = pass_spec
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_repro_asking_for_code_through_any_channel_runs_none_and_is_one_line(tmp_path, refused, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # the module channel's source would import, if anything imported it
    for name, (case, named) in _channels(tmp_path).items():
        line = refused(["repro", _write_repro(tmp_path / f"{name}.json", case)])
        assert named in line, (name, line)
    (tmp_path / "evil_pass.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w').close()\ndef fn(gm, sig):\n    return gm, sig\n")
    line = refused(["repro", _write_repro(tmp_path / "pass.json", _case(), f"{tmp_path / 'evil_pass.py'}:fn")])
    assert "--pass" in line and "not a registered pass" in line
    assert not (tmp_path / "marker").exists()


@pytest.mark.processes
def test_the_pass_a_repro_names_runs_when_the_user_gives_it(tmp_path, capsys):
    from fxfuzz.cli.main import main

    path = _write_repro(tmp_path / "r.json", _case(), "identity")  # a registered name: taken from the file
    assert main(["repro", path]) in (0, 1)
    (tmp_path / "mine.py").write_text("def fn(gm, sig):\n    return gm, sig\n")
    spec = f"{tmp_path / 'mine.py'}:fn"
    path = _write_repro(tmp_path / "mine.json", _case(), spec)
    assert main(["repro", path]) == 2
    assert main(["repro", path, "--pass", spec]) in (0, 1)


@pytest.mark.processes
def test_a_case_naming_an_operator_source_loads_once_the_user_names_it(tmp_path):
    """In a fresh process (this one has the operator already): refused without ``--op``,
    replayed once the user names the file that defines it."""
    case = _case()
    case["custom_ops"] = {"userops::scale": "user_ops"}
    path = _write_repro(tmp_path / "user.json", case)

    def repro(*extra: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "fxfuzz", "repro", path, *extra]
        return subprocess.run(argv, capture_output=True, text=True, cwd=TESTS, timeout=300)

    run = repro()
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--op user_ops" in run.stderr, run.stderr
    run = repro("--op", os.path.join(TESTS, "user_ops.py"))
    assert run.returncode == 0, run.stdout + run.stderr


def test_size_expression_bombs_are_refused_within_a_second():
    for bomb in (
        "Integer(10)**Integer(10)**Integer(10)",
        "Pow(Integer(10), Pow(Integer(10), Integer(10)))",
        "Pow(Pow(Pow(Integer(10), Integer(64)), Integer(64)), Integer(64))",
        "Mul(" + ", ".join(["Pow(Integer(2), Integer(64))"] * 60) + ")",
        "Add(" * 5000 + "Integer(1)" + ")" * 5000,
        "Integer(" + "9" * 5000 + ")",
    ):
        start = time.process_time()
        with pytest.raises(SizeExpressionError):
            parse_size(bomb)
        assert time.process_time() - start < 1, bomb[:60]
    case = _case()
    _node(case, "aten::sin.default")["val"]["tensor"]["shape"] = [{"sym": "Pow(Integer(10), Pow(Integer(10), Integer(10)))"}]
    start = time.process_time()
    with pytest.raises(UntrustedError, match="exponent"):
        case_from_dict(case)
    assert time.process_time() - start < 1


def test_real_size_expressions_still_parse():
    import sympy

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    from torch.utils._sympy.functions import FloorDiv, Max

    for expr in (2 * s0, s0**2 + 3, FloorDiv(s0 - 1, 2), Max(1, s0), sympy.Rational(1, 2) * s0):
        assert parse_size(sympy.srepr(expr)) == expr


def test_allowed_targets_resolve_and_nothing_else_does():
    import operator

    import torch

    assert resolve_target("aten::sin.default") is torch.ops.aten.sin.default
    assert resolve_target("fxfuzz::scaled_mul.default") is torch.ops.fxfuzz.scaled_mul.default
    assert resolve_target("higher_order::cond") is torch.ops.higher_order.cond
    assert resolve_target("operator.getitem") is operator.getitem
    assert resolve_target("torch._C._set_grad_enabled") is torch._C._set_grad_enabled
    for name in ("os.system", "builtins.eval", "operator.methodcaller", "torch.load", "higher_order::inductor_compiled_code",
                 "aten::from_file.default", "nosuchns::op.default", "aten::sin.__class__", "torch.ops.aten.sin.default"):  # fmt: skip
        with pytest.raises(UntrustedError, match="--op"):
            resolve_target(name)
    with pytest.raises(SerializeError, match="no operator"):
        resolve_target("aten::no_such_op_in_this_torch.default")  # another torch version: not untrusted


def test_hostile_fields_are_one_serialize_error(tmp_path):
    def broken(edit) -> dict:
        case = _case()
        edit(case)
        return case

    x = lambda c: next(t for t in c["inputs"] if t.get("shape") == [3])  # noqa: E731
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    for case in (
        broken(lambda c: _node(c, "aten::sin.default").update(op="bogus")),
        broken(lambda c: _node(c, "aten::sin.default").update(op="call_method", target="__class__")),
        broken(lambda c: x(c).update(shape=[10**6, 10**6])),
        broken(lambda c: x(c).update(values=[1.0] * 10**5)),
        broken(lambda c: x(c).update(dtype="cuda")),
        broken(lambda c: _node(c, "aten::sin.default")["val"]["tensor"].update(shape=[10**12], stride=[1])),
        broken(lambda c: _node(c, "aten::sin.default").update(args=deep)),
        broken(lambda c: _node(c, "aten::sin.default").update(args={"tuple": [{"dtype": "load"}]})),
        broken(lambda c: c["graph"]["nodes"][0].update(target="x=__import__('os')")),
        broken(lambda c: c["signature"]["inputs"][0]["arg"].update(type="CustomObjArgument")),
        broken(lambda c: c.update(symbols={"s0": {"hint": 10**12, "min": 2, "max": None}})),
        broken(lambda c: c.update(custom_ops=["x"])),
    ):
        start = time.process_time()
        with pytest.raises(SerializeError):
            case_from_dict(case)
        assert time.process_time() - start < 2


def test_a_repro_whose_fields_are_wrong_is_one_line(tmp_path, refused):
    base = json.loads(json.dumps(repro_document("r", FINDING, _case(), "set_grad")))
    for i, edit in enumerate(
        [{"finding": []}, {"finding": {"message": 3}}, {"pass": ["x"]}, {"device": "tpu"}, {"case": []}, {"case": {"format": "fxfuzz-case/1"}}]
    ):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps({**base, **edit}))
        refused(["repro", str(path)])
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(["repro", str(tmp_path / "deep.json")])
    (tmp_path / "cut.json").write_text(json.dumps(base)[:500])
    refused(["repro", str(tmp_path / "cut.json")])


def _write_corpus(tmp_path) -> str:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, (case, _) in _channels(tmp_path).items():
        _write_repro(corpus / f"{name}.json", case)
    case = _case()
    _node(case, "aten::sin.default")["target"] = "aten::no_such_op_in_this_torch.default"
    _write_repro(corpus / "other_torch.json", case)
    _write_repro(corpus / "good.json", _case())
    return str(corpus)


def test_corpus_files_asking_for_code_are_skipped_counted_and_kept(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = _write_corpus(tmp_path)
    before = sorted(os.listdir(folder))
    corpus = saved_cases(folder)
    assert [name for name, _ in corpus.cases] == ["good.json"]
    assert len(corpus.untrusted) == len(_channels(tmp_path)) and len(corpus.unloadable) == 1
    assert all("\n" not in note for note in corpus.untrusted + corpus.unloadable)
    assert sorted(os.listdir(folder)) == before and not (tmp_path / "marker").exists()


@pytest.mark.processes
def test_cli_gate_notes_and_counts_the_corpus_files_it_skips(tmp_path):
    folder = _write_corpus(tmp_path)
    argv = [sys.executable, "-m", "fxfuzz", "gate", "--candidate", "set_grad", "--corpus", folder, "--max-examples", "1",
            "--max-shrink-s", "0", "--report-dir", str(tmp_path / "out")]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, cwd=str(tmp_path), timeout=600)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr
    notes = [line for line in run.stderr.splitlines() if line.startswith("fxfuzz: note:")]
    assert len(notes) == len(_channels(tmp_path)) + 1, run.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["stats"]["skipped_untrusted"] == len(_channels(tmp_path)) and report["stats"]["unloadable"] == 1
    assert len(os.listdir(folder)) == len(_channels(tmp_path)) + 2 and not (tmp_path / "marker").exists()


def _failures_key(pass_fn, domain: str = "export") -> bytes:
    return database_key(pass_fn, domain) + b".fxfuzz-failures"


def _hostile_entries(tmp_path) -> list[bytes]:
    entries = [json.dumps(case).encode() for case, _ in _channels(tmp_path).values()]
    other = _case()
    _node(other, "aten::sin.default")["target"] = "aten::no_such_op_in_this_torch.default"
    return [*entries, json.dumps(other).encode(), b'{"format": "fxfuzz-case/1", "graph": ', b"\xff" * 10]


def _replay_keeps_every_entry(db, tmp_path) -> None:
    entries = _hostile_entries(tmp_path)
    for raw in entries:
        db.save(_failures_key(IDENTITY), raw)
    result = run_campaign(IDENTITY, CampaignSettings(max_examples=1, budget_s=120), database=db, subject=Subject(check=lambda case, fn: []))
    assert result.stats["skipped_untrusted"] == len(_channels(tmp_path))
    assert result.stats["unloadable"] == 3 and result.stats["saved_replayed"] == 0
    assert len(result.notes) == len(entries) and all("\n" not in n for n in result.notes)
    assert set(db.fetch(_failures_key(IDENTITY))) == set(entries)  # nothing deleted
    assert not (tmp_path / "marker").exists()


def test_directory_database_entries_asking_for_code_are_skipped_counted_and_kept(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _replay_keeps_every_entry(DirectoryBasedExampleDatabase(str(tmp_path / "db")), tmp_path)


@needs_redis
def test_redis_entries_asking_for_code_are_skipped_counted_and_kept(tmp_path, monkeypatch, redis_url):  # noqa: F811
    monkeypatch.syspath_prepend(str(tmp_path))
    _replay_keeps_every_entry(RedisExampleDatabase(redis.Redis.from_url(redis_url)), tmp_path)


@pytest.mark.processes
def test_cli_run_notes_and_counts_the_database_entries_it_skips(tmp_path):
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    entries = _hostile_entries(tmp_path)
    for raw in entries:
        db.save(_failures_key(load_pass("set_grad")), raw)
    argv = [sys.executable, "-m", "fxfuzz", "run", "--db", str(tmp_path / "db"), "--max-examples", "2", "--workers", "1",
            "--max-shrink-s", "0", "--report-dir", str(tmp_path / "out")]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, cwd=str(tmp_path), timeout=600)
    assert "Traceback" not in run.stderr and run.returncode in (0, 1), run.stdout + run.stderr
    assert sum(line.startswith("fxfuzz: note: left saved example") for line in run.stderr.splitlines()) == len(entries)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["stats"]["skipped_untrusted"] == len(_channels(tmp_path)) and report["stats"]["unloadable"] == 3
    assert set(entries) <= set(db.fetch(_failures_key(load_pass("set_grad"))))
    assert not (tmp_path / "marker").exists()


def test_program_entries_pasting_code_into_the_source_are_skipped_and_kept(tmp_path):
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    marker = tmp_path / "marker"
    good = to_data(CUSTOM_PROGRAM)
    hostile = []
    for path, value in (
        (("body", 0, "args", 0), f"__import__('os').system('touch {marker}')"),
        (("body", 0, "args", 0), "eval"),
        (("body", 0, "out"), "v0; import os"),
        (("inputs", 0, "name"), "x0=open('/etc/passwd')"),
        (("outputs", 0, 1), "print"),
        (("body", 1, "ctx"), "load"),
    ):
        data = copy.deepcopy(good)
        target = data
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        hostile.append(json.dumps(data).encode())
    key = _failures_key(IDENTITY, "export:program")
    for raw in hostile:
        db.save(key, raw)
    assert PROGRAMS.loads(PROGRAMS.dumps(CUSTOM_PROGRAM)).code() == CUSTOM_PROGRAM.code()
    result = run_campaign(IDENTITY, CampaignSettings(max_examples=1, budget_s=120, domain="export:program"), database=db,
                          subject=Subject(module_programs(), lambda p, fn: [], PROGRAMS))  # fmt: skip
    assert result.stats["skipped_untrusted"] + result.stats["unloadable"] == len(hostile)
    assert result.stats["skipped_untrusted"] >= 5
    assert set(db.fetch(key)) == set(hostile) and not marker.exists()


def test_graph_codec_refuses_oversized_entries_before_parsing():
    with pytest.raises(SerializeError, match="MiB"):
        GRAPH_CASES.loads(b" " * (65 * 2**20))


def test_op_options_naming_a_source_load_it_and_hand_it_to_workers(tmp_path):
    """``--op SOURCE`` / ``--fxfuzz-op SOURCE`` (no ``:attr``): the source runs once, its
    operators are recorded as coming from it, and worker processes get it; one that cannot be
    loaded is one UsageError naming the option."""
    from fxfuzz.core.errors import UsageError
    from fxfuzz.core.op_sources import named_sources, op_sources
    from fxfuzz.strategies.custom import register_ops

    source = tmp_path / "trust_ops.py"
    source.write_text(
        "import torch\nlib = torch.library.Library('trustops', 'DEF')\nlib.define('twice(Tensor x) -> Tensor')\n"
        "lib.impl('twice', lambda x: x * 2, 'CompositeExplicitAutograd')\n"
    )
    assert register_ops([str(source)], "--fxfuzz-op") == []  # a source adds no op-table entry
    assert str(source) in named_sources()
    assert op_sources(["trustops::twice.default"]) == {"trustops::twice": str(source)}
    assert resolve_target("trustops::twice.default") is not None
    with pytest.raises(UsageError, match="--fxfuzz-op"):
        register_ops([str(tmp_path / "missing.py")], "--fxfuzz-op")
    with pytest.raises(UsageError, match="--op no_such_module_for_fxfuzz"):
        register_ops(["no_such_module_for_fxfuzz"], "--op")
