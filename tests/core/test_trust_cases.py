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
from fxfuzz.campaign.engine import Subject, run_campaign
from fxfuzz.campaign.store import GRAPH_CASES, PROGRAMS, database_key
from fxfuzz.core import op_sources
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.program import to_data
from fxfuzz.core.rebuild import SizeExpressionError, parse_size
from fxfuzz.core.serialize import case_from_dict, case_to_dict, resolve_target, target_name
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.repro.files import repro_document, saved_cases
from fxfuzz.strategies import module_programs
from handmade import CUSTOM_PROGRAM, no_grad_region_case
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.extra.redis import RedisExampleDatabase
from paths import DATA, HELPERS
from redis_server import needs_redis
from work import bounded

FINDING = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
IDENTITY = load_pass("identity")
# The work a refusal may cost (tests/helpers/work.py): calls to parse one size expression
# (the largest refused here takes about 9,000) and to load one case (about 31,000), and the
# resident memory either may add (a few hundred KiB). What the bombs would cost unrefused is
# billions of calls or bytes: a tower evaluated, a 256 MiB tensor made, a graph run.
PARSE_CALLS, LOAD_CALLS, PEAK_BYTES = 20_000, 100_000, 32 << 20


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
    channels["get_attr_bound_method"] = (_bound_method_case(marker), "'graph'")
    case = _bound_method_case(marker)
    for node in case["graph"]["nodes"]:
        node["target"] = {"sub.graph.create_node": "sub.forward", "sub.recompile": "apply"}.get(
            node["target"], node["target"]
        )
    channels["get_attr_module_method"] = (case, "'forward'")
    return channels


def _bound_method_case(marker) -> dict:
    """A case that, loaded and run by fxfuzz before get_attr was confined to what the case
    defines, touched ``marker``: get_attr of the bound method ``sub.graph.create_node`` handed
    to ``wrap`` (which calls what it is given) adds a placeholder whose default argument is
    code, and ``sub.recompile`` handed to ``wrap`` executes it."""
    case = _case()
    graph = case["graph"]
    plain = {"args": {"tuple": []}, "kwargs": {"dict": []}, "val": None}
    graph["submodules"]["sub"] = {
        "nodes": [{"name": "a", "op": "placeholder", "target": "a", **plain},
                  {"name": "output", "op": "output", "target": "output", **plain, "args": {"tuple": [{"node": "a"}]}}],
        "submodules": {},
        "tensors": {},
    }  # fmt: skip
    code = f"y=__import__('os').system('touch {marker}')"
    first = max(i for i, n in enumerate(graph["nodes"]) if n["op"] == "placeholder") + 1
    graph["nodes"][first:first] = [
        {"name": "create", "op": "get_attr", "target": "sub.graph.create_node", **plain},
        {
            "name": "w1",
            "op": "call_function",
            "target": "higher_order::wrap",
            **plain,
            "args": {"tuple": [{"node": "create"}, "placeholder", code]},
        },
        {"name": "recompile", "op": "get_attr", "target": "sub.recompile", **plain},
        {
            "name": "w2",
            "op": "call_function",
            "target": "higher_order::wrap",
            **plain,
            "args": {"tuple": [{"node": "recompile"}]},
        },
    ]
    return case


def _other_torch(case: dict) -> dict:
    """``case`` as another torch might have written it: a dtype this one lacks (unloadable, not untrusted)."""
    _node(case, "aten::sin.default")["val"]["tensor"]["dtype"] = "float128"
    return case


