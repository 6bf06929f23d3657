"""``issues/<bucket>.md``: an issue text for each new bucket, ready to file upstream (title,
versions, the minimized repro inline, how to run it, expected and actual behaviour)."""

from __future__ import annotations

import json

from fxfuzz.core.passes import import_spec
from fxfuzz.report.markdown import cell, code, fenced, first_line, text
from fxfuzz.report.schema import Report, ReportFinding

# What each oracle requires of a pass (docs/oracles.md), as the "expected" of an issue.
_EXPECTED = {
    "crash": "The pass returns a `(GraphModule, ExportGraphSignature)` pair for this graph, "
    "without raising, killing the process or hanging.",
    ("crash", "export_raised"): "`torch.export` exports this module, which eager PyTorch runs "
    "forward and backward, with the pass in its place without raising.",
    "structure": "The pass's output passes `graph.lint()`, keeps every node's `users` equal to the "
    "nodes that read it, holds no call the pass removes (such as `_set_grad_enabled`) and only "
    "well-formed higher-order op calls, leaves no unused submodule attached, and keeps its "
    "behaviour when run again, deep-copied, dead-code eliminated and recompiled.",
    "signature": "The returned graph signature names the graph's placeholders and outputs in "
    "order, keeps the input and output specs, the user input names and the pytree calling "
    "convention, and passes torch.export's own checks and verifier.",
    "equivalence": "The transformed graph computes what the original computes: the same output "
    "structure, metadata, values (bit for bit on CPU), `requires_grad`, `grad_fn`, aliasing and "
    "view layout, the same inputs, parameters and buffers after the call, and the same grad "
    "mode, autocast and dispatch-key state left behind.",
    "gradients": "Backward and forward-mode AD through the transformed graph give the gradients "
    "and tangents they give through the original (`None` told apart from zeros), and raise the "
    "same way where they raise.",
    "idempotence": "Applying the pass to its own output does not raise, adds no higher-order op "
    "and keeps the behaviour.",
}
_E2E = (
    "`ep.module()` of the exported program behaves like the eager module under both grad modes: "
    "the same outputs, `requires_grad`/`grad_fn`, gradients of inputs and parameters, parameters "
    "and buffers after the call, and grad mode left behind."
)
_VS_BASELINE = (
    "The candidate pass passes every check the baseline pass passes on this case, and keeps the "
    "baseline's signature and node metadata keys."
)
_PARITY = (
    "The transformed graph gives the same results on CUDA as on CPU (within the per-dtype "
    "tolerances of `torch.testing.assert_close`), as the original graph does."
)


def expected_behaviour(oracle: str, kind: str) -> str:
    """One sentence: what the check that produced ``oracle``/``kind`` requires of the pass."""
    if kind.startswith("vs_baseline_"):
        return _VS_BASELINE
    if kind.startswith("e2e_"):
        return _E2E
    if kind.startswith("cpu_vs_cuda:"):
        return _PARITY
    sentence = (
        _EXPECTED.get((oracle, kind))
        or _EXPECTED.get(oracle)
        or f"The pass's output passes fxfuzz's {code(oracle)} check."
    )
    return sentence + (" This holds on CUDA as on CPU." if kind.startswith("cuda:") else "")


def _one_line(message: str, width: int = 120) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def render_issue(
    report: Report, finding: ReportFinding, repro_source: str | None, short_source: str | None = None
) -> str:
    """The issue text of one bucket; ``repro_source`` is its repro .py (None: none was saved),
    ``short_source`` its short program (``fxfuzz.repro.short``), which its repro .py is where
    the case allows one (then ``repro_source`` is None)."""
    pass_spec = report.run.pass_spec
    target = import_spec(pass_spec)
    # A program-level finding records the grad mode that showed it; its program's own field
    # is only the mode checked first.
    grad = finding.details.get("ambient_grad", finding.ambient_grad)
    facts = [
        ("pass", cell(code(pass_spec)) + (f" ({cell(code(target))})" if target != pass_spec else "")),
        *([("baseline pass", cell(code(report.run.baseline)))] if report.run.baseline is not None else []),
        ("torch", text(report.torch_version)),
        ("Python", text(report.python_version or "not recorded")),
        ("device", text(report.run.device or "cpu")),
        *([("ambient grad mode", "enabled" if grad else "disabled")] if grad is not None else []),
        (
            "found by",
            f"fxfuzz {text(report.tool_version)}, {report.examples} examples, seen {finding.count} time(s)",
        ),
        ("bucket", cell(code(finding.id))),
    ]
    lines = [
        f"# {text(pass_spec)}: {text(finding.oracle)}/{text(finding.kind)}: {text(first_line(finding.message))}",
        "",
        "| | |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in facts),
        "",
        "## Repro",
        "",
    ]
    if finding.graph_code:
        lines += [
            f"The minimized graph ({finding.graph_nodes} compute nodes):",
            "",
            fenced(finding.graph_code, "python"),
            "",
        ]
    if short_source is not None:
        lines += [
            "A short program on public APIs shows it: it exits 1 while the bug is there, 0 once it is fixed.",
            "",
            fenced(short_source, "python"),
            "",
            "## How to run",
            "",
            *(_how_to_run(finding.repro, short=True) if finding.repro else []),
        ]
    elif repro_source is not None:
        lines += [
            "<details><summary>Standalone repro script (needs only torch)</summary>",
            "",
            fenced(repro_source, "python"),
            "",
            "</details>",
            "",
            "## How to run",
            "",
            *(_how_to_run(finding.repro) if finding.repro else []),
        ]
    elif finding.graph_code:
        lines.append("No standalone repro script could be written for this bucket.")
    else:
        lines.append("No example was saved for this bucket (see the message below).")
    lines += [
        "",
        "## Expected behaviour",
        "",
        expected_behaviour(finding.oracle, finding.kind),
        "",
        "## Actual behaviour",
        "",
        fenced(finding.message, "text"),
    ]
    if finding.details:
        lines += ["", "Details:", "", fenced(json.dumps(finding.details, indent=2, default=str), "json")]
    return "\n".join(lines) + "\n"


def _how_to_run(repro: str, short: bool = False) -> list[str]:
    name = repro.rsplit("/", 1)[-1]
    if short:
        json_path = repro.removesuffix(".py") + ".json"
        return [
            f"Save the program as {code(name)} and run {code('python ' + name)}: it needs only torch, prints "
            "what differs and exits 1 while the bug is there, 0 once it is fixed.",
            "",
            f"With fxfuzz installed, in the report folder: {code('fxfuzz repro ' + json_path)} (every check, in a "
            f"child process; `--pass SPEC` checks a fix), or {code('fxfuzz repro --full ' + json_path)} (the "
            "complete standalone script, written for it and run).",
        ]
    return [
        f"Save the script as {code(name)} and run {code('python ' + name)}: it needs only torch, prints each "
        "failing check and exits non-zero while the bug is there (1 for a failing check), 0 once "
        "it is fixed.",
        "",
        f"With fxfuzz installed, in the report folder: {code('fxfuzz repro ' + repro)} (the full "
        "oracles, in a child process; `--pass SPEC` checks a fix).",
    ]
