"""Compare tensor dumps (.npy, .pt, raw .bin) in bounded memory.

Raw ``.bin`` outputs (``model_infer_output_<i>[_name].bin``) take dtype and shape from a
sidecar JSON (``<file>.json`` or ``<stem>.json``: ``{"dtype", "shape", "scale",
"zero_point", "axis"}``) or from the case file; quantized tensors are compared in
dequantized form (per tensor, or per channel along ``axis``). ``.npy`` files are memory
mapped and every file is read in chunks, so dumps of any size compare in bounded memory.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from qcdoctor.collectors.bounded_data import DataRefused, load_json
from qcdoctor.collectors.files import SIZE_CAPS, MiB
from qcdoctor.collectors.pt_files import load_pt
from qcdoctor.collectors.reasons import reason
from qcdoctor.errors import QcdoctorError

CHUNK = 1 << 20                       # elements per chunk (4 MiB of float32)
DUMP_SUFFIXES = (".npy", ".pt", ".bin")
_OUTPUT_INDEX = re.compile(r"model_infer_output_(\d+)")
Guard = Callable[[Path, str], Path]      # (path, kind) -> the path to read, or raises


@dataclass
class Dump:
    path: Path
    array: np.ndarray | None           # in memory (.pt), else read from the file in chunks
    shape: tuple
    scale: np.ndarray | float | None = None
    zero_point: float = 0.0
    axis: int | None = None
    dtype: np.dtype | None = None      # of the raw data on disk
    offset: int = 0                    # where the raw data starts in the file
    count: int = 0

    @property
    def size(self) -> int:
        return int(self.array.size) if self.array is not None else self.count

    def chunks(self, size: int = CHUNK) -> Iterator[np.ndarray]:
        if self.array is not None:
            flat = self.array.reshape(-1)
            for start in range(0, flat.size, size):
                yield self._dequantize(np.asarray(flat[start:start + size]), start)
            return
        # read into one reused buffer: memory stays at a chunk whatever the file size
        buffer = np.empty(min(size, max(self.count, 1)), dtype=self.dtype)
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            for start in range(0, self.count, size):
                part = buffer[:min(size, self.count - start)]
                if handle.readinto(memoryview(part).cast("B")) != part.nbytes:
                    raise QcdoctorError(reason("the file ended early (truncated?)"),
                                        file=str(self.path))
                yield self._dequantize(part, start)

    @property
    def lossless(self) -> bool:
        """Whether every value reads as a float exactly (64-bit integers beyond 2**53 do
        not): an "identical" verdict is then checked on the values as stored."""
        dtype = self.array.dtype if self.array is not None else self.dtype
        return self.scale is not None or not (dtype.kind in "iu" and dtype.itemsize == 8)

    def stored_chunks(self, size: int = CHUNK) -> Iterator[np.ndarray]:
        """The values as stored, chunk by chunk (no dequantization, no conversion)."""
        if self.array is not None:
            flat = self.array.reshape(-1)
            for start in range(0, flat.size, size):
                yield np.asarray(flat[start:start + size])
            return
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            for start in range(0, self.count, size):
                part = np.empty(min(size, self.count - start), dtype=self.dtype)
                if handle.readinto(memoryview(part).cast("B")) != part.nbytes:
                    raise QcdoctorError(reason("the file ended early (truncated?)"),
                                        file=str(self.path))
                yield part

    def _dequantize(self, part: np.ndarray, start: int) -> np.ndarray:
        if self.scale is None:
            if part.dtype == np.float32 or part.dtype == np.float64:
                return part
            # float32 holds 16-bit integers and half floats exactly; wider integers go to
            # float64, so two values one apart never read as the same number
            exact = np.float32 if part.dtype.itemsize <= 2 else np.float64
            return part.astype(exact)
        values = part.astype(np.float32) - np.float32(self.zero_point)
        if np.ndim(self.scale) == 0:
            return values * np.float32(self.scale)
        channels = len(self.scale)
        inner = int(np.prod(self.shape[self.axis + 1:])) if self.axis is not None else 1
        index = (np.arange(start, start + part.size) // inner) % channels
        return values * np.asarray(self.scale, dtype=np.float32)[index]


def _sidecar(path: Path, guard: Guard | None = None) -> dict:
    for candidate in (path.with_name(path.name + ".json"), path.with_suffix(".json")):
        if candidate.is_file() or (guard is not None and os.path.lexists(candidate)):
            readable = guard(candidate, "sidecar") if guard else candidate
            try:
                data = load_json(_read_sidecar(readable, candidate))
            except (OSError, UnicodeDecodeError) as exc:
                raise QcdoctorError(reason("unreadable sidecar: {error}", error=exc),
                                    file=str(candidate),
                                    fix=reason('write {{"dtype": "float32", "shape": '
                                               '[1, 3, 8, 8]}}')) from None
            except DataRefused as exc:
                raise QcdoctorError(exc.problem, file=str(candidate), line=exc.line,
                                    fix=exc.fix) from None
            if not isinstance(data, dict):
                raise QcdoctorError(reason("a sidecar holds one JSON object"),
                                    file=str(candidate))
            return _checked_meta(data, candidate)
    return {}


def _read_sidecar(path: Path, shown: Path) -> str:
    """The text of a sidecar, never more than its cap (``compare`` reads them unguarded)."""
    cap = SIZE_CAPS["sidecar"]
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise QcdoctorError(reason("refused: {size} bytes, more than the {cap} MiB read for a "
                                   "{kind} file", size=os.stat(path).st_size, cap=cap // MiB,
                                   kind="sidecar"), file=str(shown),
                            fix=reason("send the file this run needs, not a larger one"))
    return data.decode("utf-8")


_MAX_DIMS = 32


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _checked_meta(meta: dict, file: Path) -> dict:
    """The sidecar's fields, each of the kind it must be: a QcdoctorError naming the first
    that is not (a sidecar is someone else's file: any JSON can be in it)."""
    shape, dtype, scale = meta.get("shape"), meta.get("dtype"), meta.get("scale")
    zero_point, axis = meta.get("zero_point"), meta.get("axis")
    checks = (
        ("shape", shape is None or (isinstance(shape, list) and len(shape) <= _MAX_DIMS and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)),
         lambda found: reason("'shape' must be a list of sizes (whole numbers, 0 or more), "
                              "found {found}", found=found)),
        ("dtype", dtype is None or isinstance(dtype, str),
         lambda found: reason("'dtype' must be a dtype name such as float32, found {found}",
                              found=found)),
        ("scale", scale is None or _is_number(scale) or (
            isinstance(scale, list) and scale and all(map(_is_number, scale))),
         lambda found: reason("'scale' must be a number or a list of numbers, found {found}",
                              found=found)),
        ("zero_point", zero_point is None or _is_number(zero_point),
         lambda found: reason("'zero_point' must be a number, found {found}", found=found)),
        ("axis", axis is None or (isinstance(axis, int) and not isinstance(axis, bool)),
         lambda found: reason("'axis' must be a whole number, found {found}", found=found)),
    )
    for key, ok, problem in checks:
        if not ok:
            raise QcdoctorError(problem(_shown(meta[key])), file=str(file),
                                fix=reason('write {{"dtype": "float32", "shape": '
                                           '[1, 3, 8, 8]}}'))
    return meta