def _write_repro(path, case: dict, pass_spec: str = "set_grad") -> str:
    doc = repro_document("r", FINDING, case, identify("set_grad"))
    doc["pass"] = pass_spec
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_repro_asking_for_code_through_any_channel_runs_none_and_is_one_line(tmp_path, refused, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # the module channel's source would import, if anything imported it
    for name, (case, named) in _channels(tmp_path).items():
        line = refused(["repro", _write_repro(tmp_path / f"{name}.json", case)])
        assert named in line, (name, line)
    (tmp_path / "evil_pass.py").write_text(
        f"open({str(tmp_path / 'marker')!r}, 'w').close()\ndef fn(gm, sig):\n    return gm, sig\n"
    )
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
        return subprocess.run(argv, capture_output=True, text=True, cwd=HELPERS, timeout=300)

    run = repro()
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--op user_ops" in run.stderr, run.stderr
    run = repro("--op", os.path.join(HELPERS, "user_ops.py"))
    assert run.returncode == 0, run.stdout + run.stderr


def test_size_expression_bombs_are_refused_in_bounded_work():
    for bomb in (
        "Integer(10)**Integer(10)**Integer(10)",
        "Pow(Integer(10), Pow(Integer(10), Integer(10)))",
        "Pow(Pow(Pow(Integer(10), Integer(64)), Integer(64)), Integer(64))",
        "Mul(" + ", ".join(["Pow(Integer(2), Integer(64))"] * 60) + ")",
        "Add(" * 5000 + "Integer(1)" + ")" * 5000,
        "Integer(" + "9" * 5000 + ")",
    ):
        with bounded(calls=PARSE_CALLS, peak_bytes=PEAK_BYTES), pytest.raises(SizeExpressionError):
            parse_size(bomb)
    case = _case()
    _node(case, "aten::sin.default")["val"]["tensor"]["shape"] = [
        {"sym": "Pow(Integer(10), Pow(Integer(10), Integer(10)))"}
    ]
    with bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES), pytest.raises(UntrustedError, match="exponent"):
        case_from_dict(case)


def test_real_size_expressions_still_parse():
    import sympy

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    from torch.utils._sympy.functions import FloorDiv, Max

    for expr in (2 * s0, s0**2 + 3, FloorDiv(s0 - 1, 2), Max(1, s0), sympy.Rational(1, 2) * s0):
        assert parse_size(sympy.srepr(expr)) == expr


def test_allowed_targets_resolve_and_nothing_else_does(monkeypatch):
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
    monkeypatch.setattr(op_sources, "_ADDED", {"userns::gone"})
    with pytest.raises(SerializeError, match="no operator") as refusal:
        resolve_target("userns::gone.default")  # allowed, and missing from this torch: not untrusted
    assert not isinstance(refusal.value, UntrustedError)


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
        with bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES), pytest.raises(SerializeError):
            case_from_dict(case)


