"""The row metrics on tensors large enough for the float32 ways (vectorized extremes,
unshifted and shifted exponentials) agree with the same metrics taken in float64, with
the fused kernel (probe/fused.py) and with torch's reductions alone."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from qcdoctor.probe import fused  # noqa: E402
from qcdoctor.probe.stats import (  # noqa: E402
    extremes,
    flattened,
    nonfinite_counts,
    pair_stats,
    side_stats,
)


@pytest.fixture(autouse=True, params=[True, False], ids=["fused", "torch"])
def kernel(request, monkeypatch):
    monkeypatch.setattr(fused, "ENABLED", request.param)
    return request.param


def _reference(b: torch.Tensor, a: torch.Tensor) -> dict:
    b, a = b.double(), a.double()
    diff = a - b
    log_p, log_q = torch.log_softmax(b, 0), torch.log_softmax(a, 0)
    live = b != 0
    return {
        "cosine": float(torch.dot(a, b) / (a.norm() * b.norm())),
        "mse": float(diff.pow(2).mean()), "l1": float(diff.abs().mean()),
        "atol": float(diff.abs().max()),
        "rtol": float((diff.abs()[live] / b.abs()[live]).max()),
        "sqnr": 10 * math.log10(float(b.pow(2).sum() / diff.pow(2).sum())),
        "kl": float(torch.sum(log_p.exp() * (log_p - log_q))),
    }


@pytest.mark.parametrize("size", [5_000, 100_000])     # aminmax, then amin + amax
@pytest.mark.parametrize("offset", [0.0, 29.0, 60.0, -60.0, 100.0, -100.0])  # no shift; shifts
def test_float32_metrics_match_float64(size, offset):
    generator = torch.Generator().manual_seed(size)
    base = torch.randn(size, generator=generator) * 3 + offset
    analysis = base + 0.05 * torch.randn(size, generator=generator)
    got = pair_stats(base, analysis, base_side=side_stats(base),
                     analy_side=side_stats(analysis))
    want = _reference(base, analysis)
    # 1 - cosine is what a verdict reads: its digits, not the cosine's, are compared
    assert 1 - got["cosine"] == pytest.approx(1 - want["cosine"], rel=2e-3)
    assert got["kl"] == pytest.approx(want["kl"], rel=2e-3)
    assert got["sqnr"] == pytest.approx(want["sqnr"], rel=1e-4)
    for name in ("mse", "l1", "atol", "rtol"):
        assert got[name] == pytest.approx(want[name], rel=1e-4), name


@pytest.mark.parametrize("size", [100, 100_000])
def test_extremes_are_torchs_and_keep_a_nan(size):
    x = torch.randn(size, generator=torch.Generator().manual_seed(3))
    low, high = torch.aminmax(x)
    assert extremes(x) == (float(low), float(high))
    x[size // 2] = float("nan")
    assert all(v != v for v in extremes(x))
    side = side_stats(x)
    assert side["min"] != side["min"] and side["max"] != side["max"]


def test_finite_values_whose_sum_overflows_are_finite():
    # the sum is only a shortcut: where it overflows, the elements decide
    large = torch.full((4,), 3e38)
    assert not torch.isfinite(large.sum()) and nonfinite_counts(large) == []
    assert nonfinite_counts(torch.full((8,), 60000.0, dtype=torch.float16)) == []
    mixed = torch.tensor([3e38, 3e38, float("inf"), float("nan")])
    assert nonfinite_counts(mixed, "x") == [("x", 1, 1, 4)]


def test_a_flattened_copy_is_reused_only_while_its_tensor_is_unchanged():
    x = torch.arange(12.0).reshape(3, 4).t()          # not contiguous: flattening copies
    first = flattened(x)
    assert flattened(x) is first                       # asked again: the same copy
    x.mul_(2.0)                                        # written in place: read again
    again = flattened(x)
    assert again is not first and torch.equal(again, x.reshape(-1))
    y = x.clone().t().contiguous().t()                 # another tensor, equal values
    assert flattened(y) is not again
    with torch.inference_mode():                       # no version to tell a write
        frozen = torch.arange(6.0).reshape(2, 3).t()
        assert flattened(frozen) is not flattened(frozen)
