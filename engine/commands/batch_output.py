"""What a batch leaves behind: DIR/<case>/report.<ext>, DIR/summary.json, DIR/index.html
(with HTML), and the summary table on the terminal."""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from pathlib import Path

from qcdoctor.atomic import TEMPORARY_PREFIX
from qcdoctor.engine.commands.batch import CaseInput, CaseResult, batch_counts
from qcdoctor.errors import EXIT_ERROR, EXIT_OK, QcdoctorError

SUMMARY_SCHEMA = "qcdoctor/batch-summary-v1"
SUMMARY_FILE = "summary.json"
INDEX_FILE = "index.html"
_UNSAFE = re.compile(r"[^\w.-]+")
# a case's folder name leaves room for a -N suffix within a file name's 255 bytes
_NAME_BYTES = 200


def check_output_folder(folder: Path) -> None:
    """A batch writes only into a new or empty folder, or over its own earlier output:
    nothing the user keeps there is ever overwritten."""
    from qcdoctor.engine.commands.output_file import under_system
    if under_system(folder):
        raise QcdoctorError("a kernel folder under /proc or /sys, not a place for output",
                            file=str(folder), fix="give a new or empty folder for the reports")
    if folder.exists() and not folder.is_dir():
        raise QcdoctorError("not a folder", file=str(folder),
                            fix="with several cases, -o names a folder for the reports")
    if not folder.exists() or _holds_only_temporaries(folder):
        return
    earlier = _earlier_summary(folder / SUMMARY_FILE)
    if not isinstance(earlier, dict) or earlier.get("schema") != SUMMARY_SCHEMA:
        raise QcdoctorError("this folder holds files a batch did not write", file=str(folder),
                            fix="give a new or empty folder for the reports")


def _holds_only_temporaries(folder: Path) -> bool:
    """Nothing in ``folder`` but the atomic writer's temporaries (none at all included):
    all a batch killed while writing its first summary leaves. They are never touched."""
    return all(p.name.startswith(TEMPORARY_PREFIX) and p.name.endswith(".tmp")
               for p in folder.iterdir())


def _earlier_summary(path: Path):
    """The summary an earlier batch left at ``path``, or None when what is there is no
    such summary (a FIFO, a huge or deep file, broken JSON: never waited on or parsed)."""
    from qcdoctor.collectors.bounded_data import DataRefused, load_json
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _SUMMARY_BYTES:
            return None
        return load_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, DataRefused):
        return None


# a summary lists one short row per case: a batch of 100,000 cases writes about 40 MiB
_SUMMARY_BYTES = 64 << 20


def folder_names(cases: list[str]) -> list[str]:
    """One output folder name per case path: its folder's name made safe, unique with -2,
    -3, ... (after sanitising "a b" and "a_b" are both "a_b") and never the name of a
    file the batch writes beside them (summary.json, index.html)."""
    names, used = [], {SUMMARY_FILE, INDEX_FILE}
    for case in cases:
        path = Path(case)
        base = path.parent.name if path.name == "case.yaml" else path.name
        for suffix in (".tar.gz", ".tgz"):
            base = base.removesuffix(suffix)
        base = _UNSAFE.sub("_", base).strip("._")
        base = base.encode("utf-8")[:_NAME_BYTES].decode("utf-8", "ignore") or "case"
        name, number = base, 1
        while name in used:                 # "x-2" given as a case is taken as well
            number += 1
            name = f"{base}-{number}"
        used.add(name)
        names.append(name)
    return names


def planned_files(folder: Path, cases: list[str], extension: str | None,
                  html: bool) -> tuple[list[Path], list[Path]]:
    """(folders, files) a batch of ``cases`` may write, each case's report included."""
    names = folder_names(cases)
    folders = [folder, *(folder / n for n in names)] if extension else [folder]
    files = [folder / SUMMARY_FILE, *([folder / INDEX_FILE] if html else []),
             *(folder / n / f"report.{extension}" for n in names if extension)]
    return folders, files


