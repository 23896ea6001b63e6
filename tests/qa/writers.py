"""Write QuantAnalysis outputs in the exact formats horizon_plugin_profiler uses.

Tests build their fixtures with these: the compare and sensitivity tables come from the
product's own writer (the one ``qcdoctor probe`` uses); the rest follows the real samples.
"""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.qa_writers import (  # noqa: F401 - re-exported for the tests
    COMPARE_FORMATS,
    LAYOUTS,
    compare_rows,
    write_compare,
    write_sensitivity,
)
from qcdoctor.collectors.qa_writers import psql as _psql


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
