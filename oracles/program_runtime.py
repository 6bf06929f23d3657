"""Export a module and observe it end to end; pasted verbatim into every program-level repro.

It depends on torch alone, so a repro runs where fxfuzz is not installed. ``observe`` is
also what the program oracle (``fxfuzz.oracles.program``) compares, so the repro and the campaign
see the same things; the repro's comparison itself is ``fxfuzz.repro.program_check``.
"""

import torch
from torch.utils import _pytree as pytree

RUN_SEED = 1234


def fresh_inputs(args):
    """Independent leaf copies of the example inputs, each keeping its requires_grad flag."""
    return tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)


def export_under(module, args, grad_mode, dynamic_shapes=None):
    """``torch.export.export(module, args, strict=False, dynamic_shapes=dynamic_shapes)``
    under ``grad_mode``."""
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(grad_mode)
    try:
        return torch.export.export(module, fresh_inputs(args), strict=False, dynamic_shapes=dynamic_shapes)
    finally:
        torch.set_grad_enabled(before)


def _cotangent(t, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(t.shape, generator=gen).to(t.dtype)


def observe_module(module, args, grad_mode, seed=0):
    """Call ``module`` on fresh copies of ``args`` under ``grad_mode``; return everything
    observable: output leaves and their structure, the grad mode left behind, the module's
    parameters and buffers afterwards, and the gradients of the inputs and parameters
    (backward from every differentiable output with a cotangent seeded by its position)."""
    args = fresh_inputs(args)
    seen: dict[str, object] = {"error": None, "leaves": None, "structure": None, "grads": {}, "backward_error": None}
    before, rng = torch.is_grad_enabled(), torch.random.get_rng_state()
    torch.set_grad_enabled(grad_mode)
    # Every call from one seed: the random calls of two modules draw the same numbers.
    torch.manual_seed(RUN_SEED)
    try:
        out = module(*args)
        seen["grad_mode_after"] = torch.is_grad_enabled()
    except Exception as e:
        seen["error"], seen["grad_mode_after"] = e, torch.is_grad_enabled()
        return seen
    finally:
        torch.set_grad_enabled(before)
        torch.random.set_rng_state(rng)
    leaves, spec = pytree.tree_flatten(out)
    seen["leaves"], seen["structure"] = leaves, str(spec)
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    seen["state"] = {k: v.detach().clone() for k, v in state.items()}
    wrt = {f"input {i}": a for i, a in enumerate(args) if a.requires_grad}
    wrt.update((f"parameter {k}", v) for k, v in module.named_parameters() if v.requires_grad)
    outs = [(i, o) for i, o in enumerate(leaves) if isinstance(o, torch.Tensor) and o.requires_grad]
    seen["grads"] = dict.fromkeys(wrt)
    if wrt and outs:
        try:
            grads = torch.autograd.grad(
                [o for _, o in outs], list(wrt.values()), [_cotangent(o, seed + i) for i, o in outs], allow_unused=True
            )
            seen["grads"] = dict(zip(wrt, grads))
        except Exception as e:
            seen["backward_error"] = e
    return seen


def _same(a, b):
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and a.requires_grad == b.requires_grad
        and torch.equal(a.detach().nan_to_num(), b.detach().nan_to_num())
    )


def differences(eager, exported):
    """Human-readable differences between two observations (empty when they agree)."""
    if (eager["error"] is None) != (exported["error"] is None):
        return [f"eager raised {eager['error']!r}, exported raised {exported['error']!r}"]
    if eager["error"] is not None:
        return []
    diffs = []
    if eager["structure"] != exported["structure"] or len(eager["leaves"]) != len(exported["leaves"]):
        return [f"output structure {eager['structure']} became {exported['structure']}"]
    for i, (a, b) in enumerate(zip(eager["leaves"], exported["leaves"])):
        if not _same(a, b):
            diffs.append(f"output leaf {i}: {a!r} became {b!r}")
    for k in sorted(set(eager["state"]) | set(exported["state"])):
        a, b = eager["state"].get(k), exported["state"].get(k)
        if a is None or b is None or not _same(a, b):
            diffs.append(f"state {k} after the call: {a!r} became {b!r}")
    if eager["grad_mode_after"] != exported["grad_mode_after"]:
        diffs.append(f"grad mode after the call {eager['grad_mode_after']} became {exported['grad_mode_after']}")
    if (eager["backward_error"] is None) != (exported["backward_error"] is None):
        diffs.append(f"backward: eager raised {eager['backward_error']!r}, exported {exported['backward_error']!r}")
    for k in eager["grads"]:
        a, b = eager["grads"][k], exported["grads"].get(k)
        if (a is None) != (b is None) or (a is not None and not _same(a, b)):
            diffs.append(f"gradient of {k}: {a!r} became {b!r}")
    return diffs
