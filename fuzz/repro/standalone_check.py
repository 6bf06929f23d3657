"""The self-contained check pasted verbatim into every standalone repro.

It depends on torch alone, so a repro runs where fxfuzz is not installed. It is a compact
re-implementation of the oracles' comparisons (crash, structure, signature, equivalence,
gradients, ordered effects, the random generator's state): enough to show the failing check, not a replacement for ``fxfuzz.oracles.verify``.
"""

import copy
import faulthandler
import importlib
import importlib.util
import sys
import traceback

import torch
from fxfuzz.core.rebuild import inputs_at
from fxfuzz.core.shapes import GIVEN_SHAPES, adapt, shape_given, shape_of
from torch import fx


def load_pass_spec(spec):
    """The pass an import spec names: ``where:attr`` (``where`` a module name or a .py path,
    ``attr`` a dotted attribute, ``@SHAPE`` after it where the user named its shape), or several
    joined by ``+``, run in sequence."""
    parts = [_load_one(*part.rsplit(":", 1)) for part in spec.split("+")]

    def pipeline(gm, signature):
        for part in parts:
            gm, signature = part(gm, signature)
        return gm, signature

    return parts[0] if len(parts) == 1 else pipeline


def _load_one(where, attr):
    attr, mark, shape = attr.rpartition("@") if attr.rpartition("@")[2] in GIVEN_SHAPES else (attr, "", "")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location("repro_pass_module", where)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    for part in attr.split("."):
        module = getattr(module, part)
    return adapt(*(shape_given(module, shape) if mark else shape_of(module)))  # called as fxfuzz called it


def _clone(t):
    return t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t


def _effects():
    """The ordered effects logged so far (fxfuzz::logged's inputs, in order), taken out of the log."""
    log = getattr(torch.ops.fxfuzz, "effect_log", [])
    taken = list(log)
    log.clear()
    return taken


# Every run starts from this seed, as the oracles' runs do: random calls draw alike.
SEED = 1234


def _run(gm, inputs, ambient):
    """(inputs afterwards, outputs, grad mode left, ordered effects, the random generator's
    state after the call), on fresh copies of the inputs."""
    args = [_clone(t) for t in inputs]
    before, rng = torch.is_grad_enabled(), torch.random.get_rng_state()
    torch.set_grad_enabled(ambient)
    torch.manual_seed(SEED)
    _effects()
    try:
        out = gm(*args)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return args, outs, torch.is_grad_enabled(), _effects(), torch.random.get_rng_state()
    finally:
        torch.set_grad_enabled(before)
        torch.random.set_rng_state(rng)


def _attempt(gm, inputs, ambient):
    """``_run``'s result and None, or None and what the graph raised."""
    try:
        return _run(gm, inputs, ambient), None
    except Exception as e:
        return None, e


def _raised(ref_err, got_err, refines=False, what="running the graph"):
    """As the oracles judge it: a difference when exactly one graph raised, or the two raised
    different exception types (a graph that raises before and after the pass is not the pass's
    doing); under refinement, where the original raised, the result may do anything."""
    if type(ref_err) is type(got_err) or (refines and ref_err is not None):
        return []
    first = str(got_err or ref_err).splitlines()
    return [
        f"{what} of the original raised {type(ref_err).__name__ if ref_err else 'nothing'}, "
        f"of the transformed {type(got_err).__name__ if got_err else 'nothing'}: {first[0] if first else ''}"
    ]


def _differing(ref, got, label):
    """``label`` (formatted with the position) for each pair of tensors (or Nones) that differ."""
    return [
        label.format(i)
        for i, (r, g) in enumerate(zip(ref, got))
        if (r is None) != (g is None) or (r is not None and not _same(r, g))
    ]


