"""Graph-level reduction (fxfuzz.campaign.reduce), its place in a campaign, and ``fxfuzz reduce``
on a user's ExportedProgram (fxfuzz.core.pt2). Every reduction is bounded by a count of
candidates judged, never by time."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from typing import NamedTuple

import pytest
import torch
from fxfuzz.campaign.engine import Hooks, bucket_id, run_campaign
from fxfuzz.campaign.reduce import reduce_case
from fxfuzz.core.case import clone_input
from fxfuzz.core.errors import UntrustedError
from fxfuzz.core.identity import resolve_pass
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.core.pt2 import load_exported
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.oracles import verify
from fxfuzz.oracles.downstream import stages_forced
from fxfuzz.oracles.execute import isolated
from fxfuzz.repro.files import load_repro
from fxfuzz.repro.reduce import findings_of, reduce_finding, settings_for
from fxfuzz.strategies import from_module
from grad_merge import GRAD_MERGE, first_example
from paths import DATA, HELPERS, ROOT

BROKEN = f"{HELPERS}/reduce_passes.py:tanh_after_relu_as_sigmoid"


def signature_follows_placeholders(case) -> bool:
    placeholders = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    return [s.arg.name for s in case.signature.input_specs] == placeholders and len(case.inputs) == len(placeholders)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 3, 5])
def test_a_cse_grad_mode_merge_reduces_to_at_most_six_compute_nodes_from_a_campaigns_first_example(seed):
    """Seeds whose first 150 examples show a grad-mode merge: since the tool forms joined the
    generic kinds (2026-11-28), seed 2 shows none; seed 1's first is 15 compute nodes, reduced to 3."""
    cse = load_pass("cse")
    bid, case = first_example(cse, seed, GRAD_MERGE)
    reduced = reduce_case(case, lambda c: bid in {bucket_id(f) for f in verify(c, cse)}, max_steps=400)
    assert reduced.case.compute_nodes() <= 6, (case.compute_nodes(), reduced.case.code())
    assert reduced.case.compute_nodes() < case.compute_nodes()
    assert bid in {bucket_id(f) for f in verify(reduced.case, cse)}
    assert signature_follows_placeholders(reduced.case)


def test_nothing_is_kept_where_the_finding_does_not_hold():
    """The reduction keeps a candidate only where ``holds`` says so: a finding that never holds
    again leaves the case as it was, after every move was judged once."""
    cse = load_pass("cse")
    bid, case = first_example(cse, 1, GRAD_MERGE)
    reduced = reduce_case(case, lambda c: False, max_steps=2000)
    assert (reduced.accepted, reduced.stopped_by) == (0, "fixed point")
    assert reduced.judged > 0 and reduced.case is case


def test_the_reduction_stops_at_its_bound():
    cse = load_pass("cse")
    bid, case = first_example(cse, 3, GRAD_MERGE)
    reduced = reduce_case(case, lambda c: bid in {bucket_id(f) for f in verify(c, cse)}, max_steps=3)
    assert (reduced.judged, reduced.stopped_by) == (3, "limit")
    assert bid in {bucket_id(f) for f in verify(reduced.case, cse)}


@pytest.mark.slow
@pytest.mark.parametrize("max_shrink_s", [0, 600])
def test_a_campaign_reduces_each_buckets_example_when_its_shrinking_ends(max_shrink_s):
    """With a shrink limit the engine reduces the example it keeps for a bucket (the repro's),
    and the reduced example still shows its bucket; with none it keeps the first example."""
    cse = load_pass("cse")
    sizes: dict[str, list[int]] = {}
    minimized: dict = {}

    def on_bucket(b):
        sizes.setdefault(b.id, []).append(b.graph_nodes)

    def on_minimized(b):
        minimized.setdefault(b.id, b)

    settings = CampaignSettings(max_examples=40, max_shrink_s=max_shrink_s, seed=2, domain="functional")
    result = run_campaign(
        cse, settings, hooks=Hooks(on_bucket=on_bucket, on_minimized=on_minimized, stop=lambda: bool(minimized))
    )
    if max_shrink_s == 0:
        assert result.stats["reduce_attempts"] == 0
        return
    assert minimized and result.stats["reduce_attempts"] > 0
    ((bid, b),) = minimized.items()
    assert b.graph_nodes < sizes[bid][0] and b.graph_nodes <= 8, (sizes[bid], b.case.code())
    assert bid in {bucket_id(f) for f in verify(b.case, cse)}


