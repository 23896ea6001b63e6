"""forward.json, written by HBDK's hbm_perf beside a compiled model: for every compiled
layer, the torch module it came from and the source line that module is defined at.

The file is a JSON object whose ``layers`` (or ``children``, ``sub_layers``, ...) list the
compiled layers, each a JSON object that may list sub-layers the same way::

    {"layers": [{"name": "/model.23/cv2.0/Conv", "module": "model.23.cv2.0.conv",
                 "file": "model/head.py", "line": 123,
                 "layers": [{"name": "...", "source": "model/head.py:130", ...}]}]}

The module path is read from ``module`` (or ``torch_module``, ``module_path``, ...); the
source from ``file`` and ``line``, or from one ``source`` string ``file.py:123``. Entries
that cannot be read (not an object, a key of the wrong type, a module without its source
or a source without its module) are skipped and counted; a layer carrying neither (a
container, or an op the compiler added) is only walked through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from qcdoctor.collectors.bounded_data import DataRefused, load_json
from qcdoctor.collectors.reading.fx_graph import split_call
from qcdoctor.collectors.reasons import Reason, artifact_problem, joined, reason, with_fix, zh
from qcdoctor.source_locations import at

FORWARD_JSON = "forward.json"
_CHILDREN = ("layers", "sub_layers", "sublayers", "children", "subgraph", "ops", "nodes")
_MODULE = ("module", "torch_module", "module_path", "torch_module_path", "module_name")
_FILE = ("file", "filename", "source_file")
_LINE = ("line", "lineno", "line_number")
_SOURCE = ("source", "location", "source_location", "loc")
_SOURCE_TEXT = re.compile(r"^(?P<file>.*\S)\s*:\s*(?P<line>\d+)(?::\d+)?$")
MAX_TEXT = 300              # a module path or file name longer than this is cut
_UNREADABLE = "\0"          # a source key is there, its value cannot be read


@dataclass
class SourceMap:
    """Module path -> where it is defined and under which compiled layers."""
    defined_at: dict[str, str] = field(default_factory=dict)      # module -> "file:line"
    layers: dict[str, list[str]] = field(default_factory=dict)    # module -> layer names
    read: int = 0                                                 # layers read
    skipped: list[Reason] = field(default_factory=list)           # why, one per entry

    def source_of(self, name: str) -> tuple[str, str] | None:
        """(module, "file:line") of a row or module name: the module itself, its call
        (``head(2)`` is ``head``), or the one module whose path ends with the name on a
        dot (a QuantAnalysis table may drop the top-level prefix, or the map may)."""
        module = split_call(name)[0]
        if module in self.defined_at:
            return module, self.defined_at[module]
        tails = [m for m in self.defined_at
                 if m.endswith("." + module) or module.endswith("." + m)]
        return (tails[0], self.defined_at[tails[0]]) if len(tails) == 1 else None

    def shared(self) -> dict[str, list[str]]:
        """Modules under more than one compiled layer (none nested in another of them)."""
        return {m: names for m, names in sorted(self.layers.items()) if len(names) > 1}


def load_forward_json(data: bytes) -> SourceMap:
    """Read forward.json's bytes; ValueError (with the fix) when it is not a JSON object
    or array of layers."""
    try:
        doc = load_json(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(reason("not UTF-8 text (byte {at})", at=exc.start)) from None
    except DataRefused as exc:          # bad syntax, too deep, a number too long
        problem = exc.problem
        if exc.line:
            problem = Reason(str(reason("line {line}: {problem}", line=exc.line,
                                        problem=str(problem))),
                             zh(reason("line {line}: {problem}", line=exc.line,
                                       problem=zh(problem))))
        raise ValueError(with_fix(problem, exc.fix)) from None
    top = _children(doc) if isinstance(doc, dict) else doc
    if not isinstance(top, list):
        raise ValueError(reason("no list of layers: expected a JSON object with a 'layers' "
                                "list (or a JSON list of layers)"))
    found = SourceMap()
    # (entry, where it is, modules its enclosing layers carry); load_json bounds the depth
    stack = [(entry, f"layers[{i}]", frozenset()) for i, entry in reversed(list(enumerate(top)))]
    while stack:
        entry, where, above = stack.pop()
        if not isinstance(entry, dict):
            found.skipped.append(reason("{where}: not a JSON object", where=where))
            continue
        module = _layer(entry, where, found)
        if module and module not in above:
            names = found.layers.setdefault(module, [])
            names.append(_text(entry.get("name")) or where)
        inner = above | {module} if module else above
        children = _children(entry)
        if children is not None and not isinstance(children, list):
            found.skipped.append(reason("{where}: its sub-layers are not a list",
                                        where=where))
            continue
        key = next((k for k in _CHILDREN if k in entry), "layers")
        stack += [(child, f"{where}.{key}[{i}]", inner)
                  for i, child in reversed(list(enumerate(children or [])))]
    return found


def _children(entry: dict):
    return next((entry[k] for k in _CHILDREN if k in entry), None)


def _layer(entry: dict, where: str, found: SourceMap) -> str:
    """The layer's module path once its source is read too ("" otherwise)."""
    module = _first(entry, _MODULE)
    source = _source(entry)
    if module is None and source is None:
        return ""                   # a container, or an op with no torch module
    problem = None
    if module is None or (isinstance(module, str) and not module.strip()):
        problem = reason("{where}: a source without a module path", where=where)
    elif not isinstance(module, str):
        problem = reason("{where}: the module path is not text", where=where)
    elif source is None:
        problem = reason("{where}: module {module} without its source file and line",
                         where=where, module=module[:80])
    elif source == _UNREADABLE:
        problem = reason("{where}: the source is not 'file:line' or a file with a whole line",
                         where=where)
    if problem is not None:
        found.skipped.append(problem)
        return ""
    module = split_call(module.strip()[:MAX_TEXT])[0]
    found.read += 1
    found.defined_at.setdefault(module, source)
    return module


