"""hb_compile YAML: the input and compiler parameters that decide deployment I/O."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.yaml_schema import load_plain
from qcdoctor.errors import QcdoctorError

INPUT_KEYS = ("input_type_rt", "input_type_train", "input_layout_train", "input_source",
              "mean_value", "scale_value", "std_value", "input_name", "input_shape")


def _split(value) -> list[str]:
    """hb_compile separates the values of several inputs with ';'."""
    if value is None:
        return []
    return [part.strip() for part in str(value).split(";") if part.strip()]


def read_hb_compile(path: Path) -> dict:
    """{march, core_num, inputs: [{input_type_rt, input_type_train, ...}]}."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(reason("cannot read the compile config: {error}", error=exc),
                            file=str(path)) from None
    data = load_plain(text, str(path)) or {}
    if not isinstance(data, dict):
        raise QcdoctorError(reason("the compile config is not a mapping"), file=str(path))
    model, inputs, compiler = (_section(data, name) for name in
                               ("model_parameters", "input_parameters", "compiler_parameters"))
    columns = {key: _split(inputs.get(key)) for key in INPUT_KEYS}
    count = max((len(v) for v in columns.values()), default=0)
    rows = [{key: (values[i] if i < len(values) else (values[0] if len(values) == 1 else None))
             for key, values in columns.items()} for i in range(count)]
    march = model.get("march")
    return {"march": march if isinstance(march, str) else None,
            "core_num": _core_num(compiler.get("core_num")), "inputs": rows}


def _section(data: dict, name: str) -> dict:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _core_num(value) -> int | None:
    """A core count written as a number or as digits; anything else is not known."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    text = str(value).strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else None
