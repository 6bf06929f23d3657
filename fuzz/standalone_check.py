"""The self-contained check pasted verbatim into every standalone repro.

It depends on torch alone, so a repro runs where fxfuzz is not installed. It is a compact
re-implementation of the oracles' comparisons (crash, structure, signature, equivalence,
gradients): enough to show the failing check, not a replacement for ``oracles.verify``.
"""

import faulthandler
import importlib
import importlib.util
import sys
import traceback

import torch
from torch import fx


def load_pass(where, attr):
    """The pass: ``where`` is a module name or a .py path, ``attr`` a dotted attribute."""
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location("repro_pass_module", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    for part in attr.split("."):
        module = getattr(module, part)
    return module


def meta_val(fake, spec):
    """Re-create ``meta['val']`` (a fake tensor, a container of them, or a plain value)."""
    (key, x), = spec.items()
    if key == "tensor":
        with fake:
            t = torch.empty_strided(x["shape"], x["stride"], dtype=getattr(torch, x["dtype"]), device=x["device"])
        return t.requires_grad_(True) if x["requires_grad"] else t
    if key in ("tuple", "list"):
        items = [meta_val(fake, i) for i in x]
        return tuple(items) if key == "tuple" else items
    return x if key == "value" else None


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


def graph_module(root, graph):
    """``fx.GraphModule(root, graph)`` keeping every child of ``root`` in its order; the
    constructor alone keeps only the children the graph's get_attr nodes name."""
    gm = fx.GraphModule(root, graph)
    for name, child in root.named_children():
        if hasattr(gm, name):
            delattr(gm, name)
        gm.add_module(name, child)
    return gm


def _clone(t):
    return t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t


def _run(gm, inputs, ambient):
    """Outputs, inputs afterwards and the grad mode left, on fresh copies of the inputs."""
    args = [_clone(t) for t in inputs]
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient)
    try:
        out = gm(*args)
        return args, tuple(out) if isinstance(out, (tuple, list)) else (out,), torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(before)


def _same(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def _compare(where, r, g, grad_fn=True):
    if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
        return [f"equivalence: {where}: {type(r).__name__} became {type(g).__name__}"]
    if not isinstance(r, torch.Tensor):
        return [] if r == g else [f"equivalence: {where}: {r!r} became {g!r}"]
    if not _same(r.detach(), g.detach()):
        return [f"equivalence: {where}: {tuple(r.shape)}/{r.dtype} values differ from {tuple(g.shape)}/{g.dtype}"]
    if r.requires_grad != g.requires_grad:
        return [f"equivalence: {where}: requires_grad {r.requires_grad} became {g.requires_grad}"]
    if grad_fn and (r.grad_fn is None) != (g.grad_fn is None):
        return [f"equivalence: {where}: grad_fn presence changed"]
    return []


def _grads(args, outs, positions):
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    if not leaves or not positions:
        return [None] * len(leaves)
    cots = [torch.randn(outs[i].shape, generator=torch.Generator().manual_seed(i), dtype=outs[i].dtype) for i in positions]
    return list(torch.autograd.grad([outs[i] for i in positions], leaves, cots, allow_unused=True))


def problems(build_case, pass_fn, eliminates):
    """Every check the transformed graph fails, as one line each."""
    gm, sig, inputs, ambient = build_case()
    work, work_sig, _, _ = build_case()
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient)
    try:
        new, new_sig = pass_fn(work, work_sig)
    except Exception as e:
        traceback.print_exc()
        return [f"crash: the pass raised {type(e).__name__}: {e}"]
    finally:
        torch.set_grad_enabled(before)
    found = []
    for name, mod in new.named_modules():
        if isinstance(mod, fx.GraphModule):
            try:
                mod.graph.lint()
            except Exception as e:
                found.append(f"structure: graph {name or '<root>'} fails lint: {e}")
            left = [n.name for n in mod.graph.nodes if n.op == "call_function" and n.target in eliminates]
            if left:
                found.append(f"structure: graph {name or '<root>'} still calls {left}")
    placeholders = [n.name for n in new.graph.nodes if n.op == "placeholder"]
    if [getattr(s.arg, "name", None) for s in new_sig.input_specs] != placeholders:
        found.append(f"signature: input specs do not name the placeholders {placeholders}")
    ref_args, ref_out, ref_mode = _run(gm, inputs, ambient)
    got_args, got_out, got_mode = _run(new, inputs, ambient)
    if len(ref_out) != len(got_out):
        return found + [f"equivalence: {len(ref_out)} outputs became {len(got_out)}"]
    for i, (r, g) in enumerate(zip(ref_out, got_out)):
        found += _compare(f"output {i}", r, g)
    for i, (r, g) in enumerate(zip(ref_args, got_args)):
        found += _compare(f"input {i} after the call", r, g, grad_fn=False)
    if ref_mode != got_mode:
        found.append(f"equivalence: grad mode after the call is {got_mode}, expected {ref_mode}")
    positions = [
        i for i, o in enumerate(ref_out) if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()
    ]
    if all(isinstance(got_out[i], torch.Tensor) and got_out[i].requires_grad for i in positions):
        try:
            pairs = zip(_grads(ref_args, ref_out, positions), _grads(got_args, got_out, positions))
            for i, (r, g) in enumerate(pairs):
                if (r is None) != (g is None) or (r is not None and not _same(r, g)):
                    found.append(f"gradients: gradient {i} of the inputs differs")
        except RuntimeError as e:
            found.append(f"gradients: backward failed: {e}")
    return found


def main(build_case, pass_where, pass_attr, eliminates, expected):
    """Run the check; exit status 1 while it fails, 0 once the pass is fixed."""
    faulthandler.enable()  # a pass that crashes the process still shows where
    print(f"expected finding: {expected}", flush=True)
    found = problems(build_case, load_pass(pass_where, pass_attr), eliminates)
    for line in found:
        print(f"FAIL {line}")
    if not found:
        print("OK: every check passes (the bug is fixed)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit("this file is pasted into repros; run a repro instead")
