"""A user's failing graph as a GraphCase: an ExportedProgram saved with ``torch.export.save``.

``torch.export.load`` reads the graph from JSON, but unpickles other parts of the archive with
the full unpickler, which runs whatever code a file names: weights and tensor constants stored
"use_pickle" (``torch.load(weights_only=False)``), script and opaque objects
(``pickle.loads``), the formats before torch 2.8, and the example inputs where the restricted
unpickler refuses them (it falls back to the full one). So an archive is read into memory once
and checked before torch sees it: every pickle torch would unpickle must load under
``torch.load(weights_only=True)`` (the restricted unpickler: tensors and plain containers,
nothing else), and anything only the full unpickler reads is refused. The graph torch then
deserializes may name any attribute of ``torch``, ``operator`` or ``math`` as a call target;
the case is taken through fxfuzz's own case format (``case_to_dict``/``case_from_dict``), so
its targets pass the same allowlist as any saved case before anything runs
(docs/security.md).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Any

import torch
from fxfuzz.core.case import GraphCase
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.serialize import case_from_dict, case_to_dict

MAX_PT2_BYTES = 1 << 30  # an archive read into memory: a graph fxfuzz reduces is far smaller


def _restricted(data: bytes, what: str, path: str) -> None:
    """UntrustedError unless ``data`` unpickles under torch's restricted unpickler."""
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise UntrustedError(
            f"{path}: {what} is a pickle only the full unpickler reads ({first}); fxfuzz does not run code a file names"
        ) from None


def _checked_archive(raw: bytes, path: str) -> None:
    """Refuse an archive any part of which ``torch.export.load`` would read with the full unpickler."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile:
        raise SerializeError(f"{path} is not an archive torch.export.save writes (not a zip file)") from None
    names = archive.namelist()
    if len({n.split("/", 1)[0] for n in names}) != 1:
        raise SerializeError(f"{path} is not an archive torch.export.save writes (its files are not in one folder)")
    by_suffix = {n.split("/", 1)[1]: n for n in names if "/" in n}
    models = [k for k in by_suffix if k.startswith("models/") and k.endswith(".json")]
    if not models:
        raise UntrustedError(
            f"{path}: not an archive of torch 2.8 or later (no models/*.json); older formats load only by unpickling, which fxfuzz does not do"
        )
    for model in models:
        name = model[len("models/") : -len(".json")]
        for kind, folder in (("weights", "data/weights"), ("constants", "data/constants")):
            config_name = f"{folder}/{name}_{kind}_config.json"
            if f"{folder}/{name}.pt" in by_suffix or config_name not in by_suffix:
                raise UntrustedError(
                    f"{path}: the {kind} of {name!r} are in a format that loads only by unpickling, which fxfuzz does not do"
                )
            config = json.loads(archive.read(by_suffix[config_name])).get("config", {})
            for fqn, meta in config.items():
                file = meta.get("path_name", "")
                if kind == "constants" and not file.startswith("tensor_"):
                    raise UntrustedError(
                        f"{path}: constant {fqn!r} is a pickled object ({file}), which fxfuzz does not load"
                    )
                if meta.get("use_pickle"):
                    _restricted(archive.read(by_suffix[f"{folder}/{file}"]), f"{kind} entry {fqn!r}", path)
        inputs = f"data/sample_inputs/{name}.pt"
        if inputs in by_suffix:
            _restricted(archive.read(by_suffix[inputs]), "the example inputs", path)


def _inputs(ep: Any, path: str) -> tuple[Any, ...]:
    """The inputs in signature order: parameters, buffers and constants from the program,
    then the saved example inputs (flattened)."""
    if not ep.example_inputs:
        raise SerializeError(
            f"{path} was saved without example inputs: export it with them (torch.export.export(m, args))"
        )
    args, kwargs = ep.example_inputs
    user = torch.utils._pytree.tree_leaves((args, kwargs))
    state = {**ep.state_dict, **ep.constants}
    out, it = [], iter(user)
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            out.append(
                state[spec.target]
                .detach()
                .clone()
                .requires_grad_(spec.kind.name == "PARAMETER" and state[spec.target].requires_grad)
            )
        else:
            out.append(next(it))
    return tuple(out)


def load_exported(path: str) -> GraphCase:
    """The case an ExportedProgram file holds: its graph and signature, its parameters,
    buffers and constants, and its saved example inputs (the module docstring says what is
    checked first). SerializeError, one line, for a file that is not such a program."""
    try:
        if os.path.getsize(path) > MAX_PT2_BYTES:
            raise SerializeError(f"{path} is larger than {MAX_PT2_BYTES >> 30} GiB")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise SerializeError(f"{path} cannot be read: {e}") from None
    _checked_archive(raw, path)
    try:
        ep = torch.export.load(io.BytesIO(raw))
        case = GraphCase(ep.graph_module, ep.graph_signature, _inputs(ep, path), True, "export")
        data = case_to_dict(case)
    except SerializeError:
        raise
    except Exception as e:  # whatever torch's loader or the conversion raised: a file fxfuzz cannot read
        first = str(e).splitlines()[0][:300] if str(e) else ""
        raise SerializeError(f"{path} is not an ExportedProgram fxfuzz reads: {type(e).__name__}: {first}") from None
    return case_from_dict(data)
