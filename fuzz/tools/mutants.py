"""Mutants of a pass's source, loaded as fresh modules; the installed torch is never touched.

Why not a mutation-testing library: mutmut and cosmic-ray mutate files of the project under
test on disk (cosmic-ray rewrites the module file for each mutant, mutmut copies the project
into ``mutants/``), and mutatest writes mutated bytecode into ``__pycache__``: each would have
to write into the installed torch. The operators here are the classic ones they share, on the
stdlib ``ast``.

A mutant changes one site of one function. Loading it re-executes the target functions'
definitions into fresh module objects (copies of the real modules' namespaces), then points
every reference between those functions at the fresh copies, so the mutated code is reached
exactly where the real code would be; nothing is patched in the real modules.
"""

from __future__ import annotations
import __future__

import ast
import copy
import importlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fxfuzz.core.passes import REGISTRY, Sequential
from fxfuzz.core.shapes import adapt, shape_of


def _targets(pass_name: str) -> dict[str, tuple[str, ...] | None]:
    """Module -> the functions of it to mutate (None: every top-level function), from the
    pass's registry row."""
    return {s.module: s.functions or None for s in REGISTRY[pass_name].sources if s.mutate}


_COMPARE_SWAP: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
    ast.Gt: ast.LtE, ast.LtE: ast.Gt,
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """One change: ``operator`` applied at the ``index``-th site it has in ``function``."""

    module: str
    function: str
    operator: str
    index: int
    line: int
    description: str

    @property
    def id(self) -> str:
        return f"{self.module.rsplit('.', 1)[1]}.{self.function}:{self.line}:{self.operator}:{self.index}"


def _is_guard(stmt: ast.AST) -> bool:
    """``if <bad>: raise ...``: removing a defensive check changes nothing on valid input, and
    negating its condition (kept) already tests that the check is reachable."""
    return isinstance(stmt, ast.If) and not stmt.orelse and all(isinstance(s, ast.Raise) for s in stmt.body)


def _sites(fn: ast.FunctionDef) -> Iterator[tuple[str, ast.AST, str]]:
    """Every (operator, node, description) the operators can change in ``fn``, in a stable
    order; docstrings and error messages are skipped (changing them is equivalent)."""
    skip: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Raise):
            skip.update(id(n) for n in ast.walk(node))
    body = (
        fn.body[1:]
        if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant)
        else fn.body
    )
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE_SWAP:
                    yield "compare", node, f"{type(op).__name__} -> {_COMPARE_SWAP[type(op)].__name__} (operand {i})"
        elif isinstance(node, ast.BoolOp):
            yield "boolop", node, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            yield "negate", node, "negate the condition"
        elif isinstance(node, ast.Constant) and isinstance(node.value, (bool, int)) and not isinstance(node.value, str):
            if isinstance(node.value, bool):
                yield "constant", node, f"{node.value} -> {not node.value}"
            else:
                yield "constant", node, f"{node.value} -> {node.value + 1}"
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
        ):
            yield "swap_args", node, "swap the first two arguments"
        if isinstance(
            node, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.For, ast.If, ast.With)
        ) and not _is_guard(node):
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                yield "remove", node, f"remove the {type(node).__name__} statement"


def _apply(op: str, node: ast.AST, description: str) -> None:
    """Mutate ``node`` in place."""
    if op == "compare":
        i = int(description.rsplit(" ", 1)[1].rstrip(")"))
        node.ops[i] = _COMPARE_SWAP[type(node.ops[i])]()  # type: ignore[attr-defined]
    elif op == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()  # type: ignore[attr-defined]
    elif op == "negate":
        node.test = ast.UnaryOp(ast.Not(), node.test)  # type: ignore[attr-defined]
    elif op == "constant":
        v = node.value  # type: ignore[attr-defined]
        node.value = (not v) if isinstance(v, bool) else v + 1  # type: ignore[attr-defined]
    elif op == "swap_args":
        a = node.args  # type: ignore[attr-defined]
        a[0], a[1] = a[1], a[0]
    elif op == "remove":
        # A removed statement becomes ``pass``; a removed ``return x`` returns None.
        for field in list(node._fields):
            delattr(node, field)
        node.__class__ = ast.Pass
    else:
        raise ValueError(f"unknown mutation operator {op!r}")


