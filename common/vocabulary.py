"""Ids fixed by the knowledge base: report stages, missing items, action kinds, pitfalls."""

from __future__ import annotations

MISSING_IDS = ("symptom", "stage_results", "badcase", "platform", "versions",
               "deploy_adaptation",
               # knowledge.md §16: the direction of a metric whose name gives none (R3.1);
               # QuantAnalysis output folders listed in analyses_run but absent (R3.4)
               "higher_is_better", "analysis_outputs")
# missing items no answer can supply: the user copies files into the case folder (the
# report says which); the intake lists them and asks nothing for them
FILE_MISSING_IDS = ("analysis_outputs",)
ACTION_KINDS = ("evaluate_stage", "quant_analysis", "lut_bisect", "bc_editor", "checklist",
                "hb_verifier", "user_side_checks", "consistency_strategy", "provide_info")
# knowledge.md §6 rev 2: next actions rank by cost class first, then by rule priority:
# verify (evaluate a stage, confirm evidence, step-0 checks, fix a checklist item),
# analyse (QuantAnalysis, bc_editor, hb_verifier, LUT bisection, level 0), recalibrate (a
# qconfig change while QAT has not run: prepare and calibrate again, minutes; R4.6), retrain.
COST_CLASSES = ("verify", "analyse", "recalibrate", "retrain")
# knowledge.md §16 R3.6: ahead of the cost classes come, in this order, the fix of a failed
# checklist item, redoing an analysis run that was invalid (R3.5: a torch-vs-bc run made in
# one run where it needs two), a remedy whose effect was measured on the model (qcdoctor
# probe --try-fixes: measured beats inferred, and several measured ones rank by the error
# they removed, their ``effect``) and the remedy of the op the analysis located; a remedy
# that needs QAT is not put ahead when the user cannot retrain (R3.7)
ACTION_RANKS = ("fix_failed", "redo_invalid", "measured", "located")
PITFALL_IDS = ("single_frame_evidence", "unverified_quantized_bc", "skipped_qat_export",
               "fake_quant_state", "input_format_mismatch", "worst_layer_as_root",
               "level2_first", "strategy_for_lut", "no_sensitivity",
               "quantanalysis_for_deploy", "level_without_retrain",
               # a remedy qcdoctor probe measured (fix_trials.yaml) kept without the checks
               # its caveats call for: evaluating the dataset (it was measured on one
               # input), and the compiled model (it was measured in fake quantization)
               "measured_on_one_input", "measured_in_fake_quant")
SEVERITIES = ("info", "warning", "error")
# QuantAnalysis analysis_model_type: the stages each compares by default, and the older
# profilers' names for the same types (knowledge.md §6, §15)
ANALYSIS_TYPE_STAGES = {"fake_quant": ("float", "calib"), "pre_export": ("qat", "qat_export"),
                        "export": ("qat_export", "qat_bc"), "convert": ("qat_bc", "quantized_bc")}
OLD_ANALYSIS_NAMES = {"quantized": "convert", "hbir": "export", "pt_lut": "pre_export"}


def analysis_type(declared: str | None, analysis_stage: str) -> str:
    """The current name of an analysis type; undeclared, it follows from the analysed stage."""
    if declared:
        return OLD_ANALYSIS_NAMES.get(declared, declared)
    return {"quantized_bc": "convert", "qat_bc": "export", "qat_export": "pre_export"}.get(
        analysis_stage, "fake_quant")


DEPLOY_STAGES = ("compile", "nv12_insertion", "qdq_removal")
# where a user_side conclusion is a deployment problem: the drop shows on the hbm or board
DEPLOY_SHOWN_AT = ("nv12_bc", "qdq_removed_bc", "hbm_x86", "board")


def is_deployment_problem(stage: str, suspect: str, facts: list[dict]) -> bool:
    """knowledge.md §6 rev 2: the deployment checklist belongs to deployment problems only.

    A user_side conclusion found by the step-0 facts at an earlier stage (march differs at
    convert) or an export-state problem (_FLOAT at export) is not one.
    """
    if stage in DEPLOY_STAGES:
        return True
    summary = next((f for f in facts if f["type"] == "stage_summary"), {})
    return stage == "user_side" and suspect != "export_state" and \
        bool(summary.get("deployment_side"))


# stages that are torch models; the others are bc / hbm (fixed inputs, no task list)
TORCH_STAGES = ("float", "calib", "qat", "qat_export")


def torch_vs_bc(baseline: str, analysis: str) -> bool:
    return (baseline in TORCH_STAGES) != (analysis in TORCH_STAGES)


def needs_two_runs(baseline: str, analysis: str, input_format_differs: bool,
                   has_task_input: bool) -> bool:
    """knowledge.md §6 rev 2: torch vs bc with differing input formats or a task list
    runs each side on its own; bc vs bc (qat.bc vs quantized.bc) takes one run."""
    return torch_vs_bc(baseline, analysis) and bool(input_format_differs or has_task_input)


GROUPS = {"gate": "GT", "stage": "ST", "analysis": "AN", "consistency": "CS",
          "pitfalls": "PF", "artifacts": "AR", "layers": "LY", "deploy": "DP",
          # remedies measured on the model (fix_trials.yaml)
          "fixes": "FX"}

# Display names of chain stages (artifact names are the same in both languages).
STAGE_LABELS = {"float": "float.pt", "calib": "calib.pt", "qat": "qat.pt",
                "qat_export": "qat.export.pt", "qat_bc": "qat.bc",
                "quantized_bc": "quantized.bc", "nv12_bc": "quantized.bc + NV12",
                "qdq_removed_bc": "quantized.bc - Quantize/Dequantize",
                "hbm_x86": "hbm (x86)", "board": "board"}
# the board is a place, not a file: named in the report's language
_STAGE_LABELS_ZH = {**STAGE_LABELS, "board": "板端"}


def stage_label(stage: str, lang: str = "en") -> str:
    """Display name of a chain stage in a report language (unknown ids unchanged)."""
    return (_STAGE_LABELS_ZH if lang == "zh" else STAGE_LABELS).get(stage, stage)


# Python variable a stage's model is held in, in generated code.
STAGE_VARIABLES = {"float": "float_model", "calib": "calib_model", "qat": "qat_pt",
                   "qat_export": "qat_export_pt", "qat_bc": "qat_bc",
                   "quantized_bc": "quantized_bc", "nv12_bc": "nv12_bc",
                   "qdq_removed_bc": "qdq_removed_bc", "hbm_x86": "hbm", "board": "hbm"}
CONCLUSION_LABELS = {
    "zh": {"calibration": "calibration（校准）", "qat_training": "QAT 训练",
           "pre_export": "pre_export", "export": "export", "convert": "convert",
           "nv12_insertion": "NV12 / 前处理插入", "qdq_removal": "Quantize/Dequantize 删除",
           "compile": "compile", "user_side": "用户侧适配", "none": "无一致性问题",
           "undetermined": "暂不能判断"},
    "en": {"calibration": "calibration", "qat_training": "QAT training",
           "pre_export": "pre_export", "export": "export", "convert": "convert",
           "nv12_insertion": "NV12 / pre-processing insertion",
           "qdq_removal": "Quantize/Dequantize removal", "compile": "compile",
           "user_side": "user-side adaptation", "none": "no consistency problem",
           "undetermined": "undetermined"},
}
