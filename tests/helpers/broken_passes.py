"""Passes broken on purpose, one per check, to prove each oracle fires.

Most run the real pass first and then plant one defect, so that every other check stays
quiet and a test can tell which oracle caught what.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import operator
import threading
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.passes import load_pass
from torch import fx
from torch.fx.graph import CodeGen, _PyTreeCodeGen, _PyTreeInfo

aten = torch.ops.aten
real = load_pass("set_grad")
HOP = torch.ops.higher_order.wrap_with_set_grad_enabled


def graphs(gm):
    return [m for m in gm.modules() if isinstance(m, fx.GraphModule)]


def _nodes(gm, pred):
    return [n for m in graphs(gm) for n in m.graph.nodes if pred(n)]


def _recompile(gm):
    for m in graphs(gm):
        m.recompile()
    return gm


def _calls(target):
    return lambda n: n.op == "call_function" and n.target is target


# --- crash -----------------------------------------------------------------------------


def crashes(gm, sig):
    raise RuntimeError("planted crash")


def returns_nothing(gm, sig):
    return None


# --- structure -------------------------------------------------------------------------


def leaves_toggles(gm, sig):
    """Claims the set-grad contract but rewrites nothing."""
    return gm, sig


def breaks_lint(gm, sig):
    """Moves the first call node after its first user, so the graph uses a value before defining it."""
    gm, sig = real(gm, sig)
    for node in gm.graph.nodes:
        users = [u for u in node.users if u.op == "call_function"]
        if node.op == "call_function" and users:
            users[0].append(node)
            break
    return gm, sig


def corrupts_users(gm, sig):
    """Records a user that does not read the node: the users map lies, the code is fine."""
    gm, sig = real(gm, sig)
    nodes = list(gm.graph.nodes)
    nodes[0].users[nodes[-1]] = None
    return gm, sig


def hop_loses_meta(gm, sig):
    """Drops meta['val'] from the placeholders of every wrapped subgraph."""
    gm, sig = real(gm, sig)
    for hop in _nodes(gm, _calls(HOP)):
        sub = getattr(hop.graph.owning_module, hop.args[1].target)
        for ph in sub.graph.find_nodes(op="placeholder"):
            ph.meta.pop("val", None)
    return gm, sig


def _add_inplace(a, b):
    return a.add_(b)


def hides_mutation_from_dce(gm, sig):
    """Calls in-place adds through a plain Python function: same behaviour, but dead-code
    elimination no longer knows the call mutates its argument."""
    gm, sig = real(gm, sig)
    for node in _nodes(gm, _calls(aten.add_.Tensor)):
        node.target = _add_inplace
    return _recompile(gm), sig


def undeepcopyable(gm, sig):
    """Leaves a lock on the module, which copy.deepcopy refuses to copy."""
    gm, sig = real(gm, sig)
    gm.lock = threading.Lock()
    return gm, sig


_CALLS = itertools.count()


def _changes_after_first_call(x, token):
    # Each rewritten graph gets its own token; every call after its first returns x + 1.
    seen = _changes_after_first_call.seen
    first = token not in seen
    seen.add(token)
    return x if first else x + 1


_changes_after_first_call.seen = set()


def stateful(gm, sig):
    """The first output changes on every call after the first: rerunning breaks meaning."""
    gm, sig = real(gm, sig)
    new = _append_to_output(gm, 0, lambda g, n: g.call_function(_changes_after_first_call, (n, next(_CALLS))))
    sig.output_specs[0].arg.name = new.name
    return gm, sig


def keeps_unused_submodule(gm, sig):
    """Leaves a split-off region attached after inlining it, as torch's pass would without
    ``node_inline_``'s ``delete_all_unused_submodules``."""
    gm, sig = real(gm, sig)
    region = fx.Graph()
    region.output(())
    gm.add_submodule("submod_0", fx.GraphModule(torch.nn.Module(), region))
    return gm, sig


# --- signature -------------------------------------------------------------------------


