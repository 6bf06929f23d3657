"""Campaign driver: the example database replays a failure first, buckets deduplicate,
hooks see every bucket, and a stop request ends the campaign."""

from __future__ import annotations

from fxfuzz.campaign.engine import run_campaign
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles.crash import crash_finding
from hypothesis.database import DirectoryBasedExampleDatabase

real = load_pass("set_grad")


def big_graph_bug(gm, sig):
    """Planted bug: crashes on graphs of 8 or more compute nodes. Hypothesis starts from
    the simplest example, so a fresh campaign's first example never shows it."""
    if sum(n.op == "call_function" for n in gm.graph.nodes) >= 8:
        raise RuntimeError("planted: graph too big")
    return gm, sig


def crash_only(case, pass_fn):
    """Only the crash oracle: these tests are about the driver, so they stay fast and do not
    depend on what the other oracles find in torch's pass."""
    try:
        pass_fn(case.gm, case.signature)
    except Exception as e:
        return [crash_finding(e)]
    return []


def test_a_failure_found_once_replays_first_next_campaign(tmp_path):
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    sizes: list[int] = []
    first = run_campaign(
        big_graph_bug, budget_s=120, max_examples=80, seed_=1, database=db, check=crash_only,
        on_bucket=lambda b: sizes.append(b.graph_nodes),
    )
    assert len(first.buckets) == 1, first.buckets
    (bucket,) = first.buckets.values()
    assert bucket.finding.oracle == "crash" and bucket.count >= 1
    # Shrunk: smaller than the example that first showed it, and still big enough to crash.
    assert 8 <= bucket.graph_nodes == sizes[-1] < sizes[0]

    control = run_campaign(big_graph_bug, budget_s=60, max_examples=1, seed_=2, check=crash_only)
    again = run_campaign(big_graph_bug, budget_s=60, max_examples=1, seed_=2, database=db, check=crash_only)
    assert not control.buckets, "without the database the first example must be clean"
    assert set(again.buckets) == set(first.buckets) and again.examples == 1


def test_buckets_deduplicate_and_hooks_see_each_bucket():
    seen: list[str] = []

    def always(gm, sig):
        raise ValueError("planted")

    result = run_campaign(always, budget_s=60, max_examples=15, check=crash_only, on_bucket=lambda b: seen.append(b.id))
    assert list(result.buckets) == [seen[0]] and set(seen) == {seen[0]}
    (bucket,) = result.buckets.values()
    assert bucket.count == result.examples == 15
    assert bucket.finding.details["exception"] == "ValueError"
    assert bucket.graph_nodes == 0  # shrunk to the empty graph


def test_stop_request_ends_the_campaign():
    result = run_campaign(real, budget_s=60, max_examples=50, stop=lambda: True)
    assert result.examples == 0 and result.stopped_by == "stopped"


def test_shrinking_stops_at_its_time_limit_keeping_the_example():
    sizes: list[int] = []
    result = run_campaign(
        big_graph_bug, budget_s=60, max_examples=80, seed_=1, check=crash_only, max_shrink_s=0.0,
        on_bucket=lambda b: sizes.append(b.graph_nodes),
    )
    (bucket,) = result.buckets.values()
    assert sizes == [bucket.graph_nodes] and bucket.graph_nodes >= 8  # found, kept, not shrunk
    assert result.examples == 80  # the campaign went on after the shrink was cut short


def test_known_buckets_are_counted_but_not_shrunk():
    """A baseline bucket keeps the first example that showed it, and every example counts."""
    import broken_passes as bp
    from fxfuzz.campaign.engine import run_campaign

    (bid,) = run_campaign(bp.crashes, budget_s=120, max_examples=1).buckets
    seen: list[int] = []
    result = run_campaign(
        bp.crashes, budget_s=120, max_examples=25, known=frozenset({bid}),
        on_bucket=lambda b: seen.append(b.graph_nodes),
    )
    assert result.examples == 25 and result.buckets[bid].count == 25
    assert len(seen) == 1  # appeared once, never re-minimized
