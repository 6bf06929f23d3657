"""The first cases a seeded run of the strategies draws, as a campaign draws them."""

from fxfuzz.strategies import graph_cases
from hypothesis import HealthCheck, given, seed, settings

GENERATE = dict(database=None, deadline=None, phases=["generate"], suppress_health_check=list(HealthCheck))


def draw(n: int, seed_: int = 0, **kwargs) -> list:
    """The first ``n`` cases a seeded run draws."""
    return draw_until(n, lambda cases: False, seed_, **kwargs)


class _Enough(Exception):
    pass


def draw_until(n: int, enough, seed_: int = 0, **kwargs) -> list:
    """The first cases a seeded run draws (derandomize off, the suite's draws pinned by
    conftest; ``kwargs`` go to ``graph_cases``), up to the first ``cases`` for which
    ``enough(cases)`` holds, or all ``n``: for tests that assert something appears within ``n``
    cases and need not draw the rest."""
    cases: list = []

    @seed(seed_)
    @settings(max_examples=n, derandomize=False, **GENERATE)
    @given(graph_cases(**kwargs))
    def collect(case):
        if cases and enough(cases):
            raise _Enough  # Hypothesis replays the case that raised: nothing is added again
        cases.append(case)
        if enough(cases):
            raise _Enough

    try:
        collect()
    except _Enough:
        pass
    return cases