def _channel_axis(meta: dict, shape: tuple, path: Path) -> int | None:
    """The axis per-channel scales run along, checked against the shape."""
    scale, axis = meta.get("scale"), meta.get("axis")
    if not isinstance(scale, list) or len(scale) < 2:
        return None                     # one scale for all: no axis to run along
    if axis is None or not -len(shape) <= axis < len(shape) or shape[axis] != len(scale):
        raise QcdoctorError(reason("{count} scales need an 'axis' of the shape {shape} with as "
                                   "many channels", count=len(scale), shape=list(shape)),
                            file=str(path),
                            fix=reason('write e.g. {{"shape": [1, 3, 8, 8], "axis": 1, '
                                       '"scale": [0.1, 0.2, 0.3]}}'))
    return axis % len(shape)


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def open_dump(path: Path, dtype: str | None = None, trust_pickles: bool = False,
              guard: Guard | None = None) -> Dump:
    """A dump ready to stream; ``guard(path, kind)`` vets every file read of an untrusted case."""
    path = Path(path)
    if guard is not None:
        shown = path
        path = guard(path, "pickle" if path.suffix == ".pt" else "dump")
        meta = _sidecar(shown, guard)
    elif not path.is_file():
        raise QcdoctorError(reason("no such dump file"), file=str(path))
    else:
        meta = _sidecar(path)
    raw = None                                   # (dtype, offset, count) of data read in chunks
    array = None
    if path.suffix == ".npy":
        try:
            with open(path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                header = read_header(handle)
                offset = handle.tell()
        except (ValueError, OSError) as exc:
            raise QcdoctorError(reason("not a .npy file ({error})", error=exc),
                                file=str(path)) from None
        npy_shape, fortran, np_dtype = header
        if np_dtype.hasobject:
            raise QcdoctorError(reason("this .npy holds Python objects"), file=str(path),
                                fix=reason("save plain numeric arrays"))
        if not all(isinstance(d, int) and d >= 0 for d in npy_shape):
            raise QcdoctorError(reason("the .npy header gives the shape {shape}: a size below "
                                       "0", shape=list(npy_shape)), file=str(path),
                                fix=reason("save the array again with numpy.save"))
        np_dtype, npy_shape = _numeric(np_dtype, tuple(npy_shape), path)
        if fortran and len(npy_shape) > 1:
            array = _as_numbers(np.load(path, mmap_mode="r", allow_pickle=False), path)
        else:
            count = math.prod(npy_shape)
            if path.stat().st_size < offset + count * np_dtype.itemsize:
                raise QcdoctorError(reason("the .npy file is shorter than its header says "
                                           "(truncated?)"), file=str(path))
            raw = (np_dtype, offset, count)
            meta.setdefault("shape", list(npy_shape))
    elif path.suffix == ".pt":
        data = load_pt(path, trust_pickles)
        if hasattr(data, "detach"):
            array = _tensor_numbers(data, path)
        elif isinstance(data, np.ndarray):
            array = _as_numbers(data, path)
        else:
            raise QcdoctorError(reason("expected one tensor, found {kind}",
                                       kind=type(data).__name__), file=str(path),
                                fix=reason("save each output as its own tensor"))
    else:
        kind = meta.get("dtype") or dtype or "float32"
        try:
            np_dtype = np.dtype(kind)
        except TypeError:
            raise QcdoctorError(reason("unknown dtype {kind!r}", kind=kind),
                                file=str(path)) from None
        if np_dtype.kind not in "iuf" or np_dtype.itemsize > 8:
            # raw bytes are numbers: never objects, text, ... (nor long doubles, whose
            # layout differs between machines)
            raise QcdoctorError(reason("unknown dtype {kind!r}", kind=kind), file=str(path),
                                fix=reason("give the right dtype in a sidecar <file>.json"))
        if path.stat().st_size % np_dtype.itemsize:
            raise QcdoctorError(reason("size {size} is not a multiple of {kind}'s {itemsize} "
                                       "bytes", size=path.stat().st_size, kind=kind,
                                       itemsize=np_dtype.itemsize), file=str(path),
                                fix=reason("give the right dtype in a sidecar <file>.json"))
        raw = (np_dtype, 0, path.stat().st_size // np_dtype.itemsize)
    size = raw[2] if raw else array.size
    shape = tuple(meta.get("shape") or (array.shape if array is not None else (size,)))
    if math.prod(shape) != size:
        raise QcdoctorError(reason("shape {shape} does not hold {size} values",
                                   shape=list(shape), size=size), file=str(path),
                            fix=reason("correct the shape in the sidecar"))
    scale = meta.get("scale")
    axis = _channel_axis(meta, shape, path)
    if isinstance(scale, list):
        scale = np.asarray(scale, dtype=np.float32)
    dump = Dump(path, array, shape, scale, float(meta.get("zero_point") or 0.0), axis)
    if raw:
        dump.dtype, dump.offset, dump.count = raw
    return dump


def compare(a: Dump, b: Dump, decimals: int = 4,
            progress: Callable[[int, int], None] | None = None) -> dict:
    """Metrics of ``a`` against the reference ``b``, streamed chunk by chunk."""
    result = {"left": str(a.path), "right": str(b.path), "shape_left": list(a.shape),
              "shape_right": list(b.shape), "elements": a.size}
    if a.size != b.size:
        result.update(shape_mismatch=True, cosine=None, l1=None, max_abs=None, rel=None,
                      mismatch_ratio=None, identical=False, consistent=False, nonfinite=0)
        return result
    dot = na = nb = l1 = 0.0
    max_abs = max_ref = 0.0
    mismatched = nonfinite = 0
    tolerance = 0.5 * 10.0 ** -decimals
    done = 0
    # float32 sums of huge values overflow: such chunks are redone in float64, no warnings
    with np.errstate(over="ignore", invalid="ignore"):
        for x, y in zip(a.chunks(), b.chunks(), strict=True):
            if not x.size:
                continue
            if not (np.isfinite(x.sum()) and np.isfinite(y.sum())):     # rare: find and zero them
                bad = ~(np.isfinite(x) & np.isfinite(y))
                nonfinite += int(bad.sum())
                x, y = np.where(bad, 0, x), np.where(bad, 0, y)
            # BLAS dot products per chunk (relative error ~1e-7), summed across chunks in float64
            sums = (np.dot(x, y), np.dot(x, x), np.dot(y, y))
            # in the wider of the two dtypes: float64 values one ulp apart stay apart
            diff = np.subtract(x, y, dtype=np.result_type(x, y))
            np.abs(diff, out=diff)
            chunk_max = float(diff.max())
            if not (math.isfinite(chunk_max) and np.isfinite(sums).all()):
                # values near the float32 limit overflow it: this chunk again in float64
                x, y = x.astype(np.float64), y.astype(np.float64)
                sums = (np.dot(x, y), np.dot(x, x), np.dot(y, y))
                diff = np.abs(np.subtract(x, y))
                chunk_max = float(diff.max())
            dot, na, nb = dot + float(sums[0]), na + float(sums[1]), nb + float(sums[2])
            l1 += float(diff.sum())                      # pairwise summation
            max_abs = max(max_abs, chunk_max)
            max_ref = max(max_ref, float(y.max()), float(-y.min()))
            if chunk_max > tolerance:
                mismatched += int(np.count_nonzero(diff > tolerance))
            done += x.size
            if progress:
                progress(done, a.size)
    n = max(a.size, 1)
    identical = max_abs == 0.0 and nonfinite == 0
    if identical and not (a.lossless and b.lossless):
        identical = _equal_as_stored(a, b)
    cosine = 1.0 if na == 0 and nb == 0 else (dot / math.sqrt(na * nb) if na and nb else 0.0)
    cosine = max(-1.0, min(1.0, cosine))
    rel = max_abs / max_ref if max_ref else (0.0 if max_abs == 0 else math.inf)
    result.update(shape_mismatch=list(a.shape) != list(b.shape) and len(a.shape) > 0,
                  cosine=cosine, l1=l1 / n, max_abs=max_abs, rel=rel,
                  mismatch_ratio=mismatched / n, nonfinite=nonfinite,
                  identical=identical,
                  consistent=nonfinite == 0 and (mismatched == 0 or rel <= 1e-4))
    return result


def _equal_as_stored(a: Dump, b: Dump) -> bool:
    """Every element equal as stored (numpy compares 64-bit integers of either sign
    exactly), for dumps whose float reading may round two values to one."""
    for x, y in zip(a.stored_chunks(), b.stored_chunks(), strict=True):
        if not np.array_equal(x, y):
            return False
    return True


# dtypes read as the numbers they hold; anything else is refused by name
_NUMBER_KINDS = "biuf"


def _numeric(dtype: np.dtype, shape: tuple, path: Path) -> tuple[np.dtype, tuple]:
    """The dtype a .npy's data is read as, and its shape: complex values as (real,
    imaginary) pairs of floats, so both parts are compared, exactly."""
    if dtype.kind == "c" and dtype.itemsize in (8, 16):
        order = "=" if dtype.byteorder == "|" else dtype.byteorder
        return np.dtype(f"{order}f{dtype.itemsize // 2}"), (*shape, 2)
    if dtype.kind not in _NUMBER_KINDS or dtype.names or dtype.subdtype or dtype.itemsize > 8:
        raise QcdoctorError(reason("this array holds {kind} values, not numbers that can be "
                                   "compared", kind=dtype.name if not dtype.names else
                                   "structured"), file=str(path),
                            fix=reason("save plain numeric arrays (float, int or bool)"))
    return dtype, shape


def _as_numbers(array: np.ndarray, path: Path) -> np.ndarray:
    dtype, _ = _numeric(array.dtype, array.shape, path)
    if array.dtype.kind == "c":
        return np.ascontiguousarray(array).view(dtype).reshape(*array.shape, 2)
    return array


def _tensor_numbers(tensor, path: Path) -> np.ndarray:
    """A tensor's values as a numpy array, exactly: quantized ones dequantized (torch knows
    their scales), sparse ones made dense, bfloat16 / float8 widened to float32 (which holds
    every such value), complex ones as (real, imaginary) pairs; a nested tensor refused."""
    import torch
    if tensor.is_nested:
        raise QcdoctorError(reason("this .pt holds a nested (jagged) tensor"), file=str(path),
                            fix=reason("save each component as its own tensor"))
    tensor = tensor.detach()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor.resolve_conj())
    elif tensor.is_floating_point() and tensor.dtype not in (torch.float32, torch.float64):
        tensor = tensor.to(torch.float32)
    try:
        return _as_numbers(tensor.cpu().numpy(), path)
    except (TypeError, RuntimeError) as exc:
        raise QcdoctorError(reason("cannot read this tensor's {dtype} values ({error})",
                                   dtype=str(tensor.dtype).removeprefix("torch."),
                                   error=str(exc).splitlines()[0][:120]), file=str(path),
                            fix=reason("save it as float32")) from None


def output_key(path: Path) -> str:
    m = _OUTPUT_INDEX.search(path.name)
    return f"output_{int(m.group(1))}" if m else path.stem


def dump_files(folder: Path) -> dict[str, Path]:
    if folder.is_file():
        return {output_key(folder): folder}
    # everything but folders: a guard decides what may be read (FIFOs, symlinks out)
    return {output_key(p): p for p in sorted(folder.iterdir())
            if not p.is_dir() and p.suffix in DUMP_SUFFIXES}


def compare_paths(left: Path, right: Path, decimals: int = 4, dtype: str | None = None,
                  trust_pickles: bool = False, progress=None,
                  guard: Guard | None = None) -> list[dict]:
    """Per output: matched by output index or name; unmatched ones are listed too."""
    if not left.exists() or not right.exists():
        missing = left if not left.exists() else right
        raise QcdoctorError(reason("no such dump file or folder"), file=str(missing))
    lfiles, rfiles = dump_files(left), dump_files(right)
    if left.is_file() and right.is_file():
        lfiles, rfiles = {"output": left}, {"output": right}
    results = []
    for key in sorted(set(lfiles) | set(rfiles)):
        if key not in lfiles or key not in rfiles:
            results.append({"output": key, "missing": "left" if key not in lfiles else "right"})
            continue
        a = open_dump(lfiles[key], dtype, trust_pickles, guard)
        b = open_dump(rfiles[key], dtype, trust_pickles, guard)
        results.append({"output": key, **compare(a, b, decimals,
                                                  (lambda d, t, k=key: progress(k, d, t)) if progress else None)})
    return results
