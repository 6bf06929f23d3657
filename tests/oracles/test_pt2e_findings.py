"""Known defects of Inductor's constant folder and torchao 0.18.0's pt2e quantization, each
found by a campaign of its catalogue row, pinned on the graph a real caller hands the pass
and through fxfuzz's oracles (the bucket its known file lists).

Each test asserts the defect is still there: when torch or torchao fixes it, the test fails,
and its line in docs/known/<row>.txt and its section in docs/known-findings.md go.
"""

from __future__ import annotations

import copy
from pathlib import Path

import handmade as hm
import pytest
import torch
from fxfuzz.campaign.engine import bucket_id
from fxfuzz.core.known import load_known
from fxfuzz.core.passes import load_pass
from fxfuzz.oracles import verify
from fxfuzz.strategies import from_module
from known_modules import (
    AddsIntoInput,
    CondInMap,
    IntegerAddScalar,
    IntegerMul,
    LiteralUpdated,
    LogLinear,
    integer_args,
    integer_tensor_args,
    negative_args,
    reread_constant_case,
)
from paths import ROOT

KNOWN_DIR = Path(ROOT) / "docs" / "known"
FIXED = "fixed upstream: drop its line from {known} and its section in docs/known-findings.md"


def known(row: str) -> dict[str, str]:
    return load_known(str(KNOWN_DIR / f"{row}.txt"))


# --- Inductor's constant_fold deletes an attribute another get_attr still reads -------------


@pytest.mark.parametrize(
    "where",
    ["torch._inductor.constant_folding", "torchao.quantization.pt2e.constant_fold"],
)
def test_constant_fold_deletes_an_attribute_another_read_still_uses(where):
    """Inductor's folder and torchao's copy (convert_pt2e folds quantized weights with it)
    ``delattr`` the target of every get_attr left without users, though another get_attr of
    the same target still reads it; ``lint()`` then raises."""
    import importlib

    fold = importlib.import_module(where).constant_fold
    gm = reread_constant_case().gm
    with pytest.raises(RuntimeError, match="references nonexistent attribute _tensor_constant0"):
        fold(gm)


def test_export_constant_fold_has_the_fix():
    """torch.export's copy deletes an attribute only when no get_attr reads it any more."""
    from fxfuzz.core.catalogue import constant_fold

    gm = reread_constant_case().gm
    constant_fold(gm)
    gm.graph.lint()


def test_the_deleted_attribute_found_by_the_oracles():
    found = verify(reread_constant_case(), load_pass("inductor_constant_fold"))
    assert [f.kind for f in found] == ["pass_raised"], FIXED.format(known="docs/known/inductor_constant_fold.txt")
    assert bucket_id(found[0]) in known("inductor_constant_fold")


# --- torchao's X86InductorQuantizer observes an integer mul ------------------------------------