def _same(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def _compare(where, r, g, grad_fn=True):
    if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
        return [f"{where}: {type(r).__name__} became {type(g).__name__}"]
    if not isinstance(r, torch.Tensor):
        return [] if r == g else [f"{where}: {r!r} became {g!r}"]
    if not _same(r.detach(), g.detach()):
        return [f"{where}: {tuple(r.shape)}/{r.dtype} values differ from {tuple(g.shape)}/{g.dtype}"]
    if r.requires_grad != g.requires_grad:
        return [f"{where}: requires_grad {r.requires_grad} became {g.requires_grad}"]
    if grad_fn and (r.grad_fn is None) != (g.grad_fn is None):
        return [f"{where}: grad_fn presence changed"]
    return []


def _diff(ref, got):
    """Differences between two runs: outputs, inputs afterwards, grad mode left, ordered effects."""
    (ref_args, ref_out, ref_mode, ref_fx, ref_rng), (got_args, got_out, got_mode, got_fx, got_rng) = ref, got
    if len(ref_out) != len(got_out):
        return [f"{len(ref_out)} outputs became {len(got_out)}"]
    found = []
    for i, (r, g) in enumerate(zip(ref_out, got_out)):
        found += _compare(f"output {i}", r, g)
    for i, (r, g) in enumerate(zip(ref_args, got_args)):
        found += _compare(f"input {i} after the call", r, g, grad_fn=False)
    if ref_mode != got_mode:
        found.append(f"grad mode after the call is {got_mode}, expected {ref_mode}")
    if len(ref_fx) != len(got_fx):
        found.append(f"ordered effects: {len(ref_fx)} calls of fxfuzz::logged became {len(got_fx)}")
    elif not all(_same(r, g) for r, g in zip(ref_fx, got_fx)):
        found.append("ordered effects: the calls of fxfuzz::logged saw other values, or ran in another order")
    if not torch.equal(ref_rng, got_rng):
        found.append(
            "random generator: its state after the call differs (a random call deleted, merged, added or frozen)"
        )
    return found


def _grads(args, outs, positions):
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    if not leaves or not positions:
        return [None] * len(leaves)
    cots = [
        torch.randn(outs[i].shape, generator=torch.Generator().manual_seed(i), dtype=outs[i].dtype) for i in positions
    ]
    return list(torch.autograd.grad([outs[i] for i in positions], leaves, cots, allow_unused=True))


def _gradients(ref, got, refines=False):
    (ref_args, ref_out, *_), (got_args, got_out, *_) = ref, got
    positions = [
        i for i, o in enumerate(ref_out) if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()
    ]
    if len(ref_out) != len(got_out) or not all(
        isinstance(got_out[i], torch.Tensor) and got_out[i].requires_grad for i in positions
    ):
        return []  # the outputs already differ; _diff says how
    (ref_grads, ref_err), (got_grads, got_err) = (
        _backward(ref_args, ref_out, positions),
        _backward(got_args, got_out, positions),
    )
    if ref_err is not None or got_err is not None:
        return _raised(ref_err, got_err, refines, "backward")
    return _differing(ref_grads, got_grads, "gradient of grad-requiring input #{} differs")


def _backward(args, outs, positions):
    """``_grads``'s result and None, or None and what backward raised."""
    try:
        return _grads(args, outs, positions), None
    except RuntimeError as e:
        return None, e


def _jvp(gm, inputs, ambient):
    """Output tangents under forward-mode AD (a seeded tangent on every floating input), or
    the error raised."""
    import torch.autograd.forward_ad as fwad

    before, rng = torch.is_grad_enabled(), torch.random.get_rng_state()
    torch.set_grad_enabled(ambient)
    torch.manual_seed(SEED)
    try:
        with fwad.dual_level():
            args = [
                fwad.make_dual(
                    _clone(t), torch.randn(t.shape, generator=torch.Generator().manual_seed(i), dtype=t.dtype)
                )
                if isinstance(t, torch.Tensor) and t.is_floating_point()
                else _clone(t)
                for i, t in enumerate(inputs)
            ]
            out = gm(*args)
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            return [fwad.unpack_dual(o).tangent if isinstance(o, torch.Tensor) else None for o in out], None
    except Exception as e:
        return None, e
    finally:
        torch.set_grad_enabled(before)
        torch.random.set_rng_state(rng)


def _forward_ad(gm, new, inputs, ambient, refines=False):
    (ref, ref_err), (got, got_err) = _jvp(gm, inputs, ambient), _jvp(new, inputs, ambient)
    if ref_err is not None or got_err is not None:
        return _raised(ref_err, got_err, refines, "forward-mode AD")
    return _differing(ref, got, "forward-mode AD: tangent of output {} differs")


def _structure(new, eliminates):
    found = []
    for name, mod in new.named_modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        where = f"graph {name or '<root>'}"
        try:
            mod.graph.lint()
        except Exception as e:
            found.append(f"{where} fails lint: {e}")
        left = [n.name for n in mod.graph.nodes if n.op == "call_function" and n.target in eliminates]
        if left:
            found.append(f"{where} still calls {left}")
        for n in mod.graph.nodes:
            readers = {u for u in mod.graph.nodes if n in u.all_input_nodes}
            if set(n.users) != readers:
                found.append(f"{where}: {n.name}.users disagrees with the nodes that read it")
    return found


def _cleaned(gm):
    """A deep copy with dead code eliminated and the code regenerated in every graph."""
    dc = copy.deepcopy(gm)
    for mod in dc.modules():
        if isinstance(mod, fx.GraphModule):
            mod.graph.eliminate_dead_code()
            mod.recompile()
    return dc


def _apply(pass_fn, build_case, times):
    gm, sig, _, ambient = build_case()
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient)
    try:
        for _ in range(times):
            gm, sig = pass_fn(gm, sig)
        return gm, sig
    finally:
        torch.set_grad_enabled(before)


