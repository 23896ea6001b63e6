"""A batch's words add up: every case counted once by what it concluded (a broken stage
found, undetermined, no consistency problem, an error), the failed checks and the findings
at --fail-on beside that; the HTML index shows each case's first action, not its kind."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import html5lib
import pytest

from qcdoctor.engine.commands.batch_output import _ACTION_COLUMNS, _shortened
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.reports.termtext import display_width
from qcdoctor.wording import id_words, labels

NO_PROBLEM = """schema: qcdoctor/case-v1
title: "every stage within tolerance"
symptom: "board mAP 0.445, QAT 0.446"
evidence: [dataset_eval]
badcase: dataset_only
platform: {chip: J6E}
stages:
  qat:   {metric: mAP, value: 0.446}
  board: {metric: mAP, value: 0.445}
"""
BROKEN = "schema: qcdoctor/case-v1\nplatfrom: {chip: J6P}\n"
NUMBER = re.compile(r"\d+")


def cases(root: Path, names) -> list[Path]:
    """The bundled examples ``names``, a case with no problem and a case that fails to load."""
    folders = []
    for name in names:
        with example_path(name) as source:
            folders.append(Path(shutil.copytree(source, root / name)))
    for name, text in (("no_problem", NO_PROBLEM), ("broken", BROKEN)):
        (root / name).mkdir(parents=True)
        (root / name / "case.yaml").write_text(text, encoding="utf-8")
        folders.append(root / name)
    return folders


def expected_counts(rows: list[dict]) -> dict[str, int]:
    """Counted here from the summary's rows, independently of the batch's own counting."""
    errors = [r for r in rows if r["error"]]
    fine = [r for r in rows if not r["error"]]
    return {"total": len(rows),
            "stage_found": sum(r["stage"] not in ("none", "undetermined") for r in fine),
            "undetermined": sum(r["stage"] == "undetermined" for r in fine),
            "no_problem": sum(r["stage"] == "none" for r in fine), "error": len(errors),
            "failed_checks": sum(bool(r["failed"]) for r in rows),
            "at_fail_on": sum(r["exit"] == 1 for r in rows)}


def run_batch(tmp_path: Path, names, lang: str, *fail_on: str):
    out = tmp_path / "out"
    code = main(["triage", *map(str, cases(tmp_path / "cases", names)), "-j", "2", "--no-env",
                 "--lang", lang, "--format", "html", "-o", str(out), *fail_on])
    rows = json.loads((out / "summary.json").read_text(encoding="utf-8"))["cases"]
    return code, rows, (out / "index.html").read_text(encoding="utf-8")


def totals_lines(counts: dict, lang: str) -> list[str]:
    B = labels()[lang]["batch"]
    return [B["outcomes"].format(**counts), B["beside"].format(**counts)]


def text_of(node) -> str:
    return "".join(node.itertext())


def test_every_bundled_example_is_counted_by_what_it_concluded(tmp_path, capsys):
    code, rows, index = run_batch(tmp_path, example_names(), "en", "--fail-on", "error")
    table = capsys.readouterr().out
    counts = expected_counts(rows)
    # every example either found a broken stage or could not decide: none is "clean"
    assert counts["stage_found"] + counts["undetermined"] == len(example_names())
    assert counts["undetermined"] >= 2 and counts["no_problem"] == 1 and counts["error"] == 1
    assert counts["failed_checks"] >= 1 and counts["at_fail_on"] >= 1 and code == 2
    lines = totals_lines(counts, "en")
    assert table.splitlines()[-2:] == lines and "clean" not in table
    # the outcome numbers add up to the total; the last two are counted beside them
    total, *outcomes = map(int, NUMBER.findall(lines[0]))
    assert total == len(rows) == sum(outcomes)

    tree = html5lib.parse(index, namespaceHTMLElements=False)
    assert text_of(tree.find(".//p")).replace("\n", "") == "".join(lines)
    headings = [text_of(h) for h in tree.iter("h2")]
    assert headings == ["Cases per stage", "Each case: its conclusion and first step"]
    assert "Case" not in headings
    # styled as the report is: its stylesheet, failed rows marked as failed
    assert "tr.row-fail td" in index and '"WenQuanYi Micro Hei"' in index
    actions = {r["case"]: r for r in rows if not r["error"]}
    shown = 0
    for tr in tree.find(".//table[@class='cases']").find("tbody").iter("tr"):
        cells = tr.findall("td")
        row = actions.get(text_of(cells[0]))
        if row is None:
            continue
        cell = cells[4]
        assert cell.get("class") == "action"
        shown += 1
        if not row["first_text"]:                   # nothing to do: an empty cell
            assert text_of(cell) == ""
            continue
        cost = text_of(cell.find("span"))
        words = text_of(cell)[len(cost):]
        # the action itself (its opening words), not the kind of action it is
        assert words != id_words(row["first_kind"], "en")
        opening = re.sub(r"^\[[^]]*\] ", "", row["first_text"]).replace("`", "")[:20]
        assert words.startswith(opening), (words, row["first_text"])
        assert cost in (*labels()["en"]["batch"]["cost"].values(),
                        *(v.strip("[] ") for v in labels()["en"]["cost_label"].values()))
        assert display_width(words) <= _ACTION_COLUMNS + 4
    assert shown == len(actions)


def test_the_counts_and_the_index_in_chinese(tmp_path, capsys):
    code, rows, index = run_batch(tmp_path, ["board_nv12_deploy", "wide_gap"], "zh")
    table = capsys.readouterr().out
    counts = expected_counts(rows)
    assert (counts["stage_found"], counts["undetermined"], counts["no_problem"],
            counts["error"], counts["failed_checks"]) == (1, 1, 1, 1, 1)
    assert table.splitlines()[-2:] == [
        "共 4 个案例：1 个定位到出问题的阶段，1 个暂不能判断，1 个无一致性问题，1 个出错",
        "其中 1 个有未通过的检查项，0 个有达到 --fail-on 级别的问题"]
    tree = html5lib.parse(index, namespaceHTMLElements=False)
    assert tree.get("lang") == "zh-CN"
    assert [text_of(h) for h in tree.iter("h2")] == ["各阶段案例数", "各案例的结论与第一步"]
    board = next(r for r in rows if r["case"].endswith("board_nv12_deploy"))
    cell = next(td for td in tree.iter("td") if td.get("class") == "action")
    assert text_of(cell).startswith("验证：评测或核对" + board["first_text"][:6])


@pytest.mark.parametrize("text, shown", [
    ("Evaluate quantized.bc first.", "Evaluate quantized.bc first"),
    ("Evaluate quantized.bc first, with the same data. Then the board.",
     "Evaluate quantized.bc first, with the same data …"),
    ("Fix the failed check first (mode does not match; more here), then rebuild.",
     "Fix the failed check first (mode does not match) …"),
    ("先评测 quantized.bc，与 qat.pt 用同一数据集。然后板端。", "先评测 quantized.bc，与 qat.pt 用同一数据集 …"),
])
def test_an_action_is_cut_at_its_sentence_and_closes_what_it_opened(text, shown):
    assert _shortened(text) == shown


def test_a_long_action_is_cut_at_a_comma_outside_brackets_and_code():
    text = ("Set `" + "very_long_module_name." * 8 + "conv` to int16, and keep [a, b, c] of "
            + "x, " * 60 + "done")
    short = _shortened(text)
    assert short.endswith(" …") and display_width(short) <= _ACTION_COLUMNS + 4
    assert short.count("`") % 2 == 0 and short.count("[") == short.count("]")


def test_the_terminal_table_shows_each_first_action_not_its_kind(tmp_path, capsys):
    names = ["board_only", "convert_j6p", "wide_gap"]
    folders = cases(tmp_path / "cases", names)[:len(names)]
    assert main(["triage", *map(str, folders), "-j", "1", "--no-env", "--lang", "en",
                 "--format", "json", "-o", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out
    rows = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))["cases"]
    for row in rows:
        line = next(x for x in table.splitlines() if x.startswith(row["case"]))
        # the action's own opening words, its cost in brackets; never only its kind
        assert row["first_text"].split()[0] in line, line
        assert "[verify" in line or "[analyse" in line or "[re-calibrate" in line \
            or "[needs retraining" in line, line
        assert display_width(line) < 400
