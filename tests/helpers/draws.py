"""The first cases a seeded run of the strategies draws, as a campaign draws them."""

from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, seed, settings

GENERATE = dict(database=None, deadline=None, phases=["generate"], suppress_health_check=list(HealthCheck))


def draw(n: int, seed_: int = 0, **kwargs) -> list:
    """The first ``n`` cases a seeded run draws (derandomize off, the suite's draws pinned by
    conftest); ``kwargs`` go to ``graph_cases``."""
    cases = []

    @seed(seed_)
    @settings(max_examples=n, derandomize=False, **GENERATE)
    @given(graph_cases(**kwargs))
    def collect(case):
        cases.append(case)

    collect()
    return cases
