"""Minimized repros: ``repros/<bucket>.py`` (standalone, torch only) and ``<bucket>.json``.

The .py rebuilds the graph with plain torch.fx calls (``Graph.placeholder``,
``create_node``, ``get_attr``, ``output``, nested ``GraphModule``s), re-creates
``meta['val']`` with fake tensors, rebuilds the ``ExportGraphSignature``, writes the
inputs as literal tensors, runs the pass and exits 1 while a check fails. The .json is
``fxfuzz.core.serialize``'s case format plus the pass spec and the finding. ``load_repro`` reads
either form back for ``fxfuzz repro``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import keyword
import os
import re
from dataclasses import dataclass
from typing import Any

from fxfuzz.core import custom_ops, rebuild, shapes
from fxfuzz.core.case import GraphCase
from fxfuzz.core.choices import CONTRACT_NAMES, DEVICES
from fxfuzz.core.deadline import load_within
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.fileio import read_bounded, write_atomic
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.passes import PIPE, REGISTRY, import_spec
from fxfuzz.core.program import CLASS_NAME, Program, module_source, pasted_source
from fxfuzz.core.serialize import MAX_CASE_BYTES, case_from_dict, json_data
from fxfuzz.oracles import program_runtime
from fxfuzz.repro import program_check, standalone_check
from fxfuzz.repro.code import NAME, Code, code_name
from fxfuzz.repro.judged import judged_contract
from fxfuzz.repro.short import is_short, short_program

_RESERVED = {"g", "fake", "root", "torch", "fx", "sys", "operator", "importlib", "traceback", "gs"}


def absolute_spec(spec: str) -> str:
    """A pass spec that still resolves from another directory (file paths made absolute, in
    each part of a pipeline)."""
    if PIPE in spec:
        return PIPE.join(absolute_spec(part) for part in spec.split(PIPE))
    where, sep, attr = spec.rpartition(":")
    if sep and (where.endswith(".py") or os.sep in where):
        return f"{os.path.abspath(where)}:{attr}"
    return spec


# ---------------------------------------------------------------------------- writing


def docstring(text: str) -> str:
    """``text`` as a triple-quoted Python literal that reads as the text itself: backslashes
    and double quotes escaped (so nothing in it can end the literal early), and every
    character that is not printable but a line break written as its escape. The text of a
    repro's docstring is data (a finding's message quotes the case's strings)."""
    return '"""' + "".join(_escaped(c) for c in text) + '"""'


def _escaped(c: str) -> str:
    if c in '\\"':
        return "\\" + c
    if c == "\n" or c.isprintable():
        return c
    return c.encode("unicode_escape").decode("ascii")  # \x00, \t, \u2028, a lone \ud800


