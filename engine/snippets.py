"""Ready-to-paste code for next actions, from templates/snippets/<name>.py.j2."""

from __future__ import annotations

import json

from .templating import render_template
from .vocabulary import OLD_ANALYSIS_NAMES, STAGE_LABELS, STAGE_VARIABLES, needs_two_runs

# profiler releases before the rename call the types by these names
OLD_ANALYSIS_TYPE = {new: old for old, new in OLD_ANALYSIS_NAMES.items()}


def two_runs(baseline: str | None, analysis: str | None, case_context: dict) -> bool:
    return needs_two_runs(baseline, analysis, case_context.get("input_format_differs", False),
                          case_context.get("has_task_input", False))


def in_quotes(value) -> str:
    """Text from a case or its files (layer names, folders) escaped for a "..." literal.

    Templates write user values inside double quotes; escaped here, a quote, backslash or
    newline in a layer name cannot break the generated code.
    """
    return json.dumps(str(value), ensure_ascii=False)[1:-1]


def snippet_context(action: dict, case_context: dict) -> dict:
    baseline, analysis = action.get("baseline"), action.get("analysis")
    kind = action.get("analysis_model_type", "")
    out_dir = _out_dir(action.get("out_dir") or case_context.get("out_dirs", {}).get(kind)
                       or f"qa_{kind or 'analysis'}")
    return {
        **case_context,
        "action": action,
        "baseline": baseline, "analysis": analysis,
        "baseline_var": STAGE_VARIABLES.get(baseline, "baseline_model"),
        "analysis_var": STAGE_VARIABLES.get(analysis, "analysis_model"),
        "baseline_label": STAGE_LABELS.get(baseline, baseline),
        "analysis_label": STAGE_LABELS.get(analysis, analysis),
        "analysis_model_type": kind,
        "old_analysis_type": OLD_ANALYSIS_TYPE.get(kind, kind),
        "out_dir": in_quotes(out_dir),
        "two_runs": two_runs(baseline, analysis, case_context),
        # convert: the sensitivity run (qat.export.pt vs quantized.bc) has its own folder
        "sens_out_dir": in_quotes(out_dir.rstrip("/") + "_sens"),
        "sens_two_runs": two_runs("qat_export", "quantized_bc", case_context),
        "stage": action.get("stage_to_evaluate"),
        "stage_label": STAGE_LABELS.get(action.get("stage_to_evaluate"), ""),
        "stage_var": STAGE_VARIABLES.get(action.get("stage_to_evaluate"), "model"),
        "level": action.get("level"),
        "old_level": action.get("old_level"),
        "plugin_numbering": case_context.get("plugin_numbering", "unknown"),
        "layer": in_quotes(action.get("layer", "")),
        "lut_ops": [in_quotes(op) for op in str(action.get("ops", "")).split(",") if op],
        "limit": _number(action.get("limit")),
    }


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _out_dir(path: str) -> str:
    return path if path.startswith(("/", ".")) else f"./{path}"


def render_snippet(name: str, action: dict, case_context: dict) -> str:
    return render_template(f"snippets/{name}.py.j2",
                           **snippet_context(action, case_context)).strip() + "\n"
