"""Program: a random nn.Module as plain data (statements, state, helpers), rendered to source.

The program is data so that Hypothesis can shrink it and so that a finding's repro is the
readable source of the module rather than a pickled object.
"""

from __future__ import annotations

import inspect
import linecache
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import torch
from fxfuzz.core import custom_ops

# op name -> (source template, arity); every op keeps float dtypes and broadcasts.
PROGRAM_OPS: dict[str, tuple[str, int]] = {
    "sin": ("{0}.sin()", 1),
    "cos": ("torch.cos({0})", 1),
    "tanh": ("{0}.tanh()", 1),
    "sigmoid": ("torch.sigmoid({0})", 1),
    "relu": ("{0}.relu()", 1),
    "neg": ("-{0}", 1),
    "scale": ("{0} * 2.0", 1),
    "clone": ("{0}.clone()", 1),
    "detach": ("{0}.detach()", 1),
    "add_const": ("{0} + torch.tensor(0.5)", 1),
    "sum": ("{0}.sum()", 1),
    "mean": ("{0}.mean()", 1),
    "add": ("{0} + {1}", 2),
    "mul": ("{0} * {1}", 2),
    "sub": ("{0} - {1}", 2),
    "matmul": ("{0} @ {1}", 2),
    # fxfuzz's custom operators (fxfuzz.core.custom_ops), which the source then defines; not
    # fxfuzz::cube, whose backward raises: generated programs must run backward eagerly.
    "custom_scaled_mul": ("torch.ops.fxfuzz.scaled_mul({0}, {1})", 2),
    "custom_split_sign": ("torch.ops.fxfuzz.split_sign({0})[0]", 1),
    "custom_tanh_mask": ("torch.ops.fxfuzz.tanh_mask({0})[0]", 1),
}
# Ops on a size local (``Size``): {0} a tensor, {1} the size, {2} the factor it was read with.
SIZE_OPS: dict[str, str] = {
    "add_size": "{0} + {1}",
    "view_size": "{0}.view({1} // {2}, *{0}.shape[1:])",
}
REDUCTIONS = ("sum", "mean")
# Ops whose result may alias an operand: never the result of a cond branch.
ALIASING = ("detach",)


@dataclass(frozen=True)
class Op:
    """``out = <op>(*args)``; args are expressions: locals, inputs or ``self.<state>``."""

    out: str
    op: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Size:
    """``out = <src>.shape[<dim>] * <factor>``: a size local (a SymInt where the dim is
    dynamic), which ``SIZE_OPS`` then use, maybe in another grad region."""

    out: str
    src: str
    dim: int
    factor: int


@dataclass(frozen=True)
class GradBlock:
    """``with <ctx>:`` where ctx is ``no_grad``, ``enable_grad`` or ``set_grad_enabled``."""

    ctx: str
    flag: bool | None
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Autocast:
    """``with torch.autocast("cpu", dtype=torch.bfloat16):``"""

    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class SetGrad:
    """A bare ``torch.set_grad_enabled(flag)`` call, only inside a block that restores it."""

    flag: bool


@dataclass(frozen=True)
class StateUpdate:
    """``self.<target>.<method>(arg)`` under no_grad, e.g. a running-statistics update."""

    target: str
    method: str
    arg: str


@dataclass(frozen=True)
class Call:
    """``out = self.<callee>(*args)``: a helper method or a submodule."""

    out: str
    callee: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Cond:
    """``out = torch.cond(<pred>.sum() > 0, self.<true_fn>, self.<false_fn>, (args,))``"""

    out: str
    pred: str
    true_fn: str
    false_fn: str
    args: tuple[str, ...]


Stmt = Op | Size | GradBlock | Autocast | SetGrad | StateUpdate | Call | Cond


@dataclass(frozen=True)
class Function:
    """A method body: ``def <name>(self, *params): <body>; return <result>``.

    ``decorator`` is ``no_grad``/``enable_grad`` for helpers decorated as such.
    """

    name: str
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    result: str
    decorator: str | None = None


