"""Strategies: Hypothesis strategies that build GraphCases. Entry points: ``graph_cases``
(random cases) and ``from_module`` (the case torch.export hands the pass for a module)."""

from fxfuzz.core.capture import from_module
from fxfuzz.core.case import GraphCase
from fxfuzz.strategies.graphs import graph_cases
from fxfuzz.strategies.programs import module_programs

__all__ = ["GraphCase", "from_module", "graph_cases", "module_programs"]
