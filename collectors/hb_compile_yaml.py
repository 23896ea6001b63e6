"""hb_compile / hb_mapper YAML: the input, model and compiler parameters that decide
deployment I/O (knowledge.md §10, R5.9). Values of several inputs are ';'-separated."""

from __future__ import annotations

import json
from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.yaml_schema import load_plain
from qcdoctor.errors import QcdoctorError

INPUT_KEYS = ("input_type_rt", "input_type_train", "input_layout_train", "input_source",
              "norm_type", "mean_value", "scale_value", "std_value", "input_name",
              "input_shape")
NORM_TYPES = ("no_preprocess", "data_mean", "data_scale", "data_mean_and_scale")
SECTIONS = ("model_parameters", "input_parameters", "calibration_parameters",
            "compiler_parameters")
# the chips of the marches hb_compile / hb_mapper take; J6 is what this tool checks
J6_CHIPS = {"nash-e": "J6E", "nash-m": "J6M", "nash-p": "J6P", "nash-h": "J6H", "nash-b": "J6B"}
OTHER_CHIPS = {"bayes-e": "X5", "bayes": "X5", "bernoulli": "X3", "bernoulli2": "X3"}


def split_inputs(value) -> list[str]:
    """One entry per input: ';' separates inputs, a trailing ';' adds none, an empty
    part between two ';' stays (that input gives no value)."""
    if value is None:
        return []
    parts = [part.strip() for part in str(value).split(";")]
    while parts and not parts[-1]:
        parts.pop()
    return parts


def chip_of(march: str | None) -> str:
    """The chip a config's march compiles for: J6E... for nash-*, X5 / X3 for the
    earlier families, "" when the march is not one of them."""
    key = (march or "").strip().lower()
    return J6_CHIPS.get(key) or OTHER_CHIPS.get(key, "")


def read_hb_compile(path: Path) -> dict:
    """{march, chip, core_num, inputs: [{input_type_rt, norm_type, mean_value, ...}],
    removed_nodes, node_types, optimization}."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(reason("cannot read the compile config: {error}", error=exc),
                            file=str(path)) from None
    data = load_plain(text, str(path)) or {}
    if not isinstance(data, dict):
        raise QcdoctorError(reason("the compile config is not a mapping"), file=str(path))
    model, inputs, calibration, compiler = (_section(data, name) for name in SECTIONS)
    columns = {key: split_inputs(inputs.get(key)) for key in INPUT_KEYS}
    count = max((len(v) for v in columns.values()), default=0)
    rows = [{key: _per_input(values, i) for key, values in columns.items()}
            for i in range(count)]
    march = model.get("march")
    node_info = {**_node_info(model.get("node_info"), path),
                 **_node_info(calibration.get("node_info"), path)}
    return {"march": march.strip() if isinstance(march, str) else None,
            "chip": chip_of(march if isinstance(march, str) else None),
            "core_num": _core_num(compiler.get("core_num")), "inputs": rows,
            "removed_nodes": split_inputs(model.get("remove_node_name")),
            "node_types": node_info,
            "optimization": _words(calibration.get("optimization")),
            "quant_config": _quant_config(calibration.get("quant_config"))}


def _per_input(values: list[str], index: int) -> str | None:
    """An input's value; one value given for several inputs applies to each."""
    if index < len(values):
        return values[index] or None
    return (values[0] or None) if len(values) == 1 else None


def _section(data: dict, name: str) -> dict:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _node_info(value, path) -> dict[str, str]:
    """{node: the type it is set to} from node_info (a mapping, or its JSON/YAML text):
    {"/model.0/conv/Conv": {"ON": "BPU", "InputType": "int16", "OutputType": "int16"}}."""
    if isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except ValueError:
            value = load_plain(value, str(path))
    if not isinstance(value, dict):
        return {}
    types = {}
    for node, spec in value.items():
        if not isinstance(spec, dict):
            continue
        found = {str(spec[k]).strip().lower() for k in spec
                 if str(k).lower() in ("inputtype", "outputtype", "qtype") and spec[k] is not None}
        on = str(spec.get("ON", "")).strip()
        types[str(node)] = "/".join(sorted(found)) or (on and f"on {on}") or ""
    return {node: kind for node, kind in types.items() if kind}


def _quant_config(value) -> str:
    """quant_config as the report shows it: its file name, or the all-node type it sets."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        model = value.get("model_config")
        kind = model.get("all_node_type") if isinstance(model, dict) else None
        return f"all_node_type: {kind}" if isinstance(kind, str) else "inline"
    return ""


def _words(value) -> list[str]:
    """optimization: 'set_all_nodes_int16' or several words separated by ';' or ','."""
    if not isinstance(value, str):
        return []
    return [w for part in value.split(";") for w in (p.strip() for p in part.split(","))
            if w]


def _core_num(value) -> int | None:
    """A core count written as a number or as digits; anything else is not known."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    text = str(value).strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else None