@dataclass(frozen=True)
class StateTensor:
    """A tensor the module owns: ``param``, ``buffer`` (maybe non-persistent) or ``const``."""

    name: str
    kind: str
    seed: int
    persistent: bool = True


@dataclass(frozen=True)
class Submodule:
    """A child module with one parameter ``w`` and its own forward."""

    name: str
    seed: int
    forward: Function


@dataclass(frozen=True)
class Input:
    name: str
    seed: int
    requires_grad: bool


# An output item: ("var", name) | ("none",) | ("const", int) | ("dict", ((key, name), ...))
OutItem = tuple


@dataclass
class Program:
    """A random nn.Module: state, helper methods, submodules and a forward body.

    Every tensor has ``shape`` or is 0-d. ``ambient_grad`` is the grad mode checked first;
    the program check runs under both modes. A ``dynamic`` program exports every dim of its
    inputs as one dynamic size: ``Dim("n", min=2, max=dim_max)``, or ``Dim.AUTO`` per dim
    where ``dim_max`` is None; its state is then of size 1 in every dim (broadcast, so that
    no static size specializes the symbol).
    """

    shape: tuple[int, ...]
    inputs: tuple[Input, ...]
    state: tuple[StateTensor, ...]
    helpers: tuple[Function, ...]
    submodules: tuple[Submodule, ...]
    body: tuple[Stmt, ...]
    outputs: tuple[OutItem, ...]
    single_output: bool = False
    ambient_grad: bool = True
    domain: str = "export"
    features: dict[str, object] = field(default_factory=dict)
    dynamic: bool = False
    dim_max: int | None = None

    def other_sizes(self) -> tuple[int, ...]:
        """Sizes other than the traced one, inside the Dim's range, that the end-to-end
        check also runs the program at: the range's low end, one above the traced size and
        the range's high end (the traced size plus 4 for ``Dim.AUTO``)."""
        if not self.dynamic:
            return ()
        n = self.shape[0]
        high = self.dim_max or n + 4
        return tuple(dict.fromkeys(m for m in (2, n + 1, high) if m != n and 2 <= m <= high))

    def code(self) -> str:
        """The module's readable Python source."""
        return module_source(self)

    def compute_nodes(self) -> int:
        """Statements in forward, helpers and submodules: the size shrinking drives down."""
        bodies = [self.body] + [h.body for h in self.helpers] + [s.forward.body for s in self.submodules]
        return sum(count_statements(b) for b in bodies)

    def __str__(self) -> str:
        return f"Program(statements={self.compute_nodes()})\n{self.code()}"


def count_statements(body: tuple[Stmt, ...]) -> int:
    """Statements in ``body``, blocks counted with their contents."""
    return sum(1 + count_statements(s.body) if isinstance(s, (GradBlock, Autocast)) else 1 for s in body)


def to_data(x: Any) -> Any:
    """JSON-ready data for a Program (or any part of one), each dataclass tagged by name."""
    if is_dataclass(x) and not isinstance(x, type):
        return {"type": type(x).__name__, **{f.name: to_data(getattr(x, f.name)) for f in fields(x)}}
    if isinstance(x, (tuple, list)):
        return [to_data(i) for i in x]
    if isinstance(x, dict):
        return {k: to_data(v) for k, v in x.items()}
    return x


def from_data(d: Any) -> Any:
    """The inverse of ``to_data``: lists come back as tuples, as the dataclasses hold them."""
    if isinstance(d, dict) and d.get("type") in _TYPES:
        return _TYPES[d["type"]](**{k: from_data(v) for k, v in d.items() if k != "type"})
    if isinstance(d, list):
        return tuple(from_data(i) for i in d)
    if isinstance(d, dict):
        return {k: from_data(v) for k, v in d.items()}
    return d


