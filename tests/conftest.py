import os

from hypothesis import HealthCheck, settings

# Graph cases are slow to build next to Hypothesis's defaults; the oracles have no deadline.
settings.register_profile(
    "fxfuzz-tests",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    derandomize=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fxfuzz-tests"))