def renames_placeholder(gm, sig):
    """Renames the first placeholder without telling the signature."""
    gm, sig = real(gm, sig)
    first = next(n for n in gm.graph.nodes if n.op == "placeholder")
    first._rename("renamed_" + first.name)
    gm.recompile()
    return gm, sig


def renames_user_input(gm, sig):
    """Renames the user inputs consistently in graph and signature: callers using keyword
    arguments break all the same."""
    gm, sig = real(gm, sig)
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    for spec in sig.input_specs:
        if spec.kind.name == "USER_INPUT":
            placeholders[spec.arg.name]._rename("renamed_" + spec.arg.name)
            spec.arg.name = placeholders[spec.arg.name].name
    gm.recompile()
    return gm, sig


def renames_output(gm, sig):
    """Renames the node behind the first output without telling the signature."""
    gm, sig = real(gm, sig)
    first = gm.graph.output_node().args[0][0]
    first._rename("renamed_" + first.name)
    gm.recompile()
    return gm, sig


def drops_output_spec(gm, sig):
    gm, sig = real(gm, sig)
    sig.output_specs.pop()
    return gm, sig


def flips_persistence(gm, sig):
    """Marks every buffer non-persistent."""
    gm, sig = real(gm, sig)
    for spec in sig.input_specs:
        if spec.persistent is not None:
            spec.persistent = not spec.persistent
    return gm, sig


def adds_pytree_convention(gm, sig):
    """Installs a pytree codegen the original did not have."""
    gm, sig = real(gm, sig)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    in_spec = pytree.tree_flatten((tuple(names), {}))[1]
    gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, None))
    gm.recompile()
    return gm, sig


def drops_pytree_convention(gm, sig):
    gm, sig = real(gm, sig)
    gm.graph._codegen = CodeGen()
    gm.recompile()
    return gm, sig


def calls_python_sin(gm, sig):
    """torch.sin instead of aten.sin: same numbers and derivatives, but not an ATen op, so
    torch.export's verifier rejects the graph."""
    gm, sig = real(gm, sig)
    for node in _nodes(gm, _calls(aten.sin.default)):
        node.target = torch.sin
    return _recompile(gm), sig


def forgets_module_stack(gm, sig):
    """The wrapped regions' HOP calls without the nn_module_stack export records on every
    root op: same graph, but torch.export's nn_module_stack check rejects it."""
    gm, sig = real(gm, sig)
    for node in gm.graph.nodes:
        if node.target is HOP:
            node.meta.pop("nn_module_stack", None)
    return gm, sig


# --- equivalence -----------------------------------------------------------------------


def drops_toggles(gm, sig):
    """Deletes every toggle instead of wrapping regions: no_grad regions now record grads."""
    for mod in graphs(gm):
        for n in list(mod.graph.nodes):
            if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
                mod.graph.erase_node(n)
        mod.recompile()
    return gm, sig


def _rewrite(gm, target, build, where=lambda n: True):
    """Replace every call of ``target`` (that ``where`` accepts), in nested graph modules too,
    by what ``build`` emits; new nodes copy the replaced node's meta, as careful passes do."""
    for mod in graphs(gm):
        for n in list(mod.graph.nodes):
            if n.op == "call_function" and n.target is target and where(n):
                with mod.graph.inserting_before(n):
                    new = build(mod.graph, *n.args)
                for m in mod.graph.nodes:
                    if m.op == "call_function" and "val" not in m.meta:
                        m.meta.update({k: n.meta[k] for k in ("val", "nn_module_stack") if k in n.meta})
                n.replace_all_uses_with(new)
                mod.graph.erase_node(n)
        mod.recompile()
    return gm


def sin_to_cos(gm, sig):
    """Computes cos where the graph said sin: a value bug."""
    gm, sig = real(gm, sig)
    return _rewrite(gm, aten.sin.default, lambda g, x: g.call_function(aten.cos.default, (x,))), sig


