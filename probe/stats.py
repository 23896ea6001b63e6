"""The per-layer numbers of compare_per_layer_out, computed from two tensors.

Sums run on the tensors' own device, so only a handful of scalars leave a hook; on CPU,
float32 tensors take one pass of the fused kernel (probe/fused.py) where it is built.
Definitions (one flattened tensor per side, n elements):
Cosine = <a,b> / (|a| |b|); MSE = mean((a-b)^2); L1 = mean|a-b|; Atol = max|a-b|;
Rtol = max(|a-b| / |b|) over b != 0; SQNR = 10 log10(sum b^2 / sum (a-b)^2) dB (empty
when the two are identical: no noise to measure); KL = KL(softmax(b) || softmax(a));
var is the population variance.
"""

from __future__ import annotations

import math
import threading
import weakref

import torch

from qcdoctor.probe import fused


def flatten_output(value, name: str = "") -> list[tuple[str, torch.Tensor]]:
    """A module output as named float tensors: tensors, quantized tensors and anything
    with ``dequantize()``, inside tuples, lists and dicts (``name[0]``, ``name[key]``); a
    sparse tensor made dense, a nested one's components each a tensor (``name[0]``)."""
    if isinstance(value, torch.Tensor):
        if value.is_nested:                 # a jagged batch: its components, one a row
            return [item for i, part in enumerate(value.unbind())
                    for item in flatten_output(part, f"{name}[{i}]")]
        tensor = value.dequantize() if value.is_quantized else value
        if tensor.layout != torch.strided:  # sparse: the same values, laid out densely
            tensor = tensor.to_dense()
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


_F32, _F64 = torch.float32, torch.float64


def _float(tensor: torch.Tensor) -> torch.Tensor:
    flat = flattened(tensor)
    dtype = flat.dtype
    return flat if dtype is _F32 or dtype is _F64 else flat.float()


