"""qcdoctor probe on real architectures with one realistic fault each: the probe's own
tables must put the first departure from the clean band at the faulty layer.

pytorchcv networks of several families (depthwise MobileNetV2, SiLU EfficientNet,
squeeze-excitation SE-ResNet, residual ResNet) and a ViT-style transformer (pytorchcv
has none), random weights with BN statistics from data, quantized with torch.ao FX QAT
(the default QAT qconfig mapping, calibrated, observers frozen). Each fault is injected
into a copy of the clean QAT model; the probe runs with the clean QAT model as baseline
(rows before the fault are the very same computation: Cosine 1) and with the float model
as baseline, fused the same way (fuse_fx) and not fused at all (the probe aligns each
fused analysis module with the end of the same float pattern): there the clean band is
the clean QAT model's own row against the same baseline.

Assertions rest on the written compare_per_layer_out.txt (read back with our reader),
not on the layer reading of collectors/.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")

from qcdoctor.collectors.reading.compare_layers import load_compare  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    LutSiLU,
    coarsen_all,
    function_node,
    inject,
    network,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    per_tensor_weights,
    quantize,
    swap_module,
)

SIZE = 64
CLEAN = 0.999               # knowledge.md's cosine_good: a clean row against clean QAT



def example():
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))


@functools.lru_cache(maxsize=2)
def built(arch: str, backend: str = "qnnpack", spread: bool = False, silu: bool = False):
    """(float model, fuse_fx float model, calibrated clean FX QAT model)."""
    float_model = network(arch, SIZE, spread=spread, silu=silu)
    fused, qat = quantize(float_model, example(), backend=backend)
    return float_model, fused, qat


def table(tmp_path, baseline, analysis, name: str):
    """(row names, Cosine per row, the result) as the written txt table says."""
    result = compare_models(baseline, analysis, example(), tmp_path / name, sensitivity=False)
    frame = load_compare(tmp_path / name / "compare_per_layer_out.txt").frame
    return [s.strip() for s in frame["mod_name"]], frame["cosine"].tolist(), result


def output_cosine(a, b) -> float:
    with torch.no_grad():
        x, y = a(example()).flatten(), b(example()).flatten()
    return float(torch.nn.functional.cosine_similarity(x, y, 0))


@dataclass
class Case:
    arch: str
    layer: str                          # the faulty layer's row name
    fault: object                       # (clean qat, example) -> faulty copy
    backend: str = "qnnpack"
    spread: bool = False
    silu: bool = False
    output_below: float = 0.999         # the fault must show at the model output
    analy_op_type: str = ""


def _add_saturates(qat, _x):
    # the residual add of the second unit of stage 2: its output fake quant's range is
    # clamped to a quarter around its zero point, so large sums saturate
    return inject(qat, function_node(qat, "features.stage2.unit2", "add"), scale_factor=0.25)


CASES = {
    # per-tensor instead of per-channel weights on a depthwise conv whose folded weights
    # differ by two decades between channels (dead channels)
    "depthwise_per_tensor": Case(
        "mobilenetv2_w1", "features.stage2.unit1.conv2.conv",
        lambda qat, x: per_tensor_weights(qat, "features.stage2.unit1.conv2.conv", x),
        backend="x86", spread=True, output_below=0.99),
    # a SiLU evaluated by a 16-entry look-up table
    "silu_lut": Case(
        "efficientnet_b0", "features.stage1.unit1.dw_conv.activ",
        lambda qat, x: swap_module(qat, "features.stage1.unit1.dw_conv.activ", LutSiLU()),
        silu=True, output_below=0.99, analy_op_type="LutSiLU"),
    # a residual add that saturates (a function node, named by its module path)
    "residual_add_saturates": Case(
        "mobilenetv2_w1", "features.stage2.unit2.add", _add_saturates, output_below=0.99,
        analy_op_type="operator.add"),
    # one conv's activation fake quant with a 16 times too coarse scale (SE network)
    "coarse_scale_se": Case(
        "seresnet10", "features.stage2.unit1.body.conv1.conv",
        lambda qat, x: inject(qat, "features.stage2.unit1.body.conv1.conv", coarse=16)),
    # the same in a transformer block: the first MLP linear
    "coarse_scale_transformer": Case(
        "tinyvit", "blocks.0.mlp.0", lambda qat, x: inject(qat, "blocks.0.mlp.0", coarse=16)),
}


def leaves_band(faulty: float, clean: float) -> bool:
    """A row clearly worse than the clean QAT model's same row (both against the same
    float baseline): half as much error again, and a thousandth at least."""
    return (1 - faulty) > 1.5 * (1 - clean) + 1e-3


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fault_is_the_first_row_off_the_clean_band(tmp_path, name):
    case = CASES[name]
    float_model, fused, qat = built(case.arch, case.backend, case.spread, case.silu)
    faulty = case.fault(qat, example())
    assert output_cosine(qat, faulty) < case.output_below          # the fault matters

    # clean QAT baseline: everything before the fault is the same computation
    names, cosines, result = table(tmp_path, qat, faulty, "against_qat")
    assert not result.analysis_only and not result.unaligned and result.matched_share == 1.0
    first = next(i for i, c in enumerate(cosines) if c < CLEAN)
    assert names[first] == case.layer, (names[first], cosines[first])
    assert all(c >= CLEAN for c in cosines[:first]) and first > 0
    row = result.rows[first]
    assert case.analy_op_type in row["analy_op_type"] and row["match"] == "name"

    # float baselines, fused as the QAT model is and not fused: the clean band is the
    # clean QAT model's row against the same baseline
    for label, baseline in (("fused", fused), ("float", float_model)):
        clean_names, clean, clean_result = table(tmp_path, baseline, qat, f"clean_{label}")
        names, cosines, result = table(tmp_path, baseline, faulty, f"faulty_{label}")
        assert names == clean_names and clean_result.matched_share == 1.0, label
        assert not clean_result.baseline_only and not clean_result.unaligned, label
        off = next(i for i, (f, c) in enumerate(zip(cosines, clean, strict=True))
                   if leaves_band(f, c))
        assert names[off] == case.layer, (label, names[off], cosines[off], clean[off])
        assert cosines[:off] == pytest.approx(clean[:off], abs=1e-9), label


def test_everywhere_slightly_coarse_is_a_decline_without_a_step(tmp_path):
    """Every activation fake quant four times too coarse: the error starts at the first
    row and grows in small steps, none of them a cliff or most of the loss."""
    _, fused, qat = built("resnet10")
    faulty = coarsen_all(qat, 4)
    assert output_cosine(qat, faulty) < 0.995
    for label, baseline in (("qat", qat), ("fused", fused)):
        names, cosines, _ = table(tmp_path, baseline, faulty, label)
        values = [c for c in cosines if not math.isnan(c)]
        assert values[0] < 0.9995, label                # off from the very first row
        drops = [a - b for a, b in zip([1.0] + values[:-1], values, strict=True)]
        loss = 1 - min(values)
        assert loss > 0.01, label
        biggest = max(drops)
        assert biggest < 0.01 and biggest < 0.5 * loss, (label, biggest, loss)
        # the loss before the biggest step is a large part of it: no origin, accumulation
        at = drops.index(biggest)
        assert 1 - min(values[:at] or [1.0]) > 0.3 * loss, label
        assert sum(d > 0 for d in drops) >= len(drops) // 3, label
