"""Text from data is never code: whatever a case, a finding or a pass spec holds is written into a
repro ``.py`` as a literal (``repr``) or an escaped docstring, and a name written as code must be
a plain identifier. torch's error messages quote the case's strings
(``rounding_mode='x\"\"\"; __import__("os").system(...)'``), so a database entry controls the
finding message that lands in the repro's docstring and in the issue text that embeds it."""

from __future__ import annotations

import ast
import copy
import re
import subprocess
import sys

import pytest
from fxfuzz.cli.main import main
from fxfuzz.core.errors import SerializeError
from fxfuzz.core.identity import identify
from fxfuzz.core.passes import load_pass
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.oracles import verify
from fxfuzz.report.issue import render_issue
from fxfuzz.report.schema import Report, ReportFinding
from fxfuzz.repro import files
from fxfuzz.repro.files import docstring, graph_repro_source, program_repro_source, repro_document, write_repro
from fxfuzz.strategies.programs import module_programs
from handmade import PLANTED, no_grad_region_case, pytree_case
from hypothesis import given, settings
from hypothesis import strategies as st

MARKER = "PWNED"
# Ways out of a literal (triple quotes of both kinds, a backslash before a quote, a quote
# and a parenthesis, line breaks), each followed by code that would leave MARKER in the working
# directory if it ever ran. (\r, NUL and the other unprintables: the docstring tests below.)
PAYLOADS = [
    f'x"""\n__import__("os").system("touch {MARKER}")\n"""',
    f"x'''\n__import__('os').system('touch {MARKER}')\n'''",
    f'x\\"; __import__("os").system("touch {MARKER}"); ("\\',
]
# torch's own message for the probe's case, as an equivalence finding quotes it.
TORCH_MESSAGE = (
    "original raised RuntimeError: div expected rounding_mode to be one of None, 'trunc', or 'floor' "
    f"but found '{PAYLOADS[0]}'"
)


def _injected(source: str) -> bool:
    """Whether ``source`` calls ``__import__`` as code (fxfuzz's own repro code never does):
    a payload that got out of its literal."""
    return any(isinstance(n, ast.Name) and n.id == "__import__" for n in ast.walk(ast.parse(source)))


@given(st.text())
def test_a_docstring_reads_back_as_exactly_its_text(text):
    tree = ast.parse(docstring(text))
    (statement,) = tree.body
    assert isinstance(statement, ast.Expr) and statement.value.value == text  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text", [*PAYLOADS, '"', "\\", 'a"', '""""""', "\\\n", "\r\n\t\x00\x0b\x0c\x1b[31m\u2028\u2029\x85", "\ud800"]
)
def test_a_docstring_of_hostile_text_is_one_literal(text):
    assert ast.literal_eval(docstring(text)) == text and not _injected(docstring(text))


def _paths(value, path=()):
    """The path of every string in a JSON value, and of every key of its objects (as
    ``(path, True)``)."""
    if isinstance(value, str):
        yield path, False
    elif isinstance(value, dict):
        for k, x in value.items():
            yield (*path, k), True
            yield from _paths(x, (*path, k))
    elif isinstance(value, list):
        for i, x in enumerate(value):
            yield from _paths(x, (*path, i))


def _with(doc, path, is_key, payload):
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    if is_key:
        node[payload] = node.pop(path[-1])
    else:
        node[path[-1]] = payload
    return doc


def test_hostile_text_in_any_field_of_a_repro_document_stays_a_literal(monkeypatch):
    """Every string of a repro document (finding, pass spec, bucket, node names and targets,
    argument strings, signature, metas, pytree specs) and every key, replaced in turn by each
    payload: the .py is refused (SerializeError; a key it needs gone, KeyError) or holds the
    payload only inside literals."""
    # fxfuzz's own modules pasted into every repro hold no data: a stub keeps each parse short.
    monkeypatch.setattr(files, "pasted_source", lambda module: f"# {module.__name__}\n")
    finding = {"oracle": "equivalence", "kind": "value_mismatch", "message": "m", "details": {"x": "y"}}
    # The pytree case has every field a graph case writes: nodes, regions, metas, signature, specs.
    bucket = "equivalence-value_mismatch-0123abcd"
    doc = repro_document(bucket, finding, case_to_dict(pytree_case()), identify("set_grad"))
    written = 0
    for path, is_key in _paths(doc):
        for payload in PAYLOADS:
            try:
                source = graph_repro_source(_with(doc, path, is_key, payload))
            except SerializeError:
                continue
            except KeyError:
                assert is_key, path  # a key the writer needs was renamed away: no file at all
                continue
            assert not _injected(source), (path, payload)
            written += 1
    assert written > 100  # most fields are only quoted, and the writer still writes those


@settings(max_examples=5, deadline=None)
@given(program=module_programs())
def test_a_program_repro_quotes_its_message_as_a_literal(program):
    for payload in PAYLOADS:
        assert not _injected(program_repro_source(program, payload))


@pytest.fixture
def hostile_dir(tmp_path):
    """A folder whose name is a payload (quotes, triple quotes, a backslash, a line break):
    the pass spec, a file path inside it, is quoted into the repro as code would be."""
    folder = tmp_path / 'p"""\n__import__("os").system("touch PWNED")\n"""\\'
    folder.mkdir()
    (folder / "planted.py").write_text(PLANTED)
    return folder


@pytest.mark.processes
def test_a_repro_of_a_hostile_message_runs_no_code(tmp_path, hostile_dir, monkeypatch, capsys):
    """The probe: the message torch gives for a case whose string quotes a triple quote, in a
    finding whose every text field holds a payload, against a pass in a folder whose name is
    one. ``python x.py`` and ``fxfuzz repro x.py`` run the repro (and find the planted bug)
    and no payload runs; the issue text that embeds the script keeps it in one fenced block."""
    monkeypatch.chdir(tmp_path)
    spec = f"{hostile_dir / 'planted.py'}:drop_toggles"
    case = no_grad_region_case(ambient=True)
    (found, *_) = verify(case, load_pass(spec))
    finding = {**found.to_dict(), "message": TORCH_MESSAGE + "\n```\n" + "\n".join(PAYLOADS)}
    finding["details"] = {**finding["details"], "note": PAYLOADS[1]}
    doc = repro_document("planted-bug", finding, case_to_dict(case), identify(spec))
    py = write_repro(str(tmp_path / "repros"), doc)

    run = subprocess.run([sys.executable, py], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 1 and "FAIL" in run.stdout, run.stdout + run.stderr
    assert main(["repro", py]) == 1
    assert not (tmp_path / MARKER).exists() and not (hostile_dir / MARKER).exists()

    with open(py) as fh:
        source = fh.read()
    report = Report.from_data(
        {"pass": spec, "contract": "meaning", "torch_version": "2", "version": "0", "examples": 1, "duration_s": 1.0,
         "stopped_by": "budget", "findings": [], "stats": {}}
    )  # fmt: skip
    row = {
        **finding,
        "id": "planted-bug",
        "count": 1,
        "repro": "repros/planted-bug.py",
        "graph_code": case.code(),
        "graph_nodes": 3,
    }
    issue = render_issue(report, ReportFinding.from_data(row), source)
    at = issue.index("\n" + source.rstrip() + "\n")
    fence = issue[:at].rpartition("\n")[2].removesuffix("python")
    assert set(fence) == {"`"} and len(fence) > max(len(run) for run in re.findall(r"`+", source))
    assert issue[at + len(source.rstrip()) + 2 :].startswith(fence + "\n")  # closed right after the script
