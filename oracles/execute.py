"""Run a graph on its own copies of the inputs and record everything observable."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from fxfuzz.core.case import clone_input, copy_graph_module
from fxfuzz.core.custom_ops import EFFECT_LOG

# The RNG seed every run starts from, so seeded random ops (dropout, rand_like) draw the same
# numbers in the original and the transformed graph as long as the pass keeps their order
# (kept with the code pasted into program-level repros, which seeds its calls alike).
from fxfuzz.oracles.program_runtime import RUN_SEED
from torch import fx

AUTOCAST_DEVICES = ("cpu", "cuda")


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _differs(name: str, got: str, expected: str) -> list[str]:
    """``name after the call: got, expected expected``, where the two differ."""
    return [f"{name} after the call: {got}, expected {expected}"] if got != expected else []


def _dispatch_keys() -> tuple[int, int]:
    """The thread's local dispatch-key include and exclude sets (raw bits)."""
    return (
        torch._C._dispatch_tls_local_include_set().raw_repr(),
        torch._C._dispatch_tls_local_exclude_set().raw_repr(),
    )


def _key_sets(keys: tuple[int, int]) -> tuple[torch._C.DispatchKeySet, torch._C.DispatchKeySet]:
    return torch._C.DispatchKeySet.from_raw_repr(keys[0]), torch._C.DispatchKeySet.from_raw_repr(keys[1])


def _set_dispatch_keys(keys: tuple[int, int]) -> None:
    """Make ``keys`` the thread's dispatch-key sets, every key included (Python's
    ``DispatchKey`` lacks some, such as Tracer, so setting key by key cannot). torch offers
    only a guard that sets both sets and restores the previous ones on exit; exited first in,
    first out, two of them leave the sets they were given in place."""
    include, exclude = _key_sets(keys)
    first = torch._C._ForceDispatchKeyGuard(include, exclude)
    second = torch._C._ForceDispatchKeyGuard(include, exclude)
    first.__enter__()  # saves the leaked sets
    second.__enter__()  # saves ``keys``
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)


@dataclass(frozen=True)
class GlobalState:
    """The process-wide state a graph can leave changed: grad mode, autocast settings, and
    the thread's dispatch-key sets (torch code that fails half-way can leave autograd
    excluded: forward-mode AD through ``map`` whose body reads a tensor attribute does)."""

    grad: bool
    autocast: tuple[tuple[str, bool, torch.dtype], ...]
    autocast_cache: bool
    dispatch_keys: tuple[int, int]

    @staticmethod
    def read() -> GlobalState:
        return GlobalState(
            torch.is_grad_enabled(),
            tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES),
            torch.is_autocast_cache_enabled(),
            _dispatch_keys(),
        )

    def restore(self) -> None:
        torch.set_grad_enabled(self.grad)
        for device, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache)
        if _dispatch_keys() != self.dispatch_keys:
            _set_dispatch_keys(self.dispatch_keys)

    def __str__(self) -> str:
        autocast = ", ".join(
            f"{d} {'on' if on else 'off'} {str(dt).removeprefix('torch.')}" for d, on, dt in self.autocast
        )
        include, exclude = _key_sets(self.dispatch_keys)
        return (
            f"grad {'on' if self.grad else 'off'}; autocast {autocast}, cache {'on' if self.autocast_cache else 'off'}; "
            f"dispatch keys included {include}, excluded {exclude}"
        )

    def differences(self, expected: GlobalState) -> str:
        """What differs from ``expected``, and only that: ``grad mode after the call: on,
        expected off``; the dispatch-key sets only where nothing a user can see differs (the
        autocast flags live in them too)."""
        parts = self.grad_differences(expected) + self.autocast_differences(expected)
        if not parts and self.dispatch_keys != expected.dispatch_keys:
            (inc, exc), (want_inc, want_exc) = _key_sets(self.dispatch_keys), _key_sets(expected.dispatch_keys)
            parts.append(
                f"dispatch keys after the call: included {inc}, excluded {exc}; expected included {want_inc}, excluded {want_exc}"
            )
        return "; ".join(parts)

    def grad_differences(self, expected: GlobalState) -> list[str]:
        return _differs("grad mode", _on(self.grad), _on(expected.grad))

    def autocast_differences(self, expected: GlobalState) -> list[str]:
        """Each autocast setting that differs from ``expected``'s: per device, and the cache."""
        parts = []
        for (device, enabled, dtype), (_, want, want_dtype) in zip(self.autocast, expected.autocast):
            parts += _differs(
                f"autocast on {device}", f"{_on(enabled)} {_dtype(dtype)}", f"{_on(want)} {_dtype(want_dtype)}"
            )
        return parts + _differs("autocast cache", _on(self.autocast_cache), _on(expected.autocast_cache))

    def leak_kind(self, expected: GlobalState) -> str:
        """The finding kind for leaving this state where ``expected`` was left."""
        if self.grad != expected.grad:
            return "grad_mode_leak"
        # Autocast flags live in the dispatch-key sets too: name the cause a user can see.
        if (self.autocast, self.autocast_cache) != (expected.autocast, expected.autocast_cache):
            return "autocast_state_leak"
        return "dispatch_state_leak"


