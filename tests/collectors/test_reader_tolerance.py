"""Readers take what the tools and users really write: odd values give 'unknown' or a
partial mark, never an exception."""

from __future__ import annotations

import math

from qcdoctor.collectors.deploy_facts import _affine, _same
from qcdoctor.collectors.model_check import check_model
from qcdoctor.collectors.sensitivity import load_sensitivity, summarise
from tests.qa.writers import write_model_check, write_sensitivity


def test_normalisations_that_do_not_pair_up_are_unknown():
    assert _affine({"mean": [], "std": [1.0]}) is None                  # was ZeroDivisionError
    assert _affine({"mean": [1.0, 2.0], "std": [1.0, 2.0, 3.0]}) is None  # was a zip() error
    assert _affine({"mean": [1.0], "std": [1e-320], "divisor": 1e-320}) is None
    assert _affine({"mean": [128.0], "std": [2.0, 4.0, 8.0]}) == (
        [0.5, 0.25, 0.125], [-64.0, -32.0, -16.0])                      # one value per channel
    assert _same([1.0, "a"], [1.0, 2.0]) == "unknown"
    assert _same([1.0, 2.0], [1.0, 2.0000001]) == "yes"


def test_extreme_sensitivity_values_are_skipped_and_said(tmp_path):
    path = write_sensitivity(tmp_path, [("a", "activation", "x.Conv", -5000.0, "qint8"),
                                        ("b", "activation", "x.Conv", 10.0, "qint8"),
                                        ("c", "activation", "x.Conv", 30.0, "qint8")],
                             metric="SQNR")
    sens = load_sensitivity(path)
    summary = summarise(sens, "qa", path.name)
    assert summary["top_op"] == "b" and summary["rows"] == 2
    assert math.isfinite(summary["dominance"]) and summary["dominance"] == 100.0
    assert any("too extreme" in p for p in sens.problems)
    huge = write_sensitivity(tmp_path / "h", [("a", "activation", "x.Conv", 1e308, "qint8"),
                                              ("b", "activation", "x.Conv", 1e-308, "qint8")])
    assert summarise(load_sensitivity(huge), "qa", huge.name)["dominance"] == 1e6


def test_called_times_that_are_not_ascii_digits_are_ignored(tmp_path):
    path = write_model_check(tmp_path / "m.txt", called=[("a", 2), ("b", 0)])
    path.write_text(path.read_text().replace("  2\n", "  ²\n", 1))
    found = check_model(path)
    assert [f["kind"] for f in found if f["module"] in ("a", "b")] == ["called_zero"]


def test_repeated_section_titles_do_not_rescan_the_file(tmp_path):
    import time
    path = tmp_path / "model_check_result.txt"
    path.write_text("Fusable modules are listed below:\n" * 20_000 +
                    "Each module called times:\n" * 20_000, encoding="utf-8")
    start = time.perf_counter()
    assert check_model(path) == []
    assert time.perf_counter() - start < 5          # each title used to scan to the end
