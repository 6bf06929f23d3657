"""Strategies: Hypothesis strategies that build GraphCases. Entry point: ``graph_cases``."""

from .case import GraphCase
from .graphs import graph_cases

__all__ = ["GraphCase", "graph_cases"]
