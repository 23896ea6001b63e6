"""A probe's bad-case search (probe_run.yaml's ``samples``, sample_errors.csv) read into one
``sample_search`` fact and the plot's series; the case's bad case and evidence follow from
it; each kind of damaged input is one artifact problem naming the file and the key or line,
in both languages, and no figure of it is used wrong."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors import limits
from qcdoctor.collectors.case_facts import collect_case
from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.sample_search import SERIES_POINTS
from qcdoctor.fact_types import normalise
from tests.qa.badcase_search import CLEAN, EVERY, PROBE, SOME, build_search_case
from tests.qa.writers import sample_errors_text, samples_summary

MANIFEST = f"{PROBE}/probe_run.yaml"
ERRORS = f"{PROBE}/sample_errors.csv"


def collected(folder: Path) -> tuple[list[dict], list[dict]]:
    return collect_case(load_case(folder), environ={}, installed={}, cwd=folder)


def of(facts: list[dict], ftype: str) -> list[dict]:
    return [f for f in facts if f["type"] == ftype]


def search_of(folder: Path) -> tuple[dict | None, list[dict], list[dict]]:
    """(the sample_search fact or None, its series, the artifact problems)."""
    facts, series = collected(folder)
    found = of(facts, "sample_search")
    assert len(found) <= 1
    return (found[0] if found else None, [s for s in series if s["type"] == "sample_series"],
            of(facts, "artifact_problem"))


def test_a_search_on_every_sample_is_read_with_its_figures(tmp_path):
    fact, (series,), problems = search_of(build_search_case(tmp_path, "every", EVERY))
    assert problems == []
    assert normalise(fact) == {k: v for k, v in fact.items() if k not in ("source", "locations")}
    assert (fact["analysis"], fact["count"], fact["metric"], fact["tolerance_cosine"]) == \
        (PROBE, 16, "L1", 0.999)
    assert (fact["chosen"], fact["chosen_by"], fact["output"], fact["rank"]) == (5, "worst", "0", 1)
    assert (fact["shown_on"], fact["shown"], fact["outputs"], fact["spread"]) == (16, "all", 1, False)
    # the chosen output's Cosine over the samples, from sample_errors.csv
    values = sorted(EVERY["0"])
    assert fact["cosines_from"] == "sample_errors"
    assert fact["median_known"] and fact["median_cosine"] == pytest.approx(
        (values[7] + values[8]) / 2)
    assert (fact["worst_known"], fact["worst_cosine"], fact["worst_sample"]) == (True, 0.671, 5)
    assert (fact["chosen_known"], fact["chosen_cosine"], fact["chosen_shows"]) == (True, 0.671, "yes")
    assert fact["nonfinite"] == 0 and fact["replayable"] and fact["kept"] == 3
    assert fact["source"] == f"{MANIFEST} (samples); {ERRORS}"
    assert fact["locations"] == [{"file": MANIFEST, "line": None}, {"file": ERRORS, "line": None}]
    # the plot's data: every sample, sorted worst first, the chosen one placed
    assert [p["cosine"] for p in series["points"]] == values
    assert [p["position"] for p in series["points"]] == list(range(16))
    assert series["points"][0]["sample"] == 5 and not series["decimated"]
    assert (series["chosen"], series["chosen_position"], series["chosen_cosine"]) == (5, 0, 0.671)
    assert (series["tolerance"], series["shown_on"], series["count"]) == (0.999, 16, 16)
    assert series["source"] == ERRORS and series["output"] == "0"


def test_the_search_of_some_samples_and_of_a_given_sample(tmp_path):
    fact, (series,), _ = search_of(build_search_case(tmp_path, "some", SOME))
    assert (fact["shown_on"], fact["shown"], fact["count"], fact["outputs"]) == (3, "some", 64, 2)
    assert (fact["output"], fact["chosen"], fact["worst_sample"]) == ("logits", 21, 21)
    assert series["shown_on"] == 3                     # on the chosen output
    fact, _, _ = search_of(build_search_case(tmp_path, "given", SOME, badcase=3))
    assert (fact["chosen_by"], fact["chosen"], fact["rank"], fact["metric_worst"]) == \
        ("given", 3, 16, 21)
    # sample 3 stays inside the clean band on the output the worst was chosen on
    assert fact["chosen_shows"] == "no" and fact["chosen_cosine"] == pytest.approx(0.99987)


def test_the_folder_shows_the_case_its_bad_case_and_the_evidence(tmp_path):
    facts, _ = collected(build_search_case(tmp_path, "every", EVERY,
                                           case={"evidence": ["single_frame"], "badcase": "none"}))
    (case,) = of(facts, "case")
    assert case["badcase"] == "available"
    kinds = {f["kind"]: f for f in of(facts, "evidence")}
    assert set(kinds) == {"single_frame", "reproducible_badcase"}
    assert kinds["reproducible_badcase"]["source"] == f"{MANIFEST} (samples); {ERRORS}"
    (summary,) = of(facts, "evidence_summary")
    assert summary["sufficient"] and not summary["single_frame_only"]
    # a search where no sample shows the error found no bad case
    facts, _ = collected(build_search_case(tmp_path, "clean", CLEAN))
    assert of(facts, "case")[0]["badcase"] == "unknown"
    assert of(facts, "evidence") == [] and not of(facts, "evidence_summary")[0]["given"]


def test_without_sample_errors_the_manifest_gives_the_figures(tmp_path):
    folder = build_search_case(tmp_path, "manifest", EVERY)
    (folder / PROBE / "sample_errors.csv").unlink()
    fact, series, problems = search_of(folder)
    assert problems == [] and series == []
    assert fact["cosines_from"] == "manifest" and fact["shown_on"] == 16
    assert fact["median_known"] and fact["median_cosine"] == samples_summary(EVERY)[
        "outputs"]["0"]["median_cosine"]
    assert not fact["worst_known"] and not fact["chosen_known"] and fact["chosen_shows"] == "unknown"
    # searched by Cosine, the worst value is the worst Cosine
    folder = build_search_case(tmp_path, "by_cosine", EVERY, metric="Cosine")
    (folder / PROBE / "sample_errors.csv").unlink()
    fact, _, _ = search_of(folder)
    assert (fact["worst_known"], fact["worst_cosine"], fact["worst_sample"]) == (True, 0.671, 5)


def test_samples_that_are_no_number_are_counted_not_drawn(tmp_path):
    cosines = {"0": [0.95, math.nan, 0.8, 0.97, math.nan, 0.9]}
    fact, (series,), problems = search_of(build_search_case(tmp_path, "nan", cosines, badcase=1))
    assert problems == []
    assert fact["nonfinite"] == 2 and fact["shown_on"] == 6          # NaN shows the error
    assert fact["median_cosine"] == pytest.approx(0.925) and fact["worst_cosine"] == 0.8
    assert not fact["chosen_known"] and fact["chosen_shows"] == "yes"
    assert [p["sample"] for p in series["points"]] == [2, 5, 0, 3]
    assert series["chosen_position"] is None and series["chosen_cosine"] is None


def test_a_long_search_is_drawn_with_a_bounded_number_of_points(tmp_path):
    count = 1000
    cosines = {"0": [0.90 + 0.09 * ((i * 7919) % count) / count for i in range(count)]}
    fact, (series,), _ = search_of(build_search_case(tmp_path, "long", cosines, badcase=500))
    points = series["points"]
    assert series["decimated"] and SERIES_POINTS <= len(points) <= SERIES_POINTS + 1
    positions = [p["position"] for p in points]
    assert positions == sorted(positions) and positions[0] == 0 and positions[-1] == count - 1
    assert series["chosen_position"] in positions
    cos = [p["cosine"] for p in points]
    assert cos == sorted(cos) and cos[0] == min(cosines["0"])
    assert fact["count"] == count and fact["chosen"] == 500


def test_no_samples_key_is_a_one_input_probe(tmp_path):
    folder = build_search_case(tmp_path, "one_input", EVERY)
    manifest = yaml.safe_load((folder / PROBE / "probe_run.yaml").read_text())
    manifest["samples"] = None
    (folder / PROBE / "probe_run.yaml").write_text(yaml.safe_dump(manifest))
    fact, series, problems = search_of(folder)
    assert fact is None and series == [] and problems == []


def _samples(**changes) -> dict:
    samples = samples_summary(EVERY)
    for key, value in changes.items():
        if value is KeyError:
            del samples[key]
        else:
            samples[key] = value
    return samples


def _bad_output_entry() -> dict:
    samples = samples_summary(EVERY)
    samples["outputs"]["0"]["median_cosine"] = "high"
    return samples


@pytest.mark.parametrize("samples,named", [
    (16, "samples: expected a mapping, found 16"),
    (_samples(count=KeyError), "samples.count is missing"),
    (_samples(metric="L3"), "samples.metric: 'L3' is not one of L1, MSE, KL, ATOL, Cosine, SQNR"),
    (_samples(shown_on=-1), "samples.shown_on: expected a whole number of 0 or more, found -1"),
    (_samples(spread="no"), "samples.spread: expected true or false, found 'no'"),
    (_samples(chosen=99), "samples.chosen: sample 99 is past the last one (15)"),
    (_samples(shown_on=17), "samples.shown_on: 17 is outside 0 to 16"),
    (_samples(output="9"), "samples.output: '9' is not one of 0"),
    (_samples(chosen=3, rank=4),
     "samples.chosen: sample 3 of rank 4, where the worst of output 0 is sample 5 (rank 1)"),
    (_bad_output_entry(), "samples.outputs.0.median_cosine: expected a finite number, found 'high'"),
    (_samples(outputs={}), "samples.outputs: expected a mapping of outputs, found {...}"),
])
def test_a_malformed_samples_mapping_is_one_problem_naming_the_key(tmp_path, samples, named):
    fact, series, problems = search_of(build_search_case(tmp_path, "bad", EVERY, samples=samples))
    assert fact is None and series == []
    (problem,) = problems
    assert problem["file"] == MANIFEST and problem["partial"]
    assert problem["problem"].startswith(named), problem["problem"]
    assert problem["problem"].endswith("the bad-case search is left out")
    assert named.split(":")[0].split(" ")[0] in problem["problem_zh"]      # the key, in Chinese
    assert "不使用这次 badcase 搜索的结果" in problem["problem_zh"]
    assert problem["locations"] == [{"file": MANIFEST, "line": None}]


def _lines(cosines=EVERY) -> list[str]:
    return sample_errors_text(cosines).splitlines(keepends=True)


def _without_column(name: str) -> str:
    rows = [line.rstrip("\n").split(",") for line in _lines()]
    at = rows[0].index(name)
    return "".join(",".join(r[:at] + r[at + 1:]) + "\n" for r in rows)


def _cell(line: int, column: int, value: str) -> str:
    lines = _lines()
    cells = lines[line - 1].rstrip("\n").split(",")
    cells[column] = value
    lines[line - 1] = ",".join(cells) + "\n"
    return "".join(lines)


def _swapped(first: int, second: int) -> str:
    lines = _lines()
    lines[first - 1], lines[second - 1] = lines[second - 1], lines[first - 1]
    return "".join(lines)


@pytest.mark.parametrize("text,line,named", [
    (_without_column("Cosine"), 1, "no Cosine column (columns: sample, output, L1, MSE, KL, ATOL, SQNR"),
    (_without_column("shown"), 1, "no shown column"),
    (_cell(7, 6, "abc"), 7, "the Cosine cell 'abc' is not a number"),
    (_cell(4, 2, ""), 4, "the L1 cell '' is not a number"),
    (_cell(5, 6, "inf"), 5, "the Cosine cell 'inf' is outside -1 to 1"),
    (_cell(6, 6, "1e308"), 6, "the Cosine cell '1e308' is outside -1 to 1"),
    (_cell(9, 8, "2"), 9, "shown is '2', not 0 or 1"),
    (_cell(3, 0, "x1"), 3, "sample 'x1' is not a whole number of 0 or more"),
    (_swapped(3, 5), 3, "sample 3 follows sample 0"),
    (_cell(2, 0, "1"), 2, "the first line is of sample 1, not 0"),
    # cut while the line was written: fewer cells than the header
    ("".join(_lines())[:-20], 17, "7 cells where the header has 10"),
])
def test_a_broken_sample_errors_file_is_one_problem_at_its_line(tmp_path, text, line, named):
    fact, series, problems = search_of(build_search_case(tmp_path, "bad", EVERY, errors_text=text))
    (problem,) = problems
    assert problem["file"] == ERRORS and not problem["partial"]
    assert problem["problem"].startswith(f"line {line}: {named}"), problem["problem"]
    assert problem["problem_zh"].startswith(f"第 {line} 行：")
    assert "write the file again with qcdoctor probe" in problem["problem"]
    assert problem["locations"] == [{"file": ERRORS, "line": line}]
    # the search stands on the manifest's figures alone: no plot of a file read wrong
    assert fact["cosines_from"] == "manifest" and series == []


def test_a_sample_cut_short_is_named(tmp_path):
    lines = _lines(SOME)
    text = "".join(lines[:-1])                 # the last sample's second output is missing
    _, _, (problem,) = search_of(build_search_case(tmp_path, "cut", SOME, errors_text=text))
    assert problem["problem"].startswith(
        f"line {len(lines) - 1}: sample 63 has 1 of the 2 output lines sample 0 has")
    lines[5], lines[6] = lines[6], lines[5]    # sample 2 lists boxes before logits
    _, _, (problem,) = search_of(build_search_case(tmp_path, "order", SOME,
                                                   errors_text="".join(lines)))
    assert problem["problem"].startswith("line 6: output 'boxes' where sample 0 lists 'logits'")


def test_a_header_alone_and_a_file_past_the_line_cap(tmp_path, monkeypatch):
    _, _, (problem,) = search_of(build_search_case(tmp_path, "empty", EVERY,
                                                   errors_text=_lines()[0]))
    assert problem["problem"].startswith("no data lines after the header")
    monkeypatch.setattr(limits, "SAMPLE_ERROR_LINES", 10)
    _, _, (problem,) = search_of(build_search_case(tmp_path, "long", EVERY))
    assert problem["problem"].startswith("line 12: more than 10 lines")
    assert problem["locations"] == [{"file": ERRORS, "line": 12}]


@pytest.mark.parametrize("cosines,named", [
    ({"0": EVERY["0"][:12]}, "it gives 12 where probe_run.yaml's samples.count gives 16"),
    ({"0": [0.9995] + EVERY["0"][1:]},
     "it gives 15 where probe_run.yaml's samples.shown_on gives 16"),
    ({"out": EVERY["0"]}, "its outputs (out) are not those of probe_run.yaml's samples.outputs (0)"),
])
def test_files_of_two_searches_leave_the_search_out(tmp_path, cosines, named):
    text = sample_errors_text(cosines)
    fact, series, (problem,) = search_of(build_search_case(tmp_path, "two", EVERY,
                                                           errors_text=text))
    assert fact is None and series == []
    assert problem["file"] == ERRORS
    assert problem["problem"].startswith(named), problem["problem"]
    assert "the two files are not of one search" in problem["problem"]
    assert "两个文件不是同一次搜索的结果" in problem["problem_zh"]


def test_the_fixtures_are_the_probes_own_formats():
    """tests/qa/writers.py writes what qcdoctor probe writes: the same sample_errors.csv and
    the same summary of the search, from the same errors, with the clean model's error
    measured or not."""
    pytest.importorskip("torch")
    from qcdoctor.probe.badcase_files import sample_errors_text as probe_text
    from qcdoctor.probe.badcase_search import METRIC_NAMES, SampleSearch
    from tests.qa.writers import _FROM_COSINE
    cosines = {"0": [0.93, 0.9995, 0.71, 0.71, math.nan], "boxes": [0.9999, 0.98, 0.999, 0.97, 0.995]}
    clean = {"0": [0.995, 0.9999, 0.99, 0.9, 0.9], "boxes": [0.9999, 0.999, 0.9999, 0.9, 0.9]}
    for badcase, rounding in ((None, None), (1, None), (None, clean), (1, clean)):
        ours = samples_summary(cosines, badcase=badcase, keep=2, rounding=rounding)
        search = SampleSearch(outputs=list(cosines), metric="L1", tolerance=0.999, errors=[
            [tuple(_FROM_COSINE[m](cosines[o][s]) for m in METRIC_NAMES) for o in cosines]
            for s in range(5)])
        if rounding is not None:
            search.rounding = [[rounding[o][s] for o in cosines] for s in range(5)]
        search.chosen_output, search.chosen = ours["output"], ours["chosen"]
        search.how, search.worst_first = ours["chosen_by"], ours["kept_worst"]
        assert search.summary() == ours
        assert probe_text(search) == sample_errors_text(cosines, rounding=rounding)
    # the clean model's error measured: sample 3 (0.71 within ten times 0.9's error, 0.97
    # too) no longer shows it
    assert samples_summary(cosines, rounding=clean)["shown_on"] == 4
    assert samples_summary(cosines)["shown_on"] == 5
