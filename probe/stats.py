"""The per-layer numbers of compare_per_layer_out, computed from two tensors.

Sums run in float64 on the tensors' own device, so only a handful of scalars leave a
hook. Definitions (one flattened tensor per side, n elements):
Cosine = <a,b> / (|a| |b|); MSE = mean((a-b)^2); L1 = mean|a-b|; Atol = max|a-b|;
Rtol = max(|a-b| / |b|) over b != 0; SQNR = 10 log10(sum b^2 / sum (a-b)^2) dB (empty
when the two are identical: no noise to measure); KL = KL(softmax(b) || softmax(a));
var is the population variance.
"""

from __future__ import annotations

import math

import torch


def flatten_output(value, name: str = "") -> list[tuple[str, torch.Tensor]]:
    """A module output as named float tensors: tensors, quantized tensors and anything
    with ``dequantize()``, inside tuples, lists and dicts (``name[0]``, ``name[key]``)."""
    if isinstance(value, torch.Tensor):
        tensor = value.dequantize() if value.is_quantized else value
        if tensor.is_complex():
            return []
        return [(name, tensor.detach())]
    if isinstance(value, dict):
        return [item for key, v in value.items() for item in flatten_output(v, f"{name}[{key}]")]
    if isinstance(value, (tuple, list)):
        return [item for i, v in enumerate(value) for item in flatten_output(v, f"{name}[{i}]")]
    dequantize = getattr(value, "dequantize", None)
    if callable(dequantize):
        return flatten_output(dequantize(), name)
    return []


def _float(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1) if tensor.is_floating_point() else tensor.reshape(-1).float()


def side_stats(tensor: torch.Tensor) -> dict:
    """min, max, mean, var of one side; None for an empty tensor."""
    x = _float(tensor)
    if x.numel() == 0:
        return {"min": None, "max": None, "mean": None, "var": None}
    lo, hi = torch.aminmax(x)
    var, mean = torch.var_mean(x.double(), correction=0) if x.numel() < 2 ** 16 else \
        _var_mean_large(x)
    return {"min": float(lo), "max": float(hi), "mean": float(mean), "var": float(var)}


def _var_mean_large(x: torch.Tensor):
    # a float64 copy of a big activation would double the hook's memory: accumulate only
    n = x.numel()
    mean = torch.sum(x, dtype=torch.float64) / n
    centred = x - mean.to(x.dtype)
    return torch.sum(centred * centred, dtype=torch.float64) / n, mean


PAIR_METRICS = ("cosine", "mse", "l1", "kl", "sqnr", "atol", "rtol")


def pair_stats(base: torch.Tensor, analy: torch.Tensor, wanted=PAIR_METRICS) -> dict:
    """The comparison metrics of two same-shaped tensors (analysis against baseline);
    ``wanted``: only these (the sensitivity pass keeps one metric for every op)."""
    unknown = set(wanted) - set(PAIR_METRICS)
    if unknown:
        raise ValueError(f"unknown metric(s) {sorted(unknown)}")
    b, a = _float(base), _float(analy).to(base.device)
    n = b.numel()
    if n == 0:
        return dict.fromkeys(wanted)
    if a.dtype != b.dtype:
        a, b = a.float(), b.float()
    out, asked = {}, set(wanted)
    if asked & {"cosine", "sqnr"}:
        signal = float(torch.sum(b * b, dtype=torch.float64))
    if asked & {"mse", "l1", "sqnr", "atol", "rtol"}:
        diff = a - b
        absdiff = diff.abs()
    if asked & {"mse", "sqnr"}:
        noise = float(torch.sum(diff * diff, dtype=torch.float64))
    for name in wanted:
        if name == "cosine":
            power_a = float(torch.sum(a * a, dtype=torch.float64))
            dot = float(torch.sum(a * b, dtype=torch.float64))
            cosine = dot / math.sqrt(signal * power_a) if signal > 0 and power_a > 0 else \
                1.0 if signal == power_a else 0.0
            out[name] = min(1.0, max(-1.0, cosine))
        elif name == "mse":
            out[name] = noise / n
        elif name == "l1":
            out[name] = float(torch.sum(absdiff, dtype=torch.float64)) / n
        elif name == "kl":
            log_p = torch.log_softmax(b.double(), 0) if n < 2 ** 16 else torch.log_softmax(b, 0)
            log_q = torch.log_softmax(a.to(log_p.dtype), 0)
            out[name] = max(0.0, float(torch.sum(log_p.exp() * (log_p - log_q),
                                                 dtype=torch.float64)))
        elif name == "sqnr":
            out[name] = 10.0 * math.log10(signal / noise) if noise > 0 and signal > 0 else None
        elif name == "atol":
            out[name] = float(absdiff.max())
        else:                                   # rtol
            nonzero = b != 0
            out[name] = float(torch.max(absdiff[nonzero] / b[nonzero].abs())) \
                if bool(nonzero.any()) else None
    return out


def shape_text(tensor: torch.Tensor) -> str:
    return str(tensor.shape)
