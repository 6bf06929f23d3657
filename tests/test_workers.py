"""A multi-worker campaign survives a pass that kills its process or hangs, and still
writes the whole report folder with the case responsible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

# Segfaults on graphs with an aten.neg node, hangs on graphs with aten.exp; otherwise the
# identity with no contract, so the only findings are the ones the workers must survive.
KILLER = '''
import ctypes, time
import torch
from oracles.contract import NONE

def killer(gm, sig):
    targets = {n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes}
    if torch.ops.aten.neg.default in targets:
        ctypes.string_at(0)
    if torch.ops.aten.exp.default in targets:
        time.sleep(600)
    return gm, sig

killer.fxfuzz_contract = NONE
'''


def test_two_workers_survive_segfault_and_hang_and_report_everything(tmp_path):
    pass_file = tmp_path / "killer.py"
    pass_file.write_text(KILLER)
    out = tmp_path / "report"
    r = subprocess.run(
        [sys.executable, "-m", "fuzz.cli", "run", "--pass", f"{pass_file}:killer", "--workers", "2",
         "--budget", "15", "--max-examples", "40", "--example-timeout", "2", "--no-db", "--report-dir", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["workers"] == 2 and report["examples"] > 0
    kinds = {f["kind"]: f for f in report["findings"]}
    assert set(kinds) <= {"process_died", "hang"} and kinds, report["findings"]
    for f in report["findings"]:
        assert f["oracle"] == "crash" and not f["known"] and f["count"] >= 1
        # The parent got the case before the pass ran, so the killing graph is in the repro.
        assert f["repro"] and (out / f["repro"]).is_file()
        case = json.loads((out / f["repro"]).with_suffix(".json").read_text())["case"]
        targets = {n["target"] for n in case["graph"]["nodes"]}
        assert {"aten::neg.default", "aten::exp.default"} & targets
    if "process_died" in kinds:
        assert kinds["process_died"]["details"]["exception"] == "SIGSEGV"
    assert report["workers_detail"]["restarts"] >= 1
    for name in ("report.md", "report.html", "junit.xml"):
        assert (out / name).stat().st_size > 0
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == len(report["findings"])
    assert not [p for p in os.listdir(out / "logs") if "Traceback" in (out / "logs" / p).read_text()]
