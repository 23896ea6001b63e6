"""Write QuantAnalysis tables in the exact formats horizon_plugin_profiler uses.

``qcdoctor probe`` writes its measurements through these, so every reader, rule and
report treats them like the profiler's own files; the test fixtures use them too.
Formats (knowledge.md §8, the real samples): psql box tables with an unnamed index
column and 7-decimal floats, empty cells for None; the ', '-separated CSV without an
index column, ``*`` for commas inside cells, Python reprs (``None``); tabulate
'simple' sensitivity tables and the same rows as a plain list in ``.pt``.
"""

from __future__ import annotations

import math
from pathlib import Path

from qcdoctor.values import looks_numeric

LAYOUTS = {
    "16": ["mod_name", "base_op_type", "analy_op_type", "shape", "quant_dtype", "qscale",
           "Cosine", "L1", "Atol", "max_qscale_diff", "base_model_min", "analy_model_min",
           "base_model_max", "analy_model_max", "base_model_mean", "analy_model_mean"],
    "23": ["mod_name", "base_op_type", "analy_op_type", "shape", "quant_dtype", "qscale",
           "Cosine", "MSE", "L1", "KL", "SQNR", "Atol", "Rtol", "base_model_min",
           "analy_model_min", "base_model_max", "analy_model_max", "base_model_mean",
           "analy_model_mean", "base_model_var", "analy_model_var", "max_atol_diff",
           "max_qscale_diff"],
    "upper": ["mod_name", "base_op_type", "analy_op_type", "shape", "dtype", "qscale", "COSINE",
              "L1", "ATOL", "max_qscale_diff", "base_model_min", "analy_model_min",
              "base_model_max", "analy_model_max", "base_model_mean", "analy_model_mean", "advice"],
}
# the table's column name -> the row dict's key (the readers' lower-case names)
ROW_KEYS = {"Cosine": "cosine", "COSINE": "cosine", "Atol": "atol", "ATOL": "atol",
            "dtype": "quant_dtype", "MSE": "mse", "KL": "kl", "SQNR": "sqnr", "Rtol": "rtol",
            "L1": "l1"}
COMPARE_FORMATS = ("txt", "csv", "csv_index")


def cell(value, csv: bool) -> str:
    """One value as the profiler prints it: 7 decimals; None empty (txt) or ``None`` (csv)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None" if csv else ""
    if isinstance(value, float):
        return f"{value:.7f}" if abs(value) < 1e15 else repr(value)
    text = str(value)
    return text.replace(", ", "* ").replace(",", "*") if csv else text


def psql(header: list[str], rows: list[list[str]], index: bool = True) -> str:
    """A psql box table; numbers right-aligned, text left-aligned, as tabulate does."""
    if index:
        header = [""] + header
        rows = [[str(i)] + r for i, r in enumerate(rows)]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    under = "|" + "+".join("-" * (w + 2) for w in widths) + "|"

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if looks_numeric(c) else c.ljust(w)
                                 for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([border, line(header), under] + [line(r) for r in rows] + [border]) + "\n"


def compare_rows(rows: list[dict], layout: str) -> tuple[list[str], list[list]]:
    header = LAYOUTS[layout]
    return header, [[row.get(ROW_KEYS.get(c, c)) for c in header] for row in rows]


def write_compare(folder: Path, rows: list[dict], layout: str = "16", fmt: str = "txt") -> Path:
    """compare_per_layer_out.{txt,csv}; rows are dicts keyed by the readers' names.

    fmt: ``txt`` (psql box table), ``csv`` as the profiler writes it (no index column,
    the first field is mod_name), or ``csv_index`` (an unnamed row-number column first,
    as older writers did)."""
    header, values = compare_rows(rows, layout)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt in ("csv", "csv_index"):
        path = folder / "compare_per_layer_out.csv"
        lead = (lambda i: [str(i)]) if fmt == "csv_index" else (lambda i: [])  # noqa: E731
        lines = [", ".join(lead("") + header)]
        lines += [", ".join(lead(i) + [cell(v, True) for v in r]) for i, r in enumerate(values)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        path = folder / "compare_per_layer_out.txt"
        path.write_text(psql(header, [[cell(v, False) for v in r] for r in values]),
                        encoding="utf-8")
    return path


def sensitivity_name(output: str, metric: str, case: int | None = None, ext: str = "txt") -> str:
    return f"output_{output}{'' if case is None else f'_case_{case}'}_{metric}_sensitive_ops.{ext}"


def write_sensitivity(folder: Path, rows: list[tuple], *, output="pred", metric="L1",
                      case: int | None = None, flops: bool = True, fmt: str = "txt") -> Path:
    """rows: (op_name, sensitive_type, op_type, value, quant_dtype), most sensitive first;
    op_type is the class path (written as ``<class '...'>``). ``pt`` writes the same rows
    as a plain list (loadable with ``weights_only=True``); without ``flops`` the table has
    no flops column (as some profiler versions write it)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / sensitivity_name(output, metric, case, fmt)
    if fmt == "pt":
        import torch
        torch.save([[r[0], r[1], f"<class '{r[2]}'>", float(r[3]), r[4]] for r in rows], path)
        return path
    header = ["op_name", "sensitive_type", "op_type", metric, "quant_dtype"] + (["flops"] if flops else [])
    cells = [[r[0], r[1], f"<class '{r[2]}'>", f"{r[3]:g}", r[4]] + (["0(0%)"] if flops else [])
             for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(header)]
    fmt_row = lambda cs: "  ".join(c.rjust(w) if i == 3 else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cs, widths, strict=True))).rstrip()
    lines = [fmt_row(header), "  ".join("-" * w for w in widths)] + [fmt_row(c) for c in cells]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
