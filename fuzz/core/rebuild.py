"""Builders the rebuilt graphs of saved cases call: torch only, because every standalone
repro pastes this file's functions above its graph code (``fxfuzz.repro.files``)."""

import ast

import sympy
import torch
import torch.utils._sympy.functions
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

# What the ``sympy.srepr`` of a size expression may call: the classes size expressions are made
# of, sympy's and torch's. Read by ``parse_size``, which evaluates no Python: a saved case is data.
_SIZE_CLASSES = {
    c.__name__: c
    for c in (
        sympy.Integer,
        sympy.Rational,
        sympy.Symbol,
        sympy.Add,
        sympy.Mul,
        sympy.Pow,
        torch.utils._sympy.functions.FloorDiv,
        torch.utils._sympy.functions.CeilDiv,
        torch.utils._sympy.functions.ModularIndexing,
        torch.utils._sympy.functions.CleanDiv,
        torch.utils._sympy.functions.PythonMod,
        torch.utils._sympy.functions.Max,
        torch.utils._sympy.functions.Min,
        torch.utils._sympy.functions.PowByNatural,
        torch.utils._sympy.functions.Mod,
    )
}
_SYMBOL_ASSUMPTIONS = {"integer", "positive", "nonnegative"}
# Bounds on a size expression, checked before anything is built: sizes of real graphs are a
# few dozen characters, a handful of terms, numbers far below these.
MAX_SIZE_CHARS, MAX_SIZE_NODES, MAX_SIZE_DEPTH, MAX_SIZE_BITS, MAX_EXPONENT = 2000, 200, 16, 128, 64
# Elements of one tensor a saved case may make or ask for; a size symbol's hint and every value
# it takes (``sizes``) are at most this too.
MAX_ELEMENTS = 2**24
# The bit length an expression may reach at any values of its symbols, bounded from its syntax
# before anything is built or evaluated (``_bits``): a tower of powers is refused unbuilt. A
# stride of a tensor whose six dims are all symbolic needs about 150.
MAX_EVAL_BITS = 1024
# What a size expression may evaluate to at its symbols' hints: an int64.
MAX_SIZE_VALUE = 2**62


# The names a saved dtype, layout or memory format may have: the objects torch itself holds.
ENUMS = {
    kind: {name: v for name, v in vars(torch).items() if isinstance(v, cls)}
    for kind, cls in (("dtype", torch.dtype), ("layout", torch.layout), ("memory_format", torch.memory_format))
}
MAX_DIMS = 64


def enum(kind, name):
    """The dtype, layout or memory format named ``name`` (``float32``); ValueError for any other name."""
    if not isinstance(name, str) or name not in ENUMS[kind]:
        raise ValueError(f"not a torch {kind}: {str(name)[:80]!r}")
    return ENUMS[kind][name]


class SizeExpressionError(ValueError):
    """A size expression that is not one of the forms ``parse_size`` reads."""