class _Source(Code):
    """``Code`` that also writes tensors and whole graph builders, for the full repro."""

    def arg(self, a: Any, names: dict[str, str]) -> str:
        # A SymInt literal is rebuilt by the pasted rebuild code; a short program has no such
        # helper, so ``Code`` refuses it there and the bucket keeps its full script.
        if isinstance(a, dict) and set(a) == {"symint"}:
            return f"symint_literal({int(a['symint'])!r})"
        return super().arg(a, names)

    def tensor(self, t: dict[str, Any]) -> str:
        if "value" in t:
            return self.arg(t["value"], {})
        values = "[" + ", ".join(self.arg(x, {}) for x in t["values"]) + "]"
        return f"tensor({values}, {code_name('torch.', t['dtype'], 'dtype')}, {t['shape']!r}, {t['requires_grad']!r})"

    def graph(self, g: dict[str, Any], fname: str, out: list[str]) -> None:
        """Append ``def fname(fake)`` building this graph module (nested ones first)."""
        subs = {}
        for target, sub in g.get("submodules", {}).items():
            subs[target] = f"{fname}_{re.sub(r'[^0-9a-zA-Z_]', '_', target)}"
            self.graph(sub, subs[target], out)
        lines = [f"def {fname}(fake):", "    g = fx.Graph()"]
        names: dict[str, str] = {}
        used: set[str] = set()
        for n in g["nodes"]:
            # ASCII only: Python folds other identifiers (NFKC), so two could name one variable.
            var = n["name"] if NAME.fullmatch(n["name"]) else "n_" + re.sub(r"[^0-9A-Za-z_]", "_", n["name"])
            while keyword.iskeyword(var) or var in _RESERVED or var in used:
                var += "_"
            used.add(var)
            op = n["op"]
            if op == "placeholder":
                lines.append(f"    {var} = g.placeholder({n['name']!r})")
            elif op == "get_attr":
                lines.append(f"    {var} = g.get_attr({n['target']!r})")
            elif op == "output":
                (result,) = n["args"]["tuple"]  # output nodes take one argument
                lines.append(f"    g.output({self.arg(result, names)})")
                continue
            else:
                target = self.target(n["target"]) if op == "call_function" else repr(n["target"])
                lines.append(
                    f"    {var} = g.create_node({op!r}, {target}, {self.arg(n['args'], names)}, "
                    f"{self.arg(n['kwargs'], names)}, name={n['name']!r})"
                )
            names[n["name"]] = var
            if "module_stack" in n:
                stack = {k: tuple(v) for k, v in n["module_stack"].items()}
                lines.append(f"    {var}.meta['nn_module_stack'] = {stack!r}")
            if n.get("val") is not None:
                lines.append(f"    {var}.meta['val'] = meta_val(fake, {n['val']!r})")
        if "pytree" in g:
            p = g["pytree"]
            lines.append(
                "    g._codegen = fx.graph._PyTreeCodeGen(fx.graph._PyTreeInfo("
                f"{p['orig_args']!r}, *[pytree.treespec_loads(s) if s else None for s in ({p['in_spec']!r}, {p['out_spec']!r})]))"
            )
            self.imports.add("torch.utils._pytree as pytree")
        lines.append("    root = torch.nn.Module()")
        for target, fn in subs.items():
            lines.append(f"    set_attr(root, {target!r}, {fn}(fake))")
        for target, t in g.get("tensors", {}).items():
            lines.append(f"    set_attr(root, {target!r}, {self.tensor(t)})")
        lines.append("    return rebuild_graph_module(root, g)")
        out.append("\n".join(lines))


def _signature_source(sig: dict[str, Any], src: _Source) -> str:
    ins = [
        f"        gs.InputSpec({code_name('gs.InputKind.', s['kind'], 'input kind')}, {src.spec_argument(s['arg'])}, {s['target']!r}, {s['persistent']!r}),"
        for s in sig["inputs"]
    ]
    outs = [
        f"        gs.OutputSpec({code_name('gs.OutputKind.', s['kind'], 'output kind')}, {src.spec_argument(s['arg'])}, {s['target']!r}),"
        for s in sig["outputs"]
    ]
    return "\n".join(
        [
            "    signature = gs.ExportGraphSignature(",
            "    input_specs=[",
            *ins,
            "    ],",
            "    output_specs=[",
            *outs,
            "    ])",
        ]
    )