def test_a_repro_whose_fields_are_wrong_is_one_line(tmp_path, refused):
    base = json.loads(json.dumps(repro_document("r", FINDING, _case(), identify("set_grad"))))
    for i, edit in enumerate(
        [
            {"finding": []},
            {"finding": {"message": 3}},
            {"pass": ["x"]},
            {"device": "tpu"},
            {"case": []},
            {"case": {"format": "fxfuzz-case/1"}},
        ]
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
    _write_repro(corpus / "other_torch.json", _other_torch(_case()))
    _write_repro(corpus / "good.json", _case())
    return str(corpus)


def test_corpus_files_asking_for_code_are_skipped_counted_and_kept(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = _write_corpus(tmp_path)
    before = sorted(os.listdir(folder))
    corpus = saved_cases(folder, 60)
    assert [name for name, _ in corpus.cases] == ["good.json"]
    assert len(corpus.untrusted) == len(_channels(tmp_path)) and len(corpus.unloadable) == 1
    assert all("\n" not in note for note in corpus.untrusted + corpus.unloadable)
    assert sorted(os.listdir(folder)) == before and not (tmp_path / "marker").exists()


@pytest.mark.processes
def test_cli_gate_notes_and_counts_the_corpus_files_it_skips(tmp_path, cli, monkeypatch):
    folder = _write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    run = cli("gate", "--candidate", "set_grad", "--corpus", folder, "--max-examples", "1", "--max-shrink-s", "0",
              "--report-dir", str(tmp_path / "out"))  # fmt: skip
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
    return [
        *entries,
        json.dumps(_other_torch(_case())).encode(),
        b'{"format": "fxfuzz-case/1", "graph": ',
        b"\xff" * 10,
    ]


def _replay_keeps_every_entry(db, tmp_path) -> None:
    entries = _hostile_entries(tmp_path)
    for raw in entries:
        db.save(_failures_key(IDENTITY), raw)
    result = run_campaign(
        IDENTITY,
        CampaignSettings(max_examples=1, budget_s=120),
        database=db,
        subject=Subject(check=lambda case, fn: []),
    )
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
def test_cli_run_notes_and_counts_the_database_entries_it_skips(tmp_path, cli, monkeypatch):
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    entries = _hostile_entries(tmp_path)
    for raw in entries:
        db.save(_failures_key(load_pass("set_grad")), raw)
    monkeypatch.chdir(tmp_path)
    run = cli("run", "--db", str(tmp_path / "db"), "--max-examples", "2", "--workers", "1", "--max-shrink-s", "0",
              "--report-dir", str(tmp_path / "out"))  # fmt: skip
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


def test_a_get_attr_reaches_only_what_the_case_defines():
    """Tensors and nested graphs of the case load; a path to anything else (a method of a graph
    module or of its graph, an attribute nn.Module gives every module, a name the case never
    defined) is refused before any module is built, and what was built is checked again."""
    with open(os.path.join(DATA, "unflatten_after_def_use.json")) as fh:
        doc = json.load(fh)  # a cond: get_attr of its two branch graphs
    assert case_from_dict(copy.deepcopy(doc["case"])).compute_nodes() > 0
    for target in ("true_graph_0.to_folder", "true_graph_0.graph.create_node", "apply", "true_graph_0.code", "true_graph_0.training",
                   "no_such_graph", "true_graph_0.submodule_that_is_not_there"):  # fmt: skip
        case = copy.deepcopy(doc["case"])
        next(n for n in case["graph"]["nodes"] if n["op"] == "get_attr")["target"] = target
        with pytest.raises(UntrustedError, match="get_attr|attribute path"):
            case_from_dict(case)


def test_only_an_operator_is_handed_to_a_higher_order_op_and_nothing_else_takes_a_callable():
    with open(
        os.path.join(DATA, "post_grad", "gradients-inplace_after_forward_raises_differently-914eb3d1.json")
    ) as fh:
        doc = json.load(fh)  # with_effects(token, fxfuzz::logged, x): the one slot that takes a callable
    effects = next(n for n in doc["case"]["graph"]["nodes"] if n["target"] == "higher_order::with_effects")
    assert effects["args"]["tuple"][1] == {"callable": "fxfuzz::logged.default"}
    assert case_from_dict(copy.deepcopy(doc["case"])).compute_nodes() > 0
    case = copy.deepcopy(doc["case"])
    next(n for n in case["graph"]["nodes"] if n["target"] == "higher_order::with_effects")["args"]["tuple"][1] = {
        "callable": "operator.add"
    }
    with pytest.raises(UntrustedError, match="only an operator"):
        case_from_dict(case)
    case = _case()
    _node(case, "aten::add.Tensor")["kwargs"] = {"dict": [["alpha", {"callable": "aten::sin.default"}]]}
    with pytest.raises(UntrustedError, match="only an operator"):
        case_from_dict(case)
    case = _case()
    case["inputs"].append({"value": {"callable": "aten::sin.default"}})
    with pytest.raises(UntrustedError, match="only an operator"):
        case_from_dict(case)


def test_the_allowlist_is_what_fxfuzz_draws_and_never_a_memory_unsafe_operator(monkeypatch):
    """Named overloads, not namespaces: operators of aten, prims and inductor that fxfuzz never
    draws are refused, and operators that reinterpret or resize storage are refused even where
    the user adds them for the run; what the user adds otherwise loads."""
    from fxfuzz.core.drawn_targets import DRAWN_TARGETS
    from fxfuzz.core.serialize import memory_unsafe
    from fxfuzz.strategies.custom import FXFUZZ_OPS
    from fxfuzz.strategies.ops import INPLACE_OPS, OPS

    for spec in (*OPS, *INPLACE_OPS, *FXFUZZ_OPS):
        assert resolve_target(target_name(spec.target)) is spec.target
    assert not any(memory_unsafe(name) for name in DRAWN_TARGETS)
    unsafe = ("aten::_reshape_alias.default", "aten::as_strided.default", "aten::as_strided_.default", "aten::set_.source_Tensor",
              "aten::resize_.default", "inductor::resize_storage_bytes_.default", "aten::_unsafe_view.default", "aten::_unsafe_index.Tensor")  # fmt: skip
    for name in (
        "aten::_print.default",
        "aten::cumprod.default",
        "higher_order::wrap",
        "higher_order::inductor_compiled_code",
    ):
        with pytest.raises(UntrustedError, match="not one fxfuzz resolves"):
            resolve_target(name)
    monkeypatch.setattr(op_sources, "_ADDED", {"aten::cumprod", *(n.partition(".")[0] for n in unsafe)})
    import torch

    assert resolve_target("aten::cumprod.default") is torch.ops.aten.cumprod.default
    for name in unsafe:
        with pytest.raises(UntrustedError, match="never runs it from a saved case, added with --op or not"):
            resolve_target(name)


def _with_nodes(case: dict, *nodes: dict) -> dict:
    """``case`` with ``nodes`` (name, target, args) put before its first sin, their values returned too."""
    graph = case["graph"]["nodes"]
    at = next(i for i, n in enumerate(graph) if n["target"] == "aten::sin.default")
    graph[at:at] = [
        {"op": "call_function", "args": {"tuple": []}, "kwargs": {"dict": []}, "val": None, **n} for n in nodes
    ]
    output = next(n for n in graph if n["op"] == "output")
    output["args"]["tuple"][0]["tuple"].extend({"node": n["name"]} for n in nodes)
    return case


def _call(name: str, target: str, *args: object) -> dict:
    return {"name": name, "target": target, "args": {"tuple": list(args)}}


def test_sizes_written_in_arguments_are_bounded_by_what_they_make():
    """Elements and bytes of each value a node makes, and of all of them together, are checked
    on fake tensors before the graph runs: literal sizes, ranges, repeats and products of
    matrices past the bound are refused in bounded work (calls and memory, PEAK_BYTES), the same
    ops at sane sizes load."""
    x = {"node": "x"}
    bombs = {
        "arange_float": [_call("big", "aten::arange.default", 4e8)],
        "arange_start_step": [_call("big", "aten::arange.start_step", 0, 2**30, 1)],
        "ones": [_call("big", "aten::ones.default", [8192, 8192])],
        "full": [_call("big", "aten::full.default", [2**23, 3], 1.0)],
        "new_zeros": [_call("big", "aten::new_zeros.default", x, [2**25])],
        "expand": [_call("big", "aten::expand.default", x, [2**23, 3])],
        "outer_product": [
            _call("a", "aten::ones.default", [2**24, 1]),
            _call("b", "aten::ones.default", [1, 2**24]),
            _call("big", "aten::mm.default", {"node": "a"}, {"node": "b"}),
        ],  # fmt: skip
        "many_at_the_bound": [_call(f"o{i}", "aten::ones.default", [4096, 4096]) for i in range(20)],
        "list_repeated": [
            _call("parts", "aten::split.Tensor", x, 1),
            _call("big", "operator.mul", {"node": "parts"}, 10**9),
        ],
        "int_squared": [
            _call("n0", "operator.mul", 2**40, 2**40),
            *(_call(f"n{i + 1}", "operator.mul", {"node": f"n{i}"}, {"node": f"n{i}"}) for i in range(40)),
        ],  # fmt: skip
    }
    for name, nodes in bombs.items():
        bomb = _with_nodes(_case(), *nodes)
        with (
            bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES),
            pytest.raises(SerializeError, match="makes a tensor|exceeds|Python operators") as refusal,
        ):
            case_from_dict(bomb)
        assert "\n" not in str(refusal.value), name
    sane = [_call("r", "aten::arange.default", 4096.0), _call("o", "aten::ones.default", [4096, 4096]),
            _call("e", "aten::expand.default", x, [64, 3]), _call("m", "operator.mul", 3, 4)]  # fmt: skip
    assert case_from_dict(_with_nodes(_case(), *sane)).compute_nodes() > len(sane)


def test_size_expression_towers_are_refused_unbuilt():
    """Within the depth and exponent bounds, a tower of powers evaluates to numbers of
    billions of bits: its bit length is bounded from the syntax before anything is built."""
    symbol = "Symbol('s0', integer=True, positive=True)"

    def tower(power: str, exponent: int, height: int = 5) -> str:
        expr = symbol
        for _ in range(height):
            expr = f"{power}({expr}, Integer({exponent}))"
        return expr

    for bomb in (
        tower("Pow", 64),
        tower("PowByNatural", 64),
        tower("Pow", -64),
        tower("Pow", 2, 11),
        f"Pow({tower('Pow', 8, 2)}, Integer(-64))",
    ):
        with bounded(calls=PARSE_CALLS, peak_bytes=PEAK_BYTES), pytest.raises(SizeExpressionError, match="bits"):
            parse_size(bomb)
        case = _case()
        case["symbols"] = {"s0": {"hint": 3, "min": 2, "max": None}}
        _node(case, "aten::sin.default")["val"]["tensor"]["shape"] = [{"sym": bomb}]
        with (
            bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES),
            pytest.raises(UntrustedError, match="size expression refused"),
        ):
            case_from_dict(case)
    assert str(parse_size(tower("Pow", 2, 2))) == "s0**4"
    case = _case()
    case["symbols"] = {"s0": {"hint": 2**24, "min": 2, "max": None}}
    _node(case, "aten::sin.default")["val"]["tensor"]["shape"] = [{"sym": f"Pow({symbol}, Integer(4))"}]
    with pytest.raises(UntrustedError, match="at its hints"):
        case_from_dict(case)  # 2**96 where a size belongs