def check_planned_outputs(folder: Path, cases: list[CaseInput], extension: str | None,
                          html: bool, allow_outside: tuple[str, ...] = ()) -> None:
    """Before any case is read: no output lands in a case folder (the case may read any
    file there, and would read the reports on its next run), on a file of an
    --allow-outside folder, or on a bundle the batch reads; and what already stands at
    an output's place is what a batch writes (a folder, a regular file). Outputs are
    renamed into place, so a hard link to an input is never written through."""
    areas, bundles = [], []
    for case in cases:
        if case.problem:
            continue
        path = Path(case.path)
        if path.is_dir():
            areas.append(os.path.realpath(path))
        elif path.name == "case.yaml":
            areas.append(os.path.realpath(path.parent))
        else:
            bundles.append(path)
    outside = [os.path.realpath(p) for p in allow_outside]
    folders, files = planned_files(folder, [c.path for c in cases], extension, html)
    for place in [*folders, *files]:
        resolved = os.path.realpath(place)
        read = next((a for a in areas if _within(resolved, a)), None)
        if read is None and os.path.lexists(place):
            read = next((a for a in outside if _within(resolved, a)), None)
        if read is None and any(_same(place, bundle) for bundle in bundles):
            read = str(place)
        if read is not None:
            raise QcdoctorError(f"refusing to overwrite an input of this run: the output "
                                f"{place} would land in {read}, which this batch reads",
                                file=str(folder),
                                fix="give an output folder outside the case folders (and "
                                    "the --allow-outside folders)")
    for place, wanted in [*((p, stat.S_ISDIR) for p in folders),
                          *((p, stat.S_ISREG) for p in files)]:
        try:
            mode = os.lstat(place).st_mode
        except OSError:                   # nothing there (or unreadable: the write says so)
            continue
        if not wanted(mode):              # a link, FIFO, device, or a file for a folder
            raise QcdoctorError(f"this folder holds files a batch did not write: {place}",
                                file=str(folder),
                                fix="give a new or empty folder for the reports")


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _same(path: Path, other: Path) -> bool:
    try:
        one, two = os.stat(path), os.stat(other)
    except OSError:
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def write_outputs(folder: Path, results: list[CaseResult], extension: str | None,
                  lang: str, html: bool) -> None:
    """DIR/<case>/report.<ext> per case with a report, then summary.json (and index.html).
    A case whose report cannot be written fails alone: its result and row say why, and the
    other cases are written. Whatever stops the writing (a full disk, Ctrl-C, a kill), the
    folder holds the batch's summary and only whole case folders, so the same command
    run again takes it as the batch's own."""
    from qcdoctor.engine.commands.output_file import write_output
    _claim(folder, results, extension)
    names = folder_names([r.case for r in results])
    rows = []
    for name, result in zip(names, results, strict=True):
        report = None
        if result.text is not None and extension:
            try:
                _write_report(folder / name, f"report.{extension}", result.text)
                report = f"{name}/report.{extension}"
            except QcdoctorError as exc:
                result.exit, result.error, result.text = EXIT_ERROR, exc.render(), None
        rows.append({**result.row(), "report": report})
    write_output(folder / SUMMARY_FILE, _summary_text(rows))
    if html:
        write_output(folder / INDEX_FILE, index_html(rows, lang))


# the row of a report not written yet, in the summary that stands until the last one is
_NOT_YET = "the batch stopped before this report was written (run the same command again)"


def _claim(folder: Path, results: list[CaseResult], extension: str | None) -> None:
    """summary.json first, before any case folder, listing no report as written: from here
    on the folder is the batch's own to a rerun, however the batch ends. A folder this
    made is removed again when even that cannot be written."""
    from qcdoctor.engine.commands.output_file import make_folder, write_output
    made = not os.path.lexists(folder)
    make_folder(folder)
    rows = []
    for result in results:
        row = {**result.row(), "report": None}
        if result.text is not None and extension:
            row.update(exit=EXIT_ERROR, error=f"{result.case}: {_NOT_YET}")
        rows.append(row)
    try:
        write_output(folder / SUMMARY_FILE, _summary_text(rows))
    except BaseException:
        if made:
            _remove_if_empty(folder)
        raise


