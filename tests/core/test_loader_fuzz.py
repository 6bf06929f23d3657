"""The loaders of saved data, fuzzed (issue 33): real repro files, database entries (graph
cases and programs) mutated field by field (deleted, retyped, huge, deeply nested, hostile
strings, bound methods, towers of powers, huge sizes in arguments) or cut short either load or
raise fxfuzz's one-line error, in bounded work; never another exception, a hang or a memory blow-up. The
same for the files themselves (issue 48): a FIFO, a link to /dev/zero, a sparse GiB, a
directory, a dangling or looping link, behind any chain of links, as a repro, a baseline or a
database entry."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from typing import Any

import torch
from fxfuzz.campaign.store import GRAPH_CASES, PROGRAMS
from fxfuzz.core.errors import FxfuzzError
from fxfuzz.core.identity import identify
from fxfuzz.core.program import to_data
from fxfuzz.core.serialize import MAX_GRAPH_BYTES, case_to_dict, memory_unsafe, target_name
from fxfuzz.repro.files import load_repro, repro_document
from handmade import CUSTOM_PROGRAM, no_grad_region_case, pytree_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import DATA
from work import bounded

FINDING = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {}}
# The work one load may cost (tests/helpers/work.py): calls (the costliest drawn here, a
# document with a node repeated hundreds of times, about 400,000) and the resident memory it
# may add: all the values a case makes together are at most MAX_GRAPH_BYTES by the loader's
# own bound (those drawn here add at most about 20 MiB).
LOAD_CALLS, PEAK_BYTES = 2_000_000, MAX_GRAPH_BYTES
# Few examples per run (the whole file stays under ~20 s); CI's runs draw different ones each time.
FUZZ = settings(max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _repros() -> list[dict[str, Any]]:
    """Real repro documents: the suite's saved ones (nested cond graphs, size symbols, a custom
    operator) and two written here (grad regions; a pytree calling convention)."""
    docs = []
    for folder, _, names in sorted(os.walk(DATA)):  # tests/data/cse/ holds repros too
        for name in sorted(names):
            with open(os.path.join(folder, name)) as fh:
                docs.append(json.load(fh))
    for case in (no_grad_region_case(), pytree_case()):
        docs.append(json.loads(json.dumps(repro_document("r", FINDING, case_to_dict(case), identify("set_grad")))))
    return docs


REPROS = _repros()
PROGRAM = to_data(CUSTOM_PROGRAM)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


TOWER = "Pow(" * 5 + "Symbol('s0', integer=True, positive=True)" + ", Integer(64))" * 5
HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            -1,
            0,
            10**12,
            2**70,
            -(2**63),
            1e308,
            float("nan"),
            "",
            "x" * 100_000,
            "os.system",
            "builtins.eval",
            "higher_order::inductor_compiled_code",
            "aten::from_file.default",
            "__import__('os').system('true')",
            "Integer(10)**Integer(10)**Integer(10)",
            {},
            [],
            [10**6] * 64,
            [1.0] * 100_000,
            _nested(500),
            {"callable": "os.system"},
            {"dtype": "load"},
            {"sym": "Pow(Integer(10), Pow(Integer(10), Integer(10)))"},
            {"sym": "Symbol('s0', integer=True, positive=True)"},
            {"node": "nope"},
            {"tuple": [10**12, 10**12]},
            {"slice": [1]},
            {"float": "1e999999"},
            {"device": "cuda:99"},
            {"tensor": {"shape": [10**12], "stride": [1], "dtype": "float32", "device": "cpu", "requires_grad": False}},
            {"evilns::op": "os"},
            {"type": "Op", "out": "x", "op": "add", "args": ["eval", "x"]},
            # bound methods and attributes every module has, as get_attr targets or submodule names
            "apply",
            "forward",
            "true_graph_0.to_folder",
            "sub.graph.create_node",
            "true_graph_0.recompile",
            "training",
            "higher_order::wrap",
            {"callable": "higher_order::wrap"},
            {"callable": "aten::sin.default"},
            # memory-unsafe operators
            "aten::_reshape_alias.default",
            "aten::as_strided.default",
            "inductor::resize_storage_bytes_.default",
            "aten::set_.source_Tensor",
            # towers of powers within the depth and exponent bounds
            {"sym": TOWER},
            {"sym": TOWER.replace("Pow(", "PowByNatural(")},
            {"sym": TOWER.replace("Integer(64)", "Integer(-64)")},
            # sizes written in arguments: each bounded alone, or making a huge value
            4e8,
            [4096, 4096],
            [2**24, 1],
            [1, 2**24],
            [64, 2**18],
            {"tuple": [0, 2**30, 1]},
        ]
    ),  # fmt: skip
    st.text(max_size=30),
    st.integers(),
    st.floats(),
)


def _spots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of ``doc``: the places a mutation can hit."""
    spots, pending = [], [doc]
    while pending:
        v = pending.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            spots.append((v, k))
            pending.append(x)
    return spots