def _undifferentiated(build_case):
    """``build_case`` as a graph no one differentiates is run: grad mode off, inputs that do
    not require grad (``PassContract.differentiated``)."""

    def build():
        gm, sig, inputs, _ = build_case()
        return gm, sig, [t.detach() if isinstance(t, torch.Tensor) else t for t in inputs], False

    return build


def problems(build_case, pass_fn, eliminates, sizes=(), contract=None):
    """Every check the transformed graph fails under ``contract`` (``refines``: where the
    original raised the result may do anything; ``differentiated`` false: both graphs run
    with grad off and nothing is differentiated), as one line each; at the traced sizes, then
    the values and gradients at each of ``sizes`` (assignments of the symbolic sizes)."""
    contract = contract or {"refines": False, "differentiated": True}
    refines, differentiated = contract["refines"], contract["differentiated"]
    if not differentiated:
        build_case = _undifferentiated(build_case)
    gm, _, inputs, ambient = build_case()
    try:
        new, new_sig = _apply(pass_fn, build_case, 1)
    except Exception as e:
        traceback.print_exc()
        return [f"crash: the pass raised {type(e).__name__}: {e}"]
    found = [f"structure: {p}" for p in _structure(new, eliminates)]
    placeholders = [n.name for n in new.graph.nodes if n.op == "placeholder"]
    if [getattr(s.arg, "name", None) for s in new_sig.input_specs] != placeholders:
        found.append(f"signature: input specs do not name the placeholders {placeholders}")
    (ref, ref_err), (got, got_err) = _attempt(gm, inputs, ambient), _attempt(new, inputs, ambient)
    if ref_err is not None or got_err is not None:  # nothing further to compare, as for the oracles
        return found + [f"equivalence: {p}" for p in _raised(ref_err, got_err, refines)]
    found += [f"equivalence: {p}" for p in _diff(ref, got)]
    if differentiated:
        found += [f"gradients: {p}" for p in _gradients(ref, got, refines)]
        found += [f"gradients: {p}" for p in _forward_ad(gm, new, inputs, ambient, refines)]
    found += [f"structure: running the result again: {p}" for p in _diff(got, _run(new, inputs, ambient))]
    try:
        clean_new = _diff(got, _run(_cleaned(new), inputs, ambient))
        if clean_new and not _diff(ref, _run(_cleaned(gm), inputs, ambient)):
            found += [f"structure: after deepcopy + eliminate_dead_code + recompile: {p}" for p in clean_new]
    except Exception as e:
        found.append(f"structure: deepcopy/eliminate_dead_code/recompile of the result raised {type(e).__name__}: {e}")
    try:
        twice, _ = _apply(pass_fn, build_case, 2)
        found += [f"idempotence: after a second application: {p}" for p in _diff(ref, _run(twice, inputs, ambient))]
    except Exception as e:
        found.append(f"idempotence: the second application raised {type(e).__name__}: {e}")
    for i, at in enumerate(sizes, 1):
        resized = inputs_at(gm, inputs, at, seed=i)
        label = ", ".join(f"{k}={v}" for k, v in sorted(at.items()))
        (ref, ref_err), (got, got_err) = _attempt(gm, resized, ambient), _attempt(new, resized, ambient)
        if ref_err is not None or got_err is not None:
            found += [f"equivalence at sizes {label}: {p}" for p in _raised(ref_err, got_err, refines)]
            continue
        found += [f"equivalence at sizes {label}: {p}" for p in _diff(ref, got)]
        if differentiated:
            found += [f"gradients at sizes {label}: {p}" for p in _gradients(ref, got, refines)]
    return found