def flattened(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in one dimension: a view, or a copy of a non-contiguous one (a transposed
    output). The last copy is kept while its tensor lives unchanged: a row's baseline
    output is flattened again by that row's own error right after."""
    if tensor.dim() == 1:
        return tensor                       # a row's sides come flat already: no view op
    if tensor.is_contiguous():
        return tensor.view(-1)
    if tensor.is_inference():               # no version to tell a write (asking raises)
        return tensor.reshape(-1)
    version = tensor._version
    kept = getattr(_local, "flat", None)
    if kept is not None and kept[0]() is tensor and kept[1] == version:
        return kept[2]
    flat = tensor.reshape(-1)
    _local.flat = (weakref.ref(tensor), version, flat)
    return flat


def side_stats(tensor: torch.Tensor) -> dict:
    """min, max, mean, var of one side (None for an empty tensor), and the sum of squares
    (``sumsq``) that pair_stats reuses."""
    x = _float(tensor)
    n = x.numel()
    if n == 0:
        return {"min": None, "max": None, "mean": None, "var": None, "sumsq": 0.0}
    if fused.fits(x):
        lo, hi, total, sumsq = fused.side(x)      # one pass, float64 sums
        mean = total / n
    else:
        lo, hi = extremes(x)
        mean = float(x.sum()) / n
        sumsq = _square_sum(x)
    var = sumsq / n - mean * mean
    if not var > 0.05 * (sumsq / n):
        # the mean dominates (or all is equal): the difference above lost its digits
        centred = x - mean
        var = _square_sum(centred) / n
    return {"min": lo, "max": hi, "mean": mean, "var": max(var, 0.0), "sumsq": sumsq}


_TWO_PASSES_FROM = 32768       # elements


def extremes(x: torch.Tensor) -> tuple[float, float]:
    """(min, max) of a flat tensor, NaN when it holds one. torch's aminmax is one pass but
    not vectorized on CPU: from a few ten thousand elements, amin then amax (each
    vectorized) cost about two thirds of it; below, one call's overhead weighs more."""
    if x.numel() < _TWO_PASSES_FROM or not x.is_cpu:
        low, high = torch.aminmax(x)
        return float(low), float(high)
    return float(x.amin()), float(x.amax())


def _square_sum(x: torch.Tensor) -> float:
    """sum x^2 in one pass: the fused kernel's float64 sum, else a BLAS dot product, no
    temporary (relative error below 1e-5 for a million elements, where 1 - Cosine is
    measured from the noise energy itself)."""
    if fused.fits(x):
        return fused.side(x)[3]
    return float(torch.dot(x, x)) if x.is_cpu else float(torch.sum(x * x))


PAIR_METRICS = ("cosine", "mse", "l1", "kl", "sqnr", "atol", "rtol")
_ALL = frozenset(PAIR_METRICS)
# which metrics need what (sets made once: a call is a few microseconds of torch ops each)
_NEED_SIGNAL = frozenset({"cosine", "sqnr", "rtol"})
_NEED_NOISE = frozenset({"cosine", "mse", "sqnr", "l1", "atol", "rtol"})
_NEED_ABS = frozenset({"l1", "atol", "rtol"})
_NEED_ABS_NOT_ATOL = frozenset({"l1", "rtol"})


def pair_stats(base: torch.Tensor, analy: torch.Tensor, wanted=PAIR_METRICS, *,
               base_side: dict | None = None, analy_side: dict | None = None) -> dict:
    """The comparison metrics of two same-shaped tensors (analysis against baseline);
    ``wanted``: only these (the sensitivity pass keeps one metric for every op).
    ``base_side``/``analy_side``: side_stats of the two, when at hand (their sums of
    squares and maxima are reused).

    Contiguous float32 CPU tensors go through the fused kernel (probe/fused.py): one pass
    for the difference, its sums (in float64) and extremes. Otherwise sums run in float32
    (torch's cascade summation, relative error about 1e-7; sums of squares as BLAS dot
    products, below 1e-5), where a float64 copy costs four times as much. Cosine comes
    from the noise energy,
    cos = 1 - (|a-b|^2 - (|a| - |b|)^2) / (2 |a| |b|), so 1 - cos keeps its digits near 1.
    KL from the two log-sum-exps: KL = LSE(a) - LSE(b) - sum softmax(b) (a - b), two
    exponentials in all (in float64 below 4096 elements); where the kernel takes the pair,
    it takes KL's sums in the same call (float64 sums, its own exponentials).
    """
    if wanted is not PAIR_METRICS:
        unknown = set(wanted) - _ALL
        if unknown:
            raise ValueError(f"unknown metric(s) {sorted(unknown)}")
    b, a = _float(base), _float(analy)
    if a.device != b.device:
        a = a.to(b.device)
    n = b.numel()
    if n == 0:
        return dict.fromkeys(wanted)
    if a.dtype != b.dtype:
        a, b = a.float(), b.float()
    asked = _ALL if wanted is PAIR_METRICS else frozenset(wanted)
    values: dict = {}
    base_side, analy_side = base_side or {}, analy_side or {}
    if asked & _NEED_SIGNAL:
        signal = base_side.get("sumsq")
        signal = _square_sum(b) if signal is None else signal
    work = _scratch(n, b.dtype, b.device)
    maxima = base_side.get("max"), analy_side.get("max")
    if fused.fits(a) and fused.fits(b):
        diff = work[0]
        if "kl" in asked:
            # KL's shifts need each side's largest value: a side not measured yet is read
            maxima = tuple(fused.side(t)[1] if top is None else top
                           for top, t in zip(maxima, (b, a), strict=True))
        if "kl" in asked and _finite_numbers(maxima):
            # the difference, its numbers and KL's sums in one call
            shifts = _shift(maxima[0]), _shift(maxima[1])
            sums = fused.pair_kl(b, a, diff, *shifts, n < _SMALL)
            values["kl"] = _kl_of(*sums[4:], *shifts)
        else:
            # the difference and every number but KL's in one pass
            sums = fused.pair(b, a, diff)
    else:
        sums = None
        diff = torch.sub(a, b, out=work[0])
    if "kl" in asked and "kl" not in values:
        values["kl"] = _kl(b, a, diff, *maxima, work)
    if asked & _NEED_NOISE:
        noise = sums[0] if sums is not None else _square_sum(diff)
        values["mse"] = noise / n
        if "cosine" in asked:
            power = analy_side.get("sumsq")
            power = _square_sum(a) if power is None else power
            values["cosine"] = cosine_of_energies(signal, power, noise)
        if "sqnr" in asked:
            values["sqnr"] = _sqnr(signal, noise)
        if sums is not None:
            _, l1_sum, atol, rtol = sums[:4]
            values["l1"] = l1_sum / n
            values["atol"] = atol
            if "rtol" in asked:
                # a NaN or inf difference: no ratio
                values["rtol"] = atol if not math.isfinite(atol) else \
                    rtol if signal > 0 else None
        elif "atol" in asked and not asked & _NEED_ABS_NOT_ATOL:
            # the largest |a-b| from the signed difference: one read, no write
            low, high = extremes(diff)
            values["atol"] = -low if -low > high or low != low else high
        elif asked & _NEED_ABS:
            diff = diff.abs_()
            if "l1" in asked:
                values["l1"] = float(diff.sum()) / n
            values["atol"] = float(diff.amax())     # amax: vectorized, NaN kept
            if "rtol" in asked:
                if not math.isfinite(values["atol"]):
                    values["rtol"] = values["atol"]     # a NaN or inf difference: no ratio
                elif signal > 0:
                    # |a-b| / b: its largest magnitude is Rtol; a zero of b gives inf or
                    # nan, cleared only then (a second pass)
                    ratio = torch.div(diff, b, out=diff)   # |a-b| is used up
                    low, high = extremes(ratio)
                    if not (math.isfinite(low) and math.isfinite(high)):
                        ratio.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                        low, high = extremes(ratio)
                    values["rtol"] = max(-low, high)
                else:
                    values["rtol"] = None
    return {name: values[name] for name in wanted}


# below this many elements KL is computed in float64 (a small tensor's KL can be tiny: float32
# sums carry about 1e-7 absolute error)
_SMALL = 4096


def _kl(b: torch.Tensor, a: torch.Tensor, diff: torch.Tensor, b_max: float | None,
        a_max: float | None, work: list | None = None) -> float:
    """KL(softmax(b) || softmax(a)) = LSE(a) - LSE(b) - sum p (a - b), p = softmax(b), with
    torch's exponentials (tensors the kernel does not take, or a side not finite)."""
    if b.numel() < _SMALL:
        b, a, diff = b.double(), a.double(), diff.double()
        work = None
    b_max = float(b.max()) if b_max is None else b_max
    a_max = float(a.max()) if a_max is None else a_max
    if not (math.isfinite(b_max) and math.isfinite(a_max)):
        log_p = torch.log_softmax(b, 0)
        return _not_negative(float(torch.sum(log_p.exp() * (log_p - torch.log_softmax(a, 0)))))
    b_shift, a_shift = _shift(b_max), _shift(a_max)
    weights = _exp_shifted(b, b_shift, work[1] if work else None)
    b_sum = float(weights.sum())
    cross = (float(torch.dot(weights, diff)) if weights.is_cpu
             else float(torch.sum(weights * diff))) / b_sum
    # the weights are used up: a's exponentials go to the same buffer (less memory touched)
    a_sum = float(_exp_shifted(a, a_shift, work[1] if work else None).sum())
    return _not_negative((a_shift - b_shift) + math.log(a_sum / b_sum) - cross)


def _kl_of(b_sum: float, cross: float, a_sum: float, b_shift: float, a_shift: float) -> float:
    """KL from the kernel's sums: sum exp(b - b_shift), sum exp(b - b_shift) (a - b) and
    sum exp(a - a_shift)."""
    return _not_negative((a_shift - b_shift) + math.log(a_sum / b_sum) - cross / b_sum)


def _finite_numbers(numbers) -> bool:
    return all(v is not None and math.isfinite(v) for v in numbers)


def _not_negative(kl: float) -> float:
    """A rounding below zero is zero; NaN stays NaN (``max(0.0, nan)`` is 0.0: a
    comparison of NaN values would read as identical)."""
    return kl if kl != kl else max(0.0, kl)


_NO_SHIFT = 30.0


def _shift(top: float) -> float:
    """What a side's exponentials are shifted by: nothing while its largest value stays
    within +-30 (no exp overflows, and a term that underflows weighs less than e^-57 of
    the largest one); its maximum beyond."""
    return 0.0 if -_NO_SHIFT <= top <= _NO_SHIFT else top


def _exp_shifted(x: torch.Tensor, shift: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """exp(x - shift): one pass when there is no shift (the usual case: a shift costs a
    second pass over the tensor)."""
    if shift == 0.0:
        return torch.exp(x, out=out) if out is not None else torch.exp(x)
    if out is None:
        return torch.sub(x, shift).exp_()
    return torch.sub(x, shift, out=out).exp_()


_local = threading.local()


def _scratch(n: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Two work buffers of ``n`` elements, kept per thread and reused: a fresh large
    temporary per op can cost a page fault per 4 KiB (measured: ten times the op)."""
    views = getattr(_local, "views", None)
    if views is not None and views[0] == n and views[3] is dtype and views[4] == device:
        return views[2]                 # the last size asked again: the same views
    buffers = getattr(_local, "buffers", None)
    if buffers is None or buffers[0].numel() < n or buffers[0].dtype != dtype \
            or buffers[0].device != device:
        size = max(n, buffers[0].numel() if buffers is not None
                   and buffers[0].dtype == dtype and buffers[0].device == device else 0)
        with torch.inference_mode(False):       # usable in and out of inference mode
            buffers = [torch.empty(size, dtype=dtype, device=device) for _ in range(2)]
        _local.buffers = buffers
    views = [buffer[:n] for buffer in buffers]
    _local.views = (n, buffers, views, dtype, device)
    return views


def release_scratch() -> None:
    """Free this thread's work buffers (and the last flattened copy)."""
    _local.buffers = _local.views = _local.flat = None


def _sqnr(signal: float, noise: float) -> float | None:
    """In dB; None without noise (nothing to measure), NaN where a side is not finite
    (an infinite noise would be a ratio of 0, whose log is no number)."""
    if not (math.isfinite(signal) and math.isfinite(noise)):
        return math.nan
    return 10.0 * math.log10(signal / noise) if noise > 0 and signal > 0 else None


def cosine_of_energies(signal: float, power: float, noise: float) -> float:
    if math.isnan(signal + power + noise):
        return math.nan
    if signal <= 0 or power <= 0:
        return 1.0 if signal == power else 0.0
    if noise == 0:
        return 1.0
    norms = math.sqrt(signal * power)
    gap = math.sqrt(power) - math.sqrt(signal)
    return min(1.0, max(-1.0, 1.0 - (noise - gap * gap) / (2.0 * norms)))


def nonfinite_counts(value, name: str = "inputs") -> list[tuple[str, int, int, int]]:
    """(name, NaN count, inf count, elements) of each floating tensor in ``value`` (a
    tensor, or tuples, lists and dicts of them) that holds a NaN or an infinity."""
    found = []
    if isinstance(value, torch.Tensor):
        # a finite sum proves every element finite (a NaN or inf would carry into it):
        # one read, where the element-wise test writes a mask; a sum that overflowed
        # is checked element by element
        if (value.is_floating_point() or value.is_complex()) and \
                not bool(torch.isfinite(value.sum())) and not bool(torch.isfinite(value).all()):
            nan = int(torch.isnan(value).sum())
            found.append((name, nan, int(torch.isinf(value).sum()), value.numel()))
    elif isinstance(value, dict):
        for key, item in value.items():
            found += nonfinite_counts(item, f"{name}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            found += nonfinite_counts(item, f"{name}[{index}]")
    return found


def shape_text(tensor: torch.Tensor) -> str:
    return str(tensor.shape)
