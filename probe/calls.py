"""layer_calls.csv: one line per compare_per_layer row, in the same order, saying which
call of which module (or function op) the row is, which earlier rows' outputs it reads,
and which quantizer objects its output and its weight pass through in the analysis
model (knowledge.md R5.1, R5.5).

A row is a *call*: a module called several times gives one row per call, named as the
profiler names repeated calls (``head``, ``head(1)``, ``head(2)`` ...). What a call reads
is found by the values themselves (the FX graph's nodes, an eager model's tensors by
identity), positional and keyword arguments alike, nested in tuples, lists and dicts,
looking through everything that has no row of its own (views, shape queries,
quantizers, outputs no row compares) to the nearest rows.

A quantizer is named by its first qualified name in ``named_modules()``: torch.ao shares
one fake quant among a conv and the ReLU6 after it, a pool and its input, a concat's
inputs and output, so rows whose output passes through the same object carry the same
name.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

CALLS_FILE = "layer_calls.csv"
COLUMNS = ("name", "module", "call", "op_type", "inputs", "output_quantizer",
           "weight_quantizer")


def call_name(name: str, index: int) -> str:
    """A call's row name: the name for the first call, ``name(n)`` for the n-th after."""
    return name if index == 0 else f"{name}({index})"


@dataclass
class Call:
    """One output a model reported: what it is and the outputs (keys) it reads."""
    module: str                 # the module's qualified name or the function row's path
    op_type: str
    reads: tuple                # keys of earlier reported outputs, argument order
    output_quantizer: object = None     # the quantizer module object, if any
    weight_quantizer: object = None


def merged(groups) -> tuple:
    """The keys of several inputs in order, each once."""
    found: dict = {}
    for group in groups:
        for key in group:
            found[key] = None
    return tuple(found)


def quantizer_names(model) -> dict[int, str]:
    """id(module) -> its first qualified name in ``model.named_modules()``."""
    names: dict[int, str] = {}
    for name, module in model.named_modules():
        names.setdefault(id(module), name)
    return names


def call_lines(rows: list[tuple], calls: dict, names: dict[int, str]) -> list[dict]:
    """layer_calls.csv's lines: ``rows`` are (row name, key) in table order, ``calls`` key
    -> Call, ``names`` the quantizers' names (quantizer_names). A key read that has no row
    is looked through to the rows it reads in turn."""
    row_of = {key: name for name, key in rows}
    resolved: dict = {}

    def through(key) -> tuple:
        """The row names ``key``'s output stands for: its own row, or its inputs' rows."""
        if key in row_of:
            return (row_of[key],)
        if key in resolved:
            return resolved[key]
        resolved[key] = ()                  # a cycle (never in a forward) reads nothing
        call = calls.get(key)
        found = merged(through(k) for k in call.reads) if call is not None else ()
        resolved[key] = found
        return found

    lines = []
    for name, key in rows:
        call = calls.get(key)
        if call is None:
            lines.append({"name": name, "module": key[0], "call": key[1], "op_type": "",
                          "inputs": [], "output_quantizer": "", "weight_quantizer": ""})
            continue
        inputs = [n for n in merged(through(k) for k in call.reads) if n != name]
        lines.append({"name": name, "module": call.module, "call": key[1],
                      "op_type": call.op_type, "inputs": inputs,
                      "output_quantizer": _named(call.output_quantizer, names),
                      "weight_quantizer": _named(call.weight_quantizer, names)})
    return lines


def _named(module, names: dict[int, str]) -> str:
    return "" if module is None else names.get(id(module), "")


def calls_text(lines: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for line in lines:
        writer.writerow([line["name"], line["module"], line["call"], line["op_type"],
                         json.dumps(line["inputs"], ensure_ascii=False),
                         line["output_quantizer"], line["weight_quantizer"]])
    return out.getvalue()


def write_calls(folder: Path, lines: list[dict]) -> Path:
    path = Path(folder) / CALLS_FILE
    path.write_text(calls_text(lines), encoding="utf-8")
    return path
