"""The compiled kernel of probe/fused_stats.c, loaded through ctypes: a side's extremes
and sums, and a pair's difference with its sums and extremes, each in one pass over a
contiguous float32 CPU tensor, where torch takes one call and one pass per number
(measured on a row of 12,288 elements: 5 against 15 us for a side, 12 against 84 us for
a pair without KL); a fake quant in one pass (probe/fast_quant.py takes four), and a
layer's own quantized output measured against the baseline without being stored. Sums
are float64 in fixed lanes: the same on every machine.

It is built at install (setup.py, optional: a machine without a C compiler installs
without it) and only ever read here; without it, or with ``ENABLED``
off (the tests compare the two), probe/stats.py computes the same numbers with torch's
own reductions (float32 sums, within a few units of 1e-7)."""

from __future__ import annotations

import ctypes
import importlib.util
import math

import torch

# off: torch's reductions only
ENABLED = True

_MODULE = "qcdoctor.probe._fused_stats"


def _load():
    try:
        spec = importlib.util.find_spec(_MODULE)
        if spec is None or not spec.origin:
            return None
        library = ctypes.CDLL(spec.origin)
        pointer, count = ctypes.c_void_p, ctypes.c_int64
        library.qcd_side_f32.argtypes = [pointer, count, pointer]
        library.qcd_side_f32.restype = None
        library.qcd_pair_f32.argtypes = [pointer, pointer, pointer, count, pointer]
        library.qcd_pair_f32.restype = None
        number = ctypes.c_float
        library.qcd_fake_quant_f32.argtypes = [pointer, pointer, count] + [number] * 4
        library.qcd_fake_quant_f32.restype = None
        library.qcd_fake_quant_channels_f32.argtypes = [pointer, pointer] + [count] * 3 + \
            [pointer] * 4
        library.qcd_fake_quant_channels_f32.restype = ctypes.c_int
        library.qcd_fake_quant_pair_f32.argtypes = [pointer, pointer, count] + \
            [number] * 4 + [pointer]
        library.qcd_fake_quant_pair_f32.restype = None
        return library
    except (OSError, AttributeError, ImportError, ValueError):
        return None                     # not built, or not loadable here: torch does it


_LIBRARY = _load()


def available() -> bool:
    return _LIBRARY is not None


def fits(x: torch.Tensor) -> bool:
    """Whether the kernel takes ``x``: a contiguous float32 tensor in CPU memory."""
    return ENABLED and _LIBRARY is not None and x.dtype is torch.float32 and x.is_cpu \
        and x.is_contiguous()


def side(x: torch.Tensor) -> tuple[float, float, float, float]:
    """(min, max, sum, sum of squares) of a tensor ``fits`` takes (min and max NaN where
    a value is)."""
    _same_size(x)
    out = (ctypes.c_double * 4)()
    _LIBRARY.qcd_side_f32(x.data_ptr(), x.numel(), out)
    return out[0], out[1], out[2], out[3]


def pair(base: torch.Tensor, analy: torch.Tensor,
         diff: torch.Tensor) -> tuple[float, float, float, float]:
    """analy - base written into ``diff`` (float32, as torch subtracts); (sum of diff^2,
    sum of |diff|, max |diff| (NaN where one is), the largest finite |diff| / |base|, 0
    where there is none). All three tensors as ``fits`` takes them, of one size."""
    _same_size(base, analy, diff)
    out = (ctypes.c_double * 4)()
    _LIBRARY.qcd_pair_f32(base.data_ptr(), analy.data_ptr(), diff.data_ptr(), base.numel(),
                          out)
    return out[0], out[1], out[2], out[3]


def fake_quant(x: torch.Tensor, out: torch.Tensor, inverse: float, scale: float, low: float,
               high: float) -> None:
    """``out`` = round(clamp(x * inverse, low, high)) * scale in float32, rounding half to
    even, a NaN made ``low`` (torch's per-tensor kernel; probe/fast_quant.py). Both as
    ``fits`` takes them, of one size."""
    _same_size(x, out)
    _LIBRARY.qcd_fake_quant_f32(x.data_ptr(), out.data_ptr(), x.numel(), inverse, scale,
                                low, high)


def fake_quant_channels(x: torch.Tensor, out: torch.Tensor, axis: int, inverse: torch.Tensor,
                        scale: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> bool:
    """The same per channel along ``axis`` (the four numbers as contiguous float32 tensors
    of one per channel); False where ``x`` holds a NaN (``out`` is then not to be used)."""
    _same_size(x, out)
    shape = x.shape
    if not all(t.numel() == shape[axis] and t.dtype is torch.float32 and t.is_contiguous()
               for t in (inverse, scale, low, high)):
        raise ValueError("one float32 number a channel is needed for each of the four")
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    nan = _LIBRARY.qcd_fake_quant_channels_f32(
        x.data_ptr(), out.data_ptr(), outer, shape[axis], inner, inverse.data_ptr(),
        scale.data_ptr(), low.data_ptr(), high.data_ptr())
    return not nan


def fake_quant_pair(base: torch.Tensor, x: torch.Tensor, inverse: float, scale: float,
                    low: float, high: float) -> tuple[float, float, float]:
    """q = ``fake_quant(x)`` against ``base``, q never stored: (sum of (q - base)^2,
    max |q - base| (NaN where one is), sum of q^2)."""
    _same_size(base, x)
    out = (ctypes.c_double * 3)()
    _LIBRARY.qcd_fake_quant_pair_f32(base.data_ptr(), x.data_ptr(), x.numel(), inverse,
                                     scale, low, high, out)
    return out[0], out[1], out[2]


def _same_size(*tensors: torch.Tensor) -> None:
    """The kernel reads and writes as many elements as the first holds: a shorter one
    would be read or written past its end."""
    if any(t.numel() != tensors[0].numel() or not fits(t) for t in tensors):
        raise ValueError("the fused kernel takes contiguous float32 CPU tensors of one size")
