"""probe/fused.py, the compiled kernel of the row metrics: built by the install, it gives
the extremes torch gives (a NaN anywhere makes them NaN), the difference torch's
subtraction gives bit for bit, and sums within float64 rounding of exact ones, whatever
the length (whole lanes and a tail); the row metrics with it agree with torch's own
reductions."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from qcdoctor.probe import fused  # noqa: E402
from qcdoctor.probe.stats import pair_stats, side_stats  # noqa: E402

LENGTHS = [1, 7, 8, 9, 31, 4096, 12_289]


def test_the_install_built_the_kernel():
    # without it the probe still runs (torch's reductions), more slowly: a test
    # environment must measure the kernel, not the fallback
    assert fused.available()


@pytest.mark.parametrize("n", LENGTHS)
def test_side_is_torchs_extremes_and_exact_sums(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3 + 0.5
    low, high, total, squares = fused.side(x)
    assert (low, high) == (float(x.min()), float(x.max()))
    exact = x.double()
    assert total == pytest.approx(float(exact.sum()), rel=1e-12, abs=1e-12)
    assert squares == pytest.approx(float(exact.pow(2).sum()), rel=1e-12)


@pytest.mark.parametrize("n", LENGTHS)
def test_pair_writes_torchs_difference_and_its_numbers(n):
    generator = torch.Generator().manual_seed(n + 1)
    base = torch.randn(n, generator=generator)
    analysis = base + 0.01 * torch.randn(n, generator=generator)
    base[::5] = 0.0                                     # no ratio where the base is 0
    diff = torch.full((n,), 7.0)
    noise, l1, atol, rtol = fused.pair(base, analysis, diff)
    assert torch.equal(diff, analysis - base)
    exact = diff.double()
    assert noise == pytest.approx(float(exact.pow(2).sum()), rel=1e-12, abs=1e-30)
    assert l1 == pytest.approx(float(exact.abs().sum()), rel=1e-12, abs=1e-30)
    assert atol == float(diff.abs().max())
    live = base != 0
    want = float((diff.abs()[live] / base.abs()[live]).max()) if bool(live.any()) else 0.0
    assert rtol == want


def test_a_nan_makes_the_extremes_nan_and_an_infinity_stays_one():
    x = torch.randn(100)
    x[41] = float("inf")
    low, high, total, _ = fused.side(x)
    assert high == math.inf and math.isinf(total) and low == float(x.min())
    x[77] = float("nan")
    low, high, total, squares = fused.side(x)
    assert all(v != v for v in (low, high, total, squares))
    base, analysis = torch.randn(50), torch.randn(50)
    analysis[3] = float("nan")
    _, _, atol, _ = fused.pair(base, analysis, torch.empty(50))
    assert atol != atol


def test_the_row_metrics_agree_with_torchs_reductions(monkeypatch):
    """Each metric of a row with the kernel and without it: the same to float32 rounding
    (the kernel's sums are float64), including rows with zeros, an infinity and a
    NaN."""
    generator = torch.Generator().manual_seed(9)
    rows = []
    for n in (5, 3000, 70_000):
        base = torch.randn(n, generator=generator) * 2
        rows.append((base, base + 0.02 * torch.randn(n, generator=generator)))
    zeros = torch.randn(1000, generator=generator)
    zeros[::3] = 0.0
    rows.append((zeros, zeros + 0.1))
    broken = torch.randn(64, generator=generator)
    rows.append((broken, torch.where(torch.arange(64) == 5, torch.tensor(float("inf")),
                                     broken)))
    rows.append((broken, torch.where(torch.arange(64) == 9, torch.tensor(float("nan")),
                                     broken)))

    def numbers():
        return [(side_stats(a), pair_stats(b, a, base_side=side_stats(b),
                                           analy_side=side_stats(a))) for b, a in rows]
    with_kernel = numbers()
    monkeypatch.setattr(fused, "ENABLED", False)
    without = numbers()
    for (side, pair), (side_t, pair_t) in zip(with_kernel, without, strict=True):
        for got, want in ((side, side_t), (pair, pair_t)):
            assert got.keys() == want.keys()
            for name in got:
                g, w = got[name], want[name]
                if w is None or (isinstance(w, float) and math.isnan(w)):
                    assert g is None if w is None else g != g, name
                elif name == "cosine":
                    assert 1 - g == pytest.approx(1 - w, rel=1e-3, abs=1e-9), name
                elif name == "kl":
                    # torch's float32 sums of a large row's exponentials: within a few 1e-4
                    # of KL, by the machine's vector width (the kernel's are float64: within
                    # 5e-5 of the exact one, below)
                    assert g == pytest.approx(w, rel=5e-4, abs=1e-9), name
                else:
                    assert g == pytest.approx(w, rel=1e-5, abs=1e-9), name


@pytest.mark.parametrize("n", LENGTHS)
def test_a_quantized_output_is_measured_as_if_it_were_stored(n):
    """fake_quant_pair's numbers are those of fake_quant's stored values (torch's
    kernel's, NaN and infinities included) against the base."""
    generator = torch.Generator().manual_seed(n + 2)
    x = torch.randn(n, generator=generator) * 4
    x[n // 2] = float("nan") if n > 2 else x[0]
    base = x.nan_to_num(0.0) + 0.02 * torch.randn(n, generator=generator)
    step = torch.tensor(0.03)                   # float32, as a quantizer holds it
    numbers = (float(1.0 / step), float(step), -128.0, 127.0)    # 1/scale as the kernel
    stored = torch.empty(n)
    fused.fake_quant(x, stored, *numbers)
    want = torch.fake_quantize_per_tensor_affine(x, step, torch.tensor(0), -128, 127)
    assert torch.equal(stored, want)
    noise, atol, power = fused.fake_quant_pair(base, x, *numbers)
    diff = (stored - base).double()
    assert noise == pytest.approx(float(diff.pow(2).sum()), rel=1e-12, abs=1e-30)
    assert atol == float((stored - base).abs().max())
    assert power == pytest.approx(float(stored.double().pow(2).sum()), rel=1e-12)


def test_tensors_of_different_sizes_are_refused_before_any_memory_is_touched():
    small, large = torch.zeros(8), torch.zeros(1000)
    with pytest.raises(ValueError):
        fused.pair(large, small, torch.empty(1000))
    with pytest.raises(ValueError):
        fused.pair(large, large, small)
    with pytest.raises(ValueError):
        fused.fake_quant(large, small, 1.0, 1.0, -8.0, 7.0)
    with pytest.raises(ValueError):
        fused.fake_quant_pair(small, large, 1.0, 1.0, -8.0, 7.0)
    scales = torch.ones(3)
    with pytest.raises(ValueError):
        fused.fake_quant_channels(torch.zeros(4, 5), torch.empty(4, 5), 0, scales, scales,
                                  scales, scales)


@pytest.mark.parametrize("n", LENGTHS + [70_000])
@pytest.mark.parametrize("precise", [True, False], ids=["float64", "float32"])
def test_kls_sums_are_the_exact_ones_to_the_exponentials_precision(n, precise):
    """KL's three sums, the exponentials computed by the kernel (whole blocks, lanes and a
    tail), against float64 ones: within 1e-13 where ``precise``, else within float32's
    exponential (a few 1e-8); shifted or not."""
    generator = torch.Generator().manual_seed(n + 3)
    base = torch.randn(n, generator=generator) * 4
    analysis = base + 0.05 * torch.randn(n, generator=generator)
    diff = analysis - base
    tolerance = 1e-13 if precise else 3e-7
    for base_shift, analysis_shift in ((0.0, 0.0), (float(base.max()), float(analysis.max()))):
        weights = torch.exp(base.double() - base_shift)
        want = (float(weights.sum()), float((weights * diff.double()).sum()),
                float(torch.exp(analysis.double() - analysis_shift).sum()))
        got = fused.pair_kl(base, analysis, torch.empty(n), base_shift, analysis_shift,
                            precise)[4:]
        assert got[0] == pytest.approx(want[0], rel=tolerance)
        assert got[2] == pytest.approx(want[2], rel=tolerance)
        # the cross sum cancels: its error is relative to the sum of its terms' sizes
        size = float((weights * diff.double().abs()).sum())
        assert abs(got[1] - want[1]) <= tolerance * size


@pytest.mark.parametrize("precise", [True, False], ids=["float64", "float32"])
def test_kls_exponentials_underflow_to_zero_and_keep_a_nan(precise):
    """A term far below the largest (or -inf) adds 0, never garbage from an exponent out
    of range; a NaN stays NaN."""
    low = -800.0 if precise else -100.0
    want = sum(math.exp(v) for v in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0))
    base = torch.tensor([0.0, low, -1e30, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0])
    base[8] = float("-inf")
    # -inf: its weight is 0, but -inf - -inf is no number, so its cross term is NaN, as
    # torch's 0 * NaN makes it (such a row has a side that is not finite: no metrics)
    for finite, expected_cross in ((8, 0.0), (9, math.nan)):
        part = base[:finite].contiguous()
        got = fused.pair_kl(part, part, torch.empty(finite), 0.0, 0.0, precise)[4:]
        assert got[0] == pytest.approx(want, rel=1e-7) and got[2] == got[0]
        assert got[1] == expected_cross or (got[1] != got[1] and expected_cross != expected_cross)
    base[4] = float("nan")
    assert all(v != v for v in fused.pair_kl(base, base, torch.empty(9), 0.0, 0.0, precise)[4::2])


def test_a_rows_kl_is_zero_for_equal_sides_and_the_exact_one_elsewhere():
    """The row's KL with the kernel: 0 for equal sides, and the float64 one to its
    exponentials' precision: float64 below 4,096 elements (as torch's path computes
    them), float32 above, their sums in float64. The kernel's numbers are the same on
    every machine, so are these bounds' margins."""
    generator = torch.Generator().manual_seed(12)
    for n, scale in ((7, 0.01), (300, 1.0), (12_289, 3.0), (70_000, 2.0), (50_000, 40.0)):
        base = torch.randn(n, generator=generator) * scale
        analysis = base + 0.01 * scale * torch.randn(n, generator=generator)
        assert pair_stats(base, base.clone(), ("kl",))["kl"] == 0.0
        log_p = torch.log_softmax(base.double(), 0)
        exact = float((log_p.exp() * (log_p - torch.log_softmax(analysis.double(), 0))).sum())
        sides = {"base_side": side_stats(base), "analy_side": side_stats(analysis)}
        error = abs(pair_stats(base, analysis, ("kl",), **sides)["kl"] - exact) / exact
        assert error < (1e-7 if n < 4096 else 5e-5), n
        # without the sides given, the same number (each side's maximum read for it)
        assert pair_stats(base, analysis, ("kl",))["kl"] == \
            pair_stats(base, analysis, ("kl",), **sides)["kl"]
