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