def test_a_saved_example_that_loads_too_slowly_is_left_out_and_kept(tmp_path):
    from fxfuzz.campaign.store import Codec, SavedFailures
    from fxfuzz.core.deadline import load_within

    with pytest.raises(SerializeError, match="did not load within 0.2s"):
        load_within(0.2, time.sleep, 30)
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    store = SavedFailures(
        db, b"k", Codec(lambda case: None, lambda raw: time.sleep(30) if raw == b"slow" else GRAPH_CASES.loads(raw))
    )
    good = json.dumps(_case()).encode()
    db.save(store.key, b"slow")
    db.save(store.key, good)
    assert [raw for raw, _ in store.saved(0.5)] == [good]
    assert store.skipped == {"unloadable": 1} and "did not load within 0.5s" in store.notes[0]
    assert set(db.fetch(store.key)) == {b"slow", good}


def test_repro_loading_obeys_the_example_timeout(tmp_path, refused, monkeypatch):
    import fxfuzz.cli.repro

    path = _write_repro(tmp_path / "r.json", _case())
    monkeypatch.setattr(fxfuzz.cli.repro, "recorded_pass", lambda path: time.sleep(30))
    line = refused(["repro", path, "--example-timeout", "0.5"])
    assert "did not load within 0.5s" in line


