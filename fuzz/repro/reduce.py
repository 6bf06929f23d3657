"""``fxfuzz reduce``'s work: a user's failing graph, reduced while the same finding holds, written
as the repro a campaign writes for a bucket (``repros/<bucket>.py`` and ``.json``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxfuzz.campaign.engine import bucket_id, verify_with
from fxfuzz.campaign.reduce import Reduction, reduce_case
from fxfuzz.core.case import GraphCase
from fxfuzz.core.errors import UsageError
from fxfuzz.core.identity import PassIdentity
from fxfuzz.core.passes import PassFn
from fxfuzz.core.serialize import case_to_dict
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.oracles.downstream import stages_forced
from fxfuzz.oracles.program import shrinks_with_shared_checks
from fxfuzz.repro.files import repro_document, write_repro


@dataclass(frozen=True)
class Reduced:
    """A reduced finding: its bucket and finding on the reduced case, the compute nodes before
    and after, the reduction's account, and the repro written (its .py path)."""

    bucket: str
    finding: Finding
    nodes_before: int
    reduction: Reduction
    path: str


def findings_of(case: GraphCase, pass_fn: PassFn, settings: CampaignSettings) -> dict[str, Finding]:
    """The findings ``verify`` makes of ``case`` under ``settings`` (device; the contract is the
    pass's own, as resolved), by bucket id."""
    return {bucket_id(f): f for f in verify_with(settings)(case, pass_fn)}


def reduce_finding(
    case: GraphCase,
    pass_fn: PassFn,
    settings: CampaignSettings,
    out_dir: str,
    bucket: str | None = None,
    max_steps: int | None = None,
    deadline: float | None = None,
) -> Reduced | None:
    """Reduce ``case`` while the finding of ``bucket`` (None: the first ``verify`` makes, every
    check run) holds and write its repro (against ``settings.identity``, which ``pass_fn`` is) under
    ``out_dir/repros``; None when ``case`` shows no
    finding. UsageError when it shows others but not ``bucket``."""
    with stages_forced():  # a user's graph goes through every check, the stages a campaign shares out too
        found = findings_of(case, pass_fn, settings)
    if not found:
        return None
    if bucket is None:
        bucket = next(iter(found))
    elif bucket not in found:
        raise UsageError(f"the graph does not show bucket {bucket}; it shows {', '.join(found)}")
    forced = shrinks_with_shared_checks(found[bucket])
    with stages_forced(forced):
        reduction = reduce_case(
            case, lambda c: bucket in findings_of(c, pass_fn, settings), max_steps=max_steps, deadline=deadline
        )
        finding = findings_of(reduction.case, pass_fn, settings).get(bucket, found[bucket])
    doc = repro_document(
        bucket, finding.to_dict(), case_to_dict(reduction.case), settings.pass_identity(), settings.device
    )
    path = write_repro(os.path.join(out_dir, "repros"), doc)
    return Reduced(bucket, finding, case.compute_nodes(), reduction, path)


def settings_for(identity: PassIdentity, device: str) -> CampaignSettings:
    """The settings ``reduce_finding`` judges the pass ``identity`` under."""
    return CampaignSettings(device=device, identity=identity)