@st.composite
def mutated(draw: st.DrawFn, docs: list[Any]) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(docs)))
    for _ in range(draw(st.integers(1, 3))):
        spots = _spots(doc)
        if not spots:
            break
        parent, key = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["delete", "replace", "replace", "wrap", "duplicate"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(HOSTILE)
        elif action == "wrap":
            parent[key] = draw(st.sampled_from([[parent[key]], {"tuple": parent[key]}, {"x": parent[key]}]))
        elif isinstance(parent, list):
            parent.extend([parent[key]] * draw(st.integers(1, 300)))
        else:
            parent[key] = [parent[key]] * draw(st.integers(2, 300))
    return doc


def _graph_nodes(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return [*graph["nodes"], *(n for sub in graph["submodules"].values() for n in _graph_nodes(sub))]


@st.composite
def hostile_nodes(draw: st.DrawFn, docs: list[Any]) -> Any:
    """A real case with one to three of its nodes' targets, arguments or traced shapes (nested
    graphs' included) made hostile: where a bound method, a tower or a huge size does harm."""
    case = copy.deepcopy(draw(st.sampled_from(docs)))
    for _ in range(draw(st.integers(1, 3))):
        node = draw(st.sampled_from(_graph_nodes(case["graph"])))
        field = draw(st.sampled_from(["target", "args", "args", "shape"]))
        if field == "target":
            node["target"] = draw(HOSTILE)
        elif field == "args" and isinstance(node["args"], dict) and node["args"].get("tuple"):
            items = node["args"]["tuple"]
            items[draw(st.integers(0, len(items) - 1))] = draw(HOSTILE)
        elif isinstance(node.get("val"), dict) and "tensor" in node["val"] and node["val"]["tensor"]["shape"]:
            node["val"]["tensor"]["shape"][0] = draw(HOSTILE)
    return case


def _loads_or_refuses(load: Any, data: Any) -> Any:
    """What ``load`` made of ``data`` (None: it was refused, in one line), within the work bounds."""
    loaded = None
    with bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES):
        try:
            loaded = load(data)
        except FxfuzzError as e:
            assert "\n" not in str(e), str(e)
    return loaded


def _names_only_data(case: Any) -> None:
    """A loaded case's get_attr nodes reach tensors and graphs alone, and it calls no
    memory-unsafe operator."""
    for gm in (m for m in case.gm.modules() if isinstance(m, torch.fx.GraphModule)):
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                assert isinstance(_fetch(gm, node.target), (torch.Tensor, torch.fx.GraphModule)), node.target
            elif node.op == "call_function":
                assert not memory_unsafe(target_name(node.target)), node.target


def _fetch(gm: Any, target: str) -> Any:
    for part in target.split("."):
        gm = getattr(gm, part)
    return gm


@FUZZ
@given(mutated(REPROS))
def test_mutated_repro_files_load_or_are_one_line(doc):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.json")
        with open(path, "w") as fh:
            json.dump(doc, fh)
        _loads_or_refuses(load_repro, path)


@FUZZ
@given(mutated([d["case"] for d in REPROS]))
def test_mutated_database_entries_load_or_are_refused(case):
    _loads_or_refuses(GRAPH_CASES.loads, json.dumps(case).encode())


@FUZZ
@given(hostile_nodes([d["case"] for d in REPROS]))
def test_hostile_nodes_load_or_are_refused(case):
    loaded = _loads_or_refuses(GRAPH_CASES.loads, json.dumps(case).encode())
    if loaded is not None:
        _names_only_data(loaded)


@settings(FUZZ, max_examples=40)
@given(mutated([PROGRAM]))
def test_mutated_program_entries_load_or_are_refused(program):
    _loads_or_refuses(PROGRAMS.loads, json.dumps(program).encode())


@FUZZ
@given(st.sampled_from(REPROS), st.floats(0, 1), st.binary(max_size=8))
def test_repro_files_cut_short_or_corrupted_are_one_line(doc, where, junk):
    raw = json.dumps(doc).encode()
    cut = raw[: int(len(raw) * where)] + junk
    _loads_or_refuses(GRAPH_CASES.loads, cut)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.json")
        with open(path, "wb") as fh:
            fh.write(cut)
        _loads_or_refuses(load_repro, path)


def test_the_unmutated_documents_load():
    """The fuzz tests start from documents that load: a refusal of every input proves nothing."""
    for doc in REPROS:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "r.json")
            with open(path, "w") as fh:
                json.dump(doc, fh)
            assert load_repro(path).case.compute_nodes() > 0
    assert PROGRAMS.loads(json.dumps(PROGRAM).encode()).code() == CUSTOM_PROGRAM.code()


