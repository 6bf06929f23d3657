"""The short program: a repro of plain torch a PyTorch maintainer reads at a glance.

``short_program`` writes the minimized graph as ``torch.fx.Graph`` calls (nested graphs of
higher-order ops and tensor attributes included, built into a ``GraphModule`` from a dict of
its attributes), the example inputs as tensor literals, the pass called as its caller calls
it (``PARTS``: the graph module, and export's graph signature where the pass takes one), and
the one check the finding is about (``CHECKS``), on public APIs and without any of fxfuzz:
``python <bucket>.py`` exits 1 while the bug is there and 0 once fixed. It is written where
the pass is one of ``PARTS`` (or a pipeline of them), the finding's kind one of ``CHECKS``,
the graph calls only torch's operators (no custom ones: their definitions are fxfuzz's) and
the program comes to at most ``MAX_LINES`` lines; every other bucket keeps the full script
(``fxfuzz.repro.files``). Everything taken from the data (names, values, messages) is
written with ``repr``; a name written as code must be an ASCII identifier (``code_name``).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any

from fxfuzz.core.errors import SerializeError
from fxfuzz.core.passes import PIPE, REGISTRY
from fxfuzz.repro.code import NAME, Code, code_name
from fxfuzz.repro.judged import judged_contract

MAX_LINES = 40  # a short program is at most this many lines, or it is not written
# The operator namespaces a short program calls: torch's own. A custom operator's definition is
# its author's (fxfuzz's own are pasted into the full script only).
_NAMESPACES = frozenset({"aten", "prims", "higher_order"})


@dataclass(frozen=True)
class Part:
    """A pass as its caller calls it, on ``new`` (a copy of ``gm``): the imports, the setup its
    caller does once (left out of a crash's program when it is what gets past the crash), the
    statements, and whether it takes export's graph signature ``sig`` or reads ``meta['val']``
    (written by ``FakeTensorProp``, as tracing would have). ``kinds``, where given, are the
    only findings it has a short program for. ``exports``: its caller exports the module
    itself, so the case's parameters and buffers are the module's attributes, not inputs (a
    quantizer annotates a linear layer whose weight is a parameter, not one it is handed)."""

    imports: tuple[str, ...]
    code: tuple[str, ...]
    signature: bool = False
    metas: bool = False
    setup: tuple[str, ...] = ()
    kinds: frozenset[str] | None = None
    exports: bool = False


_DCE = ("new.graph.eliminate_dead_code()", "new.recompile()")
_EXPORT_PASSES = "torch._export.passes"
_PT2E = "from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e"
_X86 = "from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import X86InductorQuantizer, get_default_x86_inductor_quantization_config as config"
_PT2E_KINDS = frozenset({"pass_raised", "state_leak"})


def _pt2e(prepare: str, quantizer: str) -> tuple[str, ...]:
    """torchao's flow as its tutorials run it: the module torch.export gives, prepared, one
    calibration call, converted."""
    return (
        f"new = {prepare}(torch.export.export(new, tuple(inputs)).module(), {quantizer})",
        "with torch.random.fork_rng(): new(*inputs)  # one calibration call, the caller's own draws kept",
        "new = convert_pt2e(new)",
    )


PARTS: dict[str, Part] = {
    "cse": Part(
        ("from torch.fx.passes.dialect.common.cse_pass import CSEPass, get_CSE_banned_ops",),
        ("new = CSEPass(get_CSE_banned_ops())(new).graph_module",),
    ),
    "dce": Part((), _DCE),
    "set_grad": Part(
        (f"from {_EXPORT_PASSES}.replace_set_grad_with_hop_pass import replace_set_grad_with_hop_pass",),
        ("new, sig = replace_set_grad_with_hop_pass(new, sig)",),
        signature=True,
        metas=True,
    ),
    "autocast": Part(
        (f"from {_EXPORT_PASSES}.replace_autocast_with_hop_pass import replace_autocast_with_hop_pass",),
        ("new, sig = replace_autocast_with_hop_pass(new, sig)",),
        signature=True,
        metas=True,
    ),
    "split_const_subgraphs": Part(
        ("from torch.fx.experimental.const_fold import split_const_subgraphs",), ("new = split_const_subgraphs(new)",)
    ),
    "constant_folding": Part(
        (f"from {_EXPORT_PASSES}.constant_folding import constant_fold", "import torch.ao.quantization.fx._decomposed"),
        ("constant_fold(new)",),
        metas=True,
        # What pt2e (its caller) has registered: without it the pass raises (a known crash).
        setup=('LIB = torch.library.Library("pt2e_quant", "FRAGMENT")', 'LIB.define("dequantize_affine(Tensor input) -> Tensor")'),
    ),
    "inductor_constant_fold": Part(
        ("from torch._inductor.constant_folding import constant_fold",), ("constant_fold(new)",), metas=True
    ),
    "lift_constants": Part(
        (f"from {_EXPORT_PASSES}.lift_constants_pass import ConstantAttrMap, lift_constants_pass",),
        (
            "constants = ConstantAttrMap()  # the module's tensor attributes, as export gathers them",
            "[constants.add(getattr(new, n.target), n.target) for n in new.graph.find_nodes(op='get_attr')]",
            "lift_constants_pass(new, sig, constants)",
        ),
        signature=True,
        metas=True,
        kinds=frozenset({"pass_raised"}),  # its result takes the lifted constants as inputs
    ),
    "remove_noop_ops": Part(
        ("from torch._inductor.fx_passes.post_grad import remove_noop_ops",),
        ("remove_noop_ops(new.graph)", "new.recompile()"),
        metas=True,
    ),
    "pt2e_x86": Part(
        (_PT2E, _X86), _pt2e("prepare_pt2e", "X86InductorQuantizer().set_global(config())"), kinds=_PT2E_KINDS, exports=True
    ),
    "pt2e_x86_qat": Part(
        (_PT2E, _X86),
        _pt2e("prepare_qat_pt2e", "X86InductorQuantizer().set_global(config(is_qat=True))"),
        kinds=_PT2E_KINDS,
        exports=True,
    ),
    "pt2e_xnnpack": Part(
        (_PT2E, "from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config as config"),
        _pt2e("prepare_pt2e", "XNNPACKQuantizer().set_global(config())"),
        kinds=_PT2E_KINDS,
        exports=True,
    ),
}  # fmt: skip

# What ``observe`` records of one call of a graph module: its outputs (values, dtype,
# requires_grad, grad_fn, which are one tensor or an input), the inputs after the call, and
# the state it leaves (grad mode, autocast, the random generator).
_OBSERVE = """def observe(m):  # what one call shows: its outputs, the inputs after it, the state it leaves{grads_doc}
    args = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    torch.manual_seed(0), torch.set_grad_enabled(AMBIENT_GRAD)  # the same random draws; the grad mode the graph runs under
    try:
        out = list(m(*args))
    except Exception as e:
        return f"raised {{type(e).__name__}}: {{e}}"[:300]{grads}
    return [(o.detach().double().round(decimals=4).tolist(), o.dtype, o.requires_grad, o.grad_fn is not None, [o is p for p in out + args]) if torch.is_tensor(o) else o for o in out], [a.tolist() for a in args], [torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.rand(1).item()]{grads_out}
"""
_GRADS = """
    wanted, leaves = [o for o in out if torch.is_tensor(o) and o.requires_grad], [a for a in args if a.requires_grad]
    try:
        grads = [g if g is None else g.double().round(decimals=4).tolist() for g in torch.autograd.grad([o.sum() for o in wanted], leaves, allow_unused=True)] if wanted and leaves else []
    except RuntimeError as e:
        grads = f"backward raised {type(e).__name__}\""""
_JVP = """def observe(m):  # whether forward-mode AD through one call raises
    args = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    torch.set_grad_enabled(AMBIENT_GRAD)
    try:
        with torch.autograd.forward_ad.dual_level():
            m(*[torch.autograd.forward_ad.make_dual(a, torch.ones_like(a)) if a.is_floating_point() else a for a in args])
    except Exception as e:
        return f"raised {type(e).__name__}"
    return "ran"
"""
_SAVED = """def observe(m):  # the tensors autograd saves for backward during one call
    args, packed = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs], []
    torch.set_grad_enabled(AMBIENT_GRAD)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(f"{list(t.shape)}:{t.dtype}") or t, lambda t: t):
        try:
            m(*args)
        except Exception as e:
            return f"raised {type(e).__name__}"
    return sorted(packed)
"""
# How the program ends: its verdict, after ``new = run_pass(gm)``. A refinement may do anything
# where the original raised.
_COMPARE = """before, after = {0}, {1}
print(FINDING, "\\n{2}:", before, "\\n{3}:", after)
sys.exit(0 if repr(before) == repr(after) else 1)
"""
_EQUIVALENCE = """before, after = [observe(gm), observe(gm)], [observe(new), observe(new)]  # two calls each: every call behaves alike
print(FINDING, "\\noriginal:   ", before, "\\ntransformed:", after)
sys.exit(0 if repr(before) == repr(after) or REFINES and isinstance(before[0], str) else 1)  # a refinement may do anything where the original raised
"""
_RAN = 'print("the pass ran: fixed")\n'
_CALLED = "torch.set_grad_enabled(AMBIENT_GRAD)\nnew(*[t.detach().clone().requires_grad_(t.requires_grad) for t in inputs])  # a call, as its caller makes\n"
# A check by finding kind: (its observe, the lines after the pass ran).
_CLEANED = "cleaned = copy.deepcopy(new)  # the clean-up any later stage may do\ncleaned.graph.eliminate_dead_code()\ncleaned.recompile()\n"
_USERS = """bad = [(n.name, u.name) for m in new.modules() if isinstance(m, fx.GraphModule) for u in m.graph.nodes for n in u.all_input_nodes if u not in n.users]
print(FINDING, "\\nreaders missing from their input's users:", bad)
sys.exit(1 if bad else 0)
"""
_TOGGLES = (
    "(torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast)"
)
_LEFTOVER = f"""left = [n.name for m in new.modules() if isinstance(m, fx.GraphModule) for n in m.graph.nodes if n.target in {_TOGGLES}]
print(FINDING, "\\ntoggles left in place:", left)
sys.exit(1 if left else 0)
"""
_RNG = """drawn = torch.rand(4)  # the caller's next draw, after the pass
torch.manual_seed(0)
expected = torch.rand(4)
print(FINDING, "\\ndrawn after the pass:", drawn, "\\nwithout it:", expected)
sys.exit(0 if torch.equal(drawn, expected) else 1)
"""
_EQUIVALENCE_KINDS = {
    "value_mismatch", "requires_grad_mismatch", "grad_fn_mismatch", "aliasing_mismatch", "raises_differently",
    "output_count_mismatch", "grad_mode_leak", "meta_mismatch", "identity_mismatch", "autocast_state_leak",
    "rng_state_mismatch", "value_kind_mismatch",
}  # fmt: skip
_GRADIENT_KINDS = {
    "grad_presence_mismatch",
    "grad_value_mismatch",
    "backward_raises_differently",
    "tangent_value_mismatch",
}
CHECKS: dict[str, tuple[str, str]] = {
    **{k: ("observe", _EQUIVALENCE) for k in _EQUIVALENCE_KINDS},
    **{k: ("grads", _EQUIVALENCE) for k in _GRADIENT_KINDS},
    "jvp_raises_differently": ("jvp", _EQUIVALENCE),
    "saved_tensors_mismatch": ("saved", _EQUIVALENCE),
    "pass_raised": ("", _RAN),
    "lint_failed": ("", "new.graph.lint()  # raises while the bug is there\n" + _RAN),
    "cleanup_failed": ("", _CALLED + "copy.deepcopy(new)  # raises while the bug is there\n" + _RAN),
    "second_application_raised": ("", "run_pass(new)  # the second application raises while the bug is there\n" + _RAN),
    "def_use_inconsistent": ("", _USERS),
    "leftover_call": ("", _LEFTOVER),
    "rerun_changes_meaning": ("observe", _COMPARE.format("observe(new)", "observe(new)", "first run ", "second run")),
    "dead_code_elimination_changes_meaning": (
        "observe",
        _CLEANED + _COMPARE.format("observe(new)", "observe(cleaned)", "result ", "cleaned"),
    ),
    "state_leak": ("", _RNG),
}
SHORT_KINDS = frozenset(CHECKS)


_CALLER = "called as its caller calls it"  # the line where the pass's call begins


def is_short(source: str) -> bool:
    """Whether a repro .py is a short program (it begins with its ``FINDING``), not the full script."""
    return source.startswith("FINDING = ")


def _variable(name: str, taken: set[str]) -> str:
    var = name if NAME.fullmatch(name) and not keyword.iskeyword(name) else "n_" + re.sub(r"[^0-9A-Za-z_]", "_", name)
    while var in taken or keyword.iskeyword(var):
        var += "_"
    taken.add(var)
    return var


class _Writer(Code):
    """The short program's graph and input literals; ``taken`` holds every variable name in use."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes = False  # whether a graph reads a tensor attribute
        self.taken = {
            "g", "gm", "new", "sig", "inputs", "torch", "fx", "sys", "copy", "operator", "observe", "run_pass",
            "signature", "before", "after", "excused", "cleaned", "bad", "left", "drawn", "expected", "gs", "FINDING", "AMBIENT_GRAD",
            "REFINES", "LIB", "constants", "FakeTensorProp",
        }  # fmt: skip

    def target(self, name: str) -> str:
        ns, sep, _ = name.partition("::")
        if sep and ns not in _NAMESPACES:
            raise SerializeError(f"operator {name!r} is not torch's own")
        return super().target(name)

    def literal(self, t: dict[str, Any]) -> str:
        """A stored tensor as a literal: ``torch.tensor(values)`` reshaped, requiring grad as it did."""
        if "value" in t:
            return self.arg(t["value"], {})
        values = self.arg(t["values"], {})
        dtype = self.arg({"dtype": t["dtype"]}, {})
        grad = ".requires_grad_()" if t["requires_grad"] else ""
        return f"torch.tensor({values}, dtype={dtype}).reshape({t['shape']!r}){grad}"

    def graph(
        self,
        g: dict[str, Any],
        graph_var: str,
        module_var: str,
        out: list[str],
        owned: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """Append the lines that build ``g`` as ``graph_var`` and its module as ``module_var``
        (nested graphs first). ``owned`` placeholders (by name: their target and the literal
        of their value) are read as the module's attributes instead."""
        owned = owned or {}
        attrs: dict[str, str] = dict(owned.values())
        for target, sub in g.get("submodules", {}).items():
            var = _variable(re.sub(r"[^0-9A-Za-z_]", "_", target), self.taken)
            self.graph(sub, _variable("g_" + var, self.taken), var, out)
            attrs[target] = var
        for target, t in g.get("tensors", {}).items():
            attrs[target] = self.literal(t)
            self.attributes = True
        if not attrs and (traced := self.expression(g)) is not None:
            out.append(f"{module_var} = fx.symbolic_trace({traced})")
            return
        out.append(f"{graph_var} = fx.Graph()")
        names: dict[str, str] = {}
        for n in g["nodes"]:
            op = n["op"]
            if op == "output":
                (result,) = n["args"]["tuple"]
                out.append(f"{graph_var}.output({self.arg(result, names)})")
                continue
            var = _variable(n["name"], self.taken)
            if op == "placeholder" and n["name"] in owned:
                out.append(f"{var} = {graph_var}.get_attr({owned[n['name']][0]!r})")
            elif op == "placeholder":
                out.append(f"{var} = {graph_var}.placeholder({n['name']!r})")
            elif op == "get_attr":
                out.append(f"{var} = {graph_var}.get_attr({n['target']!r})")
            elif op == "call_function":
                kwargs = self.arg(n["kwargs"], names)
                call = f"{graph_var}.call_function({self.target(n['target'])}, {self.arg(n['args'], names)}"
                out.append(f"{var} = {call}{', ' + kwargs if kwargs != '{}' else ''})")
            else:
                raise SerializeError(f"a {op} node")
            names[n["name"]] = var
        root = "{" + ", ".join(f"{t!r}: {v}" for t, v in attrs.items()) + "}" if attrs else "torch.nn.Module()"
        out.append(f"{module_var} = fx.GraphModule({root}, {graph_var})")

    def expression(self, g: dict[str, Any]) -> str | None:
        """A nested graph of calls each read once as a lambda whose ``fx.symbolic_trace`` is the
        graph (one node per call); None for any other."""
        params: dict[str, str] = {}
        exprs: dict[str, str] = {}
        reads: dict[str, int] = {}
        result = None
        for n in g["nodes"]:
            for ref in re.findall(r"'node': '([^']*)'", repr((n["args"], n["kwargs"]))):
                reads[ref] = reads.get(ref, 0) + 1
        for n in g["nodes"]:
            if n["op"] == "placeholder":
                params[n["name"]] = exprs[n["name"]] = _variable(n["name"], self.taken)
            elif n["op"] == "call_function" and "::" in n["target"] and reads.get(n["name"], 0) <= 1:
                args = [self.arg(a, exprs) for a in n["args"]["tuple"]]
                args += [f"{code_name('', k, 'keyword')}={self.arg(v, exprs)}" for k, v in n["kwargs"]["dict"]]
                exprs[n["name"]] = f"{self.target(n['target'])}({', '.join(args)})"
            elif n["op"] == "output":
                (out,) = n["args"]["tuple"]
                result = self.arg(out, exprs)
            else:
                return None
        unread = [name for name in exprs if name not in params and not reads.get(name)]
        if result is None or unread:
            return None
        return f"lambda {', '.join(params.values())}: {result}"

    def signature(self, sig: dict[str, Any]) -> str:
        """export's graph signature of the case, as one expression."""
        ins = ", ".join(
            f"gs.InputSpec({code_name('gs.InputKind.', s['kind'], 'input kind')}, {self.spec_argument(s['arg'])}, {s['target']!r}, {s['persistent']!r})"
            for s in sig["inputs"]
        )
        outs = ", ".join(
            f"gs.OutputSpec({code_name('gs.OutputKind.', s['kind'], 'output kind')}, {self.spec_argument(s['arg'])}, {s['target']!r})"
            for s in sig["outputs"]
        )
        return f"gs.ExportGraphSignature([{ins}], [{outs}])"


def _owned(sig: dict[str, Any], literals: list[str]) -> dict[str, tuple[str, str]]:
    """The placeholders of the case's parameters and buffers, by name: their target and the
    literal of their value (a parameter's as ``torch.nn.Parameter``)."""
    owned = {}
    for spec, literal in zip(sig["inputs"], literals, strict=True):
        if spec["kind"] in ("PARAMETER", "BUFFER"):
            value = f"torch.nn.Parameter({literal})" if spec["kind"] == "PARAMETER" else literal
            owned[spec["arg"]["name"]] = (code_name("", spec["target"], "attribute"), value)
    return owned


def _parts(spec: str) -> list[Part] | None:
    """The parts of a pass or pipeline (a registered pipeline's row names them), or None."""
    names = REGISTRY[spec].spec.split(PIPE) if spec in REGISTRY and spec not in PARTS else spec.split(PIPE)
    return [PARTS[n] for n in names] if all(n in PARTS for n in names) else None


def short_program(doc: dict[str, Any], json_name: str = "") -> str | None:
    """The short program of a repro document (``fxfuzz.repro.files.repro_document``), or None
    where its case, pass or finding is not one a short program shows (module doc).
    ``json_name`` is the document's file name, for the line that names the full check."""
    case, finding, spec = doc["case"], doc["finding"], doc["pass"]
    parts, kind = _parts(spec), finding.get("kind")
    if parts is None or kind not in CHECKS or doc.get("device", "cpu") != "cpu" or case.get("custom_ops"):
        return None
    if any(p.kinds is not None and kind not in p.kinds for p in parts):
        return None
    contract = judged_contract(doc)
    writer = _Writer()
    graph: list[str] = []
    try:
        # A result never differentiated (post_grad) is run as its caller runs it: grad off.
        differentiated = contract["differentiated"]
        literals = [
            writer.literal(t if differentiated or "value" in t else t | {"requires_grad": False})
            for t in case["inputs"]
        ]
        owned = _owned(case["signature"], literals) if any(p.exports for p in parts) else {}
        writer.graph(case["graph"], "g", "gm", graph, owned)
        names = [s["arg"].get("name") for s in case["signature"]["inputs"]]
        inputs = ", ".join(v for name, v in zip(names, literals, strict=True) if name not in owned)
        sig = writer.signature(case["signature"]) if any(p.signature for p in parts) else None
    except (SerializeError, KeyError, TypeError, ValueError):  # a name or a form the short program does not write
        return None
    observe_kind, verdict = CHECKS[kind]
    observe = {
        "": "",
        "observe": _OBSERVE.format(grads_doc="", grads="", grads_out=""),
        "grads": _OBSERVE.format(grads_doc=", input gradients", grads=_GRADS, grads_out=", grads"),
        "jvp": _JVP,
        "saved": _SAVED,
    }[observe_kind]
    modules = sorted(
        {"copy", "sys", "torch", "torch.fx as fx"} | {m for m in writer.imports if m.partition(".")[0] != "torch"}
    )
    metas = any(p.metas for p in parts)
    ambient = bool(case["ambient_grad"]) and differentiated
    message = f"{doc['bucket']}: [{finding['oracle']}/{kind}] {finding.get('message', '')}"
    full = f"fxfuzz repro {json_name}" if json_name else "fxfuzz repro on its .json"
    # With tensor attributes, the fake mode meets real tensors: it is told it may.
    mode = ", torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True)" if writer.attributes else ""

    def call(head: str, indent: str, tail: str, use: str) -> list[str]:
        """The pass's call, in a function (``head``, ``indent``, ``tail``, ``use``) or inline."""
        body = ["new = copy.deepcopy(gm)", *([f"sig = {sig}"] if sig else []), *[s for p in parts for s in p.code]]
        body[0] += f"  # {spec}, {_CALLER}"
        return [head, *[indent + s for s in body], tail, use]

    lines = [
        f"FINDING = {message[:500]!r}  # `python THIS_FILE`: exit 1 while the pass shows the bug, 0 once fixed; every check: `{full}`",
        "import " + ", ".join([*modules, *(["torch.export.graph_signature as gs"] if sig else []), *(["torch.fx.passes.fake_tensor_prop"] if metas else [])]),
        *sorted({i for p in parts for i in p.imports}),
        *graph,
        f"inputs, AMBIENT_GRAD, REFINES = [{inputs}], {ambient!r}, {contract['refines']!r}  # the grad mode the graph runs under; whether the pass's contract refines",
        *(
            [f"with torch.set_grad_enabled(AMBIENT_GRAD): torch.fx.passes.fake_tensor_prop.FakeTensorProp(gm{mode}).propagate(*inputs)  # meta['val'], as tracing writes it"]
            if metas
            else []
        ),
        *[s for p in parts if kind != "pass_raised" for s in p.setup],
        *(["torch.manual_seed(0)  # the caller's random generator, before the pass"] if kind == "state_leak" else []),
        *(call("def run_pass(gm):", "    ", "    return new", "new = run_pass(gm)") if kind == "second_application_raised" else call("", "", "", "")),
    ]  # fmt: skip
    source = "\n".join(line for line in lines if line) + "\n" + observe + verdict
    return source if source.count("\n") <= MAX_LINES else None
