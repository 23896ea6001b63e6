"""model_check_result*.txt (written by prepare): the checks of knowledge.md §9.

Each finding becomes a ``model_check`` fact: kind, module, detail, and the line.
"""

from __future__ import annotations

import re
from pathlib import Path

from qcdoctor.collectors.tables import psql_tables, simple_table

_AVG = re.compile(r"averaging_constant\s*=\s*([0-9.eE+-]+)")
_ABNORMAL_COMPUTE = re.compile(r"^(\S+)\s+((?:float|int|qint)\d+\*(?:float|int|qint)\d+)\s*$")
STUBS = ("QuantStub", "DeQuantStub")
TITLE_GAP = 3          # lines between a section title and its table's header


def check_model(path: Path) -> list[dict]:
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    found: list[dict] = []

    def add(kind, module, detail, line):
        found.append({"kind": kind, "module": module, "detail": detail, "line": line})

    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith("Fusable modules are listed below"):
            table = simple_table(lines, i + 1, within=TITLE_GAP)
            for at, cells in (table[2] if table else []):
                name = cells[0]
                add("unfused", name.replace("(shared)", ""),
                    "shared module" if "(shared)" in name else cells[1] if len(cells) > 1 else "", at)
        elif text.startswith("Each module called times"):
            table = simple_table(lines, i + 1, within=TITLE_GAP)
            for at, cells in (table[2] if table else []):
                if len(cells) >= 2 and cells[1].isascii() and cells[1].isdigit():
                    times = int(cells[1])
                    if times == 0:
                        add("called_zero", cells[0], "called 0 times", at)
                    elif times > 1:
                        add("shared", cells[0], f"called {times} times", at)
        else:
            m = _ABNORMAL_COMPUTE.match(text)
            if m and not text.startswith("#"):
                add("abnormal_compute", m.group(1), m.group(2), i + 1)

    for _, header, rows in psql_tables(lines):
        lower = [h.lower() for h in header]
        if "module name" in lower and "input dtype" in lower:
            _layer_qconfig(lower, rows, add)
        elif "module name" in lower and "weight dtype" in lower:
            obs = lower.index("observer") if "observer" in lower else None
            for at, cells in rows:
                if obs is not None and obs < len(cells):
                    _averaging(cells[0], cells[obs], at, add)
    return found


def _layer_qconfig(lower, rows, add):
    name, mtype, in_dtype = lower.index("module name"), lower.index("module type"), lower.index("input dtype")
    obs = lower.index("observer") if "observer" in lower else None
    for at, cells in rows:
        if len(cells) <= max(name, mtype, in_dtype) or cells[name].startswith("#"):
            continue
        module, kind, inputs = cells[name], cells[mtype], cells[in_dtype]
        if "DeQuantStub" in kind and "qint8" in inputs:
            add("dequant_low_precision", module, f"DeQuantStub input {inputs}", at)
        elif not any(stub in kind for stub in STUBS) and "float32" in inputs:
            add("float_input", module, f"{kind.strip('<>')} input {inputs}", at)
        if obs is not None and obs < len(cells):
            _averaging(module, cells[obs], at, add)


def _averaging(module, observer, line, add):
    m = _AVG.search(observer)
    if m:
        try:
            value = float(m.group(1))
        except ValueError:
            return
        if abs(value - 0.01) > 1e-12:
            add("averaging_constant", module,
                f"averaging_constant={m.group(1)}" + (" (freezes the scale)" if value == 0 else ""),
                line)