def _function_defs(module_name: str, names: tuple[str, ...] | None) -> tuple[Any, list[ast.FunctionDef]]:
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(module))
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and (names is None or n.name in names)]
    return module, defs


def enumerate_mutants(pass_name: str = "set_grad") -> list[Mutant]:
    """Every mutant of the pass's target functions, in source order."""
    mutants = []
    for module_name, names in _targets(pass_name).items():
        _, defs = _function_defs(module_name, names)
        for fn in defs:
            counts: dict[str, int] = {}
            for op, node, description in _sites(fn):
                counts[op] = counts.get(op, 0) + 1
                line = getattr(node, "lineno", fn.lineno)
                mutants.append(Mutant(module_name, fn.name, op, counts[op] - 1, line, description))
    return mutants


def _mutated_def(fn: ast.FunctionDef, mutant: Mutant) -> ast.FunctionDef:
    fn = copy.deepcopy(fn)
    seen = -1
    for op, node, description in _sites(fn):
        if op == mutant.operator:
            seen += 1
            if seen == mutant.index:
                _apply(op, node, description)
                return ast.fix_missing_locations(fn)
    raise ValueError(f"mutant {mutant.id} does not match the installed source")


@dataclass(frozen=True)
class SourceEdit:
    """A hand-written change to one function: the text ``old`` of its installed source, which
    must occur exactly once, replaced by ``new`` (to put a historical version back)."""

    module: str
    function: str
    old: str
    new: str

    def apply(self, fn: ast.FunctionDef) -> ast.FunctionDef:
        """``fn`` (the installed definition) with the edit made, at the same line numbers."""
        source = textwrap.dedent(inspect.getsource(getattr(importlib.import_module(self.module), self.function)))
        if source.count(self.old) != 1:
            raise ValueError(f"edit of {self.module}.{self.function} does not match the installed source")
        edited = ast.parse(source.replace(self.old, self.new)).body[0]
        ast.increment_lineno(edited, fn.lineno - 1)
        return edited  # type: ignore[return-value]


def load_pass_variant(pass_name: str = "set_grad", mutant: Mutant | SourceEdit | None = None) -> Callable[..., Any]:
    """The registered pass with ``mutant`` applied (or an unmutated fresh copy when None); for
    a registered pipeline, its parts in sequence, all reading the same mutated helpers."""
    fresh: dict[str, types.ModuleType] = {}
    originals: dict[int, tuple[str, str]] = {}  # id(real function) -> (module, name)
    for module_name, names in _targets(pass_name).items():
        module, defs = _function_defs(module_name, names)
        if mutant is not None and mutant.module == module_name:
            change = mutant.apply if isinstance(mutant, SourceEdit) else (lambda d: _mutated_def(d, mutant))
            defs = [change(d) if d.name == mutant.function else d for d in defs]
        new = types.ModuleType(module_name)
        new.__dict__.update(module.__dict__)
        code = compile(
            ast.Module(body=[*defs], type_ignores=[]),
            module.__file__ or module_name,
            "exec",
            # The sources use postponed annotations naming TYPE_CHECKING-only imports.
            flags=__future__.annotations.compiler_flag,
            dont_inherit=True,
        )
        exec(code, new.__dict__)
        fresh[module_name] = new
        originals.update({id(getattr(module, d.name)): (module_name, d.name) for d in defs})
    # Re-point references to the real functions (``from ..utils import nodes_map``) at the copies.
    for new in fresh.values():
        for attr, value in list(vars(new).items()):
            if id(value) in originals and inspect.isfunction(value):
                where, name = originals[id(value)]
                setattr(new, attr, getattr(fresh[where], name))
    # A pipeline runs each part's fresh copy, so a mutated shared helper reaches every part.
    raw = tuple(getattr(fresh[row.module], row.attr) for row in REGISTRY[pass_name].parts)
    for part, row in zip(raw, REGISTRY[pass_name].parts):
        part.fxfuzz_contract = row.contract  # a copy of a registered pass keeps its contract
    parts = tuple(adapt(*shape_of(part)) for part in raw)
    return parts[0] if len(parts) == 1 else Sequential(parts)
