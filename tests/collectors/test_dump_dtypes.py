"""Dumps of every dtype and layout are compared exactly or refused clearly: "identical"
only when every element is. bfloat16, float8, half, sparse, quantized and complex
tensors are read exactly (complex as both parts), 64-bit integers beyond 2**53 and float64
values one ulp apart are told apart, and nested tensors, strings, structured records and
.npy headers with a size below 0 are refused naming the file, by ``compare`` and by a
whole triage."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qcdoctor.collectors.dumps import compare_paths
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.errors import QcdoctorError

torch = pytest.importorskip("torch")


def _pair(tmp_path: Path, left, right, suffix: str) -> tuple[Path, Path]:
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    for path, value in ((a, left), (b, right)):
        if suffix == ".pt":
            torch.save(value, path)
        else:
            np.save(path, value, allow_pickle=False)
    return a, b


def _identical(a: Path, b: Path) -> bool:
    (result,) = compare_paths(a, b)
    return result["identical"]


TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8, torch.int16,
                torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_a_tensor_of_any_dtype_is_identical_only_to_itself(tmp_path, dtype):
    base = torch.arange(-6, 10, dtype=torch.float32).reshape(4, 4) / 2
    if dtype == torch.bool:
        base = base > 0
    left = base.to(dtype)
    right = left.clone()
    flat = right.view(-1)
    flat[5] = (~flat[5]) if dtype == torch.bool else (flat[5].to(torch.float32) + 1).to(dtype)
    assert not torch.equal(left, right)
    assert _identical(*_pair(tmp_path / "same", left, left.clone(), ".pt")) is True
    assert _identical(*_pair(tmp_path / "diff", left, right, ".pt")) is False


@pytest.fixture(autouse=True)
def _folders(tmp_path):
    for name in ("same", "diff"):
        (tmp_path / name).mkdir()


def test_complex_dumps_differing_in_the_imaginary_part_are_not_identical(tmp_path):
    left = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    right = torch.tensor([1 + 2j, 3 + 1j], dtype=torch.complex64)
    assert _identical(*_pair(tmp_path / "diff", left, right, ".pt")) is False
    assert _identical(*_pair(tmp_path / "same", left, left.clone(), ".pt")) is True
    npy = _pair(tmp_path / "diff", left.numpy(), right.numpy(), ".npy")
    assert _identical(*npy) is False
    big_endian = _pair(tmp_path / "same", left.numpy().astype(">c16"),
                       left.numpy().astype("<c16"), ".npy")
    assert _identical(*big_endian) is True


def test_a_conjugate_view_is_read_as_its_values(tmp_path):
    value = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    a, b = _pair(tmp_path / "same", value.conj(), value.conj().resolve_conj(), ".pt")
    assert _identical(a, b) is True


def test_sparse_tensors_are_compared_dense(tmp_path):
    dense = torch.zeros(6, 6)
    dense[1, 2], dense[4, 4] = 3.0, -1.0
    other = dense.clone()
    other[4, 4] = -2.0
    for layout in ("coo", "csr"):
        make = (lambda t: t.to_sparse()) if layout == "coo" else (lambda t: t.to_sparse_csr())
        folder = tmp_path / layout
        folder.mkdir()
        assert _identical(*_pair(folder, make(dense), dense, ".pt")) is True
        (folder / "a.pt").unlink()
        assert _identical(*_pair(folder, make(dense), make(other), ".pt")) is False


def test_quantized_tensors_compare_their_dequantized_values(tmp_path):
    q = torch.quantize_per_tensor(torch.linspace(-1, 1, 16), 0.05, 0, torch.qint8)
    assert _identical(*_pair(tmp_path / "same", q, q.dequantize(), ".pt")) is True


def test_64_bit_integers_beyond_float_precision_are_told_apart(tmp_path):
    left = np.array([2**60, 7], dtype=np.int64)
    right = np.array([2**60 + 1, 7], dtype=np.int64)
    assert float(left[0]) == float(right[0])          # the float reading cannot tell them
    assert _identical(*_pair(tmp_path / "diff", left, right, ".npy")) is False
    assert _identical(*_pair(tmp_path / "same", left, left.copy(), ".npy")) is True
    unsigned = np.array([2**64 - 1, 1], dtype=np.uint64)
    close = np.array([2**64 - 2, 1], dtype=np.uint64)
    assert _identical(*_pair(tmp_path / "diff", unsigned, close, ".npy")) is False


def test_float64_values_one_ulp_apart_are_not_identical(tmp_path):
    left = np.array([1.0, 2.0], dtype=np.float64)
    right = np.array([np.nextafter(1.0, 2.0), 2.0], dtype=np.float64)
    assert np.float32(left[0]) == np.float32(right[0])
    (result,) = compare_paths(*_pair(tmp_path / "diff", left, right, ".npy"))
    assert result["identical"] is False and result["max_abs"] > 0


@pytest.mark.parametrize("value, what", [
    (np.array(["a", "b"]), "<U1"),
    (np.array([b"a", b"b"]), "|S1"),
    (np.zeros(2, dtype=[("x", "f4"), ("y", "i4")]), "structured"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
    (np.zeros(2, dtype=np.longdouble), "float128"),
])
def test_arrays_that_hold_no_numbers_are_refused_by_name(tmp_path, value, what):
    a, b = _pair(tmp_path / "same", value, value, ".npy")
    with pytest.raises(QcdoctorError) as refused:
        compare_paths(a, b)
    assert "a.npy" in str(refused.value.file or "") + str(refused.value)


def test_a_nested_tensor_is_refused(tmp_path):
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    a, b = _pair(tmp_path / "same", nested, nested, ".pt")
    with pytest.raises(QcdoctorError, match="nested"):
        compare_paths(a, b)


def _npy_with_shape(path: Path, shape_text: str, payload: bytes = b"") -> Path:
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}"
    header = header.ljust(118) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                     + payload)
    return path


def test_a_negative_dimension_in_a_npy_header_is_refused(tmp_path):
    a = _npy_with_shape(tmp_path / "a.npy", "(-1,)")
    b = _npy_with_shape(tmp_path / "b.npy", "(-1,)")
    with pytest.raises(QcdoctorError, match="below 0"):
        compare_paths(a, b)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["f2", "f4", "f8", "i1", "u1", "i2", "u2", "i4", "u4", "i8",
                              "u8", "c8", "c16", "?"]),
       size=st.integers(1, 40), where=st.integers(0, 10_000), seed=st.integers(0, 2**16))
def test_never_identical_unless_every_element_is(tmp_path_factory, dtype, size, where, seed):
    folder = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(seed)
    left = (rng.integers(0, 2, size) if dtype == "?" else rng.integers(-50, 50, size)
            ).astype(dtype)
    right = left.copy()
    at = where % size
    right[at] = (not right[at]) if dtype == "?" else right[at] + (1j if "c" in dtype else 1)
    assert not np.array_equal(left, right)
    assert _identical(*_pair(folder, left, right, ".npy")) is False


def test_compare_and_triage_refuse_a_nested_dump_clearly(tmp_path, capsys):
    case = tmp_path / "case"
    for side in ("x86", "board"):
        (case / side).mkdir(parents=True)
        torch.save(torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]),
                   case / side / "model_infer_output_0.pt")
    (case / "case.yaml").write_text("symptom: board differs from x86\nplatform: {chip: J6E}\n"
                                    "artifacts:\n  dumps: {hbm_x86: x86, board: board}\n",
                                    encoding="utf-8")
    code = main(["compare", str(case / "x86"), str(case / "board")])
    err = capsys.readouterr().err
    assert code == 2 and "nested" in err and "internal error" not in err
    report = triage_path(case, use_env=False, lang="en")
    assert not any(f["type"] == "dump_pair" and f.get("identical") for f in report["facts"])
    assert "DP101" not in {t["rule"] for t in report["trace"]}


def test_triage_of_complex_dumps_differing_in_imaginary_parts_is_no_identical_pair(tmp_path):
    case = tmp_path / "case"
    values = {"x86": [1 + 2j, 3 - 1j], "board": [1 + 2j, 3 + 1j]}
    for side, value in values.items():
        (case / side).mkdir(parents=True)
        np.save(case / side / "model_infer_output_0.npy", np.array(value, dtype=np.complex64))
    (case / "case.yaml").write_text("symptom: board differs from x86\nplatform: {chip: J6E}\n"
                                    "artifacts:\n  dumps: {hbm_x86: x86, board: board}\n",
                                    encoding="utf-8")
    report = triage_path(case, use_env=False, lang="en")
    assert "DP101" not in {t["rule"] for t in report["trace"]}
