"""One results vocabulary: "smaller" is ``Size``'s order, the same wherever examples of one
bucket meet (the engine's buckets, the supervisor, the example database, a merge of levels or
of gate phases), whatever order they arrive in."""

from __future__ import annotations

import json
import shutil

from fxfuzz.campaign.protocol import BucketFound
from fxfuzz.campaign.results import NO_EXAMPLE, Bucket, Buckets, CampaignResult, Sample, Size
from fxfuzz.campaign.store import GRAPH_CASES, SavedFailures
from fxfuzz.campaign.supervisor import ParallelCampaign, Supervisor
from fxfuzz.core.identity import identify
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import Finding
from fxfuzz.report.merge import merge_reports
from fxfuzz.report.schema import Extras, RunInfo, build_report
from fxfuzz.repro.files import repro_stem
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

BID = "equivalence-value_mismatch-00000000"


def _sample(nodes: int, text: str | None) -> Sample:
    raw = None if text is None else json.dumps({"x": text}).encode()
    return Sample(Size.of(nodes, raw), f"code {nodes} {text}", True, "export", "program", raw)  # no graph to hash


# Ties on purpose: equal nodes, equal bytes with different contents, no bytes at all.
SAMPLES = [_sample(3, "bb"), _sample(3, "aa"), _sample(2, None), _sample(5, "z"), _sample(3, "ab")]
SMALLEST = min(SAMPLES, key=lambda s: s.size)


def _bucket(example: Sample | None, count: int = 1) -> Bucket:
    return Bucket(BID, Finding("equivalence", "value_mismatch", f"shown by {example and example.code}"), example, count)


def test_size_orders_unsaved_last_then_nodes_then_bytes_then_digest():
    assert Size.of(9, b"{}") < Size.of(1, None) < NO_EXAMPLE
    assert Size.of(2, b"{1}") < Size.of(3, b"{}")
    assert Size.of(3, b"{}") < Size.of(3, b"{1}")
    a, b = Size.of(3, b'"aa"'), Size.of(3, b'"bb"')
    assert a != b and (a < b) != (b < a)  # equal nodes and bytes: still one of them is smaller


@given(st.permutations(SAMPLES))
def test_buckets_keep_the_same_example_in_any_order(order):
    buckets = Buckets()
    for s in order:
        buckets.add(_bucket(s, count=2))
    kept = buckets[BID]
    assert kept.example == SMALLEST and kept.count == 2 * len(SAMPLES)
    assert kept.finding.message == f"shown by {SMALLEST.code}"  # the finding follows its example


@given(st.permutations(SAMPLES), st.integers(0, len(SAMPLES)))
def test_merging_in_parts_keeps_what_adding_one_by_one_keeps(order, cut):
    """Two levels, two gate phases or two workers' buckets merged: the same example as one
    stream of them, and the counts of both."""
    first, second = Buckets(), Buckets()
    for s in order[:cut]:
        first.add(_bucket(s))
    for s in order[cut:]:
        second.add(_bucket(s))
    first.merge(second)
    assert first[BID].example == SMALLEST and first[BID].count == len(SAMPLES)


def test_a_bucket_without_an_example_takes_any_example():
    buckets = Buckets({BID: _bucket(None)})
    assert buckets.could_keep(BID, 10**6)
    assert buckets.add(_bucket(_sample(7, "q"), count=0)) and buckets[BID].count == 1
    assert not buckets.could_keep(BID, 8) and buckets.could_keep(BID, 7)


def test_the_supervisor_and_the_database_keep_what_buckets_keep():
    """The supervisor keeping the smallest of what its workers send, and the example database
    keeping one example per bucket, choose as ``Buckets`` does, in either order."""
    saved = [s for s in SAMPLES if s.raw is not None]
    for order in (saved, saved[::-1]):
        sup = Supervisor(ParallelCampaign(CampaignSettings(workers=1, identity=identify("identity"))))
        store = SavedFailures(InMemoryExampleDatabase(), b"key", GRAPH_CASES)
        for s in order:
            sup._on_message(None, BucketFound(_bucket(s)))  # type: ignore[arg-type]
            store.keep(BID, s.raw, s.size.nodes)
        smallest = min(saved, key=lambda s: s.size)
        assert sup.result.buckets[BID].example == smallest
        assert [raw for _, raw in store.by_bucket.values()] == [smallest.raw]
        shutil.rmtree(sup.start_dir)


def _shard_report(samples: list[Sample]):
    """The report of a shard whose campaign met ``samples`` (a repro for a saved one)."""
    result = CampaignResult()
    for s in samples:
        result.buckets.add(_bucket(s))
    repro = {BID: f"repros/{repro_stem(BID)}.py"} if result.buckets[BID].example.raw is not None else {}
    return build_report(result, RunInfo(pass_spec="p", contract="meaning"), CampaignSettings(), Extras(repros=repro))


@given(st.permutations(SAMPLES), st.integers(1, len(SAMPLES) - 1))
def test_a_merge_of_shard_reports_keeps_what_one_campaign_keeps(order, cut):
    """``fxfuzz merge`` keeps, in either order of its inputs, the example one campaign that met
    them all keeps: the same Size, through the report's rows."""
    a, b = _shard_report(order[:cut]), _shard_report(order[cut:])
    for inputs in ([("A", a), ("B", b)], [("B", b), ("A", a)]):
        (row,) = merge_reports(inputs).report.findings
        assert (row.graph_nodes, row.example_bytes, row.example_digest) == (
            SMALLEST.size.nodes,
            SMALLEST.size.nbytes,
            SMALLEST.size.digest,
        )
        assert row.graph_code == SMALLEST.code and row.count == len(SAMPLES)


def test_a_campaign_result_says_each_note_once():
    r = CampaignResult()
    r.note("lost the shared database")
    r.note("lost the shared database")
    assert r.notes == ["lost the shared database"]