def _write_report(case_folder: Path, file_name: str, text: str) -> None:
    """``text`` as case_folder/file_name. An earlier batch's folder has its report replaced
    atomically; a new folder is filled under a temporary name and renamed into place
    whole, so a failure or an interrupt never leaves an empty or half folder."""
    from qcdoctor.atomic import folder_made_atomically
    from qcdoctor.engine.commands.output_file import Target, explained, write_output
    report = case_folder / file_name
    if os.path.isdir(case_folder):
        write_output(report, text)
        return
    try:
        with folder_made_atomically(case_folder) as staging:
            # named as the user will find it, not by the temporary folder it is written in
            write_output(Target(str(report), str(staging / file_name)), text)
    except OSError as exc:              # the folder not made, or not renamed into place
        raise explained(exc, str(case_folder)) from None


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:                     # something is in it: not ours to remove
        pass


def _summary_text(rows: list[dict]) -> str:
    from qcdoctor.safe_text import json_text
    summary = {"schema": SUMMARY_SCHEMA,
               "exit": max((row["exit"] for row in rows), default=EXIT_OK), "cases": rows}
    return json_text(json.dumps(summary, ensure_ascii=False, indent=2)) + "\n"


def index_html(rows: list[dict], lang: str) -> str:
    from qcdoctor.engine.reports.html import render_view
    from qcdoctor.vocabulary import CONCLUSION_LABELS
    from qcdoctor.wording import id_words, labels
    stages = Counter(r["stage"] or "error" for r in rows)
    top = max(stages.values(), default=1)
    words = labels()[lang]
    histogram = [{"stage": s, "count": n,
                  "label": words["batch"]["error"] if s == "error" else
                  CONCLUSION_LABELS[lang].get(s, s),
                  "share": n / top} for s, n in stages.most_common()]
    actions = [_first_action(row, lang) for row in rows]
    # case names and errors made visible: controls and bidi controls as U+FFFD
    return render_view("batch_index.html.j2", rows=list(zip(rows, actions, strict=True)),
                       lang=lang, L=words, B=words["batch"], histogram=histogram,
                       totals=_totals(batch_counts(rows), lang),
                       words=lambda value: id_words(value, lang),
                       stage_words=lambda s: CONCLUSION_LABELS[lang].get(s, s))


def _action_cell(result, lang: str) -> str:
    """The terminal table's first action: its cost and its text, shortened to a column a
    terminal holds (the index shows more)."""
    if not result.first_text:
        return ""
    shown = _first_action({"first_text": result.first_text, "first_cost": result.first_cost},
                          lang, columns=_TERMINAL_ACTION_COLUMNS)
    return f"[{shown['cost']}] {shown['short']}" if shown["cost"] else shown["short"]


# the terminal table's first action column, in columns
_TERMINAL_ACTION_COLUMNS = 56
# a first action is shown up to this many columns (a Chinese character takes two)
_ACTION_COLUMNS = 120
_SENTENCE_END = re.compile(r"[。；;]|\.(?=\s)")
# a colon ends the shown part only after this much: before it, it names what follows
_COLON = re.compile(r"[:：]")
_COLON_AFTER = 60
# brackets (and `code` spans) a cut may leave open, each with what closes it
_CLOSING = (("(", ")"), ("（", "）"), ("[", "]"), ("`", "`"))


def _first_action(row: dict, lang: str, columns: int = 0) -> dict:
    """The first action as the index shows it: its cost in words, and its text shortened
    (asides and later clauses left out); the whole text stays for a tooltip."""
    from qcdoctor.wording import labels
    text = row["first_text"]
    cost = labels()[lang]["batch"]["cost"].get(row["first_cost"], "")
    # a remedy's text leads with its cost, said more precisely (retraining ruled out):
    # that label is the one shown, once
    for label in labels()[lang]["cost_label"].values():
        if text.startswith(label):
            cost, text = label.strip("【】[] "), text[len(label):]
    return {"cost": cost, "short": _shortened(text, columns or _ACTION_COLUMNS),
            "full": row["first_text"]}


