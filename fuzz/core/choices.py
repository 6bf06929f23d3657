"""The values users choose among on the command line and in the API. Imports nothing heavy,
so ``fxfuzz --help`` and the pytest plugin can offer them without importing torch."""

from __future__ import annotations

# export: pre-dispatch graphs as torch.export records them (grad and autocast toggles);
# adversarial: those and graphs export never records; aten: export's graphs lowered after
# dispatch (fxfuzz.strategies.forms), what AOTAutograd's and Inductor's passes receive;
# functional: export's graphs without in-place updates, for passes that require a functional
# graph (torch.fx's CSEPass says it "cannot be safely applied" to any other) and so must not be
# judged on one; the Inductor forms (fxfuzz.core.inductor): export's graphs as torch.compile's
# Inductor backend hands them to its passes, for inference, as a joint forward and backward
# graph, and frozen (weights as get_attr constants).
INDUCTOR_FORMS = ("inductor", "inductor_joint", "inductor_frozen")
DOMAINS = ("export", "adversarial", "aten", "functional", *INDUCTOR_FORMS)
# The domains "both" draws each case from (shrinking toward export): the pre-dispatch ones a
# grad-mode pass takes. A pass that runs after dispatch names "aten" itself.
BOTH = ("export", "adversarial")
# What a user may ask for: one domain, or "both"; a case always records the domain it was
# drawn from.
DOMAIN_CHOICES = (*DOMAINS, "both")
# The contracts a pass may be held to by name (fxfuzz.core.contract.CONTRACTS holds them).
CONTRACT_NAMES = ("meaning", "refines", "post_grad", "approximates", "quantizes", "functional", "set_grad", "autocast")
# Where a pass's contract came from: its registry row, the caller (``--contract``), the
# callable's own ``fxfuzz_contract`` declaration, or the default for a pass fxfuzz does not know.
CONTRACT_SOURCES = ("registered", "given", "declared", "default")

# What each choice means, in the words every --help shows (the CLI's and the pytest plugin's:
# tests/cli/test_options.py keeps them to these tables).
DOMAIN_MEANINGS = {
    "export": "pre-dispatch graphs as torch.export records them",
    "adversarial": "those and graphs export never records",
    "aten": "export's graphs lowered after dispatch",
    "functional": "export's graphs without in-place updates",
    "inductor": "what torch.compile hands Inductor's inference passes",
    "inductor_joint": "Inductor's joint forward and backward graphs",
    "inductor_frozen": "Inductor's graphs with frozen weights",
    "both": "each case from export or adversarial",
}
CONTRACT_MEANINGS = {
    "meaning": "observable behaviour, raise for raise",
    "refines": "may raise or save less, never more",
    "post_grad": "refines, never differentiated: Inductor's post-grad passes (aten domain only)",
    "approximates": "refines, values within a tolerance from dtype and graph: rewrites that reassociate",
    "quantizes": "inference only, values within a bound from the quantization parameters",
    "functional": "refines without aliasing or strides, values within rounding: dialect passes that turn views into copies",
    "set_grad": "torch.export's set-grad pass's promise",
    "autocast": "torch.export's autocast pass's promise",
}
PASS_SPEC_HELP = "registered name, pkg.module:fn or file.py:fn"
# How ``--pass-shape`` may say to call a pass (fxfuzz.core.shapes.GIVEN_SHAPES holds them): what
# each hands the callable.
PASS_SHAPES = {"signature": "(gm, graph_signature)", "module": "(gm)", "graph": "(gm.graph)"}


def pass_shape_help(whose: str) -> str:
    """The help of ``--pass-shape`` (``--fxfuzz-pass-shape``), which applies to ``whose``."""
    shapes = ", ".join(f"{name} {given}" for name, given in PASS_SHAPES.items())
    return f"how to call {whose} where fxfuzz cannot tell its shape: {shapes} (docs/own-pass.md#pass-shapes)"


OP_HELP = (
    "add a custom operator to the generated graphs: pkg.module:attr or file.py:attr naming the operator "
    "or an fxfuzz.strategies.op_spec(...) entry; or load a source of custom operators, pkg.module or file.py, "
    "so saved cases calling them load (repeatable; every worker process loads it)"
)


def described(meanings: dict[str, str]) -> str:
    """Choices with what each means, for a help text: ``a (what a is), b (...)``."""
    return ", ".join(f"{name} ({meaning})" for name, meaning in meanings.items())


def contract_help(whose: str) -> str:
    return (
        f"hold {whose} to this contract instead of its own (docs/oracles.md#contracts): {described(CONTRACT_MEANINGS)}"
    )


def domain_help(what: str, default: str) -> str:
    return f"{what}: {described(DOMAIN_MEANINGS)} (default: {default})"


# Generation levels: FX graphs, nn.Module programs through torch.export, or both.
LEVELS = ("graph", "program", "mixed")

DEVICES = ("cpu", "cuda")

# The local example database's default directory (reports/* is git-ignored).
DEFAULT_DB = "reports/.fxfuzz-db"

# The share of examples verify also takes through torch.export's stages (oracles.downstream):
# measured to keep a default campaign within 10% of its throughput without them.
DEFAULT_STAGE_SHARE = 0.02

# The share of programs (program level) whose export stages beyond ``ep.module()`` and other
# sizes are checked (fxfuzz.oracles.program): they cost about three times the rest of a program.
DEFAULT_PROGRAM_SHARE = 0.2
