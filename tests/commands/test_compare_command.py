"""qcdoctor compare: each output judged against --atol / --rtol, --fail-on turning the
verdicts into exit codes 0 / 1 (2 for bad input), and the table in the language asked for."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from qcdoctor.engine.commands.cli import main

BASE = np.linspace(-2.0, 2.0, 64, dtype=np.float32)


def _pair(folder, left, right):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "left.npy", left)
    np.save(folder / "right.npy", right)
    return [str(folder / "left.npy"), str(folder / "right.npy")]


def _json(capsys, *argv: str) -> tuple[int, list[dict]]:
    code = main(["compare", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _off_by(step: float):
    return BASE + np.float32(step)


@pytest.mark.parametrize("options, status, code", [
    ([], "beyond_tolerance", 0),                                  # --fail-on never by default
    (["--fail-on", "error"], "beyond_tolerance", 1),
    (["--atol", "1e-3", "--fail-on", "error"], "within_tolerance", 0),
    (["--atol", "1e-3", "--fail-on", "warning"], "within_tolerance", 0),
    (["--atol", "1e-3", "--fail-on", "info"], "within_tolerance", 1),
    (["--atol", "1e-5", "--fail-on", "error"], "beyond_tolerance", 1),
    # rel: max abs 1e-4 over the reference's largest |value|, 2
    (["--rtol", "1e-4", "--fail-on", "error"], "within_tolerance", 0),
    (["--rtol", "1e-5", "--fail-on", "error"], "beyond_tolerance", 1),
])
def test_the_exit_code_follows_the_tolerance_and_fail_on(tmp_path, capsys, options, status,
                                                         code):
    paths = _pair(tmp_path, _off_by(1e-4), BASE)
    found, (result,) = _json(capsys, *paths, *options)
    assert (found, result["status"]) == (code, status)
    assert result["level"] == {"within_tolerance": "info", "beyond_tolerance": "error"}[status]


def test_identical_dumps_pass_at_every_level(tmp_path, capsys):
    paths = _pair(tmp_path, BASE, BASE.copy())
    found, (result,) = _json(capsys, *paths, "--fail-on", "info")
    assert found == 0 and result["status"] == "identical" and result["level"] is None


def test_without_a_tolerance_only_identical_values_pass(tmp_path, capsys):
    """64-bit integers past 2**53 read as equal floats (max abs 0), yet differ: with no
    tolerance they fail; a tolerance of 1 takes them."""
    big = np.array([2**60, 2**60 + 1], dtype=np.int64)
    paths = _pair(tmp_path, big, np.array([2**60, 2**60], dtype=np.int64))
    found, (result,) = _json(capsys, *paths, "--fail-on", "error")
    assert result["max_abs"] == 0.0 and not result["identical"]
    assert (found, result["status"]) == (1, "beyond_tolerance")
    found, (result,) = _json(capsys, *paths, "--atol", "1", "--fail-on", "error")
    assert (found, result["status"]) == (0, "within_tolerance")


def _folders(tmp_path):
    left, right = tmp_path / "left", tmp_path / "right"
    for folder in (left, right):
        folder.mkdir()
    np.save(left / "model_infer_output_0.npy", BASE)              # shapes differ, same values
    np.save(right / "model_infer_output_0.npy", BASE.reshape(8, 8))
    np.save(left / "model_infer_output_1.npy", BASE)              # missing on the right
    np.save(left / "model_infer_output_2.npy", BASE)              # a different size
    np.save(right / "model_infer_output_2.npy", BASE[:32])
    with_nan = BASE.copy()
    with_nan[3] = np.nan
    np.save(left / "model_infer_output_3.npy", with_nan)
    np.save(right / "model_infer_output_3.npy", BASE)
    return str(left), str(right)


def test_every_way_outputs_fail_to_match_has_its_status_and_level(tmp_path, capsys):
    code, results = _json(capsys, *_folders(tmp_path), "--atol", "1")
    assert code == 0
    assert {r["output"]: (r["status"], r["level"]) for r in results} == {
        "output_0": ("shape_differs", "warning"), "output_1": ("missing", "error"),
        "output_2": ("not_comparable", "error"), "output_3": ("not_finite", "error")}


def test_a_shape_warning_fails_at_warning_not_at_error(tmp_path, capsys):
    left, right = tmp_path / "l.npy", tmp_path / "r.npy"
    np.save(left, BASE)
    np.save(right, BASE.reshape(8, 8))
    assert main(["compare", str(left), str(right), "--fail-on", "error"]) == 0
    assert main(["compare", str(left), str(right), "--fail-on", "warning", "--lang", "en"]) == 1
    out = capsys.readouterr().out
    assert "warning: shapes differ ([64] vs [8, 8])" in out


@pytest.mark.parametrize("lang, words", [
    ("en", ["| output | cosine |", "| identical | verdict |", "error: missing on the right side",
            "warning: shapes differ", "error: NaN or inf in 1 value(s)",
            "tolerance: an output passes with max abs <= 1 (--atol) or rel <= 0 (--rtol)",
            "4 output(s): 0 identical, 0 within the tolerance, 1 with a warning, 3 beyond"]),
    ("zh", ["| 输出 | 余弦相似度 |", "| 逐位一致 | 判定 |", "错误：右侧缺少此输出", "警告：形状不同",
            "错误：1 个元素为 NaN 或 inf", "容差：最大绝对误差 ≤ 1（--atol）或相对误差 ≤ 0（--rtol）即通过",
            "共 4 个输出：0 个逐位一致，0 个在容差内，1 个有警告，3 个超出容差或无法比较"]),
])
def test_the_table_and_summary_are_in_the_language_asked_for(tmp_path, capsys, lang, words):
    assert main(["compare", *_folders(tmp_path), "--atol", "1", "--lang", lang,
                 "--fail-on", "error"]) == 1
    out = capsys.readouterr().out
    for word in words:
        assert word in out, (word, out)
    other = "错误" if lang == "en" else "error:"
    assert other not in out


@pytest.mark.parametrize("locale, word", [("zh_CN.UTF-8", "逐位一致"), ("en_US.UTF-8", "identical")])
def test_without_lang_the_locale_chooses(tmp_path, capsys, monkeypatch, locale, word):
    monkeypatch.setenv("LC_ALL", locale)
    paths = _pair(tmp_path, BASE, BASE.copy())
    assert main(["compare", *paths]) == 0
    out = capsys.readouterr().out
    assert f"| {word} |" in out and out.count(word) >= 2      # the column and the verdict


def test_no_tolerance_says_so_in_both_languages(tmp_path, capsys):
    paths = _pair(tmp_path, BASE, BASE.copy())
    main(["compare", *paths, "--lang", "en"])
    assert "tolerance: none (--atol and --rtol 0): only identical outputs pass" in \
        capsys.readouterr().out
    main(["compare", *paths, "--lang", "zh"])
    assert "容差：无（--atol、--rtol 都为 0），只有逐位一致才通过" in capsys.readouterr().out


@pytest.mark.parametrize("option, value", [("--atol", "-1"), ("--rtol", "nan"),
                                           ("--atol", "inf")])
def test_a_tolerance_that_is_none_is_one_clear_error(tmp_path, capsys, option, value):
    paths = _pair(tmp_path, BASE, BASE.copy())
    assert main(["compare", *paths, option, value]) == 2
    err = capsys.readouterr().err
    assert f"'{option}'" in err and "is not a tolerance" in err and f"fix: give a number of 0 " \
        f"or more, e.g. {option} 1e-5" in err


def test_usage_mistakes_exit_2(tmp_path, capsys):
    paths = _pair(tmp_path, BASE, BASE.copy())
    for wrong in (["--atol", "tiny"], ["--fail-on", "errors"], ["--lang", "fr"]):
        with pytest.raises(SystemExit) as stop:
            main(["compare", *paths, *wrong])
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid float value: 'tiny'" in err and "(did you mean 'error'?)" in err
    assert main(["compare", paths[0], str(tmp_path / "gone.npy"), "--fail-on", "info"]) == 2
    assert "no such dump" in capsys.readouterr().err


def test_the_process_exits_with_the_code(tmp_path):
    """As a shell or CI sees it: a separate process, its real exit status."""
    paths = _pair(tmp_path, _off_by(0.5), BASE)

    def status(*options: str) -> int:
        return subprocess.run([sys.executable, "-m", "qcdoctor", "compare", *paths, *options],
                              capture_output=True, text=True, timeout=120).returncode
    assert (status(), status("--fail-on", "error"), status("--atol", "1", "--fail-on", "error"),
            status("--atol", "-1")) == (0, 1, 0, 2)
