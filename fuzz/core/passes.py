"""The pass under test: one frozen value (spec, callable, contract), loaded from a spec.

A spec is a registered name (one ``REGISTRY`` row each: import spec, contract, export stage,
source files, domain), ``pkg.module:obj``, ``path/to/file.py:obj``, or a pipeline ``A+B+...``
of such specs, run in sequence (``export`` names the one torch.export runs). ``obj`` is a pass
of any shape torch.fx uses, adapted to ``(gm, signature) -> (gm, signature)``
(``fxfuzz.core.shapes``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fxfuzz.core.choices import CONTRACT_SOURCES
from fxfuzz.core.contract import (
    APPROXIMATES,
    ATEN_GENERIC,
    AUTOCAST,
    CONTRACTS,
    FUNCTIONAL,
    MEANING,
    POST_GRAD,
    QUANTIZES,
    REFINES,
    SET_GRAD,
    PassContract,
    union,
)
from fxfuzz.core.errors import PassSpecError
from fxfuzz.core.internal import call_out, calls_out
from fxfuzz.core.shapes import GIVEN_SHAPES, Blind, NoShape, adapt, shape_given, shape_of
from fxfuzz.core.user_code import exits_refused

PassFn = Callable[[Any, Any], tuple[Any, Any]]


# Blind calls the pass itself: fxfuzz.core.shapes is pasted into standalone repros, which have
# no fxfuzz to call it through.
calls_out(Blind.__call__)


def identity_pass(gm: Any, graph_signature: Any) -> tuple[Any, Any]:
    """Returns its input unchanged: the control that every oracle must accept."""
    return gm, graph_signature


@dataclass(frozen=True)
class Source:
    """A module of a pass's source: measured by ``--coverage`` (only ``functions`` when given)
    and, when ``mutate``, mutated by ``fxfuzz mutate``."""

    module: str
    functions: tuple[str, ...] = ()
    mutate: bool = True


@dataclass(frozen=True)
class CallContext:
    """What a catalogue row's real caller hands its pass besides the graph, which the row's
    adapter (``fxfuzz.core.catalogue``) hands it the same way (docs/own-pass.md).

    ``inputs``: the model's example inputs, ``"real"`` (the case's values) or ``"fake"`` (the
    fake tensors the graph was traced with, its placeholders' ``val``), as the argument named
    ``inputs_as``; ``fake_mode``: the pass runs under ``V.set_fake_mode`` of the graph's fake
    mode, as ``compile_fx`` runs it; ``config``: ``torch._inductor.config`` patches around the
    call; ``args``: further arguments, by name, as the caller passes them."""

    inputs: str = ""
    inputs_as: str = "example_inputs"
    fake_mode: bool = False
    config: tuple[tuple[str, Any], ...] = ()
    args: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        """One line for ``fxfuzz passes``: each part of the context given."""
        parts = [f"{self.inputs_as}={self.inputs}"] if self.inputs else []
        parts += [f"{k}={v!r}" for k, v in self.args]
        parts += ["V.set_fake_mode"] if self.fake_mode else []
        parts += [f"config.{k}={v!r}" for k, v in self.config]
        return ", ".join(parts) or "-"


@dataclass(frozen=True)
class Registered:
    """One registry row: everything fxfuzz knows about a named pass.

    ``export_stage``: the pass's place in torch.export's pre-dispatch pipeline (None for a
    pass export does not run); ``from_module`` captures a graph just before that stage.
    ``spec`` is an import spec, or for a pipeline row the pipeline of registered names.
    """

    name: str
    spec: str
    contract: PassContract
    export_stage: int | None = None
    sources: tuple[Source, ...] = ()
    # The input space (fxfuzz.core.choices.DOMAINS) whose graphs the pass is fuzzed on.
    domain: str = "export"
    # The node kinds the pass rewrites (fxfuzz.strategies.regions.NODE_KINDS): generation
    # draws one in nearly every case; () keeps the mix of steps of a pass that declares none.
    reacts_to: tuple[str, ...] = ()
    # What the pass's real caller hands it besides the graph, given by the row's adapter.
    context: CallContext = CallContext()
    # The import specs of torch's entry points the row calls as their real caller does: named
    # alone, they lack that context, and the spec is refused naming this row (``load_pass``).
    calls: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def attr(self) -> str:
        return self.spec.partition(":")[2]

    @property
    def parts(self) -> tuple[Registered, ...]:
        """The registered passes this row runs, in order (a pipeline row's parts, else itself)."""
        return tuple(REGISTRY[name] for name in self.spec.split(PIPE)) if PIPE in self.spec else (self,)


# torch._export.utils holds more than the helpers the HOP passes call: only these count.
_HOP_HELPERS = (
    "sequential_split",
    "nodes_filter",
    "nodes_first",
    "nodes_count",
    "nodes_map",
    "node_replace_",
    "node_inline_",
)
_SHARED = (
    Source("torch._export.passes.replace_with_hop_pass_util"),
    Source("torch._export.utils", _HOP_HELPERS),
    # A general torch.fx helper, not the pass's own logic: measured, never mutated.
    Source("torch.fx.passes.split_module", mutate=False),
)
_SET_GRAD = "torch._export.passes.replace_set_grad_with_hop_pass"
_AUTOCAST = "torch._export.passes.replace_autocast_with_hop_pass"

# Separates the parts of a pipeline spec.
PIPE = "+"

_STAGE_ROWS = (
    Registered(
        "set_grad",
        f"{_SET_GRAD}:replace_set_grad_with_hop_pass",
        SET_GRAD,
        0,
        (Source(_SET_GRAD), *_SHARED),
        reacts_to=("grad_toggle",),
    ),
    Registered(
        "autocast",
        f"{_AUTOCAST}:replace_autocast_with_hop_pass",
        AUTOCAST,
        1,
        (Source(_AUTOCAST), *_SHARED),
        reacts_to=("autocast",),
    ),
)
# Export stages in the order torch.export runs them on the pre-dispatch graph.
EXPORT_STAGES: tuple[Registered, ...] = tuple(sorted(_STAGE_ROWS, key=lambda r: r.export_stage))  # type: ignore[arg-type, return-value]


# A pipeline of rows has a domain (str); one with a pass fxfuzz does not know may not (None).
_Domain = TypeVar("_Domain", str, str | None)


def pipeline_domain(domains: Sequence[_Domain]) -> _Domain:
    """The input space of a pipeline whose parts take ``domains`` (None: a pass fxfuzz does not
    know): the first part's, since that part takes the input, narrowed to ``functional`` where
    a later part needs graphs without in-place updates and the first takes export graphs,
    which include them."""
    first, later = domains[0], set(domains[1:])
    return "functional" if first in (None, "export") and "functional" in later else first


def _pipeline_row(name: str, parts: Sequence[Registered]) -> Registered:
    """The row of a pipeline of registered passes: their contracts and sources united, and
    their domain (``pipeline_domain``)."""
    return Registered(
        name,
        PIPE.join(r.name for r in parts),
        union([r.contract for r in parts]),
        sources=tuple(dict.fromkeys(s for r in parts for s in r.sources)),
        reacts_to=tuple(dict.fromkeys(k for r in parts for k in r.reacts_to)),
        domain=pipeline_domain([r.domain for r in parts]),
    )


_CATALOGUE = "fxfuzz.core.catalogue"
_EXPORT_PROGRAM = Source("torch.export.exported_program", mutate=False)
# fxfuzz.strategies.regions.CONSTANT and EFFECT (core cannot import strategies).
_CONSTANT = "constant"
_EFFECT = "effect"
# torch's own FX passes: each called as torch calls it (fxfuzz.core.catalogue says how), under
# the contract its job calls for: ``refines`` for those that remove or merge computations,
# ``post_grad`` for Inductor's, whose graphs are never differentiated again. AOTAutograd's CSE
# runs on such graphs too (the joint graph), yet is held to ``refines``, the stricter: it passes.
# Constant folding and lifting act on tensors read by get_attr: those rows declare the kind
# ``constant`` (export's constants before it lifts them) beside their contract's toggles; the
# passes that remove or merge calls anywhere in a graph (CSE, DCE) declare ``effect``, calls
# with an ordered side effect, which neither may remove or merge. The
# passes written for graphs after dispatch (AOTAutograd's CSE, Inductor's post-grad ones,
# effect-token removal) draw from aten.
_TORCH_ROWS = (
    Registered("cse", f"{_CATALOGUE}:cse", REFINES, sources=(Source("torch.fx.passes.dialect.common.cse_pass", mutate=False),), domain="functional", reacts_to=(_EFFECT, *REFINES.reacts_to)),
    Registered("dce", f"{_CATALOGUE}:eliminate_dead_code", REFINES, sources=(Source("torch.fx.graph", ("Graph",), mutate=False),), reacts_to=(_EFFECT, *REFINES.reacts_to)),
    Registered("aot_cse", "torch._functorch.compile_utils:fx_graph_cse", REFINES, sources=(Source("torch._functorch.compile_utils", ("fx_graph_cse",)),), domain="aten"),
    Registered("split_const_subgraphs", f"{_CATALOGUE}:split_const_subgraphs", REFINES, sources=(Source("torch.fx.experimental.const_fold", mutate=False),), reacts_to=(_CONSTANT, *REFINES.reacts_to)),
    Registered("lift_constants", f"{_CATALOGUE}:lift_constants", MEANING, sources=(Source("torch._export.passes.lift_constants_pass", ("lift_constants_pass",), mutate=False),), reacts_to=(_CONSTANT, *ATEN_GENERIC)),
    Registered("remove_effect_tokens", f"{_CATALOGUE}:remove_effect_tokens", REFINES, sources=(Source("torch.export._remove_effect_tokens_pass", mutate=False), _EXPORT_PROGRAM), domain="aten"),
    Registered("constant_folding", f"{_CATALOGUE}:constant_fold", REFINES, sources=(Source("torch._export.passes.constant_folding", mutate=False),), reacts_to=(_CONSTANT, *ATEN_GENERIC)),
    Registered("move_to_device", f"{_CATALOGUE}:move_to_cpu", MEANING, sources=(Source("torch.export.passes", mutate=False), _EXPORT_PROGRAM)),
    Registered("remove_noop_ops", "torch._inductor.fx_passes.post_grad:remove_noop_ops", POST_GRAD, sources=(Source("torch._inductor.fx_passes.post_grad", ("remove_noop_ops",)),), domain="aten"),
    Registered("remove_assert_ops", "torch._inductor.fx_passes.post_grad:remove_assert_ops", POST_GRAD, sources=(Source("torch._inductor.fx_passes.post_grad", ("remove_assert_ops",)),), domain="aten"),
    Registered("reorder_for_locality", "torch._inductor.fx_passes.post_grad:reorder_for_locality", POST_GRAD, sources=(Source("torch._inductor.fx_passes.post_grad", ("reorder_for_locality",)),), domain="aten"),
    # Inductor's folder (freezing calls it on a graph whose parameters are constants; torchao's
    # convert_pt2e a copy of it on export's module form): export's constants, read by get_attr.
    Registered("inductor_constant_fold", "torch._inductor.constant_folding:constant_fold", REFINES, sources=(Source("torch._inductor.constant_folding", ("constant_fold", "ConstantFolder", "replace_node_with_constant")),), reacts_to=(_CONSTANT, *ATEN_GENERIC)),
    # export's own passes by class: each a PassBase built with no arguments, as export builds it.
    Registered("remove_runtime_assertions", "torch._export.passes.remove_runtime_assertions:_RemoveRuntimeAssertionsPass", REFINES, sources=(Source("torch._export.passes.remove_runtime_assertions", mutate=False),)),
    Registered("view_copy", "torch._export.passes.replace_view_ops_with_view_copy_ops_pass:ReplaceViewOpsWithViewCopyOpsPass", FUNCTIONAL, sources=(Source("torch._export.passes.replace_view_ops_with_view_copy_ops_pass"),), domain="aten"),
    Registered("remove_auto_functionalized", f"{_CATALOGUE}:unsafe_remove_auto_functionalized", MEANING, sources=(Source("torch.export._remove_auto_functionalized_pass", mutate=False), _EXPORT_PROGRAM), domain="aten", calls=("torch.export._remove_auto_functionalized_pass:unsafe_remove_auto_functionalized_pass",)),
)  # fmt: skip

# Inductor's passes where compile_fx calls them, on the graphs of its forms (fxfuzz.core.inductor),
# each under the context compile_fx gives it (CallContext): the graph's fake mode set, and the
# fake example inputs, extra arguments and config patches its caller passes. Those whose pattern
# entries reassociate float arithmetic (attention and partial-softmax rewrites, binary folding,
# pad_mm, decomposed matmuls) are held to ``approximates``; on Inductor's forms every contract
# judges its graphs undifferentiated (contract.on_form). joint_graph_passes runs under
# ``config.fallback_random``: by default it swaps eager's random calls for Inductor's own
# generator, whose numbers differ by design; with it, Inductor promises eager's numbers.
_INDUCTOR_PASSES = "torch._inductor.fx_passes"
_JG, _PG, _FP = (f"{_INDUCTOR_PASSES}.{m}" for m in ("joint_graph", "post_grad", "freezing_patterns"))
_IN_FAKE_MODE = CallContext(fake_mode=True)
# Freezing runs once per graph, and what it makes (weights prepacked for mkldnn, read by ops
# fake tensors cannot run) is for Inductor's lowering alone: no caller hands it to freezing
# again, so its result is not judged on a second application.
_FROZEN_ONCE = dataclasses.replace(APPROXIMATES, idempotent=False)
_INDUCTOR_ROWS = (
    Registered("joint_graph_passes", f"{_CATALOGUE}:joint_graph_passes", APPROXIMATES, sources=(Source(_JG, mutate=False),), domain="inductor_joint", context=CallContext(fake_mode=True, config=(("fallback_random", True),)), calls=(f"{_JG}:joint_graph_passes",)),
    Registered("post_grad_passes", f"{_CATALOGUE}:post_grad_passes", APPROXIMATES, sources=(Source(_PG, mutate=False),), domain="inductor", context=CallContext("fake", fake_mode=True, args=(("is_inference", True),)), calls=(f"{_PG}:post_grad_passes",)),
    Registered("post_grad_passes_training", f"{_CATALOGUE}:post_grad_passes_training", APPROXIMATES, sources=(Source(_PG, mutate=False), Source("torch._functorch.partitioners", mutate=False)), domain="inductor_joint", context=CallContext("fake", fake_mode=True, args=(("is_inference", False),))),
    Registered("reinplace_inplaceable_ops", f"{_CATALOGUE}:reinplace_inplaceable_ops", REFINES, sources=(Source(f"{_INDUCTOR_PASSES}.reinplace", mutate=False),), domain="inductor", context=_IN_FAKE_MODE, calls=(f"{_INDUCTOR_PASSES}.reinplace:reinplace_inplaceable_ops",)),
    Registered("decompose_auto_functionalized", f"{_CATALOGUE}:decompose_auto_functionalized", REFINES, sources=(Source(_PG, ("decompose_auto_functionalized",), mutate=False),), domain="inductor", context=_IN_FAKE_MODE, calls=(f"{_PG}:decompose_auto_functionalized",)),
    Registered("freezing_passes", f"{_CATALOGUE}:freezing_passes", _FROZEN_ONCE, sources=(Source(_FP, mutate=False), Source(f"{_INDUCTOR_PASSES}.binary_folding", mutate=False)), domain="inductor_frozen", context=CallContext("fake", "aot_example_inputs", fake_mode=True, config=(("freezing", True),)), calls=(f"{_FP}:freezing_passes",)),
)  # fmt: skip


# functorch's partitioners, as AOTAutograd calls them on the joint graph (fxfuzz.core.catalogue.split):
# the forward and backward they return are joined as AOTAutograd's runtime runs them, and the
# result is judged as the joint graph it came from, its values and gradients exact. ``refines``:
# the joint's nodes no output needs are left out of both graphs, as a dead node is by DCE. Any
# other graph is not what they take (its outputs are no forward outputs and gradients): a run
# on another domain is refused.
_PARTITIONERS = "torch._functorch.partitioners"
_ON_JOINT = dataclasses.replace(REFINES, domains=("inductor_joint",))
_FUNCTORCH_ROWS = (
    Registered("default_partition", f"{_CATALOGUE}:default_partition", _ON_JOINT, sources=(Source(_PARTITIONERS, mutate=False),), domain="inductor_joint", context=_IN_FAKE_MODE, calls=(f"{_PARTITIONERS}:default_partition",)),
    Registered("min_cut_rematerialization_partition", f"{_CATALOGUE}:min_cut_rematerialization_partition", _ON_JOINT, sources=(Source(_PARTITIONERS, mutate=False),), domain="inductor_joint", context=CallContext(fake_mode=True, args=(("compiler", "inductor"),)), calls=(f"{_PARTITIONERS}:min_cut_rematerialization_partition",)),
)  # fmt: skip


def _pattern_row(name: str, pattern_list: str, domain: str, contract: PassContract = APPROXIMATES) -> Registered:
    """The row of one of Inductor's pattern lists (``module:attr`` or ``module:attr[i]``),
    applied on its own as its pass applies it, without the entries that lower to Inductor's
    IR (``fxfuzz.core.catalogue.PatternList``)."""
    indexed = pattern_list.endswith("]")
    return Registered(
        name,
        f"{_CATALOGUE}:patterns.{name}",
        contract,
        sources=(Source(pattern_list.partition(":")[0], mutate=False),),
        domain=domain,
        context=_IN_FAKE_MODE,
        calls=(pattern_list,) if indexed else (pattern_list, f"{pattern_list}.apply"),
    )


# Each PatternMatcherPass that joint_graph_passes, post_grad_passes and freezing_passes apply
# (post_grad's first list holds entries for GPUs alone: on CPU it is empty, and has no row).
# replace_random's list has none either: it exists to give random calls Inductor's numbers in
# place of eager's, which nothing can judge against eager; under ``fallback_random`` (which
# the joint_graph_passes row sets, to keep eager's numbers) no caller applies it.
_PATTERN_ROWS = (
    _pattern_row("joint_early_patterns", f"{_JG}:early_patterns", "inductor_joint"),
    _pattern_row("joint_patterns", f"{_JG}:patterns", "inductor_joint"),
    _pattern_row("joint_patterns_1", f"{_JG}:pass_patterns[1]", "inductor_joint"),
    _pattern_row("post_grad_patterns_1", f"{_PG}:pass_patterns[1]", "inductor"),
    _pattern_row("post_grad_patterns_2", f"{_PG}:pass_patterns[2]", "inductor"),
    *(
        _pattern_row(f"freezing_patterns_{i}", f"{_FP}:pass_patterns[{i}]", "inductor_frozen", _FROZEN_ONCE)
        for i in range(6)
    ),
    _pattern_row("binary_folding", f"{_FP}:binary_folding_pass", "inductor_frozen", _FROZEN_ONCE),
)

# pt2e quantization (torchao): prepare, one calibration call on the case's inputs, convert; the
# module form export hands it (fxfuzz.core.calls), judged for inference under ``quantizes``.
_PT2E = (
    Source("torchao.quantization.pt2e.quantize_pt2e", mutate=False),
    Source("torchao.quantization.pt2e.prepare", mutate=False),
    Source("torchao.quantization.pt2e.convert", mutate=False),
)
_PT2E_CALLS = tuple(
    f"torchao.quantization.pt2e.quantize_pt2e:{f}" for f in ("prepare_pt2e", "prepare_qat_pt2e", "convert_pt2e")
)
_PT2E_ROWS = (
    Registered("pt2e_x86", f"{_CATALOGUE}:pt2e_x86", QUANTIZES, sources=(*_PT2E, Source("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer", mutate=False)), context=CallContext("real"), calls=_PT2E_CALLS),
    Registered("pt2e_x86_qat", f"{_CATALOGUE}:pt2e_x86_qat", QUANTIZES, sources=(*_PT2E, Source("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer", mutate=False)), context=CallContext("real"), calls=_PT2E_CALLS),
    Registered("pt2e_xnnpack", f"{_CATALOGUE}:pt2e_xnnpack", QUANTIZES, sources=(*_PT2E, Source("torchao.testing.pt2e._xnnpack_quantizer", mutate=False)), context=CallContext("real"), calls=_PT2E_CALLS),
)  # fmt: skip

REGISTRY: dict[str, Registered] = {
    r.name: r
    for r in (
        *_STAGE_ROWS,
        # What torch.export itself runs on a pre-dispatch graph, in its order.
        _pipeline_row("export", EXPORT_STAGES),
        Registered("identity", "fxfuzz.core.passes:identity_pass", MEANING),
        *_TORCH_ROWS,
        *_PT2E_ROWS,
        *_INDUCTOR_ROWS,
        *_FUNCTORCH_ROWS,
        *_PATTERN_ROWS,
    )
}


@dataclass(frozen=True)
class Pass:
    """The pass under test: callable as ``(gm, signature) -> (gm, signature)`` whatever the
    shape of what it wraps, with its identity.

    ``spec`` is what the user named (a registered name or an import spec); ``target`` the
    import spec it resolved to; ``contract`` what the pass promises, and ``contract_source``
    where that came from (one of ``CONTRACT_SOURCES``), for the report to say.
    """

    spec: str
    fn: PassFn
    contract: PassContract
    target: str = ""
    parts: tuple[Pass, ...] = ()  # a pipeline's passes, in the order they run
    # False for a pass never handed the signature (fxfuzz.core.shapes): it gets one carried
    # by position, and cannot be held to names it never saw.
    takes_signature: bool = True
    contract_source: str = "registered"

    def __call__(self, gm: Any, graph_signature: Any) -> tuple[Any, Any]:
        return call_out(self.fn, gm, graph_signature)

    @property
    def registered(self) -> Registered | None:
        return REGISTRY.get(self.spec)


def contract_of(pass_fn: Any) -> PassContract:
    """A pass's contract: a Pass's own, a sequence's parts' united, a plain callable's
    ``fxfuzz_contract`` declaration (a contract or its name), or ``meaning`` (a pass fxfuzz does
    not know promises its observable behaviour, nothing more). PassSpecError, one line, for a
    declaration that is neither."""
    if isinstance(pass_fn, Pass):
        return pass_fn.contract
    if isinstance(pass_fn, Sequential):
        return union([contract_of(p) for p in pass_fn.passes])
    declared = getattr(pass_fn, "fxfuzz_contract", MEANING)
    if isinstance(declared, PassContract):
        return declared
    if isinstance(declared, str) and declared in CONTRACTS:
        return CONTRACTS[declared]
    raise PassSpecError(
        f"{getattr(pass_fn, '__qualname__', type(pass_fn).__name__)} declares fxfuzz_contract = {declared!r}: "
        f"expected a contract name ({', '.join(CONTRACTS)}) or a PassContract"
    )


def _contract_source(fn: Any) -> str:
    return "declared" if hasattr(fn, "fxfuzz_contract") else "default"


def reacts_to_of(pass_fn: Any) -> tuple[str, ...]:
    """The node kinds ``pass_fn`` reacts to: a registered pass's row's, a pipeline's parts'
    together, else a plain callable's ``fxfuzz_reacts_to`` declaration; () for a pass that
    declares nothing (generation then keeps its mix)."""
    if isinstance(pass_fn, Pass):
        if pass_fn.registered is not None:
            return pass_fn.registered.reacts_to
        if pass_fn.parts:
            return tuple(dict.fromkeys(k for part in pass_fn.parts for k in reacts_to_of(part)))
        pass_fn = pass_fn.fn
    return tuple(getattr(pass_fn, "fxfuzz_reacts_to", ()))


def domain_of(pass_fn: Any) -> str | None:
    """The input space a registered pass is fuzzed on (its row's ``domain``; a pipeline's,
    ``pipeline_domain`` of its parts'); None for a pass fxfuzz does not know."""
    if isinstance(pass_fn, Pass):
        if pass_fn.registered is not None:
            return pass_fn.registered.domain
        if pass_fn.parts:
            return pipeline_domain([domain_of(p) for p in pass_fn.parts])
    return None


def default_domain(pass_fn: Any, fallback: str) -> str:
    """The domain a command draws from when ``--domain`` is not given: the pass's own when it
    is not the export domain (aten passes cannot take export graphs), else ``fallback``; the
    first its contract judges where that one is not (``PassContract.domains``)."""
    own = domain_of(pass_fn)
    domain = own if own is not None and own != "export" else fallback
    judged = contract_of(pass_fn).domains
    return domain if not judged or domain in judged else judged[0]


def generation_kinds(pass_fn: Any, contract: PassContract | None = None) -> tuple[str, ...]:
    """The node kinds generation draws for ``pass_fn``: its own (``reacts_to_of``), else those
    of the contract it is held to (``contract``, the ``--contract`` given, else its own:
    ``contract_of``). A pipeline of passes fxfuzz loaded asks this of each part, so that
    ``set_grad+dce`` draws for both."""
    if isinstance(pass_fn, Pass) and pass_fn.parts and pass_fn.registered is None:
        return tuple(dict.fromkeys(k for part in pass_fn.parts for k in generation_kinds(part, contract)))
    return reacts_to_of(pass_fn) or (contract or contract_of(pass_fn)).reacts_to


def generation_ambient(pass_fn: Any, contract: PassContract | None = None) -> bool | None:
    """The grad mode generation traces cases under for ``pass_fn`` held to ``contract`` (the
    ``--contract`` given, else its own): off for a contract whose graphs run with grad off
    (``differentiated`` False), so that the toggles export records restore the mode they run
    under, as in a model exported for inference; else drawn (None)."""
    return None if (contract or contract_of(pass_fn)).differentiated else False


@dataclass(frozen=True)
class Sequential:
    """Passes applied one after the other, each to what the one before returned."""

    passes: tuple[PassFn, ...]

    def __call__(self, gm: Any, graph_signature: Any) -> tuple[Any, Any]:
        for pass_fn in self.passes:
            result = call_out(pass_fn, gm, graph_signature)
            if not (isinstance(result, tuple) and len(result) == 2):
                return result  # not a pass result: the oracles report what came back
            gm, graph_signature = result
        return gm, graph_signature


def import_spec(spec: str) -> str:
    """The import spec (``module:callable`` or ``file.py:callable``) a spec names; for a
    pipeline, its parts' import specs joined by ``+``."""
    if spec in REGISTRY:
        spec = REGISTRY[spec].spec
    if PIPE in spec:
        return PIPE.join(import_spec(part) for part in spec.split(PIPE))
    return spec


def _loaded_from(path: str) -> Any:
    """The module already executed from ``path`` in this process, under any name, if the file
    is unchanged since."""
    real = os.path.realpath(path)
    stamp = os.stat(real).st_mtime_ns
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file) == real and getattr(module, "__fxfuzz_stamp__", stamp) == stamp:
            return module
    return None


def _import_module(where: str) -> Any:
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise PassSpecError(f"pass file not found: {where}")
        loaded = _loaded_from(where)
        if loaded is not None:
            # Executing a file twice would register its custom operators twice, which torch
            # refuses; Python's own import runs a module once, and so does this.
            return loaded
        name = "fxfuzz_pass_" + os.path.splitext(os.path.basename(where))[0]
        spec = importlib.util.spec_from_file_location(name, where)
        if spec is None or spec.loader is None:
            raise PassSpecError(f"cannot load {where} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        module.__fxfuzz_stamp__ = os.stat(os.path.realpath(where)).st_mtime_ns  # type: ignore[attr-defined]
        try:
            spec.loader.exec_module(module)
        except BaseException as e:
            del sys.modules[name]  # half executed: never reused
            if not isinstance(e, Exception):
                raise  # it would end the process: exits_refused says so
            raise PassSpecError(f"importing {where} failed: {type(e).__name__}: {e}") from None
        return module
    try:
        return importlib.import_module(where)
    except Exception as e:
        raise PassSpecError(f"cannot import module {where!r}: {type(e).__name__}: {e}") from None


def resolve_attr(spec: str, what: str = "pass") -> Any:
    """The object ``pkg.module:attr`` or ``file.py:attr`` names (``attr`` may be dotted);
    PassSpecError with one line, naming ``what`` was asked for, if it cannot be had."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        noun = "callable" if what == "pass" else "attribute"
        raise PassSpecError(f"malformed {what} spec {spec!r}: expected pkg.module:{noun} or file.py:{noun}")
    with exits_refused(spec, PassSpecError):  # importing runs the user's code, and so may getattr
        obj: Any = _import_module(where)
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise PassSpecError(f"{where} has no attribute {attr!r}")
            obj = getattr(obj, part)
    return obj


# Separates an import spec from the shape a user named for it (``--pass-shape``): ``file.py:fn@graph``.
SHAPE_MARK = "@"


def with_shape(spec: str, shape: str | None) -> str:
    """``spec`` with the shape ``--pass-shape`` named for it (``fxfuzz.core.shapes.GIVEN_SHAPES``)
    carried in it, so that workers, reports and repros call the pass the same way; PassSpecError
    for a registered name or a pipeline, whose parts' shapes are their own."""
    if shape is None:
        return spec
    if shape not in GIVEN_SHAPES:
        raise PassSpecError(f"unknown pass shape {shape!r}: expected one of {', '.join(GIVEN_SHAPES)}")
    if not shapeable(spec):
        raise PassSpecError(f"--pass-shape names how to call one pkg.module:callable or file.py:callable, not {spec!r}")
    return f"{spec}{SHAPE_MARK}{shape}"


def shapeable(spec: str) -> bool:
    """Whether ``--pass-shape`` may name how to call ``spec``: one import spec, not a registered
    name or a pipeline, whose parts' shapes are their own."""
    return spec not in REGISTRY and PIPE not in spec and ":" in spec


def _given_shape(target: str) -> tuple[str, str | None]:
    """An import spec and the shape named for it after ``SHAPE_MARK`` (None: none named)."""
    where, mark, shape = target.rpartition(SHAPE_MARK)
    return (where, shape) if mark and shape in GIVEN_SHAPES else (target, None)


def load_pass(spec: str = "set_grad", contract: PassContract | None = None) -> Pass:
    """The Pass that ``spec`` names, in fxfuzz's form whatever its shape.

    ``contract`` (``--contract``) wins; else registered names carry their own contract, and
    other specs the callable's ``fxfuzz_contract`` declaration, else ``meaning``. Raises PassSpecError with a
    one-line message for anything unusable.
    """
    if not spec or not isinstance(spec, str):
        raise PassSpecError("empty pass spec; expected a name, pkg.module:callable or file.py:callable")
    pipeline = REGISTRY[spec].spec if spec in REGISTRY else spec
    if PIPE in pipeline:
        return _load_pipeline(spec, pipeline.split(PIPE), contract)
    target, given = _given_shape(import_spec(spec))
    if ":" not in target:
        raise PassSpecError(
            f"unknown pass {spec!r}: expected one of {', '.join(REGISTRY)}, pkg.module:callable or file.py:callable"
        )
    rows = [r.name for r in REGISTRY.values() if target in r.calls]
    if rows and given is None:
        # Its own parameters may not say so, but named alone it would miss what its caller hands it.
        raise PassSpecError(
            f"{target} is called with what its caller hands it besides the graph: run it by its catalogue row "
            f"{' or '.join(rows)} (fxfuzz passes)"
        )
    try:
        with exits_refused(target, PassSpecError):  # a PassBase class is built: the user's code runs
            obj = resolve_attr(target, "pass")
            shape, fn = shape_of(obj) if given is None else shape_given(obj, given)
    except NoShape as e:
        raise PassSpecError(f"{target} {e}") from None
    pass_fn, takes = adapt(shape, fn), shape.takes_signature
    if contract is not None:
        return Pass(spec, pass_fn, contract, target, takes_signature=takes, contract_source="given")
    if spec in REGISTRY:
        return Pass(spec, pass_fn, REGISTRY[spec].contract, target, takes_signature=takes)
    return Pass(spec, pass_fn, contract_of(fn), target, takes_signature=takes, contract_source=_contract_source(fn))


def _load_pipeline(spec: str, names: list[str], contract: PassContract | None) -> Pass:
    """The Pass running ``names`` in sequence; its contract is the union of theirs."""
    if any(not n.strip() for n in names):
        raise PassSpecError(f"malformed pass pipeline {spec!r}: an empty part between '+' signs")
    parts = []
    for name in names:
        try:
            parts.append(load_pass(name.strip(), contract))
        except PassSpecError as e:
            raise PassSpecError(f"in pass pipeline {spec!r}: {e}") from None
    return Pass(
        spec,
        Sequential(tuple(parts)),
        union([p.contract for p in parts]),
        PIPE.join(p.target for p in parts),
        tuple(parts),
        all(p.takes_signature for p in parts),
        # The least settled of its parts' sources: a default anywhere is what the report must say.
        max((p.contract_source for p in parts), key=CONTRACT_SOURCES.index),
    )
