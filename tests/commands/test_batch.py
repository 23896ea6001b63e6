"""Batch triage: many cases in one run, a broken one never stopping the rest."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import html5lib
import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path

EXAMPLES = ("board_nv12_deploy", "convert_quant_analysis", "wide_gap")
BROKEN = "schema: qcdoctor/case-v1\nplatfrom: {chip: J6P}\n"


@pytest.fixture
def queue(tmp_path) -> Path:
    """cases/: three bundled examples and, second in order, a case.yaml with a typo."""
    root = tmp_path / "cases"
    for i, name in enumerate(EXAMPLES):
        with example_path(name) as source:
            shutil.copytree(source, root / f"{i * 2}_{name}")
    (root / "1_broken").mkdir()
    (root / "1_broken" / "case.yaml").write_text(BROKEN, encoding="utf-8")
    return root


def single_report(folder: Path, capsys) -> dict:
    assert main(["triage", str(folder), "--format", "json", "--no-env", "--lang", "en"]) == 0
    return json.loads(capsys.readouterr().out)


def test_broken_case_in_the_middle_is_reported_and_the_rest_triaged(queue, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["triage", str(queue), str(tmp_path / "missing"), "--recursive", "--jobs", "1",
                 "--no-env", "--format", "json", "-o", str(out), "--lang", "en"])
    table = capsys.readouterr().out
    assert code == 2                                    # worst over all cases: an error
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    cases = [Path(row["case"]).name for row in summary["cases"]]
    assert cases == ["0_board_nv12_deploy", "1_broken", "2_convert_quant_analysis",
                     "4_wide_gap", "missing"]
    broken, missing = summary["cases"][1], summary["cases"][4]
    assert broken["exit"] == 2 and "'platfrom': unknown key" in broken["error"]
    assert "did you mean 'platform'" in broken["error"] and broken["report"] is None
    assert missing["exit"] == 2 and "no such file or folder" in missing["error"]
    for row in (summary["cases"][i] for i in (0, 2, 3)):
        report = json.loads((out / row["report"]).read_text(encoding="utf-8"))
        assert report == single_report(Path(row["case"]), capsys)
        assert row["stage"] == report["conclusion"]["stage"]
        assert row["exit"] == 0 and row["error"] is None
    board = summary["cases"][0]
    # each failed check once, as the audit counts it: input pre-processing fails only
    # through its finer check, the mode, which is the one to fix
    assert board["failed"] == ["preprocess_mode"]
    assert board["first_action"] == "fix_check:preprocess_mode"     # its failed check
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["Case", "Stage", "Determined"]
    # counted by what each case concluded; the board case's failed check beside that
    assert "'platfrom': unknown key" in table
    assert table.splitlines()[-2:] == [
        "5 cases: 2 with a broken stage found, 1 undetermined, 0 with no consistency "
        "problem, 2 with an error",
        "of these, 1 with failed checklist items, 0 with findings at --fail-on"]


def test_exit_code_is_the_worst_fail_on_over_the_cases(queue, tmp_path, capsys):
    shutil.rmtree(queue / "1_broken")
    assert main(["triage", str(queue), "-r", "-j", "1", "--no-env"]) == 0
    assert main(["triage", str(queue), "-r", "-j", "1", "--no-env", "--fail-on", "error",
                 "--lang", "en"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == \
        "of these, 1 with failed checklist items, 2 with findings at --fail-on"


def test_worker_processes_give_the_same_results_in_input_order(queue, tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["triage", str(queue), "-r", "--jobs", "1", "--no-env", "--format", "md",
                 "-o", str(one)]) == 2
    assert main(["triage", str(queue), "-r", "--jobs", "2", "--no-env", "--format", "md",
                 "-o", str(two)]) == 2
    first = json.loads((one / "summary.json").read_text(encoding="utf-8"))
    second = json.loads((two / "summary.json").read_text(encoding="utf-8"))
    assert first == second
    for row in first["cases"]:
        if row["report"]:
            assert (one / row["report"]).read_text() == (two / row["report"]).read_text()


def test_jsonl_streams_one_report_a_line_and_keeps_stdout_clean(queue, capsys):
    assert main(["triage", str(queue), "-r", "--jobs", "1", "--no-env", "--format", "jsonl",
                 "--lang", "en"]) == 2
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["schema"] for line in lines] == ["qcdoctor/report-v1", "qcdoctor/batch-error-v1",
                                                  "qcdoctor/report-v1", "qcdoctor/report-v1"]
    assert lines[1]["case"].endswith("1_broken") and "platfrom" in lines[1]["error"]
    assert lines[2]["conclusion"]["stage"] == "convert"
    assert "4 cases" in captured.err                     # the summary table, on stderr


def test_html_index_links_every_report_with_a_stage_histogram(queue, tmp_path, capsys):
    out = tmp_path / "out"
    main(["triage", str(queue), "-r", "--jobs", "1", "--no-env", "--format", "html",
          "-o", str(out), "--lang", "en"])
    index = (out / "index.html").read_text(encoding="utf-8")
    tree = html5lib.parse(index, namespaceHTMLElements=False)
    links = [a.get("href") for a in tree.iter("a")]
    assert links == ["0_board_nv12_deploy/report.html", "2_convert_quant_analysis/report.html",
                     "4_wide_gap/report.html"]
    assert all((out / link).is_file() for link in links)
    # stages in words, as the reports name them
    counts = {tr[0].text: int(tr[1].text) for tr in tree.find("body").find("table").iter("tr")}
    assert counts == {"user-side adaptation": 1, "convert": 1, "undetermined": 1, "error": 1}


def test_a_folder_without_case_yaml_needs_recursive(queue, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(queue / "4_wide_gap", other)
    assert main(["triage", str(queue), str(other), "--no-env", "-j", "1"]) == 2
    out = capsys.readouterr().out
    assert "no case.yaml in this folder (add --recursive" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["triage", str(empty), "-r", "-j", "1"]) == 2
    assert "no folder with a case.yaml below it" in capsys.readouterr().out


def test_output_folder_with_user_files_is_refused(queue, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["triage", str(queue), "-r", "-j", "1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "this folder holds files a batch did not write" in err and str(out) in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    fresh = tmp_path / "fresh"
    assert main(["triage", str(queue), "-r", "-j", "1", "-o", str(fresh)]) == 2
    assert main(["triage", str(queue), "-r", "-j", "1", "-o", str(fresh)]) == 2   # its own output


@pytest.mark.parametrize("argv, message", [
    (["--jobs", "0"], "--jobs takes 1 or more"),
    (["--format", "jsonl", "-o", "x"], "--format jsonl streams to stdout and takes no -o"),
    (["--example", "wide_gap"], "--example takes no case folders beside it"),
])
def test_bad_batch_options_are_one_clear_error(queue, argv, message, capsys):
    assert main(["triage", str(queue), str(queue), *argv]) == 2
    assert message in capsys.readouterr().err


def test_summary_table_in_chinese(queue, capsys):
    assert main(["triage", str(queue), "-r", "-j", "1", "--no-env", "--lang", "zh"]) == 2
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["案例", "阶段", "已确定"]
    assert "共 4 个案例：2 个定位到出问题的阶段，1 个暂不能判断，0 个无一致性问题，1 个出错" in out
    assert "其中 1 个有未通过的检查项，0 个有达到 --fail-on 级别的问题" in out


def test_batch_audit_and_single_audit_count_the_checklist_alike(queue, tmp_path, capsys):
    """One count everywhere: a row's failed checks are the audit's, each check once, and
    a case with one is never clean, whatever --fail-on says."""
    from qcdoctor.engine.diagnosis.checklist_counts import checklist_counts
    from qcdoctor.engine.reports.view import audit_view
    shutil.rmtree(queue / "1_broken")
    out = tmp_path / "out"
    assert main(["audit", str(queue), "-r", "-j", "1", "--no-env", "--lang", "en",
                 "--format", "json", "-o", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "3 cases: 2 with a broken stage found, 1 undetermined, 0 with no consistency "
        "problem, 0 with an error",
        "of these, 1 with failed checklist items, 0 with findings at --fail-on"]
    rows = json.loads((out / "summary.json").read_text(encoding="utf-8"))["cases"]
    for row in rows:
        report = json.loads((out / row["report"]).read_text(encoding="utf-8"))
        counts = audit_view(report)["counts"]
        assert counts == checklist_counts(report) and counts["fail"] == len(row["failed"])
        assert main(["audit", row["case"], "--no-env", "--lang", "en", "--format", "md"]) == 0
        line = (f"{counts['fail']} failed, {counts['unknown']} unknown, {counts['pass']} passed, "
                f"{counts['not_applicable']} not applicable")
        assert line in capsys.readouterr().out
    assert [r["failed"] for r in rows] == [["preprocess_mode"], [], []]


def test_stopping_early_leaves_no_worker_behind(queue):
    """Ctrl-C or a consumer that stops: the workers are ended, not waited for."""
    import multiprocessing

    from qcdoctor.engine.commands.batch import Settings, find_cases, run_batch
    before = set(multiprocessing.active_children())
    threads = set(threading.enumerate())
    cases = find_cases([str(queue)] * 20, recursive=True)            # 80 cases
    results = run_batch(cases, Settings(use_env=False), jobs=2)
    assert next(results).case == cases[0].path
    workers = set(multiprocessing.active_children()) - before
    assert len(workers) == 2
    results.close()
    # the pool's own thread may reap them first, so ask the system, not the Process objects
    assert [w.pid for w in workers if running(w.pid, within=10.0)] == []
    # nor any of the pool's threads: with one still running, this process could not fork
    assert [t.name for t in set(threading.enumerate()) - threads] == []


def running(pid: int, within: float) -> bool:
    """Whether ``pid`` still runs (a zombie does not) after waiting up to ``within`` s."""
    import time
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def test_case_folders_never_take_the_names_of_the_batch_files(tmp_path, capsys):
    """Cases named summary.json or index.html, or whose names only differ by characters
    made safe, each get their own folder beside summary.json and index.html."""
    names = ["summary.json", "index.html", "a b", "a_b", "a_b-2"]
    for name in names:
        with example_path("wide_gap") as source:
            shutil.copytree(source, tmp_path / "cases" / name)
    out = tmp_path / "out"
    assert main(["triage", *(str(tmp_path / "cases" / n) for n in names), "-j", "1",
                 "--no-env", "--format", "html", "-o", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    reports = [row["report"] for row in summary["cases"]]
    assert reports == ["summary.json-2/report.html", "index.html-2/report.html",
                       "a_b/report.html", "a_b-2/report.html", "a_b-2-2/report.html"]
    assert all((out / report).is_file() for report in reports)
    assert (out / "index.html").is_file()
    assert "internal error" not in capsys.readouterr().err


def test_folder_names_are_safe_unique_and_never_the_batch_files():
    from qcdoctor.engine.commands.batch_output import folder_names
    assert folder_names(["x/summary.json", "index.html", "c/case.yaml", "d.tar.gz", "..",
                         "e/..", "d", "a:b", "a?b", "é" * 150]) == [
        "summary.json-2", "index.html-2", "c", "d", "case", "case-2", "d-2", "a_b", "a_b-2",
        "é" * 100]


def _tree(root: Path) -> dict:
    """Every entry below ``root``: a link's target, a file's bytes, else its type."""
    import os
    import stat
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = os.readlink(path)
        elif stat.S_ISREG(os.lstat(path).st_mode):
            out[str(path)] = path.read_bytes()
        else:
            out[str(path)] = stat.S_IFMT(os.lstat(path).st_mode)
    return out


@pytest.mark.parametrize("layout", ["case_kept_in_the_output", "output_in_a_case",
                                    "report_linked_to_case_yaml", "report_is_a_fifo"])
def test_a_batch_never_writes_over_what_it_reads(queue, tmp_path, capsys, layout):
    import os
    first, second = queue / "0_board_nv12_deploy", queue / "4_wide_gap"
    out = tmp_path / "out"
    assert main(["triage", str(first), str(second), "-j", "1", "--no-env", "-o", str(out)]) == 0
    args, refused = [str(first), str(second)], "refusing to overwrite an input of this run"
    if layout == "case_kept_in_the_output":         # out/4_wide_gap is now the case itself
        shutil.rmtree(out / "4_wide_gap")
        shutil.move(second, out / "4_wide_gap")
        args = [str(first), str(out / "4_wide_gap")]
    elif layout == "output_in_a_case":
        out = first / "reports"
    elif layout == "report_linked_to_case_yaml":
        (out / "4_wide_gap" / "report.md").unlink()
        (out / "4_wide_gap" / "report.md").symlink_to(second / "case.yaml")
    else:
        (out / "4_wide_gap" / "report.md").unlink()
        os.mkfifo(out / "4_wide_gap" / "report.md")
        refused = "this folder holds files a batch did not write"
    capsys.readouterr()
    before = _tree(tmp_path)
    assert main(["triage", *args, "-j", "1", "--no-env", "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert refused in captured.err and "internal error" not in captured.err
    assert captured.out == ""                    # refused before any case was triaged
    assert _tree(tmp_path) == before


def test_an_allowed_outside_folder_takes_new_outputs_but_keeps_its_files(queue, tmp_path,
                                                                         capsys):
    shared = tmp_path / "shared"
    args = ["triage", str(queue / "0_board_nv12_deploy"), str(queue / "4_wide_gap"), "-j", "1",
            "--no-env", "--allow-outside", str(shared), "-o", str(shared / "out")]
    assert main(args) == 0                      # new files: nothing there can be read
    summary = (shared / "out" / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(args) == 2                      # the second run would replace what it may read
    assert "refusing to overwrite an input of this run" in capsys.readouterr().err
    assert (shared / "out" / "summary.json").read_bytes() == summary