def casts_outputs(gm, sig):
    """Returns every tensor output in float64."""
    gm, sig = real(gm, sig)
    out = gm.graph.output_node()
    with gm.graph.inserting_before(out):
        new = [
            gm.graph.call_function(aten._to_copy.default, (a,), {"dtype": torch.float64})
            if isinstance(a, fx.Node)
            else a
            for a in out.args[0]
        ]
    for a, n in zip(out.args[0], new):
        if isinstance(a, fx.Node):
            n.meta["val"] = a.meta["val"].to(torch.float64)
    out.args = (tuple(new),)
    gm.recompile()
    return gm, sig


def none_output_becomes_zero(gm, sig):
    """Returns the constant 0 where the graph returned None."""
    gm, sig = real(gm, sig)
    out = gm.graph.output_node()
    out.args = (tuple(0 if a is None else a for a in out.args[0]),)
    gm.recompile()
    return gm, sig


def extra_output(gm, sig):
    """Returns one more value than the graph did."""
    gm, sig = real(gm, sig)
    out = gm.graph.output_node()
    out.args = ((*out.args[0], None),)
    gm.recompile()
    return gm, sig


def copies_views(gm, sig):
    """Clones every view before returning it: same values, but no longer aliasing the input."""
    gm, sig = real(gm, sig)
    return _rewrite(
        gm,
        aten.transpose.int,
        lambda g, x, *a: g.call_function(aten.clone.default, (g.call_function(aten.transpose.int, (x, *a)),)),
    ), sig


def aliases_passthrough(gm, sig):
    """Returns ``alias(x)`` where the graph returned its input ``x``: same values and
    storage, but the output now has a grad_fn."""
    gm, sig = real(gm, sig)
    out = gm.graph.output_node()
    with gm.graph.inserting_before(out):
        new = [
            gm.graph.call_function(aten.alias.default, (a,)) if isinstance(a, fx.Node) and a.op == "placeholder" else a
            for a in out.args[0]
        ]
    for a, n in zip(out.args[0], new):
        if n is not a:
            n.meta["val"] = a.meta.get("val")
    out.args = (tuple(new),)
    gm.recompile()
    for spec, n in zip(sig.output_specs, new):
        if isinstance(n, fx.Node):
            spec.arg.name = n.name
    return gm, sig


def drops_inplace(gm, sig):
    """Computes add_ out of place: same results, but buffers are no longer updated."""
    gm, sig = real(gm, sig)
    return _rewrite(gm, aten.add_.Tensor, lambda g, a, b: g.call_function(aten.add.Tensor, (a, b))), sig


def leaks_grad_mode(gm, sig):
    """Ends the graph with grad mode flipped, as a forgotten toggle would."""
    gm, sig = real(gm, sig)
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.call_function(torch._C._set_grad_enabled, (not torch.is_grad_enabled(),)).meta["val"] = None
    gm.recompile()
    return gm, sig


def leaks_autocast(gm, sig):
    """Enters an autocast region it never exits."""
    gm, sig = real(gm, sig)
    with gm.graph.inserting_before(gm.graph.output_node()):
        enter = gm.graph.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
        enter.meta["val"] = None
    gm.recompile()
    return gm, sig


def _exclude_functionalize() -> None:
    torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Functionalize, True)


def leaks_dispatch_keys(gm, sig):
    """Leaves a dispatch key excluded for whatever the caller runs next."""
    gm, sig = real(gm, sig)
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.call_function(_exclude_functionalize, ()).meta["val"] = None
    gm.recompile()
    return gm, sig


def refuses_adversarial_graphs(gm, sig):
    """torch's pass, except that it raises on what only the adversarial domain draws: a call
    without ``meta['val']`` or a tensor read through ``get_attr``."""
    for mod in graphs(gm):
        for n in mod.graph.nodes:
            if (n.op == "call_function" and "val" not in n.meta) or (
                n.op == "get_attr" and isinstance(getattr(mod, n.target, None), torch.Tensor)
            ):
                raise RuntimeError("refused an adversarial graph")
    return real(gm, sig)


# --- gradients -------------------------------------------------------------------------


