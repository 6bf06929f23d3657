"""fuzz: pass loading, the campaign driver and the CLI. Entry points: ``load_pass``, ``run_campaign``."""

__version__ = "0.1.0"

from .campaign import CampaignResult, run_campaign  # noqa: E402
from .passes import PassSpecError, load_pass  # noqa: E402

__all__ = ["CampaignResult", "PassSpecError", "load_pass", "run_campaign", "__version__"]
