"""Ready-to-paste code for next actions, from templates/snippets/<name>.py.j2.

Values in the snippets come from untrusted case folders (out_dir, layer and op names),
and users paste the code and run it. So the snippet environment emits every ``{{ }}``
as a Python literal (``repr``: quotes, escapes, never a line break), whatever the
template says; only :class:`Code` - identifiers checked here, vocabulary labels - is
emitted as is, and the ``comment`` filter makes text safe inside a ``#`` comment.
"""

from __future__ import annotations

import keyword
import math
import re
from functools import lru_cache

from .templating import new_environment
from .vocabulary import OLD_ANALYSIS_NAMES, STAGE_LABELS, STAGE_VARIABLES, needs_two_runs

# profiler releases before the rename call the types by these names
OLD_ANALYSIS_TYPE = {new: old for old, new in OLD_ANALYSIS_NAMES.items()}

# PEP 263: this in a source file's first two lines picks its encoding (utf-7 would let
# "+AAo-" become a line break), so emitted text never holds it verbatim
_CODING = re.compile(r"(coding)([:=])")


class Code(str):
    """Text emitted into a snippet as code, unchanged; built only by the helpers below."""


def identifier(name: str) -> Code:
    """A variable name for generated code; anything else is a bug, not a case problem."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"not a Python identifier: {name!r}")
    return Code(name)


def comment(text) -> Code:
    """Text inside a ``#`` comment: escapes instead of line breaks and control characters."""
    body = repr(str(text))[1:-1]
    return Code(_CODING.sub(r"\1 \2", body))


def python_literal(value) -> str:
    """What a ``{{ value }}`` becomes in a snippet: a literal, or checked code."""
    if isinstance(value, Code):
        return value
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("a snippet holds only finite numbers")
        return f"{value:.6g}"
    text = repr(str(value))
    if text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'           # the quotes of the rest of the code
    # inside a literal the escape keeps the value and hides a PEP 263 cookie
    return text.replace("coding:", "coding\\x3a").replace("coding=", "coding\\x3d")


@lru_cache(maxsize=1)
def _environment():
    return new_environment(filters={"comment": comment, "identifier": identifier}, finalize=python_literal)


def two_runs(baseline: str | None, analysis: str | None, case_context: dict) -> bool:
    return needs_two_runs(baseline, analysis, case_context.get("input_format_differs", False),
                          case_context.get("has_task_input", False))


def snippet_context(action: dict, case_context: dict) -> dict:
    baseline, analysis = action.get("baseline"), action.get("analysis")
    kind = action.get("analysis_model_type", "")
    stage = action.get("stage_to_evaluate")
    out_dir = _out_dir(action.get("out_dir") or case_context.get("out_dirs", {}).get(kind)
                       or f"qa_{kind or 'analysis'}")
    return {
        **case_context,
        "action": action,
        "baseline": baseline, "analysis": analysis,
        "baseline_var": identifier(STAGE_VARIABLES.get(baseline, "baseline_model")),
        "analysis_var": identifier(STAGE_VARIABLES.get(analysis, "analysis_model")),
        "baseline_label": comment(STAGE_LABELS.get(baseline, baseline)),
        "analysis_label": comment(STAGE_LABELS.get(analysis, analysis)),
        "analysis_model_type": kind,
        "old_analysis_type": OLD_ANALYSIS_TYPE.get(kind, kind),
        "out_dir": out_dir,
        "two_runs": two_runs(baseline, analysis, case_context),
        # convert: the sensitivity run (qat.export.pt vs quantized.bc) has its own folder
        "sens_out_dir": out_dir.rstrip("/") + "_sens",
        "sens_two_runs": two_runs("qat_export", "quantized_bc", case_context),
        "stage": stage,
        "stage_label": comment(STAGE_LABELS.get(stage, "")),
        "stage_var": identifier(STAGE_VARIABLES.get(stage, "model")),
        "level": _level(action.get("level")),
        "old_level": action.get("old_level"),
        "plugin_numbering": case_context.get("plugin_numbering", "unknown"),
        "layer": action.get("layer", ""),
        "lut_ops": [op for op in str(action.get("ops", "")).split(",") if op],
        "limit": _number(action.get("limit")),
    }


def _level(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _out_dir(path: str) -> str:
    return path if path.startswith(("/", ".")) else f"./{path}"


def render_snippet(name: str, action: dict, case_context: dict) -> str:
    template = _environment().get_template(f"snippets/{name}.py.j2")
    return template.render(**snippet_context(action, case_context)).strip() + "\n"
