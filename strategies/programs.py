"""``module_programs()``: random nn.Module programs for the program level (torch.export end to end).

The generator only builds programs that eager PyTorch and torch.export both accept, so an
export failure is a finding rather than noise:

- every tensor has the program's base shape or is 0-d, so elementwise ops always broadcast;
- ``@`` runs only inside autocast, where both operands are cast to the same dtype;
- ``torch.cond`` branches take float32 operands of the base shape and return a fresh tensor
  of that shape, so both branches agree on shape and dtype and never alias an input;
- module state is updated in place only where grad mode is statically off, and only before
  anything read it (an earlier read may be saved for backward, and mutating it would make
  eager backward fail);
- sizes are read from base-shaped tensors (``n = x.shape[0] * k``), maybe inside a grad block,
  and used anywhere after (``x + n``, ``x.view(n // k, *x.shape[1:])``);
- a dynamic program (every input dim one dynamic size, ``Dim`` with a range or ``Dim.AUTO``)
  has state of size 1 in every dim, which broadcasts but never pins the size; so state is not
  "full" there, and is updated in place only with values that are not full either.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fxfuzz.core.program import (
    ALIASING,
    PROGRAM_OPS,
    REDUCTIONS,
    Autocast,
    Call,
    Cond,
    Function,
    GradBlock,
    Input,
    Op,
    Program,
    SetGrad,
    Size,
    StateTensor,
    StateUpdate,
    Stmt,
    Submodule,
)
from hypothesis import strategies as st

MAX_DEPTH = 2
UPDATE_METHODS = ("add_", "mul_", "copy_", "fxfuzz.add_half_")


@dataclass
class _Var:
    expr: str
    full: bool  # has the base shape (else 0-d)
    maybe_bf16: bool  # computed under autocast, or from such a value


@dataclass
class _Scope:
    """One function body being generated: the values it can use and what it may contain."""

    vars: list[_Var]
    state: list[_Var]
    grad: bool | None  # statically known grad mode; None: the ambient mode
    autocast: bool = False
    forward: bool = False  # the root forward: calls, conds and state updates allowed
    guarded: bool = False  # inside a grad block or grad decorator, which restores the mode
    branch: bool = False  # a cond branch: no autocast, no matmul
    sizes: list[tuple[str, int]] = field(default_factory=list)  # size locals and their factors


@dataclass
class _Gen:
    draw: st.DrawFn
    ndim: int
    dynamic: bool = False
    state: list[StateTensor] = field(default_factory=list)
    helpers: list[Function] = field(default_factory=list)
    submodules: list[Submodule] = field(default_factory=list)
    read: set[str] = field(default_factory=set)  # root state read so far, in program order
    stats: Counter = field(default_factory=Counter)
    next_var: int = 0

    def fresh(self) -> str:
        self.next_var += 1
        return f"v{self.next_var - 1}"

    def seed(self) -> int:
        return self.draw(st.integers(0, 2**16))


def _pick(g: _Gen, values: list[_Var]) -> _Var:
    # Prefer recent values: shrinking toward index 0 of the reversed list keeps chains short.
    v = values[-1 - g.draw(st.integers(0, len(values) - 1))]
    if v.expr.startswith("self."):
        g.read.add(v.expr[5:])
    return v


def _operands(s: _Scope) -> list[_Var]:
    return s.vars + s.state


def _op(g: _Gen, s: _Scope) -> Stmt:
    name = g.draw(st.sampled_from(sorted(PROGRAM_OPS)))
    template, arity = PROGRAM_OPS[name]
    args = [_pick(g, _operands(s)) for _ in range(arity)]
    if name == "matmul" and not (s.autocast and not s.branch and g.ndim and all(a.full for a in args)):
        name = "add"  # matmul needs equal dtypes (autocast gives them) and non-0-d operands
    full = any(a.full for a in args) and name not in REDUCTIONS and not (name == "matmul" and g.ndim == 1)
    out = _Var(g.fresh(), full, s.autocast or any(a.maybe_bf16 for a in args))
    s.vars.append(out)
    g.stats[f"prog:op:{name}"] += 1
    return Op(out.expr, name, tuple(a.expr for a in args))


def _size(g: _Gen, s: _Scope) -> Stmt | None:
    full = [v for v in s.vars if v.full]
    if not (g.ndim and full):
        return None
    src = _pick(g, full)
    out, factor = g.fresh(), g.draw(st.integers(1, 3))
    s.sizes.append((out, factor))
    g.stats["prog:size"] += 1
    return Size(out, src.expr, g.draw(st.integers(0, g.ndim - 1)), factor)


def _size_op(g: _Gen, s: _Scope) -> Stmt | None:
    name, factor = s.sizes[-1 - g.draw(st.integers(0, len(s.sizes) - 1))]
    op = g.draw(st.sampled_from(["add_size", "view_size"]))
    fit = [v for v in s.vars if v.full] if op == "view_size" else s.vars
    if not fit:
        return None
    arg = _pick(g, fit)
    out = _Var(g.fresh(), arg.full, arg.maybe_bf16)
    s.vars.append(out)
    g.stats[f"prog:op:{op}"] += 1
    return Op(out.expr, op, (arg.expr, name, str(factor)))


def _grad_block(g: _Gen, s: _Scope, depth: int) -> Stmt:
    ctx = g.draw(st.sampled_from(["no_grad", "enable_grad", "set_grad_enabled"]))
    flag = g.draw(st.booleans()) if ctx == "set_grad_enabled" else None
    mode = {"no_grad": False, "enable_grad": True}.get(ctx, flag)
    g.stats[f"prog:with:{ctx}"] += 1
    outer, guarded = s.grad, s.guarded
    s.grad, s.guarded = mode, True
    body = _body(g, s, depth + 1)
    s.grad, s.guarded = outer, guarded
    return GradBlock(ctx, flag, body)


def _autocast_block(g: _Gen, s: _Scope, depth: int) -> Stmt:
    g.stats["prog:with:autocast"] += 1
    outer = s.autocast
    s.autocast = True
    body = _body(g, s, depth + 1)
    s.autocast = outer
    return Autocast(body)


def _set_grad(g: _Gen, s: _Scope) -> Stmt:
    flag = g.draw(st.booleans())
    s.grad = flag  # until the enclosing block restores the mode it entered with
    g.stats["prog:set_grad_call"] += 1
    return SetGrad(flag)


def _updatable(g: _Gen) -> list[StateTensor]:
    return [t for t in g.state if t.kind in ("param", "buffer") and t.name not in g.read]


def _update(g: _Gen, s: _Scope) -> Stmt:
    target = g.draw(st.sampled_from(_updatable(g)))
    method = g.draw(st.sampled_from(UPDATE_METHODS))
    # A dynamic program's state has size 1: an in-place update takes no full-shaped value.
    fit = [v for v in s.vars if not (g.dynamic and v.full)]
    arg = "0.5" if not fit or method == "mul_" and g.draw(st.booleans()) else _pick(g, fit).expr
    g.stats[f"prog:update:{target.kind}"] += 1
    g.stats[f"prog:update_method:{method}"] += 1
    return StateUpdate(target.name, method, arg)


def _function(
    g: _Gen, name: str, args: list[_Var], s: _Scope, state: list[_Var], decorator: str | None
) -> tuple[Function, _Var]:
    """A method body receiving ``args`` (as a0, a1, ...) from the caller's scope, and the
    value it returns."""
    params = [_Var(f"a{i}", a.full, a.maybe_bf16) for i, a in enumerate(args)]
    grad = {"no_grad": False, "enable_grad": True}.get(decorator or "", s.grad)
    # A decorator restores the grad mode on return, so a bare toggle is safe inside it.
    inner = _Scope(list(params), state, grad, s.autocast, branch=s.branch, guarded=decorator is not None)
    body = _body(g, inner, 0)
    if s.branch:
        # A branch must return a fresh full-shaped float32 tensor (never an alias of an input).
        base = _pick(g, [v for v in inner.vars if v.full])
        op = g.draw(
            st.sampled_from([o for o, (_, n) in PROGRAM_OPS.items() if n == 1 and o not in REDUCTIONS + ALIASING])
        )
        result = _Var(g.fresh(), True, False)
        body += (Op(result.expr, op, (base.expr,)),)
    else:
        result = _pick(g, inner.vars)
    return Function(name, tuple(p.expr for p in params), body, result.expr, decorator), result


def _root_state(g: _Gen) -> list[_Var]:
    return [_Var(f"self.{t.name}", not g.dynamic, False) for t in g.state]


def _call_helper(g: _Gen, s: _Scope) -> Stmt:
    args = [_pick(g, s.vars) for _ in range(g.draw(st.integers(1, 2)))]
    decorator = g.draw(st.sampled_from([None, "no_grad", "enable_grad"]))
    name = f"helper{len(g.helpers)}"
    function, result = _function(g, name, args, s, _root_state(g), decorator)
    g.helpers.append(function)
    g.stats[f"prog:helper:{decorator or 'plain'}"] += 1
    return _call_result(g, s, name, args, result)


def _call_result(g: _Gen, s: _Scope, callee: str, args: list[_Var], result: _Var) -> Stmt:
    out = _Var(g.fresh(), result.full, result.maybe_bf16)
    s.vars.append(out)
    return Call(out.expr, callee, tuple(a.expr for a in args))


def _call_submodule(g: _Gen, s: _Scope) -> Stmt:
    arg = _pick(g, s.vars)
    name = f"sub{len(g.submodules)}"
    forward, result = _function(g, "forward", [arg], s, [_Var("self.w", not g.dynamic, False)], None)
    g.submodules.append(Submodule(name, g.seed(), forward))
    g.stats["prog:submodule"] += 1
    return _call_result(g, s, name, [arg], result)


def _cond(g: _Gen, s: _Scope) -> Stmt | None:
    fit = [v for v in s.vars if v.full and not v.maybe_bf16]
    if not fit:
        return None
    pred = _pick(g, s.vars)
    args = [_pick(g, fit) for _ in range(g.draw(st.integers(1, 2)))]
    branch_scope = _Scope([], [], s.grad, False, branch=True)
    names = []
    for _ in range(2):
        name = f"branch{len(g.helpers)}"
        g.helpers.append(_function(g, name, args, branch_scope, _root_state(g), None)[0])
        names.append(name)
    out = _Var(g.fresh(), True, False)
    s.vars.append(out)
    g.stats["prog:cond"] += 1
    return Cond(out.expr, pred.expr, names[0], names[1], tuple(a.expr for a in args))


def _statement(g: _Gen, s: _Scope, depth: int) -> Stmt:
    kinds = ["op", "op", "size"] + (["size_op"] if s.sizes else [])
    if depth < MAX_DEPTH:
        kinds += ["grad_block"] + ([] if s.branch else ["autocast"])
    if s.guarded:
        kinds.append("set_grad")
    if s.forward:
        kinds += ["helper", "submodule"] + ([] if s.autocast else ["cond"])
        if s.grad is False and _updatable(g):
            kinds.append("update")
    kind = g.draw(st.sampled_from(kinds))
    stmt: Stmt | None = None
    if kind == "grad_block":
        stmt = _grad_block(g, s, depth)
    elif kind == "autocast":
        stmt = _autocast_block(g, s, depth)
    elif kind == "set_grad":
        stmt = _set_grad(g, s)
    elif kind == "update":
        stmt = _update(g, s)
    elif kind == "helper":
        stmt = _call_helper(g, s)
    elif kind == "submodule":
        stmt = _call_submodule(g, s)
    elif kind == "cond":
        stmt = _cond(g, s)
    elif kind == "size":
        stmt = _size(g, s)
    elif kind == "size_op":
        stmt = _size_op(g, s)
    return stmt if stmt is not None else _op(g, s)


def _body(g: _Gen, s: _Scope, depth: int) -> tuple[Stmt, ...]:
    """A run of statements; a block's statements restore the grad mode the block entered with."""
    entered = s.grad
    body = tuple(_statement(g, s, depth) for _ in range(g.draw(st.integers(0 if depth else 1, 4))))
    s.grad = entered
    return body