def wrong_sin_grad(gm, sig):
    """sin(x.detach()) + 2 * (x - x.detach()): the same forward bits, the wrong derivative."""
    gm, sig = real(gm, sig)

    def build(g, x):
        d = g.call_function(aten.detach.default, (x,))
        s = g.call_function(aten.sin.default, (d,))
        z = g.call_function(aten.sub.Tensor, (x, d))
        z2 = g.call_function(aten.mul.Tensor, (z, 2.0))
        return g.call_function(aten.add.Tensor, (s, z2))

    return _rewrite(gm, aten.sin.default, build), sig


class _MulOnceDifferentiable(torch.autograd.Function):
    """mul with a hand-written backward marked ``once_differentiable``, as a fused kernel
    without a double-backward formula would have: the same values, gradients and tangents, and
    it saves what ATen's mul saves, but the gradients it returns are constants to autograd."""

    @staticmethod
    def forward(a, b):
        return torch.mul(a, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        # ATen's mul saves each operand that the other's gradient needs, no more.
        ctx.save_for_backward(b if ctx.needs_input_grad[0] else None, a if ctx.needs_input_grad[1] else None)
        ctx.save_for_forward(a, b)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        b, a = ctx.saved_tensors
        return g * b.conj() if b is not None else None, g * a.conj() if a is not None else None

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx.saved_tensors
        if ta is None or tb is None:
            return tb * a if ta is None else ta * b
        return tb * a + ta * b


# An ATen-like operator (an OpOverload, so torch.export's verifier accepts the result) whose
# autograd kernel is the function above: as a backend would register a fused kernel.
# Defined once per process: this file is both imported by name and loaded by file spec
# (``tests/helpers/broken_passes.py:fn``), and a second definition of the library raises.
if not hasattr(torch.ops.brokenpass, "mul"):
    _LIB = torch.library.Library("brokenpass", "DEF")
    _LIB.define("mul(Tensor a, Tensor b) -> Tensor")
    _LIB.impl("mul", torch.mul, "CompositeExplicitAutograd")
    _LIB.impl("mul", _MulOnceDifferentiable.apply, "Autograd")


def flat_second_order(gm, sig):
    """Every mul of two tensors becomes ``brokenpass::mul``, whose backward is
    once_differentiable: values, first-order gradients and tangents stay the same, second-order
    gradients through any mul on a differentiable path are lost."""
    gm, sig = real(gm, sig)
    for node in _nodes(gm, _calls(aten.mul.Tensor)):
        if all(isinstance(a, fx.Node) for a in node.args):
            node.target = torch.ops.brokenpass.mul.default
    return _recompile(gm), sig


def detaches_mul_lhs(gm, sig):
    """mul(a.detach(), b): values and requires_grad unchanged while ``b`` requires grad, but
    an ``a`` used nowhere else with grad on loses its gradient (None instead of a tensor)."""
    gm, sig = real(gm, sig)

    def build(g, a, b):
        return g.call_function(aten.mul.Tensor, (g.call_function(aten.detach.default, (a,)), b))

    return _rewrite(gm, aten.mul.Tensor, build), sig


class _Sin(torch.autograd.Function):
    """sin with hand-written derivatives; subclasses plant one defect."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @classmethod
    def backward(cls, ctx, g):
        return g * cls.kept(ctx).cos()

    @classmethod
    def jvp(cls, ctx, t):
        return cls.tangent_factor * t * cls.kept(ctx).cos()

    tangent_factor = 1

    @staticmethod
    def kept(ctx):
        return ctx.saved_tensors[0]


class _SinWrongTangent(_Sin):
    """The right backward, a forward-mode derivative off by a factor of two."""

    tangent_factor = 2


class _SinStashedInput(_Sin):
    """Keeps its input on ctx instead of saving it for backward: autograd neither checks its
    version nor lets allow_mutation_on_saved_tensors keep the value it had, so an in-place
    update after the forward silently changes the gradient."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.x = inputs[0]
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def kept(ctx):
        return ctx.x


def sin_wrong_tangent(x):
    return _SinWrongTangent.apply(x)


def sin_stashed_input(x):
    return _SinStashedInput.apply(x)


def _retarget(target):
    def rewrite(gm, sig):
        gm, sig = real(gm, sig)
        for node in _nodes(gm, _calls(aten.sin.default)):
            node.target = target
        return _recompile(gm), sig

    return rewrite


wrong_sin_tangent = _retarget(sin_wrong_tangent)
wrong_sin_tangent.__doc__ = "Only forward-mode AD sees this one: values and reverse-mode gradients are right."
wrong_sin_tangent.__name__ = "wrong_sin_tangent"
stashes_sin_input = _retarget(sin_stashed_input)
stashes_sin_input.__doc__ = "Only an in-place update between forward and backward sees this one."
stashes_sin_input.__name__ = "stashes_sin_input"


def _reads_without_aliasing(node):
    """An ATen op that neither mutates nor aliases its arguments (cloning one changes nothing)."""
    schema = getattr(node.target, "_schema", None)
    return (
        node.op == "call_function"
        and schema is not None
        and not any(a.alias_info for a in schema.arguments)
        and not any(r.alias_info for r in schema.returns)
    )


def saves_input_clone(gm, sig):
    """Every op reading a floating placeholder reads a clone of it instead: values, gradients
    and tangents are unchanged, but backward now saves the clone, so updating the input in
    place after the forward no longer makes backward refuse."""
    gm, sig = real(gm, sig)
    for ph in gm.graph.find_nodes(op="placeholder"):
        val = ph.meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.is_floating_point()):
            continue
        for user in [u for u in ph.users if _reads_without_aliasing(u)]:
            with gm.graph.inserting_before(user):
                copy = gm.graph.call_function(aten.clone.default, (ph,))
            copy.meta.update({k: v for k, v in user.meta.items() if k != "val"}, val=val)
            user.replace_input_with(ph, copy)
    gm.recompile()
    return gm, sig


