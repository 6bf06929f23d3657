"""Writing a stored case's names, targets and arguments as Python source, for the repros.

Text from a case is data: a name written as code must be dotted ASCII identifiers
(``code_name``); everything else is written as a literal (``repr``)."""

from __future__ import annotations

import re
from typing import Any

from fxfuzz.core.errors import SerializeError
from fxfuzz.core.serialize import resolve_target

# A name written into a repro as code (an attribute of torch, torch.ops or the signature module):
# ASCII identifiers only. Everything else from the case is written as a literal (``repr``).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def code_name(prefix: str, name: Any, what: str) -> str:
    """``prefix + name``, written into a repro as code, when ``name`` is dotted ASCII
    identifiers (an attribute path): nothing a literal could hold; SerializeError otherwise."""
    if not isinstance(name, str) or not all(NAME.fullmatch(part) for part in name.split(".")):
        raise SerializeError(f"{what} {str(name)[:200]!r} is not a name a repro can write as code")
    return prefix + name


class Code:
    """Python source for serialized graph data (targets and arguments); collects the imports it
    needs. The full repro and the short program both write a case's calls with it."""

    def __init__(self) -> None:
        self.imports: set[str] = set()

    def target(self, name: str) -> str:
        if "::" in name:
            ns, rest = name.split("::", 1)
            return code_name("torch.ops.", f"{ns}.{rest}", "operator")
        resolve_target(name)  # an allowed Python callable, stored as module.attr: nothing else is written
        self.imports.add(name.rpartition(".")[0])
        return name

    def arg(self, a: Any, names: dict[str, str]) -> str:
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(x, names) for x in a) + "]"
        if not isinstance(a, dict):
            return repr(a)
        ((key, v),) = a.items()
        if key == "node":
            if v not in names:
                raise SerializeError(f"an argument names node {str(v)[:200]!r}, which no earlier node is")
            return names[v]
        if key == "tuple":
            items = [self.arg(x, names) for x in v]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if key == "dict":
            return "{" + ", ".join(f"{self.arg(k, names)}: {self.arg(x, names)}" for k, x in v) + "}"
        if key == "float":
            return f"float({v!r})"
        if key == "device":
            return f"torch.device({v!r})"
        if key == "slice":
            return "slice(" + ", ".join(self.arg(x, names) for x in v) + ")"
        if key == "ellipsis":
            return "..."
        if key == "callable":
            return self.target(v)
        return code_name("torch.", v, key)  # dtype, layout, memory_format

    def spec_argument(self, a: dict[str, Any]) -> str:
        """A stored signature argument (``{"type": "TensorArgument", "name": ...}``) as a call
        of its class in ``torch.export.graph_signature``, imported as ``gs``."""
        fields = ", ".join(
            f"{code_name('', k, 'signature field')}={self.arg(v, {})}" for k, v in a.items() if k != "type"
        )
        return f"{code_name('gs.', a['type'], 'signature argument')}({fields})"
