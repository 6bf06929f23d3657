"""Observable behaviour of the original and transformed graph under the same grad mode:
outputs, the inputs' state after the call, and the process-wide state left behind."""

from __future__ import annotations

import math
from typing import Any

import torch
from fxfuzz.core.internal import first_line
from fxfuzz.oracles.execute import Run, StateChange
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.tolerance import Exact, max_abs_diff, same_values

VALUE_KINDS = frozenset({"value_mismatch"})


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{x.dtype}:{x.device.type}"
    return repr(x)


def _same_constant(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _storage(t: torch.Tensor) -> int | None:
    return t.untyped_storage().data_ptr() if t.numel() else None


def aliases(run: Run) -> list[tuple[str, int] | None]:
    """For each output leaf: the first input or earlier output whose storage it shares."""
    assert run.outputs is not None
    owners: dict[int, tuple[str, int]] = {}
    for i, t in enumerate(run.inputs):
        if isinstance(t, torch.Tensor) and _storage(t) is not None:
            owners.setdefault(_storage(t), ("input", i))  # type: ignore[arg-type]
    found: list[tuple[str, int] | None] = []
    for j, t in enumerate(run.outputs):
        key = _storage(t) if isinstance(t, torch.Tensor) else None
        found.append(owners.get(key) if key is not None else None)
        if key is not None:
            owners.setdefault(key, ("output", j))
    return found


def compare_value(where: str, ref: Any, got: Any, exact: Exact = True, same_device: bool = True) -> list[Finding]:
    """Compare one observed value (an output leaf or an input's final state)."""
    if isinstance(ref, torch.Tensor) != isinstance(got, torch.Tensor) or (
        not isinstance(ref, torch.Tensor) and not _same_constant(ref, got)
    ):
        return [Finding("equivalence", "value_kind_mismatch", f"{where}: {_describe(ref)} became {_describe(got)}")]
    if not isinstance(ref, torch.Tensor):
        return []
    if ref.shape != got.shape or ref.dtype != got.dtype or (same_device and ref.device.type != got.device.type):
        return [Finding("equivalence", "meta_mismatch", f"{where}: {_describe(ref)} became {_describe(got)}")]
    findings = []
    if not same_values(ref, got, exact):
        diff = max_abs_diff(ref, got)
        # Equal values that differ all the same differ in a sign of zero.
        how = f"max abs diff {diff:g}" if diff else "only in the sign of a zero"
        findings.append(
            Finding(
                "equivalence",
                "value_mismatch",
                f"{where}: values differ ({how})",
                {"where": where, "max_abs_diff": diff},
            )
        )
    if ref.requires_grad != got.requires_grad:
        findings.append(
            Finding(
                "equivalence",
                "requires_grad_mismatch",
                f"{where}: requires_grad {ref.requires_grad} became {got.requires_grad}",
                {"expected": ref.requires_grad, "got": got.requires_grad},
            )
        )
    elif (ref.grad_fn is None) != (got.grad_fn is None):
        findings.append(
            Finding(
                "equivalence",
                "grad_fn_mismatch",
                f"{where}: grad_fn {'absent' if ref.grad_fn is None else 'present'} became "
                f"{'absent' if got.grad_fn is None else 'present'}",
            )
        )
    return findings


def _itself(run: Run, t: Any) -> str:
    """Which input ``t`` is, as an object (not a view of it): a caller that changes an
    output's metadata in place (``t_()``, ``resize_()``) changes that input's too."""
    k = next((k for k, x in enumerate(run.inputs) if x is t), None)
    return "a tensor of its own" if k is None else f"input {k} itself"


def _flags_differ(r: torch.Tensor, g: torch.Tensor) -> bool:
    return r.requires_grad != g.requires_grad or (r.grad_fn is None) != (g.grad_fn is None)


def _reaches_an_input(t: torch.Tensor, inputs: Any) -> bool:
    """Whether a backward from ``t`` reaches one of ``inputs``: ``t`` itself is one, or its
    autograd graph accumulates into one (walked, nothing computed)."""
    ids = {id(x) for x in inputs if isinstance(x, torch.Tensor)}
    seen: set[Any] = set()
    stack = [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if id(getattr(fn, "variable", None)) in ids:
            return True
        stack.extend(f for f, _ in fn.next_functions)
    return id(t) in ids


def _inert_flag(ref: Run, r: Any, g: Any) -> bool:
    """``r`` requires grad though no backward from it reaches an input, and ``g``, without a
    grad_fn, requires none: a view made with grad off reports its base's requires_grad with no
    grad_fn, and what is computed from it inherits the flag, where a copy made there requires
    none. A contract that does not judge views (``functional``) excuses that; a gradient an
    input loses or gains, the gradients oracle still judges."""
    return (
        isinstance(r, torch.Tensor)
        and isinstance(g, torch.Tensor)
        and r.requires_grad
        and not g.requires_grad
        and g.grad_fn is None
        and not _reaches_an_input(r, ref.inputs)
    )


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    """Where a view's elements lie in its storage: its offset and the strides of its dimensions
    of more than one element (a dimension of one is never stepped along, so its stride places
    nothing: torch's own ``check_significant_strides`` skips it too); nothing for an empty one."""
    if t.numel() == 0:
        return ()
    return t.storage_offset(), tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def _compare_views(ref: Run, got: Run, identity: bool = True) -> list[Finding]:
    """Outputs that alias an input or another output must keep doing so, with the same layout,
    and (with ``identity``) an output that is an input itself must stay that input, or stay a
    tensor of its own.
    Where requires_grad or grad_fn presence differ, ``compare_value`` already said so (a leaf
    input returned for a view of it): one defect, one bucket."""
    assert ref.outputs is not None and got.outputs is not None
    findings = []
    for i, (ra, ga, r, g) in enumerate(zip(aliases(ref), aliases(got), ref.outputs, got.outputs)):
        if identity and ra == ga and ra is not None and ra[0] == "input" and not _flags_differ(r, g):
            if (was := _itself(ref, r)) != (now := _itself(got, g)):
                findings.append(
                    Finding(
                        "equivalence",
                        "identity_mismatch",
                        f"output {i}: {was} became {now}",
                        {"expected": was, "got": now},
                    )
                )
        if ra != ga:
            findings.append(
                Finding(
                    "equivalence",
                    "aliasing_mismatch",
                    f"output {i}: shared storage with {ra or 'nothing'}, now with {ga or 'nothing'}",
                    {"expected": str(ra), "got": str(ga)},
                )
            )
        elif isinstance(r, torch.Tensor) and isinstance(g, torch.Tensor) and (r._is_view() or ra is not None):
            if _layout(r) != _layout(g):
                findings.append(
                    Finding(
                        "equivalence",
                        "view_layout_mismatch",
                        f"output {i}: view strides/offset {r.stride()}+{r.storage_offset()} "
                        f"became {g.stride()}+{g.storage_offset()}",
                    )
                )
    return findings


def raised_differently(
    oracle: str, kind: str, what: str, ref: BaseException | None, got: BaseException | None
) -> list[Finding]:
    """A finding when exactly one side raised, or both raised different exception types."""
    if type(ref) is type(got):
        return []
    shown = got if got is not None else ref
    return [
        Finding(
            oracle,
            kind,
            f"{what} of the original raised {type(ref).__name__ if ref else 'nothing'}, "
            f"of the transformed {type(got).__name__ if got else 'nothing'}: {first_line(shown) if shown is not None else ''}",
            {"original": type(ref).__name__ if ref else None, "transformed": type(got).__name__ if got else None},
        )
    ]


def check_equivalence(
    ref: Run, got: Run, exact: Exact = True, same_device: bool = True, views: bool = True, identity: bool = True
) -> list[Finding]:
    """Outputs (structure, constants, metadata, values, autograd flags, views), inputs' state
    after the call (in-place effects), and the grad mode and autocast state left behind.
    ``same_device`` is off when the two runs live on different devices (CPU-vs-CUDA parity);
    ``views`` off for a contract that does not judge aliasing and strides (``functional``),
    ``identity`` off where an input returned itself and an alias of it are alike (Inductor's forms)."""
    if not ref.ok or not got.ok:
        return raised_differently("equivalence", "raises_differently", "running the graph", ref.error, got.error)
    assert ref.outputs is not None and got.outputs is not None
    if ref.spec != got.spec:
        return [
            Finding(
                "equivalence",
                "output_structure_mismatch",
                f"output structure {ref.spec} became {got.spec}",
                {"expected": str(ref.spec), "got": str(got.spec)},
            )
        ]
    findings = []
    for i, (r, g) in enumerate(zip(ref.outputs, got.outputs)):
        found = compare_value(f"output {i}", r, g, exact, same_device)
        if not views and _inert_flag(ref, r, g):
            found = [f for f in found if f.kind != "requires_grad_mismatch"]
        findings += found
    if same_device and views:
        findings += _compare_views(ref, got, identity)
    for i, (r, g) in enumerate(zip(ref.inputs, got.inputs)):
        findings += [
            f
            for f in compare_value(f"input {i} after the call", r, g, exact, same_device)
            if f.kind != "grad_fn_mismatch"
        ]
    if ref.state_after != got.state_after:
        findings.append(
            Finding(
                "equivalence",
                got.state_after.leak_kind(ref.state_after),
                got.state_after.differences(ref.state_after),
                {"expected": str(ref.state_after), "got": str(got.state_after)},
            )
        )
    return findings


def state_leak(leaked: list[StateChange]) -> list[Finding]:
    """A finding when the pass left process-wide state changed (``PassState.changed``), which
    ``pass_isolated`` has put back: what a caller of the pass would have run under next. The
    message says what differs; what was left changed, by name, is the bucket's key: a dtype
    left behind and a thread count are two defects."""
    if not leaked:
        return []
    names = [c.name for c in leaked]
    return [
        Finding(
            "equivalence",
            "state_leak",
            "the pass left process-wide state changed: " + "; ".join(c.differs for c in leaked),
            {"state": names, "key": "+".join(names)},
        )
    ]