# The saved repros of known findings (tests/data), each with the known file that lists its
# bucket for its pass: campaigns' examples from before the graph-level reduction. Left out: the
# two downstream buckets (cse/downstream-run_decompositions_raised-1cab78ce.json,
# unflatten_after_def_use.json), whose every candidate goes through torch.export's stages, minutes
# of CPU for a reduction; docs/known-findings.md has their measured counts.
KNOWN_REPROS = {
    "constant_folding/equivalence-value_mismatch-6ac4edc4.json": "docs/known/constant_folding.txt",
    "constant_folding/structure-cleanup_failed-d8725f23.json": "docs/known/constant_folding.txt",
    "cse/effects-effect_value_mismatch-507a3bca.json": "docs/known/cse.txt",
    "cse/equivalence-autocast_state_leak-71f39855.json": "docs/known/cse.txt",
    "cse/equivalence-meta_mismatch-19aff044.json": "docs/known/cse.txt",
    "cse/gradients-jvp_raises_differently-e49618fd.json": "docs/known/cse.txt",
    "cse/gradients-tangent_value_mismatch-358a589a.json": "docs/known/cse.txt",
    "cse/structure-dead_code_elimination_changes_meaning-72cda7b9.json": "docs/known/cse.txt",
    "cse/structure-rerun_changes_meaning-4082287d.json": "docs/known/cse.txt",
    "set_grad_dce/crash-pass_raised-9a4e04cc.json": "docs/known/set_grad+dce.txt",
    "set_grad_dce/equivalence-raises_differently-bc45a4ea.json": "docs/known/set_grad+dce.txt",
    "set_grad_dce/equivalence-value_mismatch-6ac4edc4.json": "docs/known/set_grad+dce.txt",
    "set_grad_dce/structure-lint_failed-5f2a1a94.json": "docs/known/set_grad+dce.txt",
    "repro_before_namespace.json": "fxfuzz-known.txt",
}


# docs/known-findings.md ("Repro sizes") says why this one needs more than 8.
NEEDS_MORE = {"cse/structure-rerun_changes_meaning-4082287d.json": 9}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KNOWN_REPROS))
def test_a_known_findings_saved_repro_reduces_to_at_most_eight_compute_nodes(name, tmp_path):
    """docs/known-findings.md lists the counts (and says why a finding needs more, where one
    does)."""
    path = os.path.join(DATA, name)
    repro = load_repro(path)
    with open(path) as fh:
        bucket = json.load(fh)["bucket"]
    assert bucket in load_known(os.path.join(ROOT, KNOWN_REPROS[name]))
    pass_fn, identity = resolve_pass(repro.pass_spec, repro.contract)
    settings = settings_for(identity, repro.device)
    reduced = reduce_finding(repro.case, pass_fn, settings, str(tmp_path), bucket, max_steps=300)
    assert reduced is not None
    assert reduced.reduction.case.compute_nodes() <= NEEDS_MORE.get(name, 8), reduced.reduction.case.code()
    with stages_forced():
        assert bucket in findings_of(reduced.reduction.case, pass_fn, settings)


# ---------------------------------------------------------------------------- regions, toggles, sizes


def _calls(case, target) -> int:
    return sum(
        1 for m in case.gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes if n.target is target
    )


