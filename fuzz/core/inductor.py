"""Inductor's graph forms: where ``compile_fx`` hands a graph to its FX passes, the graph it
hands there (``lowering_capture``), and the context a pass runs in there (``pass_context``).

Three forms (``fxfuzz.core.choices.INDUCTOR_FORMS``), each captured at the first pass Inductor
runs on it, before that pass changes anything:

- ``inductor``: the inference graph AOTAutograd hands Inductor (functional ATen with Inductor's
  decomposition table, input mutations kept as ``copy_`` epilogues,
  ``keep_inference_input_mutations``), as its joint-graph passes receive it;
- ``inductor_joint``: the joint forward and backward graph (``primals_*``, ``tangents_*``) that
  the partitioner hands ``joint_graph_passes`` in training;
- ``inductor_frozen``: with ``config.freezing`` under no_grad, the graph ``freezing_passes``
  receives: parameters and buffers not mutated are ``get_attr`` constants.

Nothing here re-implements a step of torch's: the graph is what ``torch.compile`` (Dynamo, then
Inductor's ``compile_fx``) builds, stopped at the capture point by raising ``Lowered``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

INFERENCE, JOINT, FROZEN = "inductor", "inductor_joint", "inductor_frozen"


class Lowered(Exception):
    """Raised at the capture point to stop ``compile_fx`` there: the graph is all we need."""


@contextlib.contextmanager
def lowering_capture(form: str) -> Iterator[list[fx.GraphModule]]:
    """Within, a ``compile_fx`` call stops where the ``form``'s graph is handed to its first
    pass, by raising ``Lowered``; the list yielded then holds that GraphModule, untouched. For
    the inference and joint forms that is the outermost ``_recursive_joint_graph_passes`` call
    (before the joint passes of any nested graph); for the frozen one ``freezing_passes``. Both
    are called by their module's name, which is what is patched."""
    from torch._inductor import compile_fx, config, freezing

    seen: list[fx.GraphModule] = []

    def spy(gm: fx.GraphModule, *args: Any, **kwargs: Any) -> None:
        seen.append(gm)
        raise Lowered()

    module, name, patch = (
        (freezing, "freezing_passes", {"freezing": True})
        if form == FROZEN
        else (compile_fx, "_recursive_joint_graph_passes", {})
    )
    real = getattr(module, name)
    setattr(module, name, spy)
    try:
        with config.patch(patch):
            yield seen
    finally:
        setattr(module, name, real)


@dataclass
class Compiled:
    """What ``torch.compile`` with Inductor's backend handed the form's first pass: the graph,
    and for each of AOTAutograd's flat arguments (whose positions its placeholder names give)
    the Dynamo source it came from: the name of a state attribute of Dynamo's graph (its
    parameters, then buffers), or of an argument of the compiled callable."""

    gm: fx.GraphModule
    sources: list[str]


def compile_to_form(fn: Callable[..., Any], args: list[Any], form: str) -> Compiled:
    """``torch.compile(fn, backend=compile_fx, fullgraph=True, dynamic=False)(*args)`` stopped at
    the ``form``'s capture point (``lowering_capture``); grad mode is the caller's (on for the
    joint form, off for the others). RuntimeError, from what torch raised, where it never
    reached that point (the joint form of a graph nothing requires grad in is an inference
    graph)."""
    from torch._inductor.compile_fx import compile_fx

    sources: list[str] = []

    def backend(gm: fx.GraphModule, example_inputs: Any) -> Any:
        state = [*dict(gm.named_parameters()), *dict(gm.named_buffers())]
        arguments = [_argument_name(ph.meta["grapharg"].source.name) for ph in gm.graph.find_nodes(op="placeholder")]
        sources.extend([*state, *arguments])
        return compile_fx(gm, example_inputs)

    error: Exception | None = None
    # Dynamo keeps state across compilations of equal code (FX gives equal graphs one code
    # object); without a reset, one case's lowering would depend on those before it.
    torch._dynamo.reset()
    with lowering_capture(form) as seen:
        try:
            torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*args)
        except Exception as e:  # noqa: BLE001 - the capture itself raises through Dynamo
            error = e
    if not seen or (form == JOINT) != is_joint(seen[0]):
        raise RuntimeError(f"torch.compile never handed the {form} graph to its passes") from error
    return Compiled(seen[0], sources)