def graph_repro_source(doc: dict[str, Any]) -> str:
    """The standalone .py for a repro document (see ``repro_document``)."""
    case, finding = doc["case"], doc["finding"]
    src = _Source()
    functions: list[str] = []
    src.graph(case["graph"], "build_graph", functions)
    signature = _signature_source(case["signature"], src)
    inputs = "\n".join(f"        {src.tensor(t)}," for t in case["inputs"])
    eliminates = "[" + ", ".join(src.target(t) for t in doc["eliminates"]) + "]"
    check = (
        pasted_source(rebuild)
        + "\n\n"
        + pasted_source(shapes)
        + "\n\n"
        + pasted_source(standalone_check).split('\nif __name__ == "__main__":')[0]
    )
    if case.get("custom_ops"):
        # The custom operators the graph calls: fxfuzz's own pasted, a user's imported.
        check += f"\n\n{pasted_source(custom_ops)}\n\n\ndefine_missing({case['custom_ops']!r})"
    imports = "\n".join(f"import {m}" for m in sorted(src.imports))
    message = f"[{finding['oracle']}/{finding['kind']}] {finding['message']}"
    about = f"""fxfuzz repro {doc["bucket"]}: {message}

Rebuilds the minimized graph with plain torch.fx calls, runs the pass and checks the
result. Needs only torch: `python {repro_stem(doc["bucket"])}.py` exits 1 while the bug is there,
0 once it is fixed. Pass under test: {doc["pass"]}.
"""
    return f'''{docstring(about)}
{imports}
{check.strip()}

import torch.export.graph_signature as gs

PASS = {import_spec(doc["pass"])!r}  # import specs, several joined by + for a pipeline
PASS_SPEC = {doc["pass"]!r}  # how fxfuzz names the pass (`fxfuzz repro` reads it)
EXPECTED = {message!r}
AMBIENT_GRAD = {case["ambient_grad"]!r}
DEVICE = {doc.get("device", "cpu")!r}  # where the campaign verified; the checks below run on CPU
# Size symbols of the metas (traced value, range) and the other sizes the checks also run at.
SYMBOLS = {case.get("symbols", {})!r}
SIZES = {case.get("sizes", [])!r}
# The contract the checks hold the pass to (as the campaign did), the finding's kind, its .json.
CONTRACT = {judged_contract(doc)!r}
KIND = {finding.get("kind")!r}
JSON = {repro_stem(doc["bucket"]) + ".json"!r}


{chr(10).join(chr(10) * 2 + f for f in functions).strip()}


def build_case():
    """(graph module, signature, inputs in signature order, ambient grad mode)."""
    gm = build_graph(fake_mode(SYMBOLS))
{signature}
    inputs = (
{inputs}
    )
    return gm, signature, inputs, AMBIENT_GRAD


if __name__ == "__main__":
    sys.exit(main(build_case, PASS, {eliminates}, EXPECTED, DEVICE, SIZES, CONTRACT, KIND, JSON, PASS_SPEC))
'''


def repro_document(
    bucket: str, finding: dict[str, Any], case: dict[str, Any], identity: PassIdentity, device: str = "cpu"
) -> dict[str, Any]:
    """The machine-readable repro: the serialized case, the pass as ``held_to`` records it,
    the finding and the device the campaign verified on (a ``cuda:`` finding only shows when
    replayed there)."""
    return {"bucket": bucket, **held_to(identity), "finding": finding, "device": device, "case": case}


def held_to(identity: PassIdentity) -> dict[str, Any]:
    """What a repro document records of its pass, all from its ``identity``: the spec, the
    contract it was held to where ``--contract`` named one (else the pass's own, left out), and
    what that contract says (the calls it eliminates, whether it refines, whether the result is
    differentiated: what the standalone check judges by)."""
    return {
        "pass": absolute_spec(identity.spec),
        **({"contract": identity.given} if identity.given is not None else {}),
        "eliminates": list(identity.eliminates),
        "refines": identity.refines,
        "differentiated": identity.differentiated,
    }


def repro_stem(bucket: str) -> str:
    """A bucket's repro file name, without extension: its id, with what file systems and CI
    artifact stores refuse (the ``:`` of a device-prefixed kind) replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", bucket)


def write_repro(directory: str, doc: dict[str, Any]) -> str:
    """Write ``<bucket>.json`` and ``<bucket>.py`` into ``directory``: the .py is the short
    program where the case allows one (``fxfuzz.repro.short``), else the full script
    (``graph_repro_source``, which ``fxfuzz repro --full`` writes on demand for any); return
    the .py path."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, repro_stem(doc["bucket"]))
    # Before writing either, so a failure leaves none.
    source = short_program(doc, repro_stem(doc["bucket"]) + ".json") or graph_repro_source(doc)
    # Each whole or absent (a full disk); an OSError names the one that failed.
    write_atomic(base + ".json", json.dumps(doc, indent=1))
    write_atomic(base + ".py", source)
    return base + ".py"


# ---------------------------------------------------------------------------- reading


@dataclass
class Repro:
    """A repro read back: the case, the pass it was found against, the recorded finding (only
    its message for the .py form) and the device ``verify`` ran on."""

    case: GraphCase
    pass_spec: str
    finding: dict[str, Any]
    device: str = "cpu"
    contract: str | None = None  # the contract the campaign held the pass to (a CONTRACT_NAMES name)


def read_json(path: str) -> Any:
    """The JSON document in ``path`` (``json_data``): SerializeError, one line, for a missing,
    oversized, unreadable or malformed file."""
    raw = _read(path)
    try:
        return json_data(raw)
    except SerializeError as e:
        raise SerializeError(f"{path}: {e}") from None