def _runs(case, first=None):
    """The case's outputs, run as the oracles run it (with ``first`` for its first input when
    given), and whether the run left the grad mode or autocast changed."""
    inputs = [clone_input(t) for t in case.inputs]
    if first is not None:
        inputs[0] = first.detach().clone().requires_grad_(inputs[0].requires_grad)
    with isolated(case.ambient_grad):
        out = case.gm(*inputs)
        return out, (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")) != (case.ambient_grad, False)


class CondOfSin(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


def test_a_cond_is_replaced_by_the_branch_the_finding_needs():
    """The finding here is "sin of the first input is returned": without inlining, the cond,
    its getitem, the sin and what is left of the other branch stay."""
    case = from_module(CondOfSin(), (torch.rand(3) + 0.5,))

    def holds(c):
        x = c.inputs[0] + 1  # another first input: no input fed the value stands in for the call
        out, _ = _runs(c, x)
        return _calls(c, torch.ops.aten.sin.default) == 1 and torch.equal(out[0], x.sin())

    assert holds(case)
    reduced = reduce_case(case, holds, max_steps=300)
    assert reduced.stopped_by == "fixed point"
    assert reduced.case.compute_nodes() == 1 and not list(reduced.case.gm.children()), reduced.case.code()
    assert holds(reduced.case) and signature_follows_placeholders(reduced.case)


class NoGradSin(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x.sin()
        return y, x.cos()


@pytest.mark.parametrize("keep_no_grad", [True, False])
def test_a_grad_region_is_inlined_with_its_mode_as_toggles_or_alone(keep_no_grad, tmp_path):
    """torch.export wraps the no_grad block in wrap_with_set_grad_enabled. Where the finding
    needs the sin's result not to require grad, the body comes out between two toggles; where
    it does not, the body alone."""
    ep = torch.export.export(NoGradSin(), (torch.randn(3, requires_grad=True),))
    torch.export.save(ep, str(tmp_path / "p.pt2"))
    case = load_exported(str(tmp_path / "p.pt2"))
    assert _calls(case, torch.ops.higher_order.wrap_with_set_grad_enabled) == 1

    def holds(c):
        """sin of the first input is returned (another first input gives its sin: no input
        fed the value stands in for the call), without grad where ``keep_no_grad``."""
        x = c.inputs[0].detach() + 1
        out, leaked = _runs(c, x)
        found = [o for o in out if torch.equal(o.detach(), x.sin())]
        needed = any(not o.requires_grad or not keep_no_grad for o in found)
        return not leaked and _calls(c, torch.ops.aten.sin.default) == 1 and needed

    assert holds(case)
    reduced = reduce_case(case, holds, max_steps=300)
    assert reduced.stopped_by == "fixed point" and not list(reduced.case.gm.children()), reduced.case.code()
    toggles = _calls(reduced.case, torch._C._set_grad_enabled)
    assert (reduced.case.compute_nodes(), toggles) == ((3, 2) if keep_no_grad else (1, 0)), reduced.case.code()
    assert holds(reduced.case)


class AutocastSin(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x.sin()
        return y


def test_an_autocast_region_goes_with_both_its_toggles():
    """``_exit_autocast`` reads ``_enter_autocast``, so the enter cannot go alone, and the exit
    alone leaves autocast on: only the pair goes."""
    case = from_module(AutocastSin(), (torch.randn(3),))
    assert _calls(case, torch.amp.autocast_mode._enter_autocast) == 1

    def holds(c):
        _, leaked = _runs(c)
        return not leaked and _calls(c, torch.ops.aten.sin.default) == 1

    reduced = reduce_case(case, holds, max_steps=300)
    assert reduced.stopped_by == "fixed point"
    assert reduced.case.compute_nodes() == 1, reduced.case.code()


class Matmul(torch.nn.Module):
    def forward(self, x, y):
        return (x @ y).relu()


def test_sizes_shrink_while_the_finding_holds():
    """Every dimension of one size is cut at once and the metas follow; a size the finding
    needs (here: the first input has at least two rows) stays."""
    case = from_module(Matmul(), (torch.randn(6, 4), torch.randn(4, 5)))

    def holds(c):
        out, _ = _runs(c)
        return c.inputs[0].shape[0] >= 2 and _calls(c, torch.ops.aten.matmul.default) == 1

    assert holds(case)
    reduced = reduce_case(case, holds, max_steps=300)
    assert reduced.stopped_by == "fixed point"
    assert [tuple(t.shape) for t in reduced.case.inputs] == [(3, 1), (1, 1)], reduced.case.code()
    for node in reduced.case.gm.graph.nodes:
        if isinstance(node.meta.get("val"), torch.Tensor):
            assert node.meta["val"].shape[0] in (1, 3)


# ---------------------------------------------------------------------------- fxfuzz reduce


@pytest.fixture(scope="module")
def deep_program(tmp_path_factory):
    """A residual stack of 48 blocks (over 200 compute nodes) holding tanh(relu(...)) once,
    saved with torch.export.save."""
    import sys

    sys.path.insert(0, HELPERS)
    from reduce_passes import Deep

    torch.manual_seed(0)
    ep = torch.export.export(Deep(48), (torch.randn(2, 4),))
    path = tmp_path_factory.mktemp("deep") / "deep.pt2"
    torch.export.save(ep, str(path))
    return str(path), sum(1 for n in ep.graph.nodes if n.op == "call_function")


@pytest.mark.slow
def test_fxfuzz_reduce_turns_a_failing_exported_program_into_a_small_repro(cli, deep_program, tmp_path):
    path, nodes = deep_program
    assert nodes >= 200
    r = cli("reduce", path, "--pass", BROKEN, "--out", str(tmp_path), "--max-shrink-s", "300", "--max-steps", "400")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ended at a fixed point" in r.stdout, r.stdout  # it finished inside its bound
    (json_path,) = tmp_path.glob("repros/*.json")
    assert (tmp_path / "repros" / (json_path.stem + ".py")).exists()
    repro = load_repro(str(json_path))
    assert repro.case.compute_nodes() <= 10, repro.case.code()
    assert json_path.stem in {bucket_id(f) for f in verify(repro.case, load_pass(BROKEN))}
    assert signature_follows_placeholders(repro.case)


@pytest.mark.slow
def test_fxfuzz_reduce_says_so_when_the_graph_shows_no_finding(cli, deep_program, tmp_path):
    r = cli("reduce", deep_program[0], "--pass", f"{HELPERS}/reduce_passes.py:unchanged", "--out", str(tmp_path))
    assert r.returncode == 0 and "nothing to reduce" in r.stdout
    assert not (tmp_path / "repros").exists()


@pytest.mark.slow
def test_fxfuzz_reduce_refuses_a_bucket_the_graph_does_not_show(cli, deep_program, tmp_path):
    r = cli(
        "reduce", deep_program[0], "--pass", BROKEN, "--bucket", "crash-pass_raised-00000000", "--out", str(tmp_path)
    )
    assert r.returncode == 2 and "does not show bucket crash-pass_raised-00000000" in r.stderr


class _Marker:
    """A pickle that, unpickled by the full unpickler, creates the file it names."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _with_replaced(src: str, dst: str, suffix: str, data: bytes) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, data if item.filename.endswith(suffix) else zin.read(item.filename))


@pytest.mark.slow
def test_a_saved_program_whose_example_inputs_only_the_full_unpickler_reads_is_refused(deep_program, tmp_path):
    """torch.export.load falls back to the full unpickler for example inputs the restricted
    one refuses, so the file's code runs (shown first); load_exported refuses the file and
    nothing runs."""
    marker = tmp_path / "ran"
    hostile = str(tmp_path / "hostile.pt2")
    _with_replaced(deep_program[0], hostile, "data/sample_inputs/model.pt", pickle.dumps(_Marker(str(marker))))
    with pytest.raises(Exception):  # noqa: B017  whatever torch's loader makes of the marker's file object
        torch.export.load(hostile)  # the marker's open() returns a file object, not inputs
    assert marker.exists(), "torch.export.load no longer runs this pickle: the check in fxfuzz.core.pt2 may be loosened"
    marker.unlink()
    with pytest.raises(UntrustedError, match="example inputs"):
        load_exported(hostile)
    assert not marker.exists()


@pytest.mark.slow
def test_a_saved_program_with_a_pickled_weight_is_loaded_only_if_the_restricted_unpickler_reads_it(
    deep_program, tmp_path
):
    marker = tmp_path / "ran"
    with zipfile.ZipFile(deep_program[0]) as z:
        (config_name,) = [n for n in z.namelist() if n.endswith("model_weights_config.json")]
        config = json.loads(z.read(config_name))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True

    def archive(weight: bytes) -> str:
        out = str(tmp_path / f"w{len(weight)}.pt2")
        with zipfile.ZipFile(deep_program[0]) as zin, zipfile.ZipFile(out, "w") as zout:
            for item in zin.infolist():
                if item.filename == config_name:
                    zout.writestr(item, json.dumps(config))
                elif item.filename.endswith("data/weights/" + first["path_name"]):
                    zout.writestr(item, weight)
                else:
                    zout.writestr(item, zin.read(item.filename))
        return out

    with pytest.raises(UntrustedError, match="weights entry"):
        load_exported(archive(pickle.dumps(_Marker(str(marker)))))
    assert not marker.exists()
    buffer = io.BytesIO()
    torch.save(torch.nn.Parameter(torch.zeros(4, 4)), buffer)
    assert load_exported(archive(buffer.getvalue())).compute_nodes() >= 200  # a plain tensor pickle loads


class Case(NamedTuple):  # what ``_calls`` reads of a case: its graph module
    gm: torch.fx.GraphModule


class CondInCond(torch.nn.Module):
    def forward(self, x):
        inner = lambda x: torch.cond(x.sum() > 1, lambda x: x.sin(), lambda x: x.cos(), (x,))  # noqa: E731
        return torch.cond(x.sum() > 0, inner, lambda x: x.tan(), (x,))


def test_a_cond_inside_a_branch_is_replaced_by_its_branch_too():
    """The finding here is "the top-level cond, its other branch calling tan, returns sin of
    the input": the top-level cond must stay, so only inlining the cond nested in its branch
    takes the inner cond out."""
    case = from_module(CondInCond(), (torch.rand(3) + 0.5,))

    def holds(c):
        top = [n for n in c.gm.graph.nodes if n.target is torch.ops.higher_order.cond]
        if len(top) != 1 or _calls(c, torch.ops.aten.sin.default) != 1:
            return False
        other = getattr(c.gm, top[0].args[2].target)
        out, _ = _runs(c)
        return _calls(Case(other), torch.ops.aten.tan.default) == 1 and torch.equal(out[0], c.inputs[0].sin())

    assert holds(case) and _calls(case, torch.ops.higher_order.cond) == 2
    reduced = reduce_case(case, holds, max_steps=300)
    assert holds(reduced.case) and _calls(reduced.case, torch.ops.higher_order.cond) == 1, reduced.case.code()


# A campaign's example, reduced before conds nested in branches were.
KNOWN_FIRST = "set_grad/crash-pass_raised-2b2fc5ab.json"


@pytest.mark.parametrize("max_shrink_s", [0, 600])
def test_a_known_buckets_first_example_is_reduced_once_so_its_repro_is_a_short_program(max_shrink_s, tmp_path):
    """Hypothesis never shrinks a known bucket, but the engine reduces its first example (as a
    new bucket's, within ``max_shrink_s``): the README's campaign, all of whose buckets are
    known, writes short programs. The example here comes to 43 lines as one."""
    from fxfuzz.core.serialize import case_to_dict
    from fxfuzz.repro.files import repro_document
    from fxfuzz.repro.short import short_program

    repro = load_repro(os.path.join(DATA, KNOWN_FIRST))
    pass_fn, identity = resolve_pass(repro.pass_spec, repro.contract)
    known = frozenset(load_known(os.path.join(ROOT, "fxfuzz-known.txt")))
    seen: list[int] = []
    settings = CampaignSettings(max_examples=1, max_shrink_s=max_shrink_s, known=known, identity=identity)
    result = run_campaign(
        pass_fn, settings, hooks=Hooks(on_bucket=lambda b: seen.append(b.graph_nodes)), rerun=[repro.case]
    )
    ((bid, bucket),) = result.buckets.items()
    assert bid in known and bucket.count == 1 and "shrink_attempts" not in result.stats

    def program(case) -> str | None:
        return short_program(repro_document(bid, bucket.finding.to_dict(), case_to_dict(case), identity))

    if max_shrink_s == 0:
        assert result.stats["reduce_attempts"] == 0 and program(bucket.case) is None and len(seen) == 1
        return
    assert result.stats["reduce_attempts"] > 0 and seen[-1] < seen[0]
    source = program(bucket.case)
    assert source is not None and "import fxfuzz" not in source and "from fxfuzz" not in source, source
    assert bid in findings_of(bucket.case, pass_fn, settings_for(identity, "cpu"))