# The finding kinds ``problems`` re-implements: for any other (export's verifier, its stages,
# what autograd saves, aliasing and views, second-order gradients, ...) a quiet compact check
# says nothing about whether the bug is fixed.
RECHECKED = frozenset({
    "pass_raised", "bad_return", "lint_failed", "def_use_inconsistent", "leftover_call", "input_names_mismatch",
    "raises_differently", "value_mismatch", "value_kind_mismatch", "output_count_mismatch", "requires_grad_mismatch",
    "grad_fn_mismatch", "grad_mode_leak", "effects_lost", "effect_value_mismatch", "effects_reordered",
    "grad_presence_mismatch", "grad_value_mismatch", "backward_raises_differently", "jvp_raises_differently",
    "tangent_value_mismatch", "rerun_changes_meaning", "dead_code_elimination_changes_meaning",
    "second_application_raised", "second_application_changes_meaning",
})  # fmt: skip


def _full_oracles(build_case, device, sizes, contract, fxfuzz_spec):
    """fxfuzz's own oracles on ``device``, the pass ``fxfuzz_spec`` held to the contract the
    campaign held it to (``contract["given"]``, else its own), when fxfuzz is importable here and
    the device is present: the exact verdict. None otherwise."""
    try:
        from fxfuzz.core.case import GraphCase
        from fxfuzz.core.identity import resolve_pass
        from fxfuzz.oracles import verify
        from fxfuzz.oracles.downstream import stages_forced
    except ImportError:
        return None
    if fxfuzz_spec is None or (device == "cuda" and not torch.cuda.is_available()):
        return None
    gm, sig, inputs, ambient = build_case()
    case = GraphCase(gm, sig, tuple(inputs), ambient, sizes=tuple(sizes))
    pass_fn, _ = resolve_pass(fxfuzz_spec, (contract or {}).get("given"))
    with stages_forced():  # every check, as fxfuzz repro judges it
        return [str(f) for f in verify(case, pass_fn, device=device)]


def main(
    build_case,
    pass_spec,
    eliminates,
    expected,
    device="cpu",
    sizes=(),
    contract=None,
    kind=None,
    json_name=None,
    fxfuzz_spec=None,
):
    """Run the check under ``contract`` (a dict: ``given``, the ``--contract`` name or None,
    ``refines`` and ``differentiated``; None: meaning); exit status 1 while it fails, 0 once the
    pass is fixed, 2 when the finding (its ``kind``) cannot be judged here: seen on another
    device (the compact checks run on CPU only), or of a check the compact one does not
    re-implement (``RECHECKED``). With fxfuzz importable, its oracles judge too, the pass
    loaded by its fxfuzz name ``fxfuzz_spec``."""
    faulthandler.enable()  # a pass that crashes the process still shows where
    print(f"expected finding: {expected}", flush=True)
    pass_fn = load_pass_spec(pass_spec)
    found = problems(build_case, pass_fn, eliminates, sizes, contract)
    for line in found:
        print(f"FAIL {line}")
    full = _full_oracles(build_case, device, sizes, contract, fxfuzz_spec)
    for line in full or []:
        print(f"FAIL (fxfuzz oracles) {line}")
    found += full or []
    if not found and full is None and device != "cpu":
        print(
            f"UNDECIDED: the finding was seen on {device}, and the checks that ran here (CPU only) pass; "
            f"replay it with `fxfuzz repro` where torch sees {device}"
        )
        return 2
    if not found and full is None and kind is not None and kind not in RECHECKED:
        print(
            f"not re-checked here: run `fxfuzz repro {json_name or 'the repro .json'}` (this program does not re-implement the {kind} check)"
        )
        return 2
    if not found:
        print("OK: every check passes (the bug is fixed)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit("this file is pasted into repros; run a repro instead")
