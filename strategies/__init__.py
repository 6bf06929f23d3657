"""Strategies: Hypothesis strategies that build GraphCases. Entry points: ``graph_cases``
(random cases), ``from_module`` (the case torch.export hands the pass for a module; it raises
``ExportFailed`` where export fails first) and ``register_op`` (a user's custom operator in
the op table graph cases draw from)."""

from fxfuzz.core.capture import ExportFailed, from_module
from fxfuzz.core.case import GraphCase
from fxfuzz.strategies.custom import op_spec, register_op
from fxfuzz.strategies.graphs import graph_cases
from fxfuzz.strategies.programs import module_programs

__all__ = ["ExportFailed", "GraphCase", "from_module", "graph_cases", "module_programs", "op_spec", "register_op"]
