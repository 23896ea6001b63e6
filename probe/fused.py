"""The compiled kernel of probe/fused_stats.c, loaded through ctypes: a side's extremes
and sums, and a pair's difference with its sums and extremes, each in one pass over a
contiguous float32 CPU tensor, where torch takes one call and one pass per number
(measured on a row of 12,288 elements: 5 against 15 us for a side, 12 against 84 us for
a pair without KL); with KL's sums, one more pass in the same call (where torch takes
two exponentials, two sums and a dot product); a fake quant in one pass (probe/fast_quant.py takes four), and a
layer's own quantized output measured against the baseline without being stored. Sums
are float64 in fixed lanes: the same on every machine.

It is built at install as a plain shared library (setup.py, optional: a machine without
a C compiler installs without it), loaded here only where its version number is the one
these signatures were written for; without it, or with ``ENABLED``
off (the tests compare the two), probe/stats.py computes the same numbers with torch's
own reductions (float32 sums, within a few units of 1e-7)."""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import torch

# off: torch's reductions only
ENABLED = True

KERNEL_FILE = "libqcdfused.so.1"        # setup.py builds it under this name
# the number fused_stats.c's qcd_fused_version holds for the signatures below: a library
# built from another version of the source is never called with these arguments
KERNEL_VERSION = 4


def _load(path: Path | None = None):
    """(the library, '') or (None, why it is not used)."""
    path = path or Path(__file__).with_name(KERNEL_FILE)
    if not path.is_file():
        return None, "not built (no C compiler at install, or fast-math compiler flags)"
    try:
        library = ctypes.CDLL(str(path))
        version = ctypes.c_int32.in_dll(library, "qcd_fused_version").value
    except (OSError, ValueError) as exc:
        return None, f"not loadable here ({str(exc).splitlines()[0][:120]})"
    if version != KERNEL_VERSION:
        return None, (f"built from another version of qcdoctor (kernel {version}, this one "
                      f"needs {KERNEL_VERSION}): reinstall qcdoctor")
    try:
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
        library.qcd_pair_kl_f32.argtypes = [pointer] * 3 + [count] + [ctypes.c_double] * 2 + \
            [ctypes.c_int, pointer]
        library.qcd_pair_kl_f32.restype = None
    except AttributeError as exc:       # a function missing: not this kernel
        return None, f"incomplete ({exc})"
    return library, ""


_LIBRARY, _WHY_NOT = _load()


def available() -> bool:
    return _LIBRARY is not None


def why_not() -> str:
    """Why the kernel is not used ('' where it is): probe_run.yaml and the bench say it."""
    if _LIBRARY is None:
        return _WHY_NOT
    return "" if ENABLED else "switched off"


def fits(x: torch.Tensor) -> bool:
    """Whether the kernel takes ``x``: a contiguous float32 tensor in CPU memory."""
    return readable(x) and x.is_contiguous()


def readable(x: torch.Tensor) -> bool:
    """Whether the kernel can read ``x``'s memory: a float32 tensor in CPU memory (laid
    out however: ``in_memory_order`` says whether it is one block)."""
    return ENABLED and _LIBRARY is not None and x.dtype is torch.float32 and x.is_cpu


def in_memory_order(x: torch.Tensor) -> torch.Tensor | None:
    """``x``'s elements as a contiguous 1-D view in the order they lie in memory, where
    they fill one block without gaps or overlaps (a transposed or permuted output); None
    otherwise. An element-wise map (a fake quant) may run over it, its output written the
    same way into ``torch.empty_like(x)``, which keeps such a tensor's strides."""
    if x.is_contiguous():
        return x.view(-1)
    expected = 1
    for stride, size in sorted(zip(x.stride(), x.shape, strict=True)):
        if size == 1:
            continue
        if stride != expected:
            return None
        expected *= size
    return x.as_strided((x.numel(),), (1,))


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
    _apart([diff], [base, analy])
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
    _apart([out], [x])
    _LIBRARY.qcd_fake_quant_f32(x.data_ptr(), out.data_ptr(), x.numel(), inverse, scale,
                                low, high)


def fake_quant_channels(x: torch.Tensor, out: torch.Tensor, axis: int, inverse: torch.Tensor,
                        scale: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> bool:
    """The same per channel along ``axis`` (the four numbers as contiguous float32 tensors
    of one per channel); False where ``x`` holds a NaN (``out`` is then not to be used)."""
    _same_size(x, out)
    shape = x.shape
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} is not one of the {len(shape)} axes")
    axis %= len(shape)                 # a negative axis counts from the end
    numbers = (inverse, scale, low, high)
    if not all(t.numel() == shape[axis] and fits(t) for t in numbers):
        raise ValueError("one float32 number a channel, in contiguous CPU tensors, is needed "
                         "for each of the four")
    _apart([out], [x, *numbers])
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


def pair_kl(base: torch.Tensor, analy: torch.Tensor, diff: torch.Tensor, base_shift: float,
            analy_shift: float, precise: bool) -> tuple[float, ...]:
    """``pair``'s four numbers, then KL's three sums in the same call, in float64, their
    exponentials computed alike on every machine (in float64 where ``precise``, else
    float32): sum exp(base - base_shift), sum exp(base - base_shift) * diff and
    sum exp(analy - analy_shift), each shift a float32 number."""
    _same_size(base, analy, diff)
    _apart([diff], [base, analy])
    out = (ctypes.c_double * 7)()
    _LIBRARY.qcd_pair_kl_f32(base.data_ptr(), analy.data_ptr(), diff.data_ptr(),
                             base.numel(), base_shift, analy_shift, int(precise), out)
    return tuple(out)


def _apart(written: list[torch.Tensor], read: list[torch.Tensor]) -> None:
    """The kernel's pointers are ``restrict``: a tensor it writes must share no byte with
    any other it reads or writes (an in-place call included), else its result is
    undefined."""
    spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
             for t in (*written, *read)]
    for i in range(len(written)):
        low, high = spans[i]
        for j, (other_low, other_high) in enumerate(spans):
            if j != i and low < other_high and other_low < high:
                raise ValueError("the fused kernel writes a tensor that shares memory with "
                                 "one it reads: give it a tensor of its own")


def _same_size(*tensors: torch.Tensor) -> None:
    """The kernel reads and writes as many elements as the first holds: a shorter one
    would be read or written past its end."""
    size = tensors[0].numel()
    for tensor in tensors:
        if tensor.numel() != size or not fits(tensor):
            raise ValueError("the fused kernel takes contiguous float32 CPU tensors of one "
                             "size")