def _append_to_output(gm, index, build):
    """Replace output ``index`` by what ``build(graph, node)`` emits; every new node gets the node's meta."""
    out = gm.graph.output_node()
    first = out.args[0][index]
    before = set(gm.graph.nodes)
    with gm.graph.inserting_before(out):
        new = build(gm.graph, first)
    for n in set(gm.graph.nodes) - before:
        n.meta = dict(first.meta)
    out.args = (tuple(new if i == index else a for i, a in enumerate(out.args[0])),)
    gm.recompile()
    return new


def adds_dead_edge(gm, sig):
    """Output 0 plus the last input times alpha=0: the same values and gradients (AddBackward
    saves nothing), but output 0's autograd graph now reaches the last input too."""
    gm, sig = real(gm, sig)
    last = list(gm.graph.find_nodes(op="placeholder"))[-1]
    new = _append_to_output(gm, 0, lambda g, n: g.call_function(aten.add.Tensor, (n, last), {"alpha": 0}))
    sig.output_specs[0].arg.name = new.name
    return gm, sig


def saves_more(gm, sig):
    """Output 0 times ones_like(output 0): the same bits everywhere, one more tensor (the
    ones) saved for backward."""
    gm, sig = real(gm, sig)

    def times_ones(g, n):
        return g.call_function(aten.mul.Tensor, (n, g.call_function(aten.ones_like.default, (n,))))

    new = _append_to_output(gm, 0, times_ones)
    sig.output_specs[0].arg.name = new.name
    return gm, sig


# --- idempotence -----------------------------------------------------------------------


def _toggle_free(gm):
    return not _nodes(gm, _calls(torch._C._set_grad_enabled))


def wraps_again(gm, sig):
    """Every application wraps the first placeholder in one more identity HOP."""
    gm, sig = real(gm, sig)
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    sub_graph = fx.Graph()
    ph = sub_graph.placeholder("x")
    ph.meta["val"] = x.meta.get("val")
    sub_graph.output((ph,))
    name = f"identity_{len(_nodes(gm, _calls(HOP)))}"
    setattr(gm, name, fx.GraphModule(torch.nn.Module(), sub_graph))
    first_call = next(n for n in gm.graph.nodes if n.op != "placeholder")
    with gm.graph.inserting_before(first_call):
        attr = gm.graph.get_attr(name)
        hop = gm.graph.call_function(HOP, (torch.is_grad_enabled(), attr, x))
        hop.meta["val"] = (x.meta.get("val"),)
        item = gm.graph.call_function(operator.getitem, (hop, 0))
        item.meta["val"] = x.meta.get("val")
    gm.recompile()
    return gm, sig


