"""hb_compile YAML: the input and compiler parameters that decide deployment I/O."""

from __future__ import annotations

from pathlib import Path

import yaml

from qcdoctor.engine.errors import QcdoctorError

INPUT_KEYS = ("input_type_rt", "input_type_train", "input_layout_train", "input_source",
              "mean_value", "scale_value", "std_value", "input_name", "input_shape")


def _split(value) -> list[str]:
    """hb_compile separates the values of several inputs with ';'."""
    if value is None:
        return []
    return [part.strip() for part in str(value).split(";") if part.strip()]


def _plain_int(value) -> bool:
    """ASCII digits only: str.isdigit takes "²", which int() then rejects."""
    text = str(value)
    return text.isascii() and text.isdigit()


def read_hb_compile(path: Path) -> dict:
    """{march, core_num, inputs: [{input_type_rt, input_type_train, ...}]}."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(f"cannot read the compile config: {exc}", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise QcdoctorError("the compile config is not valid YAML", file=str(path),
                            line=mark.line + 1 if mark else None,
                            fix="check indentation and quoting") from None
    if not isinstance(data, dict):
        raise QcdoctorError("the compile config is not a mapping", file=str(path))
    model = data.get("model_parameters") or {}
    inputs = data.get("input_parameters") or {}
    compiler = data.get("compiler_parameters") or {}
    columns = {key: _split(inputs.get(key)) for key in INPUT_KEYS}
    count = max((len(v) for v in columns.values()), default=0)
    rows = [{key: (values[i] if i < len(values) else (values[0] if len(values) == 1 else None))
             for key, values in columns.items()} for i in range(count)]
    core = compiler.get("core_num")
    return {"march": model.get("march"), "core_num": int(core) if _plain_int(core) else None,
            "inputs": rows}
