"""What torch.export does with the pass's output, stage by stage: the result must go through
every stage users run on an ExportedProgram and keep its meaning there.

The stages: ``ep.module()`` (unlifting), ``ep.run_decompositions()`` (default table, then
``module()``), a ``torch.export.save``/``load`` round trip in memory (then ``module()``), and
``torch.export.unflatten``. Only what the pass can be blamed for counts: the original graph
goes through the same stage, and a stage that raises on the result but not on the original
(``<stage>_raised``), or whose module behaves differently from the same stage's module of the
original (``<stage>_changes_meaning``), is a finding, even when the root cause lies in torch's
stage code (the message names the stage).

Compared, on the user inputs under the case's ambient grad mode: output values (exactly where
the stage keeps the graph's ops; after decompositions, which replace ops by others computing
in another order, within ``fxfuzz.oracles.tolerance.TOLERANCES``), the module's buffers after
the call (buffer mutations), and where the stage keeps autograd (all but decompositions, whose
result ``module()`` runs as the decomposed inference graph) each output's requires_grad and
the gradients of the inputs and parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from fxfuzz.core.calls import exported_program
from fxfuzz.core.case import clone_input
from fxfuzz.core.choices import DEFAULT_STAGE_SHARE
from fxfuzz.core.internal import first_line
from fxfuzz.oracles.equivalence import compare_value
from fxfuzz.oracles.execute import GlobalState, release_frames
from fxfuzz.oracles.finding import Finding
from fxfuzz.oracles.program_runtime import observe_module
from fxfuzz.oracles.tolerance import Bound, Exact
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind


def _save_load(ep: ExportedProgram) -> torch.nn.Module:
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer).module()


_Make = Callable[[ExportedProgram], torch.nn.Module]
_SERDE_LOG = logging.getLogger("torch._export.serde.serialize")


def _quiet(make: _Make) -> _Make:
    """``make`` without torch's own notices, the same on every example whatever the pass did:
    the deprecation of ``LeafSpec`` that copying a pytree spec raises (unflatten, decompositions)
    and serde's note on each empty list it writes (save). Printed for every example that went
    through the stages, they buried a bench's or a worker's output (#36)."""

    def quietly(ep: ExportedProgram) -> torch.nn.Module:
        level = _SERDE_LOG.level
        _SERDE_LOG.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*LeafSpec.* is deprecated", category=FutureWarning)
                return make(ep)
        finally:
            _SERDE_LOG.setLevel(level)

    return quietly


# stage -> (what it makes of an ExportedProgram, whether values stay exact and autograd kept)
DOWNSTREAM_STAGES: dict[str, tuple[_Make, bool]] = {
    "module": (_quiet(lambda ep: ep.module()), True),
    "run_decompositions": (_quiet(lambda ep: ep.run_decompositions().module()), False),
    "save_load": (_quiet(_save_load), True),
    "unflatten": (_quiet(lambda ep: torch.export.unflatten(ep)), True),
}
# Decompositions cost about four times the other three stages together (1.4 s of 1.7 s per
# example, both graphs), so they take a fifth of the share: the same cost buys the cheap
# stages three times the examples.
_RATE = {"run_decompositions": 0.2}


def _first_line(e: BaseException) -> str:
    text = first_line(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _exported(gm: fx.GraphModule, sig: ExportGraphSignature, inputs: Sequence[Any]) -> ExportedProgram | None:
    """The ExportedProgram of ``gm`` over copies of ``inputs`` (a stage's call mutates its
    buffers); None when its constructor rejects it (the rejection of a result is the
    signature oracle's ``export_verifier_rejects``)."""
    try:
        return exported_program(gm, sig, [clone_input(v) for v in inputs], copy=True)
    except Exception:
        return None


def _observe(
    stage: str, ep: ExportedProgram, users: Sequence[Any], ambient: bool
) -> tuple[dict[str, Any] | None, BaseException | None]:
    """The stage's module of ``ep`` called on the user inputs (``observe_module``), or what
    the stage or the call raised. The process-wide state is put back afterwards: torch's
    stage code can leave it changed (``run_decompositions`` raising while it retraces an
    autocast region leaves that region's autocast dtype set), and every later check of the
    example would start from it."""
    make, _ = DOWNSTREAM_STAGES[stage]
    before = GlobalState.read()
    try:
        seen = observe_module(make(ep), users, ambient)
    except Exception as e:
        return None, release_frames(e)
    finally:
        before.restore()
    if seen["error"] is not None:
        return None, release_frames(seen["error"])
    return seen, None


def _differences(
    stage: str, ref: dict[str, Any], got: dict[str, Any], grads_exact: bool = True, values: Bound | None = None
) -> list[str]:
    """How ``got`` (the result's module) differs from ``ref`` (the original's), as messages;
    gradients within tolerance unless ``grads_exact`` (``fxfuzz.oracles.semantics.compare``);
    values and gradients within ``values`` where the contract excuses rounding."""
    _, kept = DOWNSTREAM_STAGES[stage]
    exact: Exact = kept if values is None else values
    if ref["structure"] != got["structure"] or len(ref["leaves"]) != len(got["leaves"]):
        return [f"outputs {ref['structure']} became {got['structure']}"]
    found = []
    for i, (a, b) in enumerate(zip(ref["leaves"], got["leaves"])):
        found += compare_value(f"output {i}", a, b, exact)
    for k, a in ref["state"].items():
        found += compare_value(f"buffer or parameter {k} after the call", a, got["state"].get(k), exact)
    messages = [
        f.message for f in found if kept or f.kind != "requires_grad_mismatch" and not f.kind.startswith("grad_fn")
    ]
    if kept:
        if (ref["backward_error"] is None) != (got["backward_error"] is None):
            messages.append(
                f"backward raised {got['backward_error']!r} where the original's raised {ref['backward_error']!r}"
            )
        for k, a in ref["grads"].items():
            b = got["grads"].get(k)
            if (a is None) != (b is None):
                messages.append(
                    f"gradient of {k}: {'none' if a is None else 'one'} became {'none' if b is None else 'one'}"
                )
            elif a is not None:
                messages += [
                    f"gradient of {f.message}"
                    for f in compare_value(k, a, b, grads_exact if values is None else values)
                    if f.kind != "requires_grad_mismatch"
                ]
    return messages


def check_downstream(
    gm: fx.GraphModule,
    sig: ExportGraphSignature | None,
    original_gm: fx.GraphModule,
    original_sig: ExportGraphSignature,
    inputs: Sequence[Any],
    ambient: bool,
    stages: Sequence[str] = tuple(DOWNSTREAM_STAGES),
    grads_exact: bool = True,
    values: Bound | None = None,
) -> list[Finding]:
    """A finding for each of ``stages`` that raises on the result, or makes it behave unlike
    the same stage makes the original, where the stage works on the original."""
    if sig is None:
        return []  # reported as signature_missing
    users = [v for s, v in zip(original_sig.input_specs, inputs) if s.kind == InputKind.USER_INPUT]
    findings: list[Finding] = []
    for stage in stages:
        # Each side's ExportedProgram afresh for each stage: a call of one stage's module
        # updates the buffers the next would start from.
        original_ep = _exported(original_gm, original_sig, inputs)
        ep = _exported(gm, sig, inputs) if original_ep is not None else None
        if original_ep is None or ep is None:
            return findings
        ref, ref_error = _observe(stage, original_ep, users, ambient)
        if ref_error is not None:
            continue  # the stage fails on the original: nothing here is the pass's doing
        got, error = _observe(stage, ep, users, ambient)
        if error is not None:
            findings.append(
                Finding(
                    "downstream",
                    f"{stage}_raised",
                    f"torch.export's {stage} stage raised on the result ({_first_line(error)}) but not on the "
                    "original: the pass's output is what the stage cannot handle",
                    {"stage": stage, "exception": type(error).__name__},
                )
            )
            continue
        diffs = _differences(stage, ref, got, grads_exact, values)  # type: ignore[arg-type]
        if diffs:
            findings.append(
                Finding(
                    "downstream",
                    f"{stage}_changes_meaning",
                    f"after torch.export's {stage} stage the result behaves unlike the original after the same "
                    f"stage (the pass's output is blamed, whichever code is at fault): {diffs[0]}",
                    {"stage": stage, "differences": diffs[:5]},
                )
            )
    return findings


# Whether every example goes through the stages now, whatever share ``verify`` was given.
_FORCED = {"forced": False}


@contextlib.contextmanager
def stages_forced(forced: bool = True) -> Iterator[None]:
    """Every example goes through the stages inside (while a downstream bucket shrinks, so
    every shrink attempt is judged alike)."""
    before = _FORCED["forced"]
    _FORCED["forced"] = forced or before
    try:
        yield
    finally:
        _FORCED["forced"] = before


def stages_are_forced() -> bool:
    """Is every example taken through every check it runs only for a share, now?"""
    return _FORCED["forced"]


def stages_selected(case_code: str, ambient: bool, share: float = DEFAULT_STAGE_SHARE) -> tuple[str, ...]:
    """The stages the case (its graph code and ambient grad mode) goes through: a hash of it
    against ``share`` (0 to 1; a fifth of it for decompositions), so replays and shrink
    attempts of a case decide alike; every stage while forced."""
    if _FORCED["forced"]:
        return tuple(DOWNSTREAM_STAGES)
    digest = hashlib.sha1(f"{ambient}|{case_code}".encode()).digest()
    h = int.from_bytes(digest[:4], "big") / 2**32
    return tuple(s for s in DOWNSTREAM_STAGES if h < share * _RATE.get(s, 1.0))
