"""Write QuantAnalysis outputs in the exact formats horizon_plugin_profiler uses.

Tests build their fixtures with these; the formats follow the real samples: psql box
tables with an unnamed index column and 7-decimal floats, the ', '-separated CSV with
'*' inside shapes and Python reprs, tabulate 'simple' sensitivity tables.
"""

from __future__ import annotations

import math
from pathlib import Path

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
_KEY = {"Cosine": "cosine", "COSINE": "cosine", "Atol": "atol", "ATOL": "atol", "dtype": "quant_dtype",
        "MSE": "mse", "KL": "kl", "SQNR": "sqnr", "Rtol": "rtol", "L1": "l1"}


def _cell(value, csv: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None" if csv else ""
    if isinstance(value, float):
        return f"{value:.7f}" if abs(value) < 1e15 else repr(value)
    text = str(value)
    return text.replace(", ", "* ").replace(",", "*") if csv else text


def _psql(header: list[str], rows: list[list[str]], index: bool = True) -> str:
    if index:
        header = [""] + header
        rows = [[str(i)] + r for i, r in enumerate(rows)]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    under = "|" + "+".join("-" * (w + 2) for w in widths) + "|"

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if _numeric(c) else c.ljust(w)
                                 for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([border, line(header), under] + [line(r) for r in rows] + [border]) + "\n"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def compare_rows(rows: list[dict], layout: str) -> tuple[list[str], list[list]]:
    header = LAYOUTS[layout]
    out = []
    for row in rows:
        values = []
        for column in header:
            key = _KEY.get(column, column)
            values.append(row.get(key))
        out.append(values)
    return header, out


COMPARE_FORMATS = ("txt", "csv", "csv_index")


def write_compare(folder: Path, rows: list[dict], layout: str = "16", fmt: str = "txt") -> Path:
    """fmt: ``txt`` (psql box table), ``csv`` as the profiler writes it (no index column,
    the first field is mod_name), or ``csv_index`` (an unnamed row-number column first)."""
    header, values = compare_rows(rows, layout)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt in ("csv", "csv_index"):
        path = folder / "compare_per_layer_out.csv"
        lead = (lambda i: [str(i)]) if fmt == "csv_index" else (lambda i: [])  # noqa: E731
        lines = [", ".join(lead("") + header)]
        lines += [", ".join(lead(i) + [_cell(v, True) for v in r]) for i, r in enumerate(values)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        path = folder / "compare_per_layer_out.txt"
        path.write_text(_psql(header, [[_cell(v, False) for v in r] for r in values]),
                        encoding="utf-8")
    return path


def layer(name: str, cosine: float | None, *, op="torch.nn.modules.conv.Conv2d",
          analy_op="horizon_plugin_pytorch.nn.qat.conv2d.Conv2d", dtype="qint8",
          qscale=0.0082740, base=(-1.0, 1.0), analy=None, atol=None, shape="torch.Size([1, 8, 4, 4])"):
    analy = analy or base
    if atol is None and cosine is not None:
        atol = max(1e-6, (1.0 - cosine) * 2.0)
    return {"mod_name": name, "base_op_type": op, "analy_op_type": analy_op, "shape": shape,
            "quant_dtype": dtype, "qscale": qscale, "cosine": cosine,
            "l1": None if cosine is None else (1.0 - cosine) / 3, "atol": atol,
            "max_qscale_diff": None if atol is None or qscale is None else atol / qscale,
            "base_model_min": base[0], "analy_model_min": analy[0], "base_model_max": base[1],
            "analy_model_max": analy[1], "base_model_mean": 0.01, "analy_model_mean": 0.011,
            "mse": None if cosine is None else (1.0 - cosine) / 10, "kl": 0.0,
            "sqnr": None if cosine is None else 30.0, "rtol": 0.5, "base_model_var": 0.3,
            "analy_model_var": 0.31, "max_atol_diff": atol, "advice": ""}


def write_sensitivity(folder: Path, rows: list[tuple], *, output="pred", metric="L1",
                      case: int | None = None, flops: bool = True, fmt: str = "txt") -> Path:
    """rows: (op_name, sensitive_type, op_type, value, quant_dtype)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"output_{output}{'' if case is None else f'_case_{case}'}_{metric}_sensitive_ops.{fmt}"
    path = folder / name
    if fmt == "pt":
        import torch
        torch.save([list(r) for r in rows], path)
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


def write_advisor(folder: Path, rows: list[tuple]) -> Path:
    """rows: (mod_name, op_type, abnormal_info, advice)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "abnormal_layer_advisor.txt"
    path.write_text(_psql(["mod_name", "op_type", "abnormal_info", "advice"],
                          [list(r) for r in rows]), encoding="utf-8")
    return path


def write_badcase(folder: Path, worst: dict[str, dict[str, int]]) -> Path:
    """worst: metric -> output -> dataloader index (the first of badcase.txt's tables)."""
    folder.mkdir(parents=True, exist_ok=True)
    outputs = sorted({o for per in worst.values() for o in per})
    first = _psql(["metric"] + outputs,
                  [[m] + [str(per.get(o, "")) for o in outputs] for m, per in worst.items()],
                  index=False)
    values = _psql(["metric"] + outputs, [[m] + ["0.5" for _ in outputs] for m in worst], index=False)
    path = folder / "badcase.txt"
    path.write_text("The bad case input index of each output:\n" + first +
                    "\nThe metric results of each bad case:\n" + values, encoding="utf-8")
    return path


def write_fx_graph(path: Path, nodes: list[tuple[str, str, str, str]]) -> Path:
    """nodes: (opcode, name, target, args)."""
    header = ["opcode", "name", "target", "args", "kwargs"]
    rows = [list(n) + ["{}"] for n in nodes]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    line = lambda cs: "  ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)).rstrip()  # noqa: E731
    text = "Graph:\n" + "\n".join([line(header), "  ".join("-" * w for w in widths)] +
                                  [line(r) for r in rows]) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def write_model_check(path: Path, *, unfused=(), called=(), dequant_qint8=(), averaging=()) -> Path:
    parts = []
    if unfused:
        w = max(len(n) for n in unfused) + 2
        parts.append("Fusable modules are listed below:\nname".ljust(w + 33) + "type\n" +
                     "-" * w + "  " + "-" * 40 + "\n" +
                     "\n".join(f"{n.ljust(w)}  <class 'horizon_plugin_pytorch.nn.qat.conv2d.Conv2d'>"
                               for n in unfused) + "\n")
    else:
        parts.append("All fusable modules are fused in model!\n")
    if called:
        w = max(len(n) for n, _ in called) + 2
        parts.append("Each module called times:\n" + "name".ljust(w) + "  called times\n" +
                     "-" * w + "  " + "-" * 14 + "\n" +
                     "\n".join(f"{n.ljust(w)}  {t:>14}" for n, t in called) + "\n")
    else:
        parts.append("All modules in the model run exactly once.\n")
    rows = [["quant", "<class 'horizon_plugin_pytorch.nn.qat.stubs.QuantStub'>", "[torch.float32]",
             "['qint8']", "-1", "MinMaxObserver"]]
    rows += [[n, "<class 'horizon_plugin_pytorch.nn.qat.stubs.DeQuantStub'>", "['qint8']",
              "[torch.float32]", "qconfig = None", ""] for n in dequant_qint8]
    rows += [[n, "<class 'horizon_plugin_pytorch.nn.qat.conv2d.Conv2d'>", "['qint8']", "['qint8']",
              "-1", f"MinMaxObserver(averaging_constant={a})"] for n, a in averaging]
    parts.append("Each layer out qconfig:\n" + _psql(["Module Name", "Module Type", "Input dtype",
                                                      "out dtype", "ch_axis", "observer"],
                                                     rows, index=False))
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
