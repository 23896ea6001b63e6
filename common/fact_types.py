"""The fact vocabulary: every fact type the collectors emit and the rules may read.

Facts are flat dicts of scalars. Every fact sent to the engine carries every field of
its type (no None): durable_rules compares JSON loosely (``"abc" > 10`` is true,
``true == 1`` matches), so both facts and rule operands are type-checked against
this table before they reach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STAGES = ("float", "calib", "qat", "qat_export", "qat_bc", "quantized_bc",
          "nv12_bc", "qdq_removed_bc", "hbm_x86", "board")
CONCLUSION_STAGES = ("calibration", "qat_training", "pre_export", "export", "convert",
                     "nv12_insertion", "qdq_removal", "compile", "user_side", "none",
                     "undetermined")
STATUSES = ("normal", "abnormal", "unknown")
TRISTATE = ("yes", "no", "unknown")
ANALYSIS_TYPES = ("fake_quant", "pre_export", "export", "convert", "quantized", "hbir",
                  "pt_lut")
EVIDENCE_KINDS = ("dataset_eval", "reproducible_badcase", "multi_frame_visual", "single_frame")
CHIPS = ("J6E", "J6M", "J6P", "J6H", "J6B", "S100", "S100P", "S600", "unknown")
MARCHES = ("nash-e", "nash-m", "nash-p", "nash-h", "nash-b", "nash-b-lite", "nash-b-plus",
           "nash-starry-p", "bayes", "bernoulli2", "unknown")
PACKAGES = ("horizon-plugin-pytorch", "horizon-plugin-profiler", "hbdk4-compiler")
USER_CHECKS = ("same_checkpoint", "same_qconfig", "same_march", "same_prepost")
CHECKLIST_STATUSES = ("pass", "fail", "unknown", "not_applicable")
# knowledge.md §10: the five mandatory items, then the compile-configuration checks
CHECKLIST_ITEMS = ("input_preprocessing", "layout", "input_scale", "pre_post_nodes", "padding",
                   "march_consistency", "insert_before_convert", "qdq_after_convert",
                   "qdq_io_types", "preprocess_mode", "nv12_even_size", "input_type_pair",
                   "input_source", "core_num")
QA_TYPES = ("fake_quant", "pre_export", "export", "convert")
ADVISOR_KINDS = ("asymmetric_input", "large_input_range", "output_not_high_precision",
                 "range_too_large_int8", "range_too_large_any", "scale_not_cover", "inf_nan",
                 "other")
MODEL_CHECK_KINDS = ("unfused", "called_zero", "shared", "dequant_low_precision",
                     "averaging_constant", "float_input", "abnormal_compute",
                     # plugin 3.x (knowledge.md R5.10): a float input x an integer weight
                     # in the gemm table, a row of the closing "please check" table
                     "gemm_float_input", "please_check")
# fix_trials.yaml (qcdoctor probe --try-fixes, collectors/fix_trials.py): the remedies tried
# on a copy of the analysis model; int16 is activation and weight together. float is no
# remedy one deploys: it bounds what any quantization setting of its layers can remove
FIX_TRIALS_SCHEMA = "qcdoctor/fix-trials-v1"
FIX_KINDS = ("int16_activation", "int16_weight", "int16", "fixed_scale", "per_channel", "float")
DEPLOYABLE_FIXES = tuple(f for f in FIX_KINDS if f != "float")
FIX_METRICS = ("Cosine", "L1", "MSE")
# the layers of one trial in one text field: qualified names joined by this (a name holding
# a comma is refused when read, so splitting on it gives the names back exactly)
LAYER_SEPARATOR = ", "
# the probe's bad-case search (probe_run.yaml's samples, sample_errors.csv): the metrics
# of each sample's error, in the file's column order; how the sample the layers were read
# on was chosen (the worst, or given with --badcase); on how many samples the error shows
SAMPLE_METRICS = ("L1", "MSE", "KL", "ATOL", "Cosine", "SQNR")
SAMPLE_CHOSEN_BY = ("worst", "given")
SAMPLE_SHOWN = ("none", "some", "all")
# knowledge.md §17 R4.5: the step a QuantAnalysis folder speaks for (qa_folder.scope)
FOLDER_SCOPES = ("unplaced", "located", "recovered", "other_step", "invalid_run", "postprocess",
                 # a stage against itself (two calibrations, a model and its copy): R5.6
                 "control")


@dataclass(frozen=True)
class Field:
    kind: str                       # str | int | float | bool
    choices: tuple | None = None    # allowed values (str fields)
    default: object = None

    def check(self, value) -> str | None:
        """Return why ``value`` does not fit, or None."""
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and not math.isfinite(value):
                return "must be a finite number (NaN/Inf are stated as booleans instead)"
        else:
            ok = isinstance(value, str)
        if not ok:
            return f"must be {self.kind}, got {type(value).__name__} {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}; got {value!r}"
        return None


def _s(*choices, default="unknown"):
    if choices and default not in choices:
        default = choices[0]    # a default is always a legal value
    return Field("str", tuple(choices) if choices else None, default)


def _b(default=False):
    return Field("bool", None, default)


def _i(default=-1):
    return Field("int", None, default)


def _f(default=0.0):
    return Field("float", None, default)


# on the facts read from a QuantAnalysis folder: the folder's qa_folder.drives (R4.5)
_DRIVES = {"drives": _b(True)}

FACT_TYPES: dict[str, dict[str, Field]] = {
    # one per chain stage, unknown ones included, so rules can say "X is unknown"
    "stage": {"stage": _s(*STAGES), "status": _s(*STATUSES), "metric": _s(default=""),
              "value": _f(), "has_value": _b(), "reference": _s(default=""),
              "derived": _b()},
    # summary of the stage table; first_abnormal / last_normal are "" when none
    "stage_summary": {"known": _i(0), "normal": _i(0), "abnormal": _i(0),
                      "first_abnormal": _s(default=""), "last_normal": _s(default=""),
                      "reference_missing": _b(), "board": _s(*STATUSES),
                      # the first abnormal stage comes after the deployment adaptations (on
                      # an adapted bc, the hbm or the board): knowledge.md §6 rev 2
                      "deployment_side": _b(),
                      # knowledge.md §5 rev 2: what to evaluate when nothing is abnormal yet
                      "next_unknown": _s(*STAGES, "", default="")},
    # the drop: last normal stage L -> first abnormal stage A
    "transition": {"from": _s(*STAGES), "to": _s(*STAGES), "gap": _i(0),
                   "skipped": _s(*STAGES, "", default=""),
                   "bisect": _s(*STAGES, "", default=""),
                   # R4.9: the bisection stage has a result under another metric name
                   "bisect_named_apart": _b()},
    "non_monotonic": {"abnormal": _s(*STAGES), "normal": _s(*STAGES)},
    # from qat on, a stage better than the evaluated stage before it beyond the tolerance
    "stage_rise": {"before": _s(*STAGES), "after": _s(*STAGES), "gain": _f(), "limit": _f()},
    # calib abnormal while qat is normal: QAT recovered the calibration loss
    "calib_recovered": {},
    # §16 R3.3: a later step, from the first abnormal stage on, that loses more than the
    # tolerance against the evaluated stage before it; stage/suspect name the step as the
    # stage table of knowledge.md §5 does
    "further_drop": {"from": _s(*STAGES), "to": _s(*STAGES), "gap": _i(0),
                     "skipped": _s(*STAGES, "", default=""),
                     "bisect": _s(*STAGES, "", default=""), "drop": _f(), "limit": _f(),
                     "stage": _s(*CONCLUSION_STAGES), "suspect": _s(default="")},
    # §16 R3.1: a metric whose name gives no direction, read both ways; what each reading
    # concludes and whether they agree
    "direction_readings": {"metric": _s(default=""), "agree": _b(),
                           "higher_stage": _s(*CONCLUSION_STAGES),
                           "higher_suspect": _s(default=""),
                           "lower_stage": _s(*CONCLUSION_STAGES),
                           "lower_suspect": _s(default="")},
    # §16 R3.2: values of one metric on two scales (percent vs fraction); high/low are the
    # first stage of each scale, *_stages all of them with their values
    "metric_scale": {"metric": _s(default=""), "kind": _s("fraction", "ratio"),
                     "high": _s(*STAGES), "low": _s(*STAGES), "high_value": _f(),
                     "low_value": _f(), "high_stages": _s(default=""),
                     "low_stages": _s(default="")},
    # §17 R4.8: the first drop, under twice the tolerance, that a later step at least five
    # times larger outweighs (times: whole times as large); the chain reads it as normal,
    # the later step makes the conclusion. stage/suspect name its step as §5 does
    "unconfirmed_drop": {"from": _s(*STAGES), "to": _s(*STAGES), "gap": _i(0),
                         "from_value": _f(), "to_value": _f(), "drop": _f(), "limit": _f(),
                         "stage": _s(*CONCLUSION_STAGES), "suspect": _s(default=""),
                         "later_from": _s(*STAGES), "later_to": _s(*STAGES),
                         "later_drop": _f(), "times": _i(0)},
    # §17 R4.8: no tolerance in the case, and the default one (kind abs|rel, its share or
    # amount) decided a stage's status: its loss against its reference is close to it
    "default_tolerance": {"kind": _s("rel", "abs"), "share": _f(), "stage": _s(*STAGES),
                          "reference": _s(*STAGES), "drop": _f(), "limit": _f(),
                          "status": _s(*STATUSES)},
    # §17 R4.9: a stage whose metric name is not the one of the stage it would be compared
    # with (names compared by collectors/metric_direction.metric_key); one per pair of names.
    # decides_stage: no stage before it is abnormal, so its value may hold the drop
    "metric_names": {"stage": _s(*STAGES), "metric": _s(default=""), "value": _f(),
                     "reference": _s(*STAGES), "reference_metric": _s(default=""),
                     "reference_value": _f(), "decides_stage": _b()},
    "evidence_summary": {"given": _b(), "sufficient": _b(), "single_frame_only": _b()},
    "evidence": {"kind": _s(*EVIDENCE_KINDS)},
    "case": {"symptom_given": _b(), "badcase": _s("available", "dataset_only", "none", "unknown"),
             "retrain": _s(*TRISTATE), "fake_quant_state": _s("validation", "float", "unknown"),
             "input_format_differs": _b(), "has_task_input": _b(), "deploy_given": _b(),
             "deploy_keys": _s(default=""),
             "postprocess_in_model": _s(*TRISTATE),
             "language": _s("zh", "en", default="zh")},
    "platform": {"chip": _s(*CHIPS), "march": _s(*MARCHES), "known": _b(),
                 "strategy_chip": _b()},
    "version": {"package": _s(*PACKAGES), "version": _s(default=""), "known": _b(),
                "requirement": _s("hard", "recommended", "none", default="none"),
                "minimum": _s(default=""), "meets": _s(*TRISTATE)},
    "user_check": {"check": _s(*USER_CHECKS), "value": _s(*TRISTATE)},
    "user_checks_summary": {"any_failed": _b(), "all_confirmed": _b()},
    # levels in the current numbering; old 1 and 3 count as the level below them
    "consistency_history": {"current": _i(), "highest_tried": _i(), "tried_0": _b(),
                            "tried_1": _b(), "tried_2": _b(), "any": _b(),
                            "numbering": _s("new", "old", default="new"),
                            "old_levels": _s(default=""), "between": _b()},
    "analysis_run": {"analysis_model_type": _s(*ANALYSIS_TYPES), "baseline": _s(*STAGES),
                     "analysis": _s(*STAGES), "sensitivity": _b(), "separate_runs": _b(),
                     "out_dir": _s(default=""), "mixes_torch_and_bc": _b(),
                     # torch vs bc with differing input formats or a task list: two runs
                     "needs_two_runs": _b()},
    "analysis_summary": {"analysis_model_type": _s(*ANALYSIS_TYPES), "runs": _i(0),
                         "with_sensitivity": _b()},
    # §16 R3.4: an analyses_run entry whose out_dir holds no readable output; it counts as
    # not run (no analysis_run fact). folders: every such out_dir, for one question
    "analysis_absent": {"analysis_model_type": _s(*ANALYSIS_TYPES), "baseline": _s(*STAGES),
                        "analysis": _s(*STAGES), "out_dir": _s(default=""),
                        "problem": _s("folder_missing", "folder_outside", "folder_empty",
                                      "tables_unreadable", "folder_not_read"),
                        "folders": _s(default="")},
    # --- QuantAnalysis outputs (collectors/quant_analysis.py); "analysis" is the folder
    "qa_folder": {"analysis": _s(default=""), "comparison": _s("unknown", *QA_TYPES),
                  "baseline": _s(*STAGES, "", default=""),
                  "analysis_stage": _s(*STAGES, "", default=""),
                  "known_from": _s("analyses_run", "probe", "content", "folder name", "unknown"),
                  # which tool wrote the tables: the Horizon profiler or qcdoctor probe
                  "origin": _s("profiler", "probe", default="profiler"),
                  # the analysis model's quantization flow, for fix code in it: horizon
                  # (the profiler's tables), else what probe_run.yaml says
                  "flow": _s("horizon", "torch_ao_fx", "torch_ao_eager", "other",
                             default="horizon"),
                  "has_compare": _b(), "has_sensitivity": _b(), "has_advisor": _b(),
                  # two quantized versions of one model, equal without quantization (R5.6)
                  "control": _b(),
                  "has_badcase": _b(),
                  # sensitivity tables present, or the probe's manifest says it ran one
                  "sensitivity_ran": _b(),
                  # knowledge.md §17 R4.7: a folder of the same comparison (same type, same
                  # analysed stage) ran one: this comparison's sensitivity is run
                  "sibling_sensitivity": _b(),
                  # knowledge.md §17 R4.5: which step the folder speaks for. located: its
                  # comparison spans the located drop (drop_from -> drop_to); unplaced: no
                  # drop is located, or its comparison is unknown; recovered: it compares
                  # the calibration loss QAT recovered; other_step: another step;
                  # invalid_run: a torch-vs-bc run made in one run where it needs two
                  # (R3.5); postprocess: the compared model holds its post-processing
                  # (R4.3). drives: its readings drive origin findings, remedies and
                  # bc_editor targets (located or unplaced only)
                  "scope": _s(*FOLDER_SCOPES, default="unplaced"), "drives": _b(True),
                  "drop_from": _s(*STAGES, "", default=""),
                  "drop_to": _s(*STAGES, "", default=""),
                  # what its per-layer reading names: the (first) source, or where the
                  # accumulation starts; "" when it names none
                  "origin_layer": _s(default=""),
                  "origin_pattern": _s("", "cliff", "gradual", "accumulation_with_step",
                                       "two_sources", "outlier", default="")},
    "layer_table": {"analysis": _s(default=""), "rows": _i(0), "compared": _i(0),
                    "mismatch_rows": _i(0), "layout": _s("16", "23", "upper", "other"),
                    "partial": _b(), "abnormal": _b(),
                    # where the reading's edges came from (knowledge.md §18 R5.1, R5.5);
                    # graph_rows: compared rows the graph carries; unmapped: rows it does not
                    # (each read against the row printed before it), the first named
                    "graph": _s("layer_calls", "fx_graph", "row_order", default="row_order"),
                    "graph_rows": _i(0), "unmapped": _i(0), "unmapped_layers": _s(default=""),
                    # rows layer_own_error.csv leaves unmeasured, and why (R5.2)
                    "own_unmeasured": _i(0), "own_unmeasured_why": _s(default="")},
    # the per-layer reading (collectors/reading/layer_graph.py, knowledge.md §17 R4.1): layer/row
    # is the (first) source, or where accumulation starts (gradual); located: a source op
    # is named; fired: what made it one; drop: its Cosine step below the rows it reads
    # (input_cosine, inputs); qdiff: Atol at the row in quantization steps (qdiff_known),
    # steps_before: the largest of the rows it reads
    "layer_origin": {"analysis": _s(default=""), "layer": _s(default=""), "row": _i(0),
                     "pattern": _s("cliff", "gradual", "accumulation_with_step",
                                   "two_sources", "outlier"),
                     "located": _b(), "fired": _s("cosine_drop", "dominant_step", "atol_jump",
                                                  "own_error", "none", default="none"),
                     # the comparison that made it (and the second source) one: the numbers
                     # compared and the thresholds used, e.g. "step 0.38 >= cliff_drop 0.01"
                     "test": _s(default=""), "second_test": _s(default=""),
                     "op_type": _s(default=""),
                     "dtype": _s(default=""), "qscale": _f(), "cosine": _f(), "atol": _f(),
                     "drop": _f(), "qdiff": _f(), "qdiff_known": _b(), "steps_before": _f(),
                     "loss_before": _f(), "input_cosine": _f(1.0), "inputs": _s(default=""),
                     "typical_step": _f(), "largest_step": _f(),
                     "largest_row": _i(0), "declining": _i(0), "loss": _f(), "sources": _i(0),
                     "start_layer": _s(default=""), "start_row": _i(0),
                     "second_layer": _s(default=""), "second_row": _i(0), "second_drop": _f(),
                     "second_cosine": _f(), "region": _s(default=""), "region_rows": _i(0),
                     "region_lut": _b(),
                     # a LUT op at a source or in the accumulation's region (R4.1: LUT
                     # bisection only where the region holds one)
                     "lut_involved": _b(),
                     # read along fx_graph.txt, or row by row without one (R4.1)
                     "reading": _s("graph", "row_order", default="row_order"),
                     # a 10 % change of the thresholds named in flips changes the reading;
                     # what settles it (R4.1)
                     "borderline": _b(), "flips": _s(default=""),
                     "settled_by": _s("own_error", "fix_trial", "", default=""),
                     "own_known": _b(), "own_cosine": _f(), "own_qsteps": _f(),
                     # rows whose output passes through the origin's quantizer (R5.1)
                     "same_quantizer": _s(default=""),
                     "base_min": _f(), "base_max": _f(),
                     "analy_min": _f(), "analy_max": _f(), **_DRIVES},
    # rows within a few quantization steps, none standing out: quantization noise (R4.1)
    "layer_noise": {"analysis": _s(default=""), "rows": _i(0), "min_cosine": _f(1.0),
                    "max_qsteps": _f(), "start_layer": _s(default=""), "start_row": _i(0),
                    "reading": _s("graph", "row_order", default="row_order"),
                    "test": _s(default=""),     # the numbers compared, the thresholds used
                    "borderline": _b(), "flips": _s(default=""), **_DRIVES},
    # post-processing rows (topk, argmax, sort, nms, index outputs) left out of the search;
    # worst: one of them is the lowest row of the table (R4.3); the region from the first
    # selection op through every row reading it (region_rows, from first_layer) and the
    # rows entering it, where the figures are taken (R5.4)
    "layer_postprocess": {"analysis": _s(default=""), "rows": _i(0), "worst": _b(),
                          "region_rows": _i(0), "first_layer": _s(default=""),
                          "entries": _s(default=""), **_DRIVES},
    # the kind of error at a source row (order 1: the origin, 2: the second source);
    # numbers whose flag (dtype_known, range_known, range_placed, steps_known,
    # weight_known, own_known) is false are unknown, written 0 (knowledge.md §17 R4.3)
    "error_kind": {"analysis": _s(default=""), "layer": _s(default=""), "order": _i(1),
                   "kind": _s("truncation", "weight", "rounding", "conversion", "lut",
                              "unclear"),
                   "range_ratio": _f(), "base_absmax": _f(), "scale_limit": _f(),
                   "dtype": _s(default=""), "dtype_known": _b(), "range_known": _b(),
                   "qscale": _f(), "qmin": _i(0), "qmax": _i(0), "zero_point": _f(),
                   "zero_point_given": _b(), "range_placed": _b(), "range_low": _f(),
                   "range_high": _f(), "range_width": _f(), "base_min": _f(), "base_max": _f(),
                   "analy_min": _f(), "analy_max": _f(), "narrower": _b(), "clipped": _b(),
                   "at_edge": _b(), "covered": _s(*TRISTATE), "room": _f(), "steps": _f(),
                   "steps_known": _b(), "lut_op": _s(default=""), "inputs_clean": _b(),
                   "weight_known": _b(), "weight_sqnr": _f(), "per_tensor": _b(),
                   "channel_ratio": _f(), "weight_poor": _b(), "own_known": _b(),
                   "own_cosine": _f(), "own_qsteps": _f(), **_DRIVES},
    "layer_worst": {"analysis": _s(default=""), "layer": _s(default=""), "row": _i(0),
                    "cosine": _f(), "atol": _f(), "is_origin": _b(), "has_origin": _b(),
                    "origin_layer": _s(default=""), "origin_row": _i(0), **_DRIVES},
    "sensitivity_summary": {"analysis": _s(default=""), "output": _s(default=""),
                            "metric": _s(default=""), "rows": _i(0), "top_op": _s(default=""),
                            "top_kind": _s(default="activation"), "top_op_type": _s(default=""),
                            "top_value": _f(), "dominance": _f(), "dominant": _b(), "flat": _b(),
                            "tail_near_zero": _b(True), "lut_in_top": _b(),
                            "lut_ops": _s(default=""), "top_ops": _s(default=""),
                            # top / 5th value; the lowest tail_count values' mean / top
                            "spread": _f(), "tail_count": _i(0), "tail_ratio": _f(),
                            # knowledge.md §16 R3.10: measured against a fixed-point
                            # baseline, the readings are not used (usable false)
                            "baseline": _s(*STAGES, "", default=""),
                            "baseline_quantized": _b(), "usable": _b(True),
                            # knowledge.md R5.3: every fake quant off is already far from
                            # the baseline, so every value carries the models' difference
                            # (usable false)
                            "models_differ": _b(),
                            # case.yaml says the model keeps its post-processing (§8: the
                            # likely cause of a tail far from zero)
                            "postprocess_declared": _b(),
                            # read against compare_per_layer's clear origin (a cliff) of
                            # the same model: "" when there is none
                            "origin_layer": _s(default=""), "top_is_origin": _b(),
                            "against_origin": _b(), "misses_origin": _b(),
                            # the same comparison's per-layer table has every compared
                            # layer in the clean band: the values rank noise (usable false)
                            "comparison_clean": _b(), **_DRIVES},
    "advisor_message": {"analysis": _s(default=""), "layer": _s(default=""),
                        "kind": _s(*ADVISOR_KINDS), "op_type": _s(default=""),
                        "message": _s(default="")},
    "badcase_spread": {"analysis": _s(default=""), "metrics": _i(0), "distinct_indices": _i(0),
                       "spread": _b()},
    # the probe's bad-case search of one folder (collectors/sample_search.py): ``count``
    # samples searched; a sample shows the error where an output's Cosine is below
    # tolerance_cosine (``shown_on`` samples, ``shown`` none / some / all of them). The
    # layers were read on sample ``chosen``: the worst by ``metric`` on ``output`` (the one
    # whose worst is largest), or given (--badcase), ``rank`` there (1: the worst).
    # metric_worst: the worst sample by the metric on that output. ``outputs``: how many;
    # spread: their worst samples differ. The chosen output's per-sample Cosine (from
    # ``cosines_from``): median, worst (of worst_sample), the chosen sample's and whether
    # it shows the error there, each known only where *_known (chosen_shows: unknown);
    # nonfinite: samples whose Cosine is not a number. replayable: a second pass gives
    # the same samples; kept: the worst samples kept for fix trials. rounding_known: the
    # probe measured the clean model's error (every value rounded to its steps, none
    # clipped) on every sample, and a sample shows the error only past rounding_factor
    # times it; below_tolerance: samples with an output's Cosine below the tolerance
    # whatever the reason (shown_on where the clean model's error was not measured)
    "sample_search": {"analysis": _s(default=""), "count": _i(0),
                      "metric": _s(*SAMPLE_METRICS), "tolerance_cosine": _f(),
                      "chosen": _i(0), "chosen_by": _s(*SAMPLE_CHOSEN_BY),
                      "output": _s(default=""), "rank": _i(1), "metric_worst": _i(0),
                      "shown_on": _i(0), "shown": _s(*SAMPLE_SHOWN), "spread": _b(),
                      "below_tolerance": _i(0), "rounding_known": _b(),
                      "rounding_factor": _f(),
                      "outputs": _i(0), "median_cosine": _f(), "median_known": _b(),
                      "worst_cosine": _f(), "worst_known": _b(), "worst_sample": _i(),
                      "chosen_cosine": _f(), "chosen_known": _b(),
                      "chosen_shows": _s(*TRISTATE), "nonfinite": _i(0), "kept": _i(0),
                      "replayable": _b(True), "cosines_from": _s("sample_errors", "manifest")},
    "weight_stat": {"analysis": _s(default=""), "module": _s(default=""), "min": _f(),
                    "max": _f(), "dtype": _s(default="")},
    "model_check": {"kind": _s(*MODEL_CHECK_KINDS), "count": _i(0), "modules": _s(default=""),
                    "detail": _s(default="")},
    # an origin at one call of a module called several times with one quantizer
    # (knowledge.md R5.10): the remedy is a module of its own for that call
    "shared_call_origin": {"analysis": _s(default=""), "layer": _s(default=""),
                           "module": _s(default=""), "call": _i(0), "calls": _i(0),
                           **_DRIVES},
    # hbm_perf's forward.json (collectors/hbm_perf.py): where a located op (role origin), a
    # sensitivity top op (sensitive) or a module model_check_result names (checked) is
    # defined, "file.py:123"
    "op_source": {"analysis": _s(default=""), "layer": _s(default=""),
                  "module": _s(default=""), "role": _s("origin", "sensitive", "checked"),
                  "at": _s(default=""), **_DRIVES},
    # forward.json: modules under several compiled layers (the first with its layers)
    "compiled_shared_module": {"count": _i(0), "modules": _s(default=""),
                               "module": _s(default=""), "defined_at": _s(default=""),
                               "layers": _s(default="")},
    # what prepare says it ran with: model_check_result's version lines and current march
    # (plugin 3.x, knowledge.md R5.10); folded into the version and platform facts
    "prepare_version": {"package": _s(*PACKAGES), "version": _s(default="")},
    "prepare_march": {"march": _s(default=""), "known": _b()},
    # case.yaml gives one version, the file prepare wrote another
    "version_mismatch": {"package": _s(*PACKAGES), "given": _s(default=""),
                         "found": _s(default="")},
    # --- measured fixes (collectors/fix_trials.py): "analysis" is the probe's folder. One
    # fix_trial per trial, best first (rank 1); reaches: it meets the file's target (error
    # removed at least target_removed, or a Cosine at least target_cosine when one is given)
    "fix_trial": {"analysis": _s(default=""), "rank": _i(0), "fix": _s(*FIX_KINDS),
                  "layers": _s(default=""), "layer_count": _i(0), "after": _f(),
                  "error_removed": _f(), "forwards": _i(0), "reaches": _b(),
                  "deployable": _b(), **_DRIVES},
    # the search of one folder: single_* is the best one-layer trial of a remedy one can
    # deploy (single_tried: there is one), best_* the best such trial of any size
    # (measured: there is one), float_* the best float trial (the upper bound); greedy_*
    # the greedy set (greedy: the file has one), its size and whether it reached the target
    "fix_trials": {"analysis": _s(default=""), "metric": _s(*FIX_METRICS), **_DRIVES,
                   # before_known: false when the file gives no figure before any fix
                   # within_target: the output met the target before any fix
                   "output": _s(default=""), "before": _f(), "before_known": _b(),
                   "within_target": _b(),
                   "target_removed": _f(),
                   "target_cosine": _f(), "cosine_target": _b(), "budget": _i(0),
                   "forwards": _i(0), "candidates": _i(0), "trials": _i(0), "notes": _i(0),
                   "measured": _b(), "best_fix": _s(*FIX_KINDS, "", default=""),
                   "best_layers": _s(default=""), "best_after": _f(), "best_removed": _f(),
                   "single_tried": _b(), "single_reaches": _b(),
                   "single_fix": _s(*FIX_KINDS, "", default=""),
                   "single_layer": _s(default=""), "single_after": _f(),
                   # a measured fixed scale's threshold (the range end it covers), or ""
                   "single_threshold": _s(default=""),
                   # and its qparams: "scale,zero_point,quant_min,quant_max", or ""
                   "single_qparams": _s(default=""),
                   "single_removed": _f(),
                   "greedy": _b(), "greedy_fix": _s(*FIX_KINDS, "", default=""),
                   "greedy_layers": _s(default=""), "greedy_size": _i(0),
                   "greedy_after": _f(), "greedy_removed": _f(), "greedy_forwards": _i(0),
                   "greedy_reached": _b(), "greedy_deployable": _b(),
                   # a remedy one can deploy reaches the target: one layer's, or the
                   # greedy set's
                   "reached": _b(),
                   "float_tried": _b(), "float_layers": _s(default=""), "float_after": _f(),
                   "float_removed": _f(),
                   # the budget ended the search; float removed the most (R4.4)
                   "budget_spent": _b(), "float_best": _b(),
                   # the file's caveats: measured on one input; in fake quantization only
                   "one_input": _b(), "fake_quant_only": _b(),
                   # R5.4: the model contains post-processing; the figures were taken on
                   # the tensors entering it (the rows producing them, the region's rows)
                   "before_postprocess": _b(), "postprocess_entries": _s(default=""),
                   "postprocess_rows": _i(0),
                   # R5.3: the two models differ beyond quantization (the probe's note)
                   "models_differ": _b(),
                   # a probe over many samples: the samples searched (0: one input), how
                   # many the trials measured, and the recommended fix confirmed on every
                   # one (its median share of the error removed, the share of samples it
                   # improved, the worst sample after it and its figure), or why not
                   "samples": _i(0), "measured_on": _i(0), "confirmed": _b(),
                   "not_confirmed": _s("", "no_fix", "one_pass", default=""),
                   "confirmed_removed": _f(), "improved_share": _f(),
                   "confirmed_over": _i(0), "confirmed_reaches": _b(),
                   "worst_after_sample": _i(-1), "worst_after": _f()},
    # R5.3 (collectors/model_match.py): the analysis model with every fake quant off against
    # the baseline, from probe_run.yaml's models_match; self_baseline: the baseline is the
    # analysis model itself, fake quant off (qcdoctor probe --baseline self)
    "models_match": {"analysis": _s(default=""), "match": _b(True), "cosine": _f(1.0),
                     "max_abs": _f(), "relative": _f(), "relative_known": _b(True),
                     "tolerance": _f(), "self_baseline": _b(), **_DRIVES},
    # the same where they do not match: every reading of that folder carries the difference
    "models_differ": {"analysis": _s(default=""), "cosine": _f(1.0), "max_abs": _f(),
                      "relative": _f(), "relative_known": _b(True), "tolerance": _f(),
                      "baseline": _s(*STAGES, "", default=""),
                      "analysis_stage": _s(*STAGES, "", default=""), **_DRIVES},
    "deploy_branch_hint": {"node": _s(default=""), "target": _s(default="")},
    "graph_loaded": {"nodes": _i(0)},
    "artifact_problem": {"file": _s(default=""), "problem": _s(default=""),
                         "problem_zh": _s(default=""), "partial": _b()},
    # --- deployment (collectors/deploy_facts.py, collectors/dumps.py)
    "deploy_compare": {"item": _s(default=""), "check": _s(*CHECKLIST_ITEMS), "train": _s(default=""),
                       "board": _s(default=""), "equal": _s(*TRISTATE),
                       # what leaves it unknown when one value is asked for by name
                       # (knowledge.md R5.9: "divisor", a 0-1 training scale with none)
                       "missing": _s("", "divisor", default="")},
    # the hb_compile / hb_mapper config read (knowledge.md R5.9): its march and chip
    # (j6: no for bayes-e X5 / bernoulli X3), inputs, and the node types it sets
    "deploy_config": {"march": _s(default=""), "chip": _s(default=""), "j6": _s(*TRISTATE),
                      "inputs": _i(0), "norm_types": _s(default=""),
                      "int16_nodes": _i(0), "node_types": _s(default=""),
                      "optimization": _s(default=""),
                      # a compile script was read too (its inserts decide the pre-processing)
                      "with_script": _b()},
    # a compile script / config found in the case folder, case.yaml naming none: file is
    # the one read ("" when several fit and none is preferred), candidates all that fit
    "deploy_found": {"kind": _s("script", "config"), "file": _s(default=""),
                     "candidates": _s(default=""), "count": _i(0)},
    # the nodes the config's remove_node_name removes
    "removed_nodes": {"count": _i(0), "names": _s(default="")},
    "march_check": {"convert": _s(default=""), "compile": _s(default=""),
                    "platform": _s(default=""), "board": _s(default=""),
                    # model_check_result's "current march" (knowledge.md R5.10)
                    "prepare": _s(default=""),
                    "consistent": _s(*TRISTATE), "differing": _s(default="")},
    "insert_call": {"name": _s(default=""), "line": _i(0), "before_convert": _s(*TRISTATE)},
    "qdq_removal": {"line": _i(0), "after_convert": _s(*TRISTATE), "quantize": _s(*TRISTATE),
                    "dequantize": _s(*TRISTATE)},
    "preprocess_mode": {"mode": _s(default="unknown"), "train_color": _s(default="unknown")},
    "layout_check": {"train_layout": _s(default="unknown"), "input_layout": _s(default="unknown"),
                     "transpose": _s(*TRISTATE), "permutes_ok": _s(*TRISTATE),
                     "permutes": _s(default=""), "known": _b()},
    "deploy_script": {"read": _b(), "inserts": _b(), "removes_io": _b(), "converts": _b(),
                      "compiles": _b()},
    "nv12_size": {"height": _i(0), "width": _i(0), "known": _b(), "even": _b()},
    # a row stride of the board's image input (deploy.board.stride / uv_stride), in bytes:
    # aligned to 32 (knowledge.md §10); short: below the row it must hold (width bytes,
    # known only with the width); aligned_stride: the nearest valid one (aligned, not short)
    "stride": {"plane": _s("Y", "UV"), "stride": _i(0), "width": _i(0), "width_known": _b(),
               "aligned": _b(), "short": _b(), "aligned_stride": _i(0)},
    "input_types": {"index": _i(0), "train": _s(default="unknown"), "rt": _s(default="unknown"),
                    "input_source": _s(default="unknown")},
    "core_num": {"march": _s(default="unknown"), "core_num": _i(0)},
    # the fake-quant state the compile/export script's last export runs in (knowledge.md §5
    # user-side facts); case_state: case.yaml's fake_quant_state, which wins when given;
    # agrees: whether the two say the same (unknown when case.yaml states none)
    "export_state": {"state": _s("validation", "float", "qat", "calibration"),
                     "case_state": _s("validation", "float", "unknown"),
                     "agrees": _s(*TRISTATE), "set_line": _i(0), "export_line": _i(0),
                     "export_call": _s("export", "pre_export")},
    "dump_pair": {"left": _s(*STAGES, "", default=""), "right": _s(*STAGES, "", default=""),
                  "outputs": _i(0), "compared": _i(0), "identical": _s(*TRISTATE),
                  "consistent": _s(*TRISTATE), "worst_output": _s(default=""),
                  "min_cosine": _f(), "max_abs": _f(), "shape_mismatch": _b()},
    # a checklist result, fed back so stage rules can read failed items
    # (rolled_up: a mandatory item's status comes from a worse finer check, knowledge §10)
    "checklist": {"item": _s(*CHECKLIST_ITEMS), "status": _s(*CHECKLIST_STATUSES),
                  "rolled_up": _b()},
    # conclusion, derived from the stage rules' candidates before later rules run
    "conclusion": {"stage": _s(*CONCLUSION_STAGES), "determined": _b(),
                   "suspect": _s(default="")},
}

GATE_TYPE = "$gate"
# fact types (nearly) every case has: collect_facts always emits the first nine, and the
# last three follow from any stage result. The engine shards rules by the types they need
# beyond these (a speed hint only: a rule whose types are missing simply does not fire).
USUAL_TYPES = frozenset(("case", "consistency_history", "evidence_summary", "platform", "stage",
                         "stage_summary", "user_check", "user_checks_summary", "version",
                         "conclusion", "transition", "evidence"))
# carried with a fact for the report, never sent to the engine; ``locations``: where it
# was read, as data (common/source_locations.py), for SARIF
PROVENANCE_KEYS = ("source", "locations", "note", "basis", "basis_drop", "basis_limit",
                   "basis_decimals", "direction", "direction_from",
                   # a stage after the first abnormal one against the evaluated stage before
                   # it (knowledge.md §16 R3.3), for the stage table
                   "step_from", "step_drop", "step_limit", "step_decimals")


_SHADOWED = {k for schema in FACT_TYPES.values() for k in schema} & set(PROVENANCE_KEYS)
assert not _SHADOWED, f"provenance keys shadow fact fields: {_SHADOWED}"


def normalise(fact: dict) -> dict:
    """Fill defaults and check every field; raise ValueError naming the field."""
    ftype = fact.get("type")
    plan = _PLANS.get(ftype)
    if plan is None:
        raise ValueError(f"unknown fact type {ftype!r}")
    schema = FACT_TYPES[ftype]
    if not schema.keys() >= fact.keys() - _NOT_FIELDS:
        name = next(n for n in fact if n not in schema and n not in _NOT_FIELDS)
        raise ValueError(f"fact type {ftype!r} has no field {name!r}; "
                         f"fields: {', '.join(schema)}")
    out = {"type": ftype}
    for name, kind, choices, default in plan:
        value = fact.get(name)
        if value is None:
            value = default
        kind_of = type(value)
        # the common exact types are checked inline; anything else takes the full check
        if kind_of is str:
            ok = kind == "str" and (choices is None or value in choices)
        elif kind_of is float:
            ok = kind == "float" and math.isfinite(value)
        elif kind_of is int:
            ok = kind == "int"
            if kind == "float":
                value, ok = float(value), True
        else:
            ok = kind_of is bool and kind == "bool"
        if not ok:
            value = _checked(ftype, name, FACT_TYPES[ftype][name], value)
        out[name] = value
    return out


def _checked(ftype: str, name: str, spec: Field, value):
    if spec.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    problem = spec.check(value)
    if problem:
        raise ValueError(f"fact {ftype}.{name} {problem}")
    return value


_NOT_FIELDS = {"type", *PROVENANCE_KEYS}
# per fact type: (field, kind, allowed values, default), in schema order
_PLANS = {ftype: tuple((name, spec.kind, frozenset(spec.choices) if spec.choices else None,
                        spec.default) for name, spec in schema.items())
          for ftype, schema in FACT_TYPES.items()}