def parse_size(text):
    """The sympy expression ``sympy.srepr`` wrote as ``text``, built from its syntax tree: only
    calls of ``_SIZE_CLASSES`` with integer, rational and symbol literals, within the bounds
    above (a power's exponent included), so nothing runs and nothing grows without limit."""
    if not isinstance(text, str) or len(text) > MAX_SIZE_CHARS:
        raise SizeExpressionError(f"a size expression is a string of at most {MAX_SIZE_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise SizeExpressionError(f"unreadable size expression {text[:80]!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_SIZE_NODES:
        raise SizeExpressionError(f"size expression of more than {MAX_SIZE_NODES} syntax nodes")
    return _size_node(tree, 0)[0]


def _literal(node):
    """An int or str constant (a negated int too), else SizeExpressionError."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    if isinstance(node, ast.Constant) and type(node.value) in (int, str, bool):
        if type(node.value) is int and node.value.bit_length() > MAX_SIZE_BITS:
            raise SizeExpressionError(f"a number of more than {MAX_SIZE_BITS} bits in a size expression")
        return node.value
    raise SizeExpressionError(f"unexpected {type(node).__name__} in a size expression")


def _bounded(expr):
    for atom in expr.atoms(sympy.Rational):
        if max(int(atom.p).bit_length(), int(atom.q).bit_length()) > MAX_SIZE_BITS:
            raise SizeExpressionError(f"a size expression whose numbers exceed {MAX_SIZE_BITS} bits")
    return expr


def _bits(cls, args, bits):
    """An upper bound on the bit length of ``cls(*args)`` (numerators and denominators) at any
    values of its symbols, from its arguments' bounds ``bits``: computed before ``cls`` is
    built, since sympy evaluates numbers as it builds."""
    if cls in (sympy.Pow, torch.utils._sympy.functions.PowByNatural):
        if len(args) != 2 or not (args[1].is_Integer and abs(int(args[1])) <= MAX_EXPONENT):
            raise SizeExpressionError(
                f"a power in a size expression takes an integer exponent of at most {MAX_EXPONENT}"
            )
        return bits[0] * max(abs(int(args[1])), 1)
    if cls is sympy.Add:
        return max(bits) + len(bits).bit_length()
    return sum(bits)  # products, quotients, remainders, maxima: at most the product's bits


def _size_node(node, depth):
    """(expression, a bound on its bit length) of one call of the syntax tree."""
    if depth > MAX_SIZE_DEPTH:
        raise SizeExpressionError(f"size expression nested deeper than {MAX_SIZE_DEPTH}")
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SIZE_CLASSES):
        what = ast.unparse(node.func if isinstance(node, ast.Call) else node)[:60]
        raise SizeExpressionError(
            f"{what!r} is not allowed in a size expression (allowed: {', '.join(sorted(_SIZE_CLASSES))})"
        )
    cls = _SIZE_CLASSES[node.func.id]
    if cls is sympy.Symbol:
        if len(node.args) != 1 or any(
            k.arg not in _SYMBOL_ASSUMPTIONS or _literal(k.value) is not True for k in node.keywords
        ):
            raise SizeExpressionError("a size symbol is Symbol('name', integer=True, positive=True)")
        name = _literal(node.args[0])
        if not (isinstance(name, str) and name.isidentifier() and len(name) <= 32):
            raise SizeExpressionError(f"bad size symbol name {name!r}")
        return sympy.Symbol(name, **{k.arg: True for k in node.keywords if k.arg}), MAX_ELEMENTS.bit_length()
    if node.keywords:
        raise SizeExpressionError(f"keyword arguments to {node.func.id} in a size expression")
    if cls in (sympy.Integer, sympy.Rational):
        numbers = [_literal(a) for a in node.args]
        if (
            not 1 <= len(numbers) <= 2
            or any(type(n) is not int for n in numbers)
            or (len(numbers) == 2 and numbers[1] == 0)
        ):
            raise SizeExpressionError(f"{node.func.id} takes integer literals")
        return cls(*numbers), max(max(n.bit_length() for n in numbers), 1)
    parsed = [_size_node(a, depth + 1) for a in node.args]
    if not parsed or len(parsed) > MAX_SIZE_NODES:
        raise SizeExpressionError(f"{node.func.id} without arguments in a size expression")
    args = [a for a, _ in parsed]
    bits = _bits(cls, args, [b for _, b in parsed])
    if bits > MAX_EVAL_BITS:
        raise SizeExpressionError(f"a size expression that may reach {bits} bits, more than {MAX_EVAL_BITS}")
    return _bounded(cls(*args)), bits


def fake_mode(symbols=None):
    """A fake mode for rebuilt metas; with ``symbols`` (name -> {"hint", "min", "max"}), its
    ShapeEnv holds those size symbols with their traced values and ranges."""
    if not symbols:
        return FakeTensorMode(allow_non_fake_inputs=True)
    env = ShapeEnv()
    for name, s in symbols.items():
        sym = sympy.Symbol(name, integer=True, positive=True)  # as ShapeEnv makes size symbols
        env.var_to_range[sym] = ValueRanges(s["min"], int_oo if s["max"] is None else s["max"])
        env.backed_var_to_val[sym] = sympy.Integer(s["hint"])
    return FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)


def size(fake, x):
    """A size: an int, or ``{"sym": srepr}``, a SymInt of ``fake``'s ShapeEnv."""
    if not isinstance(x, dict):
        return x
    env = fake.shape_env
    expr = parse_size(x["sym"])
    hint = int(expr.xreplace(env.backed_var_to_val))  # cheap: parse_size bounded its bits
    if abs(hint) > MAX_SIZE_VALUE:
        raise SizeExpressionError(f"a size expression worth {hint} at its hints, beyond {MAX_SIZE_VALUE}")
    return env.create_symintnode(expr, hint=hint)


def meta_val(fake, spec):
    """Re-create ``meta['val']`` (a fake tensor, a SymInt, a container of them, or a plain value)."""
    ((key, x),) = spec.items()
    if key == "tensor":
        if len(x["shape"]) > MAX_DIMS or len(x["stride"]) != len(x["shape"]):
            raise ValueError(f"a tensor meta of {len(x['shape'])} dims and {len(x['stride'])} strides")
        shape, stride = [size(fake, n) for n in x["shape"]], [size(fake, n) for n in x["stride"]]
        with fake:
            t = torch.empty_strided(shape, stride, dtype=enum("dtype", x["dtype"]), device=torch.device(x["device"]))
        return t.requires_grad_(True) if x["requires_grad"] else t
    if key == "symint":
        return size(fake, x)
    if key in ("tuple", "list"):
        items = [meta_val(fake, i) for i in x]
        return tuple(items) if key == "tuple" else items
    return x if key == "value" else None


def symint_literal(value):
    """A ``torch.SymInt`` whose value is the constant ``value`` (a size its ShapeEnv specialized),
    as a call argument holds it where a tool hands the SymInt on instead of its int."""
    if type(value) is not int or abs(value) > MAX_SIZE_VALUE:
        raise ValueError(f"a SymInt literal is an int within an int64, not {str(value)[:40]}")
    from torch.fx.experimental.sym_node import SymNode

    return torch.SymInt(SymNode(sympy.Integer(value), ShapeEnv(), int, value, constant=value))


def tensor(values, dtype, shape, requires_grad):
    t = torch.tensor(values, dtype=dtype).reshape(shape)
    return t.requires_grad_(True) if requires_grad else t


def set_attr(root, target, value):
    *parents, last = target.split(".")
    for p in parents:
        if not hasattr(root, p):
            setattr(root, p, torch.nn.Module())
        root = getattr(root, p)
    if isinstance(value, torch.Tensor):
        root.register_buffer(last, value)
    else:
        setattr(root, last, value)


def rebuild_graph_module(root, graph):
    """``fx.GraphModule(root, graph)`` keeping every child of ``root`` in its order; the
    constructor alone keeps only the children the graph's get_attr nodes name."""
    gm = fx.GraphModule(root, graph)
    for name, child in root.named_children():
        if hasattr(gm, name):
            delattr(gm, name)
        gm.add_module(name, child)
    return gm


def size_at(size, sizes):
    """A (possibly symbolic) size evaluated at ``sizes`` (symbol name -> value)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    expr = size.node.expr
    return int(expr.xreplace({s: sizes[s.name] for s in expr.free_symbols}))


def inputs_at(gm, inputs, sizes, seed=0):
    """``inputs`` resized to the symbolic sizes ``sizes``: each input whose placeholder meta has
    a symbolic dim gets a fresh seeded tensor of the new shape (same dtype, same
    requires_grad); the others are kept."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for i, (ph, t) in enumerate(zip(placeholders, inputs)):
        val = ph.meta.get("val")
        if not isinstance(t, torch.Tensor) or not isinstance(val, torch.Tensor):
            out.append(t)
            continue
        shape = tuple(size_at(s, sizes) for s in val.shape)
        if shape == tuple(t.shape):
            out.append(t)
            continue
        gen = torch.Generator().manual_seed(seed * 1000 + i)
        if t.dtype == torch.bool:
            new = torch.randint(0, 2, shape, generator=gen).bool()
        elif t.is_floating_point() or t.is_complex():
            new = torch.randn(shape, generator=gen).to(t.dtype)
        else:
            new = torch.randint(-3, 4, shape, generator=gen).to(t.dtype)
        out.append(new.requires_grad_(t.requires_grad))
    return tuple(out)
