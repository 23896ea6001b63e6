"""Probe folders written for the reading's tests: compare_per_layer_out in the profiler's
format, with the layer_calls.csv, layer_own_error.csv and fx_graph.txt beside it that the
probe (or the profiler) writes, each in its documented format."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors.reading.compare_layers import read_folder, row_facts
from qcdoctor.fact_types import normalise
from tests.qa.writers import layer, write_compare

CONV = "torch.nn.modules.conv.Conv2d"


@dataclass
class Row:
    """One call: its row name, Cosine, the rows it reads, its op type and quantizers."""
    name: str
    cosine: float
    inputs: list[str] = field(default_factory=list)
    op: str = CONV
    quantizer: str = ""             # "" : one of its own, named after the row
    weight: str = ""
    base: tuple[float, float] = (-1.0, 1.0)
    analy: tuple[float, float] | None = None
    dtype: str = "qint8"

    @property
    def output_quantizer(self) -> str:
        return self.quantizer or f"{self.name.split('(')[0]}.activation_post_process" + (
            f"#{self.name}" if "(" in self.name else "")


def write_table(folder: Path, rows: list[Row]) -> Path:
    return write_compare(folder, [layer(r.name, r.cosine, op=r.op, analy_op=r.op,
                                        base=r.base, analy=r.analy, dtype=r.dtype)
                                  for r in rows], "16", "csv")


def write_calls(folder: Path, rows: list[Row]) -> Path:
    path = Path(folder) / "layer_calls.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["name", "module", "call", "op_type", "inputs", "output_quantizer",
                      "weight_quantizer"])
        for r in rows:
            module, _, call = r.name.partition("(")
            out.writerow([r.name, module, int(call.rstrip(")") or 0), r.op,
                          json.dumps(r.inputs), r.output_quantizer, r.weight])
    return path


def write_own(folder: Path, own: dict[str, float | str | tuple], status: bool = True) -> Path:
    """own: row name -> its own Cosine, the reason it was not measured, or (a Cosine, a
    status): numbers left in the cells of a row that was not measured."""
    path = Path(folder) / "layer_own_error.csv"
    header = ["mod_name", "own_cosine", "own_atol", "own_qsteps", "weight_sqnr_db",
              "weight_scheme", "weight_channel_ratio"] + (["own_status"] if status else [])
    with path.open("w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(header)
        for name, value in own.items():
            value, why = value if isinstance(value, tuple) else (value, "measured")
            if isinstance(value, str):
                cells = [name, "", "", "", "", "", "", value]
            else:
                steps = (1.0 - value) * 2.0 / 0.008274
                cells = [name, value, (1.0 - value) * 2.0, steps, "", "", "", why]
            out.writerow(cells[:len(header)])
    return path


def write_graph(folder: Path, nodes: list[tuple[str, ...]]) -> Path:
    """fx_graph.txt as the profiler prints it; nodes: (opcode, name, target, args[, kwargs])."""
    header = ["opcode", "name", "target", "args", "kwargs"]
    rows = [list(n) + ["{}"] * (5 - len(n)) for n in nodes]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    text = "Graph:\n" + "\n".join([line(header), "  ".join("-" * w for w in widths)] +
                                  [line(r) for r in rows]) + "\n"
    path = Path(folder) / "fx_graph.txt"
    path.write_text(text, encoding="utf-8")
    return path


def read(folder: Path, table: Path | None = None):
    """(reading, {fact type: [facts]}) of the folder's table, read as triage reads it."""
    table = table or Path(folder) / "compare_per_layer_out.csv"
    layers, reading = read_folder(table)
    facts: dict[str, list[dict]] = {}
    for fact in row_facts(layers, reading, "qa", f"qa/{table.name}"):
        normalise(fact)
        facts.setdefault(fact["type"], []).append(fact)
    return reading, facts


def origin(facts) -> tuple[str, str, str]:
    """(pattern, origin layer, second layer) of a reading's facts."""
    found = facts.get("layer_origin")
    if not found:
        return ("noise" if "layer_noise" in facts else "none", "", "")
    return found[0]["pattern"], found[0]["layer"], found[0]["second_layer"]