@contextmanager
def effects_logged() -> Iterator[list[torch.Tensor]]:
    """The ordered side effects (``fxfuzz::logged`` calls) made inside the block, in order:
    the log is cleared on entry, and its entries move to the list yielded on exit, so what an
    earlier execution (or the pass itself) logged is never counted as this one's."""
    EFFECT_LOG.clear()
    made: list[torch.Tensor] = []
    try:
        yield made
    finally:
        made += EFFECT_LOG
        EFFECT_LOG.clear()


@dataclass
class Run:
    """One execution: the inputs' state afterwards, the flattened outputs (``spec`` keeps
    their nesting), the global state the graph left, the ordered side effects it made, the
    CPU generator's state right after the call (``rng_after``, for ``fxfuzz.oracles.rng``), or
    the error it raised."""

    inputs: tuple[Any, ...]
    outputs: list[Any] | None
    spec: pytree.TreeSpec | None
    state_after: GlobalState
    error: BaseException | None = None
    effects: list[torch.Tensor] = field(default_factory=list)
    rng_after: torch.Tensor | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def release_frames(exc: BaseException) -> BaseException:
    """Free the locals of the finished frames ``exc``'s traceback holds (and those of the
    exceptions chained to it), innermost first; return ``exc``, still readable (type,
    message, file and line for bucketing).

    A traceback keeps torch's frames alive, and with them the dispatch-key guards those
    frames hold as locals (objects that restore the thread's dispatch-key state when freed).
    While a recorded error lived, autograd could stay switched off for whatever ran next,
    and the garbage collector, freeing such frames out of order, left it switched off for
    good (a later graph's forward-mode AD then failed an internal assert). Innermost first
    frees the guards in the reverse of the order they were taken, as unwinding would."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            try:
                frame.clear()
            except RuntimeError:  # a frame still running: the caller's own
                pass
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return exc


@contextmanager
def isolated(ambient_grad: bool, device: str = "cpu") -> Iterator[None]:
    """Run under ``ambient_grad`` with a fixed RNG seed; afterwards restore the grad mode,
    autocast state and RNG state whatever the graph did to them."""
    before = GlobalState.read()
    # The CPU generator directly: torch.manual_seed and fork_rng cost ~0.4 ms a call.
    cpu_state = torch.default_generator.get_state()
    cuda_state = torch.cuda.get_rng_state() if device == "cuda" else None
    torch.default_generator.manual_seed(RUN_SEED)
    if device == "cuda":
        torch.cuda.manual_seed(RUN_SEED)
    torch.set_grad_enabled(ambient_grad)
    try:
        yield
    finally:
        before.restore()
        torch.default_generator.set_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state)


@dataclass(frozen=True)
class StateChange:
    """One part of the process-wide state a pass left changed: its name (what the finding's
    bucket keys on) and what differs, for the reader (``thread count after the call: 3,
    expected 2``)."""

    name: str
    differs: str


@dataclass(frozen=True, eq=False)  # compared by ``changed``: its tensors have no truth value
class PassState:
    """The process-wide state a pass can leave changed beyond what a graph can
    (``GlobalState``): the default dtype, deterministic algorithms, the intra-op thread
    count, anomaly mode, and the CPU random generator (and CUDA's, once initialized)."""

    graph: GlobalState
    default_dtype: torch.dtype
    deterministic: tuple[bool, bool]  # enabled, warn only
    threads: int
    anomaly: tuple[bool, bool]  # enabled, check NaN
    rng: torch.Tensor
    cuda_rng: tuple[torch.Tensor, ...]

    @staticmethod
    def read() -> PassState:
        return PassState(
            GlobalState.read(),
            torch.get_default_dtype(),
            (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
            torch.get_num_threads(),
            (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            torch.default_generator.get_state(),
            tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else (),
        )

    def restore(self) -> None:
        self.graph.restore()
        torch.set_default_dtype(self.default_dtype)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        if torch.get_num_threads() != self.threads:  # each call rebuilds the pool
            torch.set_num_threads(self.threads)
        torch.autograd.set_detect_anomaly(*self.anomaly)
        torch.default_generator.set_state(self.rng)
        if self.cuda_rng:
            torch.cuda.set_rng_state_all(self.cuda_rng)

    def changed(self, before: PassState) -> list[StateChange]:
        """What differs from ``before``, each part by name and with what differs; the
        dispatch-key sets are put back, not named: torch itself leaves them changed where a
        call fails half-way."""
        g, b = self.graph, before.graph

        def deterministic(d: tuple[bool, bool]) -> str:
            return ("on (warn only)" if d[1] else "on") if d[0] else "off"

        def anomaly(a: tuple[bool, bool]) -> str:
            return f"on (NaN check {_on(a[1])})" if a[0] else "off"

        moved = "advanced or reseeded"
        cuda_moved = len(self.cuda_rng) != len(before.cuda_rng) or not all(
            map(torch.equal, self.cuda_rng, before.cuda_rng)
        )
        named = [
            ("grad mode", g.grad_differences(b)),
            ("autocast state", g.autocast_differences(b)),
            ("default dtype", _differs("default dtype", _dtype(self.default_dtype), _dtype(before.default_dtype))),
            (
                "deterministic algorithms",
                _differs(
                    "deterministic algorithms", deterministic(self.deterministic), deterministic(before.deterministic)
                ),
            ),
            ("thread count", _differs("thread count", str(self.threads), str(before.threads))),
            ("anomaly mode", _differs("anomaly mode", anomaly(self.anomaly), anomaly(before.anomaly))),
            (
                "random generator state",
                _differs("the CPU random generator", moved, "as it was")
                if not torch.equal(self.rng, before.rng)
                else [],
            ),
            (
                "CUDA random generator state",
                _differs("the CUDA random generators", moved, "as they were") if cuda_moved else [],
            ),
        ]
        return [StateChange(name, "; ".join(parts)) for name, parts in named if parts]


@contextmanager
def pass_isolated(ambient_grad: bool) -> Iterator[list[StateChange]]:
    """``isolated`` for a call of the pass: afterwards every part of ``PassState`` is put back
    too, and the list yielded holds what the pass, returning, left changed."""
    leaked: list[StateChange] = []
    with isolated(ambient_grad):
        before = PassState.read()
        try:
            yield leaked
            leaked += PassState.read().changed(before)
        finally:
            before.restore()


def run_graph(
    gm: Callable[..., Any],
    inputs: tuple[Any, ...],
    ambient_grad: bool,
    device: str = "cpu",
    prepare: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
) -> Run:
    """Execute ``gm`` under ``ambient_grad`` on fresh copies of ``inputs`` on ``device``.

    ``prepare`` turns the copies into what the graph is called with (forward-mode AD wraps
    them as dual tensors). A graph that raises is an observation, not an error.
    """
    clones = tuple(clone_input(t, device) for t in inputs)
    args = prepare(clones) if prepare else clones
    state_after = None
    with isolated(ambient_grad, device), effects_logged() as effects:
        try:
            out = gm(*args)
            state_after = GlobalState.read()
            rng_after = torch.default_generator.get_state()
            leaves, spec = pytree.tree_flatten(out)
            run = Run(clones, leaves, spec, state_after, rng_after=rng_after)
        except Exception as e:
            run = Run(clones, None, None, state_after or GlobalState.read(), release_frames(e))
    run.effects = effects
    return run


def graph_modules(gm: fx.GraphModule) -> list[tuple[str, fx.GraphModule]]:
    """The module and every GraphModule nested in it, with qualified names."""
    return [(name or "<root>", m) for name, m in gm.named_modules() if isinstance(m, fx.GraphModule)]


_AUTOCAST_ENTER = torch.amp.autocast_mode._enter_autocast


def _retargeted(node: fx.Node, target: torch.device) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``node``'s arguments with every recorded device naming ``target``: ``torch.device``
    values anywhere in them, and the device type an autocast region was entered for."""
    args, kwargs = fx.node.map_aggregate(
        (node.args, node.kwargs), lambda a: target if isinstance(a, torch.device) else a
    )
    if node.target is _AUTOCAST_ENTER and args and isinstance(args[0], str):
        args = (target.type, *args[1:])
    return args, kwargs


def on_device(gm: fx.GraphModule, device: str) -> fx.GraphModule:
    """``gm`` as export would have recorded it on ``device``: ``gm`` itself when nothing in it
    names another device; otherwise a structural copy with its tensor attributes moved there
    and its recorded devices (factory calls' ``device=``, the metadata assertions export puts
    before ``.to(dtype)``, autocast regions' device type) naming it. Left naming CPU, a graph
    raises on CUDA on both sides alike, or runs its autocast regions unchanged, and the CUDA
    checks would compare nothing of it."""
    # With its index, as export records it (cuda:0): an assertion naming plain "cuda" fails
    # torch's strict device check on a cuda:0 tensor where fake tracing runs it (cond with grad
    # traces its branches) but not in eager kernels, a difference of fxfuzz's making.
    target = torch.empty(0, device=device).device

    def tensor_attrs(m: fx.GraphModule) -> list[str]:
        return [
            n.target
            for n in m.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(m, n.target, None), torch.Tensor)
        ]

    def needs_moving(m: fx.GraphModule) -> bool:
        return any(_retargeted(n, target) != (n.args, n.kwargs) for n in m.graph.nodes) or any(
            getattr(m, t).device.type != target.type for t in tensor_attrs(m)
        )

    if not any(needs_moving(m) for _, m in graph_modules(gm)):
        return gm
    moved = copy_graph_module(gm)
    for _, m in graph_modules(moved):
        for t in tensor_attrs(m):
            setattr(m, t, getattr(m, t).to(device))
        for n in m.graph.nodes:
            n.args, n.kwargs = _retargeted(n, target)
        m.recompile()
    return moved