_LOCAL = re.compile(r"L\['(\w+)'\]")


def _argument_name(source: str) -> str:
    """The argument a Dynamo source of a graph input names (``L['x']`` -> ``x``); the source
    itself for any other."""
    m = _LOCAL.fullmatch(source)
    return m.group(1) if m else source


def is_joint(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` is AOTAutograd's joint graph: it takes ``(primals, tangents)``."""
    codegen = gm.graph._codegen
    return isinstance(codegen, fx.graph._PyTreeCodeGen) and list(codegen.pytree_info.orig_args) == [
        "primals",
        "tangents",
    ]


# AOTAutograd's placeholder names: ``arg{i}_1`` (inference) and ``primals_{i+1}`` (joint) read
# its i-th flat argument; ``tangents_{j}`` the j-th tangent.
_ARG = re.compile(r"(?:arg(\d+)_1|primals_(\d+)|tangents_(\d+))")


def placeholder_source(name: str) -> tuple[str, int] | None:
    """What an AOTAutograd placeholder named ``name`` reads: ``("arg", i)`` (its i-th flat
    argument, from 0) or ``("tangent", j)`` (from 1); None for any other name."""
    m = _ARG.fullmatch(name)
    if m is None:
        return None
    if m.group(3) is not None:
        return "tangent", int(m.group(3))
    return "arg", int(m.group(1)) if m.group(1) is not None else int(m.group(2)) - 1


def fake_mode_of(gm: fx.GraphModule) -> Any:
    """The fake mode of ``gm``'s metas (None where it has none)."""
    from torch._export.utils import _detect_fake_mode_from_gm

    return _detect_fake_mode_from_gm(gm)


@contextlib.contextmanager
def pass_context(domain: str, gm: fx.GraphModule) -> Iterator[None]:
    """The context Inductor runs its passes on a graph of ``domain`` in (``compile_fx`` around
    AOTAutograd and its compilers): ``V.set_fake_mode`` of the graph's fake mode and a tracing
    context of it; nothing for any other domain."""
    from fxfuzz.core.choices import INDUCTOR_FORMS

    fake = fake_mode_of(gm) if domain in INDUCTOR_FORMS else None
    if fake is None:
        yield
        return
    from torch._inductor.virtualized import V

    with V.set_fake_mode(fake), torch._guards.tracing(torch._guards.TracingContext(fake)):
        yield


# ---------------------------------------------------------------------------- pattern reach

# Matches and replacements of Inductor's pattern entries since the last ``drain_reach``, by
# stats key; filled while ``counting_patterns`` is active.
_REACH: dict[str, int] = {}
_LIST_NAMES: dict[int, str] = {}
# The modules whose PatternMatcherPass objects are named in the counts.
_PATTERN_MODULES = (
    "torch._inductor.fx_passes.joint_graph",
    "torch._inductor.fx_passes.post_grad",
    "torch._inductor.fx_passes.pre_grad",
    "torch._inductor.fx_passes.freezing_patterns",
    "torch._inductor.fx_passes.split_cat",
    "torch._inductor.fx_passes.binary_folding",
    "torch._inductor.fx_passes.fuse_attention",
    "torch._inductor.fx_passes.pad_mm",
    "torch._inductor.fx_passes.decompose_mem_bound_mm",
    "torch._inductor.fx_passes.reinplace",
    "torch._inductor.fx_passes.mkldnn_fusion",
    "torch._inductor.fx_passes.quantization",
)


def _list_names() -> dict[int, str]:
    """``module.name`` (``module.name[i]`` inside a list or dict) of every PatternMatcherPass the
    pattern modules hold, by id; only modules already imported are read."""
    import sys

    from torch._inductor.pattern_matcher import PatternMatcherPass

    for mod_name in _PATTERN_MODULES:
        mod = sys.modules.get(mod_name)
        short = mod_name.rpartition(".")[2]
        for attr, value in vars(mod).items() if mod is not None else ():
            if isinstance(value, PatternMatcherPass):
                _LIST_NAMES.setdefault(id(value), f"{short}.{attr}")
            elif isinstance(value, (list, tuple, dict)):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for k, v in items:
                    if isinstance(v, PatternMatcherPass):
                        _LIST_NAMES.setdefault(id(v), f"{short}.{attr}[{k}]")
    return _LIST_NAMES


def entry_label(entry: Any) -> str:
    """A pattern entry, named as readers can find it: its handler's name where it has one
    (``register_graph_pattern``), else its root target and a short hash of its pattern."""
    import hashlib

    handler = getattr(entry, "handler", None)
    if handler is not None and hasattr(handler, "__qualname__"):
        return f"{handler.__module__.rpartition('.')[2]}.{handler.__qualname__}"
    pattern = entry.pattern
    fns = getattr(pattern, "fns", None) or ("?",)
    digest = hashlib.sha1(repr(pattern).encode()).hexdigest()[:8]
    return f"{fns[0]}#{digest}"


def reach_key(list_name: str, entry: Any, what: str) -> str:
    """The stats key of one count: ``pattern:<list>:<entry>:<matched|replaced>``."""
    return f"pattern:{list_name}:{entry_label(entry)}:{what}"


@contextlib.contextmanager
def counting_patterns() -> Iterator[None]:
    """Within, each application of an Inductor pattern entry counts once as ``matched`` (its
    pattern matched and its extra check held: what torch counts as ``pattern_matcher_count``)
    and once more as ``replaced`` where its handler then changed the graph (created, erased or
    re-pointed a node; a handler may bail). Nothing is patched unless Inductor's pattern
    matcher is already imported (no pass of it ran, or could)."""
    import sys

    pm = sys.modules.get("torch._inductor.pattern_matcher")
    if pm is None:
        yield
        return
    current: list[str] = []
    real_pass_apply = pm.PatternMatcherPass.apply

    def pass_apply(self: Any, gm: Any) -> int:
        current.append(_list_names().get(id(self)) or self.pass_name or "unnamed")
        try:
            return real_pass_apply(self, gm)
        finally:
            current.pop()

    classes = [
        c for c in (pm.GraphPatternEntry, pm.ReplacementPatternEntry, pm.LoweringPatternEntry) if "apply" in vars(c)
    ]
    reals = {c: vars(c)["apply"] for c in classes}

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def apply(self: Any, match: Any, graph: fx.Graph, node: Any) -> Any:
            list_name = current[-1] if current else "unnamed"
            _count(reach_key(list_name, self, "matched"))
            changed = []
            hooks = _mutation_hooks(graph, lambda *a, **k: changed.append(True))
            try:
                return real(self, match, graph, node)
            finally:
                hooks()
                if changed:
                    _count(reach_key(list_name, self, "replaced"))

        return apply

    pm.PatternMatcherPass.apply = pass_apply
    for c in classes:
        c.apply = counted(reals[c])
    try:
        yield
    finally:
        pm.PatternMatcherPass.apply = real_pass_apply
        for c in classes:
            c.apply = reals[c]


def _count(key: str) -> None:
    _REACH[key] = _REACH.get(key, 0) + 1


def _mutation_hooks(graph: fx.Graph, hook: Callable[..., None]) -> Callable[[], None]:
    """Register ``hook`` for node creation, erasure and replacement on ``graph``'s module;
    the function returned removes them."""
    gm = graph.owning_module
    if gm is None:
        return lambda: None
    gm._register_create_node_hook(hook)
    gm._register_erase_node_hook(hook)
    gm._register_replace_node_hook(hook)

    def remove() -> None:
        gm._unregister_create_node_hook(hook)
        gm._unregister_erase_node_hook(hook)
        gm._unregister_replace_node_hook(hook)

    return remove


def drain_reach() -> dict[str, int]:
    """The pattern counts since the last call, and none left behind."""
    out = dict(_REACH)
    _REACH.clear()
    return out