def load_repro(path: str) -> Repro:
    """The repro in a .json or .py file (a short program's is its .json's); SerializeError if
    malformed, UntrustedError if it asks for code this run does not trust. The pass it names is information only (``trusted_pass``)."""
    if path.endswith(".json"):
        doc = read_json(path)
        if not isinstance(doc, dict) or not {"case", "pass", "finding"} <= doc.keys():
            raise SerializeError(f"{path} is not an fxfuzz repro (needs case, pass and finding)")
        finding, spec = doc["finding"], doc["pass"]
        if not isinstance(finding, dict) or not isinstance(finding.get("message", ""), str):
            raise SerializeError(f'{path}: "finding" is an object with a "message" string')
        if not isinstance(spec, str) or len(spec) > 10_000:
            raise SerializeError(f'{path}: "pass" is a pass spec (a string)')
        device = _device(path, doc.get("device", "cpu"))
        contract = doc.get("contract")
        if contract is not None and contract not in CONTRACT_NAMES:
            raise SerializeError(f'{path}: "contract" is one of {", ".join(CONTRACT_NAMES)}')
        try:
            case = case_from_dict(doc["case"])
        except SerializeError as e:
            raise type(e)(f"{path}: {e}") from None
        return Repro(case, spec, finding, device, contract)
    if path.endswith(".py"):
        source = _read_py(path)
        return load_repro(replayed(path)) if is_short(source) else _load_py(path, source)
    raise SerializeError(f"{path}: expected a repro .py or .json")


def replayed(path: str) -> str:
    """The file ``fxfuzz repro`` replays for ``path``: a short program's .json beside it (the
    short program holds no case fxfuzz reads), else ``path`` itself. A short program whose
    .json is gone is no repro fxfuzz can replay: SerializeError."""
    if not path.endswith(".py") or not is_short(_read_py(path)):
        return path
    doc = path.removesuffix(".py") + ".json"
    if not os.path.isfile(doc):
        raise SerializeError(
            f"{path} is a short program; fxfuzz replays the .json written beside it, and {doc} is missing"
        )
    return doc


def trusted_pass(spec: str, path: str) -> str:
    """``spec``, the pass the repro ``path`` records, if it is a registered name (or a pipeline
    of them): fxfuzz imports no code a .json names, so any other pass must be given with
    ``--pass``. A .py repro is a program its user chose to run, its pass spec included."""
    if path.endswith(".py") or all(part in REGISTRY for part in spec.split(PIPE)):
        return spec
    raise UntrustedError(
        f"{path} was found against pass {spec[:300]!r}, which is not a registered pass, and fxfuzz does not "
        f"import a pass a repro names: to replay against it, give it with --pass {spec[:300]}"
    )


def recorded_pass(path: str) -> tuple[str, str]:
    """(pass spec, device) a repro records, read without running any of it: a .py's literal
    ``PASS_SPEC`` and ``DEVICE`` assignments; running the file is the replay's job, in a child
    process. SerializeError if it is not a repro."""
    if not path.endswith(".py") or replayed(path) != path:  # a .json, or a short program's .json
        repro = load_repro(replayed(path))
        return repro.pass_spec, repro.device
    try:
        tree = ast.parse(_read_py(path), path)
    except (SyntaxError, ValueError) as e:
        raise SerializeError(f"{path} is not readable Python: {e}") from None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in (
            ["PASS_SPEC"],
            ["DEVICE"],
        ):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)  # type: ignore[attr-defined]
            except ValueError:
                pass
    if not isinstance(values.get("PASS_SPEC"), str):
        raise SerializeError(f"{path} is not an fxfuzz repro (no PASS_SPEC)")
    return values["PASS_SPEC"], _device(path, values.get("DEVICE", "cpu"))


def _read(path: str) -> bytes:
    """The bytes of the repro ``path`` as ``read_bounded`` reads them: a FIFO, a device (or a
    link to one) or a file over ``MAX_CASE_BYTES`` refused before any read. SerializeError, one
    line, for any file that cannot be read."""
    try:
        return read_bounded(path, MAX_CASE_BYTES)
    except FileNotFoundError:
        raise SerializeError(f"no such file: {path}") from None
    except OSError as e:
        raise SerializeError(f"{path} cannot be read: {e.strerror or e}") from None