def test_x86_quantizer_observes_an_integer_mul():
    """``export(...).module()``, prepared with the X86 Inductor quantizer's default config: the
    annotation of ``mul`` takes no account of dtype, so a HistogramObserver watches an int64
    tensor, and the calibration call raises."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    model = torch.export.export(IntegerMul(), integer_args()).module()
    prepared = prepare_pt2e(model, X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config()))
    with pytest.raises(RuntimeError, match="histogram_cpu.* not implemented for 'Long'"):
        prepared(*integer_args())


@pytest.mark.parametrize("row", ["pt2e_x86", "pt2e_x86_qat"])
def test_the_integer_mul_found_by_the_oracles(row):
    """Both X86 flows (the QAT one's fake-quantize raises otherwise); the XNNPACK-style
    quantizer leaves an integer mul alone."""
    found = verify(from_module(IntegerMul(), integer_args()), load_pass(row))
    assert [f.kind for f in found] == ["pass_raised"] and "Long" in found[0].message, FIXED.format(
        known=f"docs/known/{row}.txt"
    )
    assert bucket_id(found[0]) in known(row)
    assert (
        hm.unknown(verify(from_module(IntegerMul(), integer_args()), load_pass("pt2e_xnnpack")), "pt2e_xnnpack") == []
    )


# --- a model that cannot run is no verdict on the quantizer ---------------------------------


def test_a_calibration_call_that_raises_as_the_model_does_is_no_finding():
    """A ``map`` whose body makes a bfloat16 copy, in a float16 autocast region: the graph
    itself raises when run (map's eager kernel under CPU autocast), and so does the flow's
    calibration call, which runs the model as its caller would. No verdict on the quantizer
    (a false alarm of quantizes' false-alarm run, tests/data/calibration_raises_as_the_model_does.json);
    where only the prepared model raises (the NaN batch below), it is still the pass's."""
    import os

    from fxfuzz.oracles.execute import run_graph
    from fxfuzz.repro.files import load_repro
    from paths import DATA

    case = load_repro(os.path.join(DATA, "calibration_raises_as_the_model_does.json")).case
    assert run_graph(case.gm, case.inputs, case.ambient_grad).error is not None
    assert verify(case, load_pass("pt2e_xnnpack")) == []
    nan = {bucket_id(f) for f in verify(from_module(LogLinear(), negative_args()), load_pass("pt2e_xnnpack"))}
    assert nan == {"crash-pass_raised-d828124b"}, nan


# --- convert_pt2e turns an integer add of a scalar into a float32 result --------------------


def test_convert_pt2e_turns_an_integer_add_of_a_scalar_into_float():
    """``export(...).module()`` of ``n + 2`` on an int64 tensor, through torchao's flow with
    the XNNPACK-style quantizer: the converted module holds the scalar as a float32 tensor
    constant and returns float32 where the model returns int64."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    (n,) = integer_tensor_args()
    model = torch.export.export(IntegerAddScalar(), (n,)).module()
    prepared = prepare_pt2e(model, XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    prepared(n)
    converted = convert_pt2e(prepared)
    assert IntegerAddScalar()(n).dtype == torch.int64
    assert converted(n).dtype == torch.float32, FIXED.format(known="docs/known/pt2e_xnnpack.txt")


def test_the_integer_add_found_by_the_oracles():
    """The bucket the row's false-alarm run drew (docs/history.md), listed known."""
    found = verify(from_module(IntegerAddScalar(), integer_tensor_args()), load_pass("pt2e_xnnpack"))
    meta = [f for f in found if f.kind == "meta_mismatch"]
    assert meta and "torch.int64" in meta[0].message and "torch.float32" in meta[0].message, found
    assert bucket_id(meta[0]) in known("pt2e_xnnpack")


# --- convert_pt2e deletes the subgraphs of a HOP nested in a HOP's subgraph ------------------


def test_delete_all_unused_submodules_drops_nested_subgraphs():
    """torch.fx's ``GraphModule.delete_all_unused_submodules`` keeps a submodule only where a
    node of the root graph reads it: a cond's branches read inside a map body are deleted
    though the body still calls them."""
    model = torch.export.export(CondInMap(), (torch.randn(2, 3),)).module()
    body = next(m for n, m in model.named_children() if n.startswith("body_graph"))
    assert any(n.startswith("true_graph") for n, _ in body.named_children())
    model.delete_all_unused_submodules()
    assert not any(n.startswith("true_graph") for n, _ in body.named_children())


@pytest.mark.parametrize("row", ["pt2e_x86", "pt2e_x86_qat", "pt2e_xnnpack"])
def test_convert_pt2e_fails_on_a_cond_inside_a_map(row):
    """convert_pt2e's ``_convert_to_reference_decomposed_fx`` ends with that call; its
    DuplicateDQPass then lints the body and raises."""
    found = verify(from_module(CondInMap(), (torch.randn(2, 3),)), load_pass(row))
    assert [f.kind for f in found] == ["pass_raised"], FIXED.format(known=f"docs/known/{row}.txt")
    assert "DuplicateDQPass" in found[0].message
    assert bucket_id(found[0]) in known(row)


def test_convert_pt2e_raises_on_the_module_export_hands_it():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    xs = torch.randn(2, 3)
    model = torch.export.export(CondInMap(), (xs,)).module()
    prepared = prepare_pt2e(model, X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config()))
    prepared(copy.deepcopy(xs))
    with pytest.raises(Exception, match="DuplicateDQPass") as raised:
        convert_pt2e(prepared)
    assert "references nonexistent attribute" in str(raised.value.__cause__)


# --- convert_pt2e quantizes the operands of an in-place add: the input is never updated ------


def test_convert_pt2e_loses_the_update_of_an_input_an_inplace_add_makes():
    """``x.add_(y)`` on a user input, exported and quantized with the XNNPACK-style quantizer:
    ``convert_pt2e`` puts a quantize/dequantize pair on each operand of the annotated ``add_``,
    which then updates the dequantized copy; the caller's ``x`` keeps its value and the output
    no longer is ``x``. The prepared model (observers return their input) still updates it."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    def args():
        return torch.tensor([[1.0]]), torch.tensor([[2.0]])

    model = torch.export.export(AddsIntoInput(), args()).module()
    prepared = prepare_pt2e(model, XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    x, y = args()
    assert prepared(x, y) is x and x.item() == 3.0
    converted = convert_pt2e(prepared)
    x, y = args()
    out = converted(x, y)
    assert x.item() == 1.0 and out.data_ptr() != x.data_ptr(), FIXED.format(known="docs/known/pt2e_xnnpack.txt")


def test_the_lost_input_update_found_by_the_oracles():
    """Both buckets the pt2e_xnnpack campaign drew (each repro one ``add_`` node) on the
    module: the input not updated, and the output no longer sharing its storage. The X86
    quantizer leaves a lone ``add_`` unannotated."""
    case = from_module(AddsIntoInput(), (torch.tensor([[1.0]]), torch.tensor([[2.0]])))
    found = {bucket_id(f): f.message for f in verify(case, load_pass("pt2e_xnnpack"))}
    assert "input 0 after the call" in found.get("equivalence-value_mismatch-6ac4edc4", ""), FIXED.format(
        known="docs/known/pt2e_xnnpack.txt"
    )
    assert "output 0: shared storage with ('input', 0)" in found.get("equivalence-aliasing_mismatch-16544f3e", "")
    assert set(found) <= set(known("pt2e_xnnpack")), found
    assert hm.unknown(verify(case, load_pass("pt2e_x86")), "pt2e_x86") == []


def test_inductor_constant_fold_folds_a_value_the_graph_then_updates():
    """The in-place defect of torch.export's copy (docs/known/constant_folding.txt) is
    Inductor's too: the literal is folded into an attribute that ``mul_`` then updates on
    every call, so results accumulate."""
    from torch._inductor.constant_folding import constant_fold

    x = torch.full((3,), 2.0)
    gm = torch.export.export(LiteralUpdated(), (x,)).module()
    constant_fold(gm)
    first, second = gm(x).clone(), gm(x).clone()
    assert torch.equal(first, torch.tensor([2.0, 4.0, 6.0])) and torch.equal(second, torch.tensor([4.0, 8.0, 12.0])), (
        FIXED.format(known="docs/known/inductor_constant_fold.txt")
    )


# --- torchao's observers refuse a calibration batch whose activations hold NaN --------------


def _xnnpack():
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config())


def _x86(qat: bool):
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_qat=qat))


@pytest.mark.parametrize("quantizer", ["xnnpack", "x86"])
def test_histogram_observer_raises_on_nan_activations(quantizer):
    """A linear layer on ``x.log()``, calibrated on negative values: HistogramObserver, the
    activation observer of both quantizers' static configs, calls ``torch.histc`` over the
    batch's range, and a NaN range raises (pytorch/pytorch#103467 made it skip inf, not NaN)."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    model = torch.export.export(LogLinear(), negative_args()).module()
    prepared = prepare_pt2e(model, _xnnpack() if quantizer == "xnnpack" else _x86(qat=False))
    try:
        prepared(*negative_args())
    except RuntimeError as e:
        assert "torch.histc: range of [-nan, -nan] is not finite" in str(e), e
    else:
        raise AssertionError(FIXED.format(known=f"docs/known/pt2e_{quantizer}.txt"))


def test_the_qat_observer_asserts_on_nan_activations_at_convert():
    """The X86 QAT config's fake-quantize observes the NaN batch without a word; ``convert_pt2e``
    then computes its qparams and asserts min < max."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    prepared = prepare_qat_pt2e(torch.export.export(LogLinear(), negative_args()).module(), _x86(qat=True))
    prepared(*negative_args())
    try:
        convert_pt2e(prepared)
    except AssertionError as e:
        assert "min nan should be less than max nan" in str(e), e
    else:
        raise AssertionError(FIXED.format(known="docs/known/pt2e_x86_qat.txt"))


@pytest.mark.parametrize(
    "row, bucket",
    [
        ("pt2e_xnnpack", "crash-pass_raised-d828124b"),
        ("pt2e_x86", "crash-pass_raised-d828124b"),
        ("pt2e_x86_qat", "crash-pass_raised-56cbf3f1"),
    ],
)
def test_nan_activations_found_by_the_oracles(row, bucket):
    """The bucket each row draws on the module (xnnpack's drawn by its campaign), listed known."""
    found = {bucket_id(f) for f in verify(from_module(LogLinear(), negative_args()), load_pass(row))}
    assert found == {bucket}, found
    assert bucket in known(row)
