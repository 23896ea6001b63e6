"""model_check_result*.txt (written by prepare): the checks of knowledge.md §9, as plugin
2.x and 3.x write them (R5.10).

Each finding is a dict: kind, module, detail and the line. A module's repeated calls are
named ``name(1)``, ``name(2)`` ... in the per-layer tables: a finding on one of them
names the module and the call. Plugin 3.x adds, and ``read_model_check`` returns beside
the findings:

- version lines at the top (``horizon_plugin_pytorch version: 3.0.5``,
  ``horizon_plugin_profiler version: ...``, ``current march: nash-e``): what prepare ran;
- ``Modules below are not used:`` (name) and ``Modules below are used multi times:``
  (name, called times): the same findings as ``Each module called times`` (0, or more
  than once);
- ``Gemm input dtypes statistics(inputxweight)``: a float input times an integer weight
  (``torch.float32xqint8``) is a gemm fed by no QuantStub (or a float input by design);
- ``Please check if these OPs qconfigs are expected..``: (module, message), each row a
  finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors.reading.fx_graph import split_call
from qcdoctor.collectors.tables import psql_tables, simple_table

_AVG = re.compile(r"averaging_constant\s*=\s*([0-9.eE+-]+)")
_ABNORMAL_COMPUTE = re.compile(r"^(\S+)\s+((?:float|int|qint)\d+\*(?:float|int|qint)\d+)\s*$")
# "horizon_plugin_pytorch version: 3.0.5" (a colon, an equals sign or spaces between)
_VERSION = re.compile(r"^(horizon[_-]plugin[_-](?:pytorch|profiler))\s+version\s*[:=]?\s*"
                      r"(\S+)\s*$", re.I)
_MARCH = re.compile(r"^current\s+march\s*[:=]?\s*(\S+)\s*$", re.I)
# input x weight dtypes of a gemm, as the gemm table and the "please check" messages write
# them: a float input times an integer weight
_FLOAT_GEMM = re.compile(r"(?:torch\.)?float(?:16|32|64)\s*x\s*(?:torch\.)?q?u?int\d+", re.I)
STUBS = ("QuantStub", "DeQuantStub")
TITLE_GAP = 3          # lines between a section title and its table's header
# section titles, as the lines start (plugin 2.x: "Each module called times")
CALLED_TIMES = "Each module called times"
NOT_USED = "Modules below are not used"
USED_MULTI = "Modules below are used multi times"
GEMM_DTYPES = "Gemm input dtypes statistics"
PLEASE_CHECK = "Please check if these OPs qconfigs are expected"


@dataclass
class ModelCheck:
    findings: list[dict] = field(default_factory=list)
    # package (horizon-plugin-pytorch, horizon-plugin-profiler) -> (version, line)
    versions: dict[str, tuple[str, int]] = field(default_factory=dict)
    march: tuple[str, int] | None = None


def check_model(path: Path) -> list[dict]:
    return read_model_check(path).findings


def read_model_check(path: Path) -> ModelCheck:
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    result = ModelCheck()
    seen: set[tuple[str, str, str]] = set()

    def add(kind, module, detail, line, **extra):
        module, call = split_call(module)
        # one finding a module (at its first call); a "please check" row per message
        key = (kind, module, detail if kind == "please_check" else "")
        if key in seen:
            return
        seen.add(key)
        result.findings.append({"kind": kind, "module": module, "detail": detail,
                                "line": line, "call": call, **extra})

    psql = {start: (header, rows) for start, header, rows in psql_tables(lines)}
    for i, line in enumerate(lines):
        text = line.strip()
        version, march = _VERSION.match(text), _MARCH.match(text)
        if version:
            package = version.group(1).lower().replace("_", "-")
            result.versions.setdefault(package, (version.group(2), i + 1))
        elif march and result.march is None:
            result.march = (march.group(1).lower(), i + 1)
        elif text.startswith("Fusable modules are listed below"):
            for at, cells in _table_under(lines, i, psql)[1]:
                name = cells[0]
                add("unfused", name.replace("(shared)", ""),
                    "shared module" if "(shared)" in name else cells[1] if len(cells) > 1
                    else "", at)
        elif text.startswith((CALLED_TIMES, USED_MULTI)):
            for at, cells in _table_under(lines, i, psql)[1]:
                if len(cells) >= 2 and cells[1].isascii() and cells[1].isdigit():
                    times = int(cells[1])
                    if times == 0:
                        add("called_zero", cells[0], "called 0 times", at)
                    elif times > 1:
                        add("shared", cells[0], f"called {times} times", at, times=times)
        elif text.startswith(NOT_USED):
            for at, cells in _table_under(lines, i, psql)[1]:
                if cells and cells[0]:
                    add("called_zero", cells[0], "called 0 times", at)
        elif text.startswith(GEMM_DTYPES):
            _gemm_dtypes(_table_under(lines, i, psql), add)
        elif text.startswith(PLEASE_CHECK):
            header, rows = _table_under(lines, i, psql)
            for at, cells in rows:
                if len(cells) >= 2 and cells[0]:
                    add("please_check", cells[0], cells[1], at)
        else:
            m = _ABNORMAL_COMPUTE.match(text)
            if m and not text.startswith("#"):
                add("abnormal_compute", m.group(1), m.group(2), i + 1)

    for header, rows in psql.values():
        lower = [h.lower() for h in header]
        if "module name" in lower and "input dtype" in lower:
            _layer_qconfig(lower, rows, add)
        elif "module name" in lower and "weight dtype" in lower:
            obs = lower.index("observer") if "observer" in lower else None
            for at, cells in rows:
                if obs is not None and obs < len(cells):
                    _averaging(cells[0], cells[obs], at, add)
    return result


def _table_under(lines: list[str], title: int, psql: dict) -> tuple[list[str], list]:
    """(header, [(line, cells)]) of the table right under the title at ``title``: a psql
    table or a tabulate 'simple' one; ([], []) where none starts within TITLE_GAP lines."""
    for start in range(title + 2, title + 3 + TITLE_GAP):
        if start in psql:
            return psql[start]
    found = simple_table(lines, title + 1, within=TITLE_GAP)
    return (found[0], found[2]) if found else ([], [])


def _gemm_dtypes(table: tuple[list[str], list], add) -> None:
    """A float input times an integer weight counted in the gemm table, whichever way the
    table is laid out (a dtype pair a row, or a column)."""
    header, rows = table
    floats = [k for k, h in enumerate(header) if _FLOAT_GEMM.fullmatch(h.strip())]
    for at, cells in rows:
        label = cells[0] if cells else ""
        counts = [cells[k] for k in floats if k < len(cells)]
        if _FLOAT_GEMM.fullmatch(label.strip()):
            counts = [c for c in cells[1:] if c.strip().isdigit()]
            pair = label
        else:
            pair = ", ".join(header[k] for k in floats)
        total = sum(int(c) for c in counts if c.strip().isascii() and c.strip().isdigit())
        if total and label.lower() != "total":
            add("gemm_float_input", label, f"{total} gemm(s) with {pair.strip()} "
                                           "(input x weight)", at)


def _layer_qconfig(lower, rows, add):
    name, mtype, in_dtype = (lower.index("module name"), lower.index("module type"),
                             lower.index("input dtype"))
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
                f"averaging_constant={m.group(1)}" + (" (freezes the scale)" if value == 0
                                                      else ""),
                line)