# Files of every kind a path can name, each behind a chain of links or none: a loader reads a
# regular file within its bound and refuses anything else in one line (or, for a database
# entry, leaves it unread with a note) without blocking on a FIFO or reading a device.
KINDS = ["regular", "fifo", "dev-zero", "sparse", "directory", "dangling", "loop"]


def _make(folder: str, kind: str, links: int, content: bytes) -> str:
    target = os.path.join(folder, "target")
    if kind == "regular":
        with open(target, "wb") as fh:
            fh.write(content)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        target = "/dev/zero"
    elif kind == "sparse":
        with open(target, "wb") as fh:
            fh.truncate(1 << 30)
    elif kind == "directory":
        os.mkdir(target)
    elif kind == "loop":
        os.symlink(os.path.join(folder, "loop"), os.path.join(folder, "loop"))
        target = os.path.join(folder, "loop")
    path = target  # "dangling": the target is never made
    for i in range(max(links, kind == "dev-zero")):  # /dev/zero is named through a link here
        link = os.path.join(folder, f"link{i}")
        os.symlink(path, link)
        path = link
    return path


@settings(FUZZ, max_examples=40)
@given(st.sampled_from(KINDS), st.integers(0, 3), st.sampled_from(REPROS), st.sampled_from(["repro", "known", "entry"]))
def test_every_kind_of_file_loads_or_is_refused_unread(kind, links, doc, loader):
    from fxfuzz.campaign.database import CheckedDirectoryDatabase
    from fxfuzz.core.known import load_known

    with tempfile.TemporaryDirectory() as folder:
        content = (
            json.dumps(doc).encode()
            if loader == "repro"
            else b"a-b-1 reason\n"
            if loader == "known"
            else json.dumps(doc["case"]).encode()
        )
        if loader == "entry":  # the entry's own folder of a directory database
            notes: list[str] = []
            db = CheckedDirectoryDatabase(folder, notes.append)
            key_folder = db._key_path(b"k")
            key_folder.mkdir()
            path = _make(str(key_folder), kind, links, content)
            with bounded(calls=LOAD_CALLS, peak_bytes=PEAK_BYTES):
                entries = list(db.fetch(b"k"))
            if kind == "regular":
                assert content in entries and GRAPH_CASES.loads(content).compute_nodes() > 0
            else:
                # Each left unread with a one-line note, but a dangling link: an entry deleted meanwhile.
                assert (
                    content not in entries and bool(notes) == (kind != "dangling") and all("\n" not in n for n in notes)
                )
            return
        path = _make(folder, kind, links, content)
        if not path.endswith(".json"):
            os.symlink(path, os.path.join(folder, "named.json"))
            path = os.path.join(folder, "named.json")
        if kind == "regular":
            assert (
                (load_repro(path).case.compute_nodes() > 0)
                if loader == "repro"
                else load_known(path) == {"a-b-1": "reason"}
            )
        else:
            _loads_or_refuses(load_repro if loader == "repro" else load_known, path)