def rewrites_own_output(gm, sig):
    """Correct on graphs with toggles; on a toggle-free graph (its own output) it turns sin into cos."""
    if _toggle_free(gm):
        return sin_to_cos(gm, sig)
    return real(gm, sig)


def refuses_own_output(gm, sig):
    """Correct on graphs with toggles; raises on a toggle-free graph."""
    if _toggle_free(gm):
        raise ValueError("nothing to rewrite")
    return real(gm, sig)


# --- pipelines -------------------------------------------------------------------------

# The field defect pytorch/pytorch#140589, fixed by PR #141169: node_inline_ set an inlined
# region's get_attr submodule on the parent under the name it had inside the region,
# overwriting the parent's own ``submod_1`` when set_grad had already made one and autocast ran
# after it. Removing the collision check the fix added (``if hasattr(gm, new_target_name)``)
# restores that code; both passes of the sequence read the restored helper.
_INLINE_MUTANT = "utils.node_inline_:860:remove:20"


@functools.cache
def _old_inline_export() -> Any:
    # Built on first use, not at import: the mutant's id names a line of torch 2.13's source, and
    # every test module imports this file, also on a torch whose source differs (the CUDA
    # machine's).
    from fxfuzz.tools.mutants import enumerate_mutants, load_pass_variant

    mutant = next((m for m in enumerate_mutants("export") if m.id == _INLINE_MUTANT), None)
    if mutant is None:
        raise LookupError(
            f"torch {torch.__version__} has no mutant {_INLINE_MUTANT} (its id names torch 2.13's source)"
        )
    return load_pass_variant("export", mutant)


def inline_overwrites_submod(gm, sig):
    """set_grad then autocast, both with node_inline_ as it was before pytorch PR #141169."""
    return _old_inline_export()(gm, sig)


def inline_overwrites_submod_set_grad_only(gm, sig):
    """The set-grad part alone of ``inline_overwrites_submod``."""
    return _old_inline_export().passes[0](gm, sig)


def unsaveable(gm, sig):
    """The real pass, then node metadata torch.export.save cannot write (the serializer
    writes meta['custom'] as JSON): every other check passes."""
    gm, sig = real(gm, sig)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["custom"] = {"note": object()}
    return gm, sig


# --- symbolic sizes --------------------------------------------------------------------


def _symint_operands(gm):
    """(HOP call, operand position, operand) of every SymInt operand of a wrap_with_set_grad_enabled."""
    return [
        (n, i, a)
        for n in _nodes(gm, _calls(HOP))
        for i, a in enumerate(n.args)
        if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.SymInt)
    ]


def freezes_symint_operands(gm, sig):
    """Passes each SymInt operand of the HOP as the size it had when traced: right at the traced
    sizes, wrong at every other."""
    gm, sig = real(gm, sig)
    for node, i, a in _symint_operands(gm):
        node.args = (*node.args[:i], a.meta["val"].node.hint, *node.args[i + 1 :])
    return _recompile(gm), sig


def drops_symint_operands(gm, sig):
    """Drops the SymInt operands of the HOP and the subgraph placeholders they fed, the
    subgraph reading the traced size instead: consistent structure, right only at the traced sizes."""
    gm, sig = real(gm, sig)
    for node, i, a in reversed(_symint_operands(gm)):
        owner = node.graph.owning_module
        sub = getattr(owner, node.args[1].target)
        ph = [p for p in sub.graph.nodes if p.op == "placeholder"][i - 2]
        hint = a.meta["val"].node.hint
        for user in list(ph.users):
            user.args = fx.node.map_arg(user.args, lambda n, ph=ph, hint=hint: hint if n is ph else n)
        sub.graph.erase_node(ph)
        node.args = node.args[:i] + node.args[i + 1 :]
    return _recompile(gm), sig