def _first(entry: dict, keys: tuple[str, ...]):
    return next((entry[k] for k in keys if k in entry), None)


def _source(entry: dict) -> str | None:
    """"file:line" from the entry; None when it has no source key; _UNREADABLE when one is
    there but its value cannot be read."""
    file, line = _first(entry, _FILE), _first(entry, _LINE)
    if file is not None or line is not None:
        if isinstance(line, str) and line.strip().isdigit():
            line = int(line)
        if isinstance(file, str) and file.strip() and isinstance(line, int) \
                and not isinstance(line, bool) and line > 0:
            return f"{file.strip()[:MAX_TEXT]}:{line}"
        return _UNREADABLE
    text = _first(entry, _SOURCE)
    if text is None:
        return None
    match = _SOURCE_TEXT.match(text.strip()) if isinstance(text, str) else None
    if match is None or int(match["line"]) <= 0:
        return _UNREADABLE
    return f"{match['file'][:MAX_TEXT]}:{int(match['line'])}"


def _text(value) -> str:
    return value.strip()[:MAX_TEXT] if isinstance(value, str) else ""


# which facts name an op, and the role the citation gives it
_CITED = (("layer_origin", "layer", "origin"), ("layer_origin", "second_layer", "origin"),
          ("sensitivity_summary", "top_op", "sensitive"))
SHOWN_SHARED = 8            # modules named in the shared-module finding


def source_map_facts(found: SourceMap, rel: str, facts: list[dict],
                     shared: dict[str, tuple[int, str, list]]) -> list[dict]:
    """The facts one read forward.json gives: where each located op, each sensitivity top
    op and the first module of each model_check finding is defined (``op_source``), the modules under several compiled layers
    (``compiled_shared_module``, and into ``shared``: module -> (layers, source,
    locations), as model_check_result's "used multi times" feeds it), and one
    artifact_problem for the entries skipped."""
    out: list[dict] = []
    if found.skipped:
        out.append({**_skipped_problem(found, rel), "locations": at(rel)})
    cited: set[tuple[str, str]] = set()
    for fact_type, key, role in _CITED:
        for fact in facts:
            name = fact.get(key, "") if fact["type"] == fact_type else ""
            if not name or (fact_type == "layer_origin" and not fact.get("located", True)):
                continue
            source = found.source_of(name)
            if source is None or (fact["analysis"], name) in cited:
                continue
            cited.add((fact["analysis"], name))
            out.append({"type": "op_source", "analysis": fact["analysis"], "layer": name,
                        "module": source[0], "role": role, "at": source[1],
                        "drives": fact.get("drives", True), "source": rel,
                        "locations": at(rel)})
    for fact in facts:          # a model_check finding: its first module the map knows
        if fact["type"] != "model_check" or fact["kind"] == "called_zero":
            continue            # a module never called was compiled into no layer
        named = [m for m in fact["modules"].split(",") if m and found.source_of(m)]
        if named and ("", named[0]) not in cited:
            cited.add(("", named[0]))
            module, where = found.source_of(named[0])
            out.append({"type": "op_source", "analysis": "", "layer": named[0],
                        "module": module, "role": "checked", "at": where,
                        "drives": True, "source": rel, "locations": at(rel)})
    many = found.shared()
    for module, names in many.items():
        shared.setdefault(module, (len(names), rel, at(rel)))
    if many:
        shown = [f"{m} ({len(n)})" for m, n in list(many.items())[:SHOWN_SHARED]]
        first = next(iter(many))
        out.append({"type": "compiled_shared_module", "count": len(many),
                    "modules": ", ".join(shown), "module": first,
                    "defined_at": found.defined_at.get(first, ""),
                    "layers": ", ".join(many[first][:4]), "source": rel,
                    "locations": at(rel)})
    return out


def _skipped_problem(found: SourceMap, rel: str) -> dict:
    """One problem for every entry skipped: how many, the first, and the fix (the rest of
    the file is read)."""
    count = reason("{count} layer entries could not be read and were skipped ({read} read)",
                   count=len(found.skipped), read=found.read)
    problem = with_fix(joined([count, found.skipped[0]]),
                       reason("write each layer as a JSON object with its module path and "
                              "'file' and 'line' (or 'source': 'file.py:123')"))
    return artifact_problem(rel, problem, True, rel)
