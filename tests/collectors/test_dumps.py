"""Tensor dump comparison: formats, quantized dumps, mismatches, bounded memory, stage facts."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.dumps import CHUNK, compare, compare_paths, open_dump
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.errors import QcdoctorError

RNG = np.random.default_rng(3)


def write_bin(path: Path, array: np.ndarray, **meta) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    array.tofile(path)
    if meta:
        path.with_name(path.name + ".json").write_text(json.dumps(meta))
    return path


def test_identical_and_noisy_float_dumps(tmp_path):
    a = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", a)
    same = compare(open_dump(tmp_path / "a.npy"), open_dump(tmp_path / "b.npy"))
    assert same["identical"] and same["cosine"] == pytest.approx(1.0) and same["max_abs"] == 0
    noisy = a + np.float32(1e-3) * RNG.standard_normal(a.shape).astype(np.float32)
    np.save(tmp_path / "c.npy", noisy)
    result = compare(open_dump(tmp_path / "c.npy"), open_dump(tmp_path / "a.npy"), decimals=4)
    assert not result["identical"] and not result["consistent"]
    expected_cos = float(np.dot(noisy.ravel().astype(np.float64), a.ravel()) /
                         (np.linalg.norm(noisy.astype(np.float64)) * np.linalg.norm(a.astype(np.float64))))
    assert result["cosine"] == pytest.approx(expected_cos, abs=1e-6)   # float32 BLAS dots
    assert result["max_abs"] == pytest.approx(float(np.abs(noisy - a).max()))
    assert result["mismatch_ratio"] == pytest.approx(float(np.mean(np.abs(noisy - a) > 0.5e-4)))


def test_quantized_dump_is_compared_dequantized(tmp_path):
    ref = RNG.uniform(-1, 1, (1, 4, 8, 8)).astype(np.float32)
    scale = 1 / 127
    q = np.clip(np.round(ref / scale), -128, 127).astype(np.int8)
    write_bin(tmp_path / "board" / "model_infer_output_0.bin", q, dtype="int8",
              shape=[1, 4, 8, 8], scale=scale)
    write_bin(tmp_path / "x86" / "model_infer_output_0_logits.bin", ref)
    [result] = compare_paths(tmp_path / "board", tmp_path / "x86")
    assert result["output"] == "output_0"
    assert result["cosine"] > 0.9999 and result["max_abs"] <= scale / 2 + 1e-6


def test_per_channel_dequantization(tmp_path):
    scales = np.array([0.01, 0.1, 1.0], dtype=np.float32)
    q = RNG.integers(-100, 100, (2, 3, 5)).astype(np.int16)
    ref = q.astype(np.float32) * scales[None, :, None]
    write_bin(tmp_path / "q.bin", q, dtype="int16", shape=[2, 3, 5], scale=scales.tolist(), axis=1)
    np.save(tmp_path / "ref.npy", ref)
    result = compare(open_dump(tmp_path / "q.bin"), open_dump(tmp_path / "ref.npy"))
    assert result["identical"]


def test_mismatched_shapes_and_missing_outputs(tmp_path):
    write_bin(tmp_path / "l" / "model_infer_output_0.bin", np.zeros(12, np.float32))
    write_bin(tmp_path / "l" / "model_infer_output_1.bin", np.zeros(4, np.float32))
    write_bin(tmp_path / "r" / "model_infer_output_0.bin", np.zeros(10, np.float32))
    results = {r["output"]: r for r in compare_paths(tmp_path / "l", tmp_path / "r")}
    assert results["output_0"]["shape_mismatch"] and results["output_0"]["cosine"] is None
    assert results["output_1"]["missing"] == "right"


def test_torch_dumps_and_quantized_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8)
    torch.save(x, tmp_path / "a.pt")
    torch.save(torch.quantize_per_tensor(x, 0.05, 0, torch.qint8), tmp_path / "q.pt")
    result = compare(open_dump(tmp_path / "q.pt"), open_dump(tmp_path / "a.pt"))
    assert result["max_abs"] <= 0.025 + 1e-6 and result["cosine"] > 0.99


@pytest.mark.parametrize("content,meta,words", [
    (np.zeros(5, np.int8), {"dtype": "float32"}, "not a multiple"),
    (np.zeros(6, np.float32), {"dtype": "float32", "shape": [4, 4]}, "does not hold"),
    (np.zeros(4, np.float32), {"dtype": "complex-ish"}, "unknown dtype"),
])
def test_bad_dumps_give_clear_errors(tmp_path, content, meta, words):
    path = write_bin(tmp_path / "x.bin", content, **meta)
    with pytest.raises(QcdoctorError, match=words):
        open_dump(path)


def test_nan_and_inf_are_counted_not_propagated(tmp_path):
    a = np.ones(100, np.float32)
    b = a.copy()
    b[3] = np.nan
    b[7] = np.inf
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    result = compare(open_dump(tmp_path / "a.npy"), open_dump(tmp_path / "b.npy"))
    assert result["nonfinite"] == 2 and not result["identical"] and np.isfinite(result["cosine"])


def test_large_dumps_stream_in_bounded_memory(tmp_path):
    n = CHUNK * 4 + 123                                   # 4+ chunks
    a = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="w+", shape=(n,))
    a[:] = 1.0
    a.flush()
    b = np.memmap(tmp_path / "b.bin", dtype=np.float32, mode="w+", shape=(n,))
    b[:] = 1.0
    b[-1] = 2.0
    b.flush()
    del a, b
    seen = []
    tracemalloc.start()
    result = compare(open_dump(tmp_path / "a.bin"), open_dump(tmp_path / "b.bin"),
                     progress=lambda done, total: seen.append(done))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result["max_abs"] == 1.0 and result["elements"] == n
    assert seen[-1] == n and len(seen) == 5
    # a few chunk-sized buffers, however large the files: 16 bytes per element is 4 chunks
    assert peak < CHUNK * 4 * 16, f"peak {peak / 2**20:.0f} MiB is not bounded by the chunk size"


def _dump_case(root: Path, x86: np.ndarray, board: np.ndarray, bc: np.ndarray | None = None) -> Path:
    write_bin(root / "dumps" / "x86" / "model_infer_output_0.bin", x86)
    write_bin(root / "dumps" / "board" / "model_infer_output_0.bin", board)
    dumps = {"hbm_x86": "dumps/x86", "board": "dumps/board"}
    if bc is not None:
        write_bin(root / "dumps" / "bc" / "model_infer_output_0.bin", bc)
        dumps["quantized_bc"] = "dumps/bc"
    (root / "case.yaml").write_text(yaml.safe_dump({
        "evidence": ["dataset_eval"],
        "stages": {"quantized_bc": {"status": "normal"}, "hbm_x86": {"status": "normal"},
                   "board": {"status": "abnormal"}},
        "artifacts": {"dumps": dumps}}))
    return root


def test_dump_facts_and_x86_board_rules(tmp_path):
    base = RNG.standard_normal(1000).astype(np.float32)
    differ = _dump_case(tmp_path / "d", base, base * 0.5 + 0.1, bc=base + np.float32(1e-6))
    report = triage_case(load_case(differ), lang="en", environ={}, installed={}, cwd=differ)
    pairs = {(f["left"], f["right"]): f for f in report["facts"] if f["type"] == "dump_pair"}
    assert pairs[("hbm_x86", "board")]["identical"] == "no"
    assert pairs[("quantized_bc", "hbm_x86")]["consistent"] == "yes"
    rules = {f["rule"] for f in report["findings"]}
    assert {"DP100", "DP102"} <= rules
    same = _dump_case(tmp_path / "s", base, base.copy())
    report = triage_case(load_case(same), lang="en", environ={}, installed={}, cwd=same)
    assert "DP101" in {f["rule"] for f in report["findings"]}


def test_compare_cli(tmp_path, capsys):
    base = RNG.standard_normal(64).astype(np.float32)
    np.save(tmp_path / "a.npy", base)
    np.save(tmp_path / "b.npy", base + 1)
    assert main(["compare", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "| output |" in out and "| no |" in out
    assert main(["compare", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["max_abs"] == pytest.approx(1.0)
    assert main(["compare", str(tmp_path / "a.npy"), str(tmp_path / "nope.npy")]) == 2
    assert "no such dump" in capsys.readouterr().err


def test_compare_json_is_strict_json_with_a_note_for_what_json_cannot_hold(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.ones(8, np.float32))
    np.save(tmp_path / "zeros.npy", np.zeros(8, np.float32))     # rel = max_abs / 0
    assert main(["compare", str(tmp_path / "a.npy"), str(tmp_path / "zeros.npy"),
                 "--format", "json"]) == 0
    out = capsys.readouterr().out
    (result,) = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert result["rel"] is None and result["max_abs"] == 1.0
    assert result["notes"] == ["rel was inf (not a JSON number): written as null"]