def freezes_input_metas(gm, sig):
    """Records every user input's traced sizes in its placeholder meta, the symbols gone: the
    graph runs as before at every size, but the ExportedProgram built on it checks calls
    against the frozen sizes (``ep.module()`` refuses any other)."""
    gm, sig = real(gm, sig)
    for ph in gm.graph.find_nodes(op="placeholder"):
        val = ph.meta.get("val")
        if isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape):
            hints = [d.node.hint if isinstance(d, torch.SymInt) else d for d in val.shape]
            with val.fake_mode:
                ph.meta["val"] = torch.empty(hints, dtype=val.dtype).requires_grad_(val.requires_grad)
    return gm, sig


# Each pass here is the set-grad pass broken in one way (or a stand-in for it), and is held to
# the set-grad contract; a pass fxfuzz does not know would be held to ``meaning`` only.
# --- process state left changed -------------------------------------------------------

# What each pass of ``leaks`` leaves changed, by the name its finding gives it.
LEAKS = {
    "grad mode": lambda: torch.set_grad_enabled(not torch.is_grad_enabled()),
    "autocast state": lambda: torch.set_autocast_enabled("cpu", not torch.is_autocast_enabled("cpu")),
    "default dtype": lambda: torch.set_default_dtype(torch.float64),
    "deterministic algorithms": lambda: torch.use_deterministic_algorithms(
        not torch.are_deterministic_algorithms_enabled()
    ),
    "thread count": lambda: torch.set_num_threads(torch.get_num_threads() + 1),
    "anomaly mode": lambda: torch.autograd.set_detect_anomaly(not torch.is_anomaly_enabled()),
    "random generator state": lambda: torch.rand(1),
}


def leaks(state: str) -> Any:
    """torch's pass, returning with ``state`` (a key of ``LEAKS``) left changed."""

    def leaking(gm, sig):
        gm, sig = real(gm, sig)
        LEAKS[state]()
        return gm, sig

    leaking.__name__ = leaking.__qualname__ = "leaks_" + state.replace(" ", "_")
    leaking.fxfuzz_contract = real.contract  # type: ignore[attr-defined]
    return leaking


def leaks_then_raises(gm, sig):
    """Changes the default dtype, then raises: the state is put back all the same."""
    torch.set_default_dtype(torch.float64)
    raise RuntimeError("planted crash after a leak")


# --- what only the pass's own call can raise ------------------------------------------------


def returns_bare_node(gm, sig):
    """torch's pass, whose output node then returns its first output bare, not in a tuple."""
    gm, sig = real(gm, sig)
    out = gm.graph.output_node()
    out.args = (out.args[0][0],)
    gm.recompile()
    return gm, sig


def raises_keyboard_interrupt(gm, sig):
    raise KeyboardInterrupt


def exits(gm, sig):
    raise SystemExit(3)


class _Unreadable:
    def __str__(self) -> str:
        raise ValueError("no text")


class _SlowToRead(Exception):
    def __str__(self) -> str:
        import time

        time.sleep(3600)
        return "late"


def raises_unreadable(gm, sig):
    """Raises an exception whose text cannot be read: ``str()`` of it raises."""
    raise RuntimeError(_Unreadable())


def raises_slow_to_read(gm, sig):
    """Raises an exception whose text takes an hour to read."""
    raise _SlowToRead()


for _fn in list(globals().values()):
    if (
        inspect.isfunction(_fn)
        and _fn.__module__ == __name__
        and list(inspect.signature(_fn).parameters)[:2] == ["gm", "sig"]
    ):
        _fn.fxfuzz_contract = real.contract


def _planted_generation_error(_: Any) -> Any:
    raise ValueError("planted in generation")


def raising_cases(settings: Any) -> Any:
    """A generation that raises (``Task.strategy``): an error outside anything the pass runs."""
    from hypothesis import strategies as st

    return st.just(None).map(_planted_generation_error)


# Imports fine in the CLI process, kills every worker process at start-up (outside any example).
DIES_IN_WORKERS = """
import os, sys
if sys.argv[0].endswith("worker.py"):
    os._exit(7)

def fine(gm, sig):
    return gm, sig
"""