def _read_py(path: str) -> str:
    try:
        return _read(path).decode()
    except UnicodeDecodeError as e:
        raise SerializeError(f"{path} is not readable Python: {e}") from None


def _device(path: str, device: object) -> str:
    if device not in DEVICES:
        raise SerializeError(f"{path}: unknown device {device!r} (expected one of {', '.join(DEVICES)})")
    return str(device)


def _load_py(path: str, source: str) -> Repro:
    spec = importlib.util.spec_from_file_location("fxfuzz_repro", path)
    if spec is None or spec.loader is None:
        raise SerializeError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    try:
        # The text read, not the path again; compiled without this module's __future__ imports.
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
        gm, signature, inputs, ambient = module.build_case()
        spec_ = module.PASS_SPEC
    except Exception as e:
        raise SerializeError(f"{path} is not a working fxfuzz repro: {type(e).__name__}: {e}") from None
    sizes = tuple(dict(s) for s in getattr(module, "SIZES", ()))
    case = GraphCase(
        gm=gm, signature=signature, inputs=tuple(inputs), ambient_grad=ambient, domain="repro", sizes=sizes
    )
    return Repro(
        case, spec_, {"message": getattr(module, "EXPECTED", "")}, _device(path, getattr(module, "DEVICE", "cpu"))
    )


@dataclass
class Corpus:
    """The cases of a corpus folder that load, by path, and a note for each file left out:
    ``untrusted`` ones ask for code this run does not trust, ``unloadable`` ones are malformed
    or were written for another torch. Files left out stay where they are."""

    cases: list[tuple[str, GraphCase]]
    untrusted: list[str]
    unloadable: list[str]


def saved_cases(corpus_dir: str, timeout_s: float) -> Corpus:
    """The case of every repro ``*.json`` under ``corpus_dir`` (repros written by ``fxfuzz run``
    or ``fxfuzz gate``) that loads within ``timeout_s``, sorted by path; SerializeError only
    for a missing folder."""
    if not os.path.isdir(corpus_dir):
        raise SerializeError(f"corpus directory not found: {corpus_dir}")
    corpus = Corpus([], [], [])
    for root, _, files in sorted(os.walk(corpus_dir)):
        for name in sorted(f for f in files if f.endswith(".json")):
            path = os.path.join(root, name)
            try:
                corpus.cases.append((os.path.relpath(path, corpus_dir), load_within(timeout_s, load_repro, path).case))
            except UntrustedError as e:
                corpus.untrusted.append(f"skipped corpus file (kept): {e}")
            except SerializeError as e:
                corpus.unloadable.append(f"skipped corpus file (kept): {e}")
    return corpus


def write_program_repro(directory: str, bucket: str, message: str, program: Program) -> str:
    """``<directory>/<bucket>.py`` for a program-level finding: the program's standalone source
    (module, export call, end-to-end check); returns its path."""
    path = os.path.join(directory, f"{repro_stem(bucket)}.py")
    os.makedirs(directory, exist_ok=True)
    write_atomic(path, program_repro_source(program, f"{bucket}: {message}"))
    return path


def program_repro_source(p: Program, message: str = "") -> str:
    """A standalone script (needs only torch): the module source, then the export call and
    the end-to-end comparison under both grad modes. It exits 1 while they disagree."""
    check = pasted_source(program_runtime) + "\n\n\n" + pasted_source(program_check)
    header = f"fxfuzz program-level repro: {message}" if message else "fxfuzz program-level repro"
    about = f"""{header}

Exports class Program with torch.export (non-strict, with dynamic_shapes()), then calls
ep.module() and the eager module under each grad mode (at the traced size and at each of
other_sizes()) and compares outputs, requires_grad, gradients, the module's
state and the grad mode left behind; with fxfuzz installed it also checks the graph export
hands the set-grad pass. Exit status 1 while anything disagrees, 0 once all agree.
"""
    return f"""{docstring(about)}
{module_source(p).strip()}


{check}


if __name__ == "__main__":
    sys.exit(main({CLASS_NAME}, example_inputs, dynamic_shapes(), other_sizes()))
"""