# Generated cases loaded per domain: lowering an aten case takes about a second.
LOADED_SAMPLE = {
    "export": 80,
    "adversarial": 80,
    "functional": 80,
    "aten": 20,
    "inductor": 4,
    "inductor_joint": 2,
    "inductor_frozen": 3,
}


@pytest.mark.slow
def test_fxfuzz_own_cases_and_captures_load_against_the_allowlist():
    """Every corpus capture and a fresh sample of generated cases of every domain (another
    seed than the one ``fxfuzz.tools.drawn_targets`` wrote the list from) load: the allowlist and
    the size checks refuse nothing fxfuzz makes itself."""
    from fxfuzz.core.choices import DOMAINS
    from fxfuzz.strategies import graph_cases
    from fxfuzz.strategies.corpus import corpus_cases
    from hypothesis import HealthCheck, given, seed, settings

    for name, case in corpus_cases():
        assert case_from_dict(json.loads(json.dumps(case_to_dict(case)))).compute_nodes() == case.compute_nodes(), name
    for domain in DOMAINS:
        loaded = []

        @seed(4801)
        @settings(
            max_examples=LOADED_SAMPLE[domain], deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(graph_cases(domain))
        def loads(case):
            # Called below, in this iteration: the late binding B023 warns of cannot bite.
            same = case_from_dict(json.loads(json.dumps(case_to_dict(case)))).compute_nodes() == case.compute_nodes()
            loaded.append(same)  # noqa: B023

        loads()
        assert len(loaded) == LOADED_SAMPLE[domain] and all(loaded), domain