_TYPES = {
    c.__name__: c
    for c in (
        Op,
        Size,
        GradBlock,
        Autocast,
        SetGrad,
        StateUpdate,
        Call,
        Cond,
        Function,
        StateTensor,
        Submodule,
        Input,
        Program,
    )
}
# Program data saved before StateTensor had its name (example databases) still loads.
_TYPES["State"] = StateTensor


# ---------------------------------------------------------------------------- source


def pasted_source(module: types.ModuleType) -> str:
    """A torch-only module's source for pasting into a standalone script: no docstring, no
    fxfuzz imports."""
    body = inspect.getsource(module).split('"""', 2)[2]
    return "\n".join(line for line in body.splitlines() if not line.startswith("from fxfuzz")).strip()


CLASS_NAME = "Program"
_HEADER = '''import torch
from torch import nn


def _t(seed, shape):
    """Seeded example values: the module and its inputs are the same on every run."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))
'''


def _statement(s: Stmt, indent: str) -> list[str]:
    if isinstance(s, Op):
        template = SIZE_OPS[s.op] if s.op in SIZE_OPS else PROGRAM_OPS[s.op][0]
        return [f"{indent}{s.out} = {template.format(*s.args)}"]
    if isinstance(s, Size):
        return [f"{indent}{s.out} = {s.src}.shape[{s.dim}] * {s.factor}"]
    if isinstance(s, (GradBlock, Autocast)):
        if isinstance(s, Autocast):
            head = 'torch.autocast("cpu", dtype=torch.bfloat16)'
        elif s.ctx == "set_grad_enabled":
            head = f"torch.set_grad_enabled({s.flag})"
        else:
            head = f"torch.{s.ctx}()"
        return [f"{indent}with {head}:", *_body(s.body, indent + "    ")]
    if isinstance(s, SetGrad):
        return [f"{indent}torch.set_grad_enabled({s.flag})"]
    if isinstance(s, StateUpdate):
        if s.method.startswith("fxfuzz."):  # a custom operator mutating its first argument
            return [f"{indent}torch.ops.{s.method}(self.{s.target}, {s.arg})"]
        return [f"{indent}self.{s.target}.{s.method}({s.arg})"]
    if isinstance(s, Call):
        return [f"{indent}{s.out} = self.{s.callee}({', '.join(s.args)})"]
    if isinstance(s, Cond):
        operands = ", ".join(s.args) + ("," if len(s.args) == 1 else "")
        return [f"{indent}{s.out} = torch.cond({s.pred}.sum() > 0, self.{s.true_fn}, self.{s.false_fn}, ({operands}))"]
    raise TypeError(f"not a statement: {s!r}")


def _body(body: tuple[Stmt, ...], indent: str) -> list[str]:
    lines = [line for s in body for line in _statement(s, indent)]
    return lines or [f"{indent}pass"]


def _function(f: Function) -> list[str]:
    head = [f"    @torch.{f.decorator}()"] if f.decorator else []
    params = "".join(f", {p}" for p in f.params)
    return [*head, f"    def {f.name}(self{params}):", *_body(f.body, " " * 8), f"        return {f.result}"]


def _output(item: OutItem) -> str:
    kind = item[0]
    if kind == "var":
        return item[1]
    if kind == "none":
        return "None"
    if kind == "const":
        return repr(item[1])
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in item[1]) + "}"


def _returns(p: Program) -> str:
    if p.single_output:
        return _output(p.outputs[0])
    return "(" + ", ".join(_output(o) for o in p.outputs) + ("," if len(p.outputs) == 1 else "") + ")"


def _dynamic_shapes(p: Program) -> str:
    """Source of ``dynamic_shapes()``: the ``dynamic_shapes`` argument of the export call."""
    if not p.dynamic:
        return "def dynamic_shapes():\n    return None"
    dim = f'torch.export.Dim("n", min=2, max={p.dim_max})' if p.dim_max else "torch.export.Dim.AUTO"
    spec = "{" + ", ".join(f"{d}: n" for d in range(len(p.shape))) + "}"
    return f"def dynamic_shapes():\n    n = {dim}\n    return ({', '.join([spec] * len(p.inputs))},)"


