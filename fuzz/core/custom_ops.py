"""fxfuzz's own custom operators (namespace ``fxfuzz``), registered at import.

Graphs in the wild call operators whose autograd is registered rather than derived, so graph
cases and programs call these (``fxfuzz.strategies.custom``). Each has a fake implementation,
so metas come from fake propagation as for ATen ops. Torch only: standalone repros and
program sources paste this file's code (everything after this docstring) to define the
operators they call, and ``define_ops`` does nothing where they already exist (a repro
loaded into a process that imported fxfuzz).

- ``fxfuzz::scaled_mul(x, y)`` = ``2*x*y``: ``torch.library.custom_op`` with
  ``register_autograd``; its ``setup_context`` saves both inputs.
- ``fxfuzz::split_sign(x)`` = ``(|x|, sign(x))``: the sign is marked non-differentiable and
  grads are not materialized, so backward sees ``None`` for an unused output.
- ``fxfuzz::add_half_(x, y)``: ``x += y/2`` in place (``mutates_args``), returns nothing;
  no autograd formula.
- ``fxfuzz::cube(x)`` = ``x**3``: no autograd formula; backward through it raises.
- ``fxfuzz::tanh_mask(x)`` = ``(tanh(x), x > 0)``: the older ``torch._custom_op`` API,
  ``impl_save_for_backward`` and ``impl_backward(output_differentiability=[True, False])``
  (whose generated ``autograd.Function`` calls ``mark_non_differentiable``); its forward
  raises under grad mode on an input that requires grad until the backward is registered.
- ``fxfuzz::logged(x)`` = ``x * 1``, registered with an ordered side effect (as
  ``aten::_print`` is): a post-dispatch export threads an effect token through each call
  (``with_effects``), which ``_remove_effect_tokens`` takes out again. The effect is real:
  each call appends a copy of its input to ``EFFECT_LOG``, so the order and number of the
  calls a graph makes, and what each saw, are observable (``fxfuzz.oracles.effects``). Only
  the real kernel logs: fake and meta propagation (tracing, export, lowering) do not.
"""

import importlib
import importlib.util
import sys
import warnings

import torch
from torch import Tensor


def _scaled_mul_ops():
    @torch.library.custom_op("fxfuzz::scaled_mul", mutates_args=())
    def scaled_mul(x: Tensor, y: Tensor) -> Tensor:
        return x * y * 2

    @scaled_mul.register_fake
    def _(x, y):
        return torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=torch.result_type(x, y), device=x.device)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        # Broadcast operands get their gradient summed back to their own shape.
        return (grad * y * 2).sum_to_size(x.shape), (grad * x * 2).sum_to_size(y.shape)

    scaled_mul.register_autograd(backward, setup_context=setup_context)


def _split_sign_ops():
    @torch.library.custom_op("fxfuzz::split_sign", mutates_args=())
    def split_sign(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.abs(), x.sign()

    @split_sign.register_fake
    def _(x):
        return torch.empty_like(x), torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(output[1])

    def backward(ctx, grad_abs, grad_sign):
        (sign,) = ctx.saved_tensors
        return None if grad_abs is None else grad_abs * sign

    split_sign.register_autograd(backward, setup_context=setup_context)


def _mutating_and_plain_ops():
    @torch.library.custom_op("fxfuzz::add_half_", mutates_args=("x",))
    def add_half_(x: Tensor, y: Tensor) -> None:
        x.add_(y, alpha=0.5)

    @add_half_.register_fake
    def _(x, y):
        return None

    @torch.library.custom_op("fxfuzz::cube", mutates_args=())
    def cube(x: Tensor) -> Tensor:
        return x * x * x

    @cube.register_fake
    def _(x):
        return torch.empty_like(x)


def _legacy_ops():
    try:
        from torch._custom_op.impl import custom_op
    except ImportError:  # a torch without the old API: the other operators still exist
        return

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the API is deprecated; graphs still use it

        @custom_op("fxfuzz::tanh_mask")
        def tanh_mask(x: Tensor) -> tuple[Tensor, Tensor]: ...  # type: ignore[empty-body]  # a schema: kernels are registered below

    # Both devices: with a CPU kernel alone every generated graph calling it raised on CUDA on both
    # sides alike, which left --device cuda blind to those cases (seen on the first GPU run).
    @tanh_mask.impl(("cpu", "cuda"))
    def _(x):
        t = torch.tanh(x)
        return t, (x > 0).to(x.dtype)

    @tanh_mask.impl_abstract()
    def _(x):
        return torch.empty_like(x), torch.empty_like(x)

    # torch 2.13.0's custom_op registers its Autograd indirection kernel without setting this
    # flag, so impl_save_for_backward would refuse: "already has an Autograd kernel".
    tanh_mask._registered_autograd_kernel_indirection = True

    @tanh_mask.impl_save_for_backward()
    def _(inputs, output):
        return output[0]

    @tanh_mask.impl_backward(output_differentiability=[True, False])
    def _(ctx, saved, grad_t, grad_mask):
        return {"x": grad_t * (1 - saved * saved)}


# What fxfuzz::logged did, call by call in order: a detached copy of each call's input;
# whoever observes it clears it before an execution and reads it after. One list per process,
# kept on torch's namespace of these operators: a standalone repro pastes this code, and its
# copy and fxfuzz's (whichever defined the operator) must log to and read the same list.
# (getattr and setattr: to a type checker the namespace holds operators only.)
if not hasattr(torch.ops.fxfuzz, "effect_log"):
    setattr(torch.ops.fxfuzz, "effect_log", [])  # noqa: B010
EFFECT_LOG: list[Tensor] = getattr(torch.ops.fxfuzz, "effect_log")  # noqa: B009


def _effectful_op():
    @torch.library.custom_op("fxfuzz::logged", mutates_args=())
    def logged(x: Tensor) -> Tensor:
        EFFECT_LOG.append(x.detach().clone())
        return x * 1

    @logged.register_fake
    def _(x):
        return torch.empty_like(x)

    from torch._library.effects import EffectType

    torch.library._register_effectful_op("fxfuzz::logged", EffectType.ORDERED)


def define_ops():
    """Register the ``fxfuzz::`` operators unless this process already has them."""
    if hasattr(torch.ops.fxfuzz, "scaled_mul"):
        return
    _scaled_mul_ops()
    _split_sign_ops()
    _mutating_and_plain_ops()
    _effectful_op()
    _legacy_ops()


define_ops()


def load_source(source):
    """Run the source of custom operators: import a module by name, or execute a .py file."""
    if not source.endswith(".py"):
        return importlib.import_module(source)
    module_name = "fxfuzz_ops_" + source.rpartition("/")[2][:-3]
    spec = importlib.util.spec_from_file_location(module_name, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"no such file: {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def define_missing(sources):
    """Load the source (a module name or a .py file) of each operator ``ns::name`` in
    ``sources`` that this process does not have yet. Only standalone repros call it: they are
    code their user chose to run; fxfuzz itself loads no source a saved case names."""
    for qualname, source in sources.items():
        ns, _, name = qualname.partition("::")
        if not hasattr(getattr(torch.ops, ns), name):
            load_source(source)
