"""What a batch leaves behind: DIR/<case>/report.<ext>, DIR/summary.json, DIR/index.html
(with HTML), and the summary table on the terminal."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from .batch import CaseResult, worst_exit
from .errors import QcdoctorError

SUMMARY_SCHEMA = "qcdoctor/batch-summary-v1"
SUMMARY_FILE = "summary.json"
_UNSAFE = re.compile(r"[^\w.-]+")


def check_output_folder(folder: Path) -> None:
    """A batch writes only into a new or empty folder, or over its own earlier output:
    nothing the user keeps there is ever overwritten."""
    if folder.exists() and not folder.is_dir():
        raise QcdoctorError("not a folder", file=str(folder),
                            fix="with several cases, -o names a folder for the reports")
    if not folder.exists() or not any(folder.iterdir()):
        return
    try:
        earlier = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = None
    if not isinstance(earlier, dict) or earlier.get("schema") != SUMMARY_SCHEMA:
        raise QcdoctorError("this folder holds files a batch did not write", file=str(folder),
                            fix="give a new or empty folder for the reports")


def folder_names(results: list[CaseResult]) -> list[str]:
    """One output folder name per case: its folder's name, made unique with -2, -3, ..."""
    names, seen = [], Counter()
    for result in results:
        path = Path(result.case)
        base = path.parent.name if path.name == "case.yaml" else path.name
        for suffix in (".tar.gz", ".tgz"):
            base = base.removesuffix(suffix)
        base = _UNSAFE.sub("_", base).strip("._") or "case"
        seen[base] += 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def write_outputs(folder: Path, results: list[CaseResult], extension: str | None,
                  lang: str, html: bool) -> None:
    from .atomic import write_text_atomic
    folder.mkdir(parents=True, exist_ok=True)
    names = folder_names(results)
    rows = []
    for name, result in zip(names, results, strict=True):
        row = {**result.row(), "report": None}
        if result.text is not None and extension:
            (folder / name).mkdir(exist_ok=True)
            write_text_atomic(folder / name / f"report.{extension}", result.text)
            row["report"] = f"{name}/report.{extension}"
        rows.append(row)
    summary = {"schema": SUMMARY_SCHEMA, "exit": worst_exit(results),
               "cases": rows}
    write_text_atomic(folder / SUMMARY_FILE,
                      json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    if html:
        write_text_atomic(folder / "index.html", index_html(rows, lang))


def index_html(rows: list[dict], lang: str) -> str:
    from .report import labels
    from .templating import render_template
    from .vocabulary import CONCLUSION_LABELS
    stages = Counter(r["stage"] or "error" for r in rows)
    top = max(stages.values(), default=1)
    histogram = [{"stage": s, "label": CONCLUSION_LABELS[lang].get(s, s), "count": n,
                  "share": n / top} for s, n in stages.most_common()]
    return render_template("batch_index.html.j2", autoescape=True, rows=rows, lang=lang,
                           L=labels()[lang], B=labels()[lang]["batch"], histogram=histogram)


def summary_table(results: list[CaseResult], lang: str) -> str:
    """The summary as aligned columns (display width: Chinese takes two columns)."""
    from .report import _one_line as one_line
    from .report import labels
    from .termtext import display_width
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
            cells = [r.case, r.stage, L["yes"] if r.determined else L["no"], r.suspect,
                     r.first_action, ", ".join(r.failed), str(r.exit)]
        body.append([one_line(c) for c in cells])
    widths = [max(display_width(row[i]) for row in [head, *body]) for i in range(len(head))]

    def line(cells):
        return "  ".join(c + " " * (w - display_width(c)) for c, w in zip(cells, widths, strict=True)).rstrip()
    counts = Counter(r.exit for r in results)
    totals = B["totals"].format(total=len(results), ok=counts[0], findings=counts[1],
                                errors=counts[2])
    return "\n".join([line(head), *(line(row) for row in body), "", *errors, *([""] if errors else []), totals]) + "\n"