def _outputs(g: _Gen, s: _Scope) -> tuple[tuple, bool]:
    def var() -> str:
        return _pick(g, s.vars).expr

    items: list[tuple] = [("var", var())]
    for _ in range(g.draw(st.integers(0, 3))):
        kind = g.draw(st.sampled_from(["var", "none", "const", "dict"]))
        g.stats[f"prog:output:{kind}"] += 1
        if kind == "var":
            items.append(("var", var()))
        elif kind == "none":
            items.append(("none",))
        elif kind == "const":
            items.append(("const", g.draw(st.integers(0, 3))))
        else:
            items.append(("dict", tuple((k, var()) for k in "ab"[: g.draw(st.integers(1, 2))])))
    single = len(items) == 1 and g.draw(st.booleans())
    return tuple(items), single


@st.composite
def module_programs(draw: st.DrawFn) -> Program:
    """Random nn.Module programs: parameters, buffers, constant tensors and submodules, with
    forward bodies mixing ops, grad-mode blocks, grad-decorated helpers, in-place state
    updates under no_grad, ``torch.cond`` with grad blocks in its branches and autocast
    blocks; outputs mix tensors, dicts, None and constants."""
    ndim = draw(st.integers(0, 2))
    size = draw(st.integers(1, 3))
    # Static is what shrinking reaches: a failure that needs no dynamic size loses it.
    dynamic = ndim > 0 and draw(st.integers(0, 2)) != 0
    dim_max = draw(st.sampled_from([None, 8, 16]))  # None: Dim.AUTO
    shape = ((max(size, 2) if dynamic else size),) * ndim  # 0 and 1 specialize, as in export
    g = _Gen(draw, ndim, dynamic)
    if dynamic:
        g.stats["prog:dynamic:range" if dim_max else "prog:dynamic:auto"] += 1
    for kind, prefix, most in (("param", "p", 2), ("buffer", "b", 2), ("const", "c", 1)):
        for i in range(draw(st.integers(0, most))):
            persistent = kind != "buffer" or draw(st.booleans())
            g.state.append(StateTensor(f"{prefix}{i}", kind, g.seed(), persistent))
    inputs = tuple(Input(f"x{i}", g.seed(), draw(st.booleans())) for i in range(draw(st.integers(1, 2))))
    forward = _Scope([_Var(x.name, True, False) for x in inputs], _root_state(g), None, forward=True)
    body = _body(g, forward, 0)
    outputs, single = _outputs(g, forward)
    program = Program(
        shape=shape,
        inputs=inputs,
        state=tuple(g.state),
        helpers=tuple(g.helpers),
        submodules=tuple(g.submodules),
        body=body,
        outputs=outputs,
        single_output=single,
        ambient_grad=draw(st.booleans()),
        dynamic=dynamic,
        dim_max=dim_max if dynamic else None,
    )
    g.stats["prog:statements"] = program.compute_nodes()
    program.features = dict(g.stats)
    return program
