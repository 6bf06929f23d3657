"""Sharded campaigns over one real Redis server: shards draw apart, share their failures through
Redis (each replays the others' first), and a Redis that dies mid-campaign loses nothing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import redis
from fxfuzz.campaign.engine import Subject, run_campaign
from fxfuzz.campaign.store import GRAPH_CASES, SavedFailures, database_key
from fxfuzz.campaign.supervisor import worker_seed
from fxfuzz.core.passes import load_pass
from fxfuzz.core.settings import CampaignSettings
from hypothesis.database import DirectoryBasedExampleDatabase
from paths import HELPERS
from redis_server import free_port, needs_redis, start_redis

BROKEN = os.path.join(HELPERS, "broken_passes.py") + ":leaves_toggles"


def _failure_entries(url: str) -> int:
    client = redis.Redis.from_url(url)
    return sum(client.scard(k) for k in client.keys(b"*fxfuzz-failures"))


def test_every_shard_worker_and_restart_gets_its_own_seed():
    seeds = [worker_seed(7, (k, 8), i, g) for k, i, g in itertools.product(range(1, 9), range(16), range(6))]
    assert len(set(seeds)) == len(seeds)
    assert worker_seed(7, (1, 2), 0, 0) == worker_seed(7, (1, 2), 0, 0)  # the same campaign again: the same draws
    assert worker_seed(7, (1, 2), 0, 0) != worker_seed(7, (1, 1), 0, 0)


def test_two_shards_draw_different_examples():
    """Distinct seeds mean distinct streams: the shards share only graphs so small that one
    shard alone draws them again and again."""
    identity = load_pass("identity")

    def drawn(shard: tuple[int, int]) -> list[str]:
        seen: list[str] = []
        settings = CampaignSettings(max_examples=40, budget_s=120, seed=worker_seed(0, shard, 0, 0))
        run_campaign(identity, settings, subject=Subject(check=lambda c, f: seen.append(c.code()) or []))
        return seen

    one, two = drawn((1, 2)), drawn((2, 2))
    assert one != two
    assert len(set(one) & set(two)) <= len(set(one)) // 4, set(one) & set(two)


@pytest.mark.processes
@needs_redis
def test_two_shards_share_failures_through_redis(tmp_path, redis_url, cli):
    """The shards' campaigns and the merge run in this process (their workers are processes
    all the same): what is shared goes through Redis, not through the process."""
    reports = []
    for k in (1, 2):
        out = tmp_path / f"shard{k}"
        r = cli("run", "--pass", BROKEN, "--shard", f"{k}/2", "--workers", "1", "--max-examples", "25",
                "--db", str(tmp_path / f"db{k}"), "--db", redis_url, "--report-dir", str(out))  # fmt: skip
        assert r.returncode == 1, r.stdout + r.stderr
        reports.append(json.loads((out / "report.json").read_text()))
    one, two = reports
    assert (one["shard"], two["shard"]) == ("1/2", "2/2")
    assert one["workers_detail"]["database"]["shared"] == [redis_url]
    # The shards' minimized failures are in Redis after the runs ...
    assert _failure_entries(redis_url) >= 1
    # ... and shard 2, with an empty local database, replayed shard 1's first.
    assert not one["stats"].get("saved_replayed") and two["stats"]["saved_replayed"] >= 1
    assert {f["id"] for f in one["findings"]} <= {f["id"] for f in two["findings"]}

    # One report from both: examples summed, buckets the union.
    merged_dir = tmp_path / "merged"
    r = cli("merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--report-dir", str(merged_dir))
    assert r.returncode == 1, r.stdout + r.stderr
    merged = json.loads((merged_dir / "report.json").read_text())
    assert merged["examples"] == one["examples"] + two["examples"] == 50 and merged["shards"] == ["1/2", "2/2"]
    assert {f["id"] for f in merged["findings"]} == {f["id"] for f in one["findings"] + two["findings"]}


# Rewrites nothing (a set-grad finding at once); once the flag file exists it also crashes,
# so the campaign finds a second bucket only after the test has stopped Redis.
TWO_PHASE = """
import os

from fxfuzz.core.contract import SET_GRAD

FLAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "phase2")

def two_phase(gm, sig):
    if os.path.exists(FLAG):
        raise RuntimeError("planted crash, after the shared database went away")
    return gm, sig


two_phase.fxfuzz_contract = SET_GRAD  # leaves the toggles: a leftover_call bucket at once
"""


@pytest.mark.processes
@needs_redis
def test_redis_dying_mid_campaign_loses_nothing(tmp_path, monkeypatch):
    (tmp_path / "two_phase.py").write_text(TWO_PHASE)
    port = free_port()
    server = start_redis(port)
    url, local = f"redis://127.0.0.1:{port}/0", str(tmp_path / "db")
    out = tmp_path / "report"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fxfuzz",
            "run",
            "--pass",
            "two_phase.py:two_phase",
            "--workers",
            "2",
            "--max-examples",
            "120",
            "--db",
            local,
            "--db",
            url,
            "--report-dir",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    try:
        # A count of examples, not a budget, ends it: a budget also ran while the workers
        # started, and on a loaded machine ran out before the second phase showed anything.
        deadline = time.monotonic() + 180
        while _failure_entries(url) == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, "the campaign ended before Redis could be stopped"
        server.send_signal(signal.SIGKILL)
        server.wait()
        (tmp_path / "phase2").touch()
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
        server.kill()
    assert proc.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    notes = [line for line in stderr.splitlines() if "became unreachable" in line]
    assert len(notes) == 1 and url in notes[0], stderr
    report = json.loads((out / "report.json").read_text())
    assert report["stopped_by"] == "max_examples" and report["workers_detail"]["notes"] == [
        notes[0].removeprefix("fxfuzz: note: ")
    ]
    kinds = {f["kind"]: f for f in report["findings"]}
    assert {"leftover_call", "pass_raised"} <= set(kinds), report["findings"]

    # The local database holds the minimized example of every bucket, the one found before
    # Redis went away and the one found after.
    monkeypatch.chdir(tmp_path)  # the campaign's pass spec is relative to it, and so is its database key
    key = database_key(load_pass("two_phase.py:two_phase"), "export")
    store = SavedFailures(DirectoryBasedExampleDatabase(local), key, GRAPH_CASES)
    saved = {case.code() for _, case in store.saved()}
    assert {f["graph_code"] for f in report["findings"]} <= saved