def _shortened(text: str, columns: int = _ACTION_COLUMNS) -> str:
    """``text`` up to its first sentence's end, cut at a comma or a word to fit
    _ACTION_COLUMNS and marked with … when anything was left out; a bracket or a `code`
    span the cut leaves open is closed again."""
    from qcdoctor.engine.reports.termtext import display_width
    end = _SENTENCE_END.search(text)
    short = text[:end.start()] if end else text
    colon = next((m for m in _COLON.finditer(short)
                  if display_width(short[:m.start()]) >= _COLON_AFTER), None)
    short = short[:colon.start()] if colon else short
    if display_width(short) > columns:
        while display_width(short) > columns - 4:
            short = short[:-1]
        short = short[:_last_break(short)].rstrip(" ,，、")
    short = short.rstrip(" .。")
    if short == text.rstrip(" .。"):
        return short
    for opening, closing in _CLOSING:
        opened = short.count(opening) - (short.count(closing) if opening != closing else 0)
        short += closing * (opened % 2 if opening == closing else max(opened, 0))
    return short + " …"


def _last_break(text: str) -> int:
    """Where to cut ``text``: at its last comma, else its last space, outside brackets and
    in its second half; else at its end (Chinese without either)."""
    for breaks in ("，,、", " "):
        for at in range(len(text) - 1, len(text) // 2, -1):
            before = text[:at]
            if text[at] in breaks and before.count("[") == before.count("]") \
                    and before.count("(") == before.count(")"):
                return at
    return len(text)


def _totals(counts: dict[str, int], lang: str) -> list[str]:
    """The batch's counts in words: what the cases concluded, which adds up to all of them,
    then the cases with a failed checklist item and with a finding at --fail-on."""
    from qcdoctor.wording import labels
    B = labels()[lang]["batch"]
    return [B["outcomes"].format(**counts), B["beside"].format(**counts)]


def summary_table(results: list[CaseResult], lang: str) -> str:
    """The summary as aligned columns (display width: Chinese takes two columns), then the
    totals: what the cases concluded, and beside that their failed checks and findings."""
    from qcdoctor.engine.reports.termtext import display_width
    from qcdoctor.safe_text import one_line
    from qcdoctor.vocabulary import CONCLUSION_LABELS
    from qcdoctor.wording import item_words, labels, suspect_words
    B = labels()[lang]["batch"]
    L = labels()[lang]
    head = [B[k] for k in ("col_case", "col_stage", "col_determined", "col_suspect",
                           "col_action", "col_failed", "col_exit")]
    body, errors = [], []
    for r in results:
        if r.error:
            cells = [r.case, B["error"], "", "", "", "", str(r.exit)]
            errors.append("\n  ".join(
                one_line(part) for part in r.error.splitlines()))
        else:
            # words, as the reports show them (summary.json keeps the ids)
            cells = [r.case, CONCLUSION_LABELS[lang].get(r.stage, r.stage),
                     L["yes"] if r.determined else L["no"],
                     suspect_words(r.suspect, r.failed, lang),
                     _action_cell(r, lang),
                     L["list"].join(item_words(f, "fail", lang) for f in r.failed), str(r.exit)]
        body.append([one_line(c) for c in cells])
    widths = [max(display_width(row[i]) for row in [head, *body]) for i in range(len(head))]

    def line(cells):
        return "  ".join(c + " " * (w - display_width(c)) for c, w in zip(cells, widths, strict=True)).rstrip()
    totals = _totals(batch_counts([r.row() for r in results]), lang)
    return "\n".join([line(head), *(line(row) for row in body), "", *errors, *([""] if errors else []), *totals]) + "\n"
