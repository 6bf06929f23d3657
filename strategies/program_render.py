"""Render a Program to Python source, and turn that source back into a module class."""

from __future__ import annotations

import inspect
import linecache
import sys
import types
from collections.abc import Callable

import torch

from . import program_standalone
from .program_model import (
    OPS,
    Autocast,
    Call,
    Cond,
    Function,
    GradBlock,
    Op,
    OutItem,
    Program,
    SetGrad,
    StateUpdate,
    Stmt,
)

CLASS_NAME = "Program"
_HEADER = '''import torch
from torch import nn


def _t(seed, shape):
    """Seeded example values: the module and its inputs are the same on every run."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))
'''


def _statement(s: Stmt, indent: str) -> list[str]:
    if isinstance(s, Op):
        return [f"{indent}{s.out} = {OPS[s.op][0].format(*s.args)}"]
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
        return [f"{indent}self.{s.target}.{s.method}({s.arg})"]
    if isinstance(s, Call):
        return [f"{indent}{s.out} = self.{s.callee}({', '.join(s.args)})"]
    if isinstance(s, Cond):
        operands = ", ".join(s.args) + ("," if len(s.args) == 1 else "")
        return [
            f"{indent}{s.out} = torch.cond({s.pred}.sum() > 0, self.{s.true_fn}, self.{s.false_fn}, ({operands}))"
        ]
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


def module_source(p: Program) -> str:
    """Readable source of the program: ``_t``, the submodule classes and class ``Program``,
    plus ``example_inputs()``."""
    shape = repr(p.shape)
    parts = [_HEADER]
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
    args = ", ".join(f"_t({x.seed}, {shape})" + (".requires_grad_()" if x.requires_grad else "") for x in p.inputs)
    parts.append(f"def example_inputs():\n    return ({args},)")
    return "\n\n\n".join(parts) + "\n"


# One fixed file name: frames in program code then bucket alike across programs.
PROGRAM_FILE = "<fxfuzz-program>"
PROGRAM_MODULE = "fxfuzz_program"


def load_program(p: Program) -> tuple[type[torch.nn.Module], Callable[[], tuple]]:
    """Exec the program's source; return its module class and its ``example_inputs``.

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
    return getattr(module, CLASS_NAME), module.example_inputs


def repro_source(p: Program, message: str = "") -> str:
    """A standalone script (needs only torch): the module source, then the export call and
    the end-to-end comparison under both grad modes. It exits 1 while they disagree."""
    check = inspect.getsource(program_standalone).split('"""', 2)[2].strip()
    header = f"fxfuzz program-level repro: {message}" if message else "fxfuzz program-level repro"
    return f'''"""{header}

Exports class Program with torch.export (non-strict), then calls ep.module() and the eager
module under each grad mode and compares outputs, requires_grad, gradients, the module's
state and the grad mode left behind; with fxfuzz installed it also checks the graph export
hands the set-grad pass. Exit status 1 while anything disagrees, 0 once all agree.
"""
{module_source(p).strip()}


{check}


if __name__ == "__main__":
    sys.exit(main({CLASS_NAME}, example_inputs))
'''
