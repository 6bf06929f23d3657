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
CONTRACT_NAMES = ("meaning", "refines", "post_grad", "set_grad", "autocast")

# Generation levels: FX graphs, nn.Module programs through torch.export, or both.
LEVELS = ("graph", "program", "mixed")

DEVICES = ("cpu", "cuda")

# The local example database's default directory (reports/* is git-ignored).
DEFAULT_DB = "reports/.fxfuzz-db"

# The share of examples verify also takes through torch.export's stages (oracles.stages):
# measured to keep a default campaign within 10% of its throughput without them.
DEFAULT_STAGE_SHARE = 0.02

# The share of programs (program level) whose export stages beyond ``ep.module()`` and other
# sizes are checked (fxfuzz.oracles.program): they cost about three times the rest of a program.
DEFAULT_PROGRAM_SHARE = 0.2