def _shape(ndim: int, size: str) -> str:
    return "(" + ", ".join([size] * ndim) + ("," if ndim == 1 else "") + ")"


def module_source(p: Program) -> str:
    """Readable source of the program: ``_t``, the submodule classes and class ``Program``,
    plus ``example_inputs(n)`` (inputs of size ``n`` in every dim), ``dynamic_shapes()`` and
    ``other_sizes()``."""
    ndim = len(p.shape)
    # A dynamic program's state broadcasts (size 1), so it never pins the symbol.
    shape = _shape(ndim, "1") if p.dynamic else repr(p.shape)
    parts: list[str] = []
    for sub in p.submodules:
        cls = sub.name.capitalize()
        parts.append(
            "\n".join(
                [
                    f"class {cls}(nn.Module):",
                    "    def __init__(self):",
                    "        super().__init__()",
                    f"        self.w = nn.Parameter(_t({sub.seed}, {shape}))",
                    "",
                    *_function(sub.forward),
                ]
            )
        )
    init = ["    def __init__(self):", "        super().__init__()"]
    for t in p.state:
        value = f"_t({t.seed}, {shape})"
        if t.kind == "param":
            init.append(f"        self.{t.name} = nn.Parameter({value})")
        elif t.kind == "buffer":
            extra = "" if t.persistent else ", persistent=False"
            init.append(f'        self.register_buffer("{t.name}", {value}{extra})')
        else:
            init.append(f"        self.{t.name} = {value}")
    init += [f"        self.{sub.name} = {sub.name.capitalize()}()" for sub in p.submodules]
    methods = [line for f in p.helpers for line in ["", *_function(f)]]
    inputs = "".join(f", {x.name}" for x in p.inputs)
    forward = ["", f"    def forward(self{inputs}):", *_body(p.body, " " * 8), f"        return {_returns(p)}"]
    parts.append("\n".join([f"class {CLASS_NAME}(nn.Module):", *init, *methods, *forward]))
    size = _shape(ndim, "n")
    args = ", ".join(f"_t({x.seed}, {size})" + (".requires_grad_()" if x.requires_grad else "") for x in p.inputs)
    parts.append(f"def example_inputs(n={p.shape[0] if ndim else 1}):\n    return ({args},)")
    parts.append(_dynamic_shapes(p))
    parts.append(f"def other_sizes():\n    return {p.other_sizes()!r}")
    # The custom operators it calls are defined in the source, so it runs with torch alone.
    defines = [pasted_source(custom_ops)] if any("torch.ops.fxfuzz." in part for part in parts) else []
    return "\n\n\n".join([_HEADER, *defines, *parts]) + "\n"


# One fixed file name: frames in program code then bucket alike across programs.
PROGRAM_FILE = "<fxfuzz-program>"
PROGRAM_MODULE = "fxfuzz_program"


def load_program(p: Program) -> tuple[type[torch.nn.Module], Callable[..., tuple], Any]:
    """Exec the program's source; return its module class, its ``example_inputs`` (called
    with a size: the inputs at that size) and its ``dynamic_shapes()``.

    The source is registered with linecache (replacing the previous program's), so
    tracebacks and export's stack traces show the program's own lines.
    """
    source = module_source(p)
    linecache.cache[PROGRAM_FILE] = (len(source), None, source.splitlines(True), PROGRAM_FILE)
    # A real module in sys.modules: eager torch.cond traces the branches with dynamo, which
    # looks the program's globals up by module name.
    module = types.ModuleType(PROGRAM_MODULE)
    sys.modules[PROGRAM_MODULE] = module
    exec(compile(source, PROGRAM_FILE, "exec"), module.__dict__)
    return getattr(module, CLASS_NAME), module.example_inputs, module.dynamic_shapes()
