"""CSEPass's grad-mode buckets and the first campaign example that shows one, for the
reduction and short-repro tests."""

from fxfuzz.campaign.engine import Hooks, run_campaign
from fxfuzz.core.settings import CampaignSettings

# The buckets of CSEPass's grad-mode defects (docs/known/cse.txt): toggles merged, and equal
# calls merged across a toggle. Its aliasing bucket is left out: a merge of equal calls with
# no toggle at all shows it too.
GRAD_MERGE = {
    "equivalence-requires_grad_mismatch-ce6d8dfe",
    "equivalence-grad_mode_leak-dcf08181",
    "gradients-grad_presence_mismatch-66e5ff94",
    "equivalence-grad_fn_mismatch-fd46f87f",
    "gradients-grad_value_mismatch-7964935e",
    "gradients-backward_raises_differently-3bd93a99",
}


def first_example(pass_fn, seed: int, buckets: set[str], max_examples: int = 150):
    """The first example of a campaign (no shrinking, no reduction) that shows one of
    ``buckets``, and that bucket."""
    firsts: dict = {}

    def on_bucket(b):
        if b.id in buckets:
            firsts.setdefault(b.id, b.case)

    settings = CampaignSettings(max_examples=max_examples, max_shrink_s=0, seed=seed, domain="functional")
    run_campaign(pass_fn, settings, hooks=Hooks(on_bucket=on_bucket, stop=lambda: bool(firsts)))
    assert firsts, f"seed {seed} drew none of {sorted(buckets)} in {max_examples} examples"
    return next(iter(firsts.items()))  # one example may show several: the first the campaign recorded
