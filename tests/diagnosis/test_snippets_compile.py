"""Every piece of generated code is valid Python: every snippet, for every bundled example,
every rule that emits code (each of its firing examples) and the case variants that change
what a snippet writes (march, input formats, task lists, bad case, awkward user names).
"""

from __future__ import annotations

import itertools

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.snippets import render_snippet
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching.derived import fill
from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.fact_types import STAGES, normalise
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES

# names a user or a QuantAnalysis file can give: quotes, backslashes, spaces, non-ASCII
AWKWARD = 'head."cls"\\branch 层\n# x'

CONTEXTS = [
    {"march": march, "input_format_differs": differs, "has_task_input": task,
     "badcase": badcase, "out_dirs": out_dirs}
    for march, differs, task, badcase, out_dirs in itertools.product(
        ("nash-e", "unknown"), (False, True), (False, True),
        ("available", "dataset_only", "none", "unknown"),
        ({}, {"convert": AWKWARD, "export": "qa export/it's"}))
]


def _compiles(code: str, where: str) -> None:
    try:
        compile(code, where, "exec")
    except SyntaxError as exc:     # show the generated code with the failure
        pytest.fail(f"{where}: {exc}\n{code}")


def _snippet_rules():
    return [r for r in load_rules() if r.then.get("next_action", {}).get("snippet")]


def test_rules_emit_code_at_all():
    assert len(_snippet_rules()) >= 15


@pytest.mark.parametrize("name", example_names())
@pytest.mark.parametrize("lang", ("zh", "en"))
def test_every_example_emits_code_that_compiles(name, lang):
    with example_path(name) as path:
        report = triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path)
    codes = [a for a in report["next_actions"] if a.get("code")]
    assert codes, f"{name}: some next action carries code"
    for action in codes:
        _compiles(action["code"], f"{name}:{action['id']}")


@pytest.mark.parametrize("rule", _snippet_rules(), ids=lambda r: r.id)
def test_every_rule_snippet_compiles_in_every_context(rule):
    rendered = 0
    for case in rule.examples["fires"]:
        facts = [normalise(f) for f in case]
        for bindings in oracle_bindings(rule.when, facts):
            action = fill(rule.then["next_action"], bindings)
            for context in CONTEXTS:
                _compiles(render_snippet(action["snippet"], action, context), rule.id)
                rendered += 1
    assert rendered


@pytest.mark.parametrize("context", CONTEXTS[:: len(CONTEXTS) // 8])
def test_every_template_and_variant_compiles(context):
    """The variants rules do not reach today: every stage, analysis type, level, layer."""
    variants = [("evaluate_stage", {"stage_to_evaluate": s}) for s in STAGES]
    for kind, (baseline, analysis) in ANALYSIS_TYPE_STAGES.items():
        for b, a in {(baseline, analysis), ("qat_export", "quantized_bc"), ("qat", "qat_bc")}:
            variants.append(("quant_analysis", {"analysis_model_type": kind, "baseline": b,
                                                "analysis": a}))
    variants += [("consistency_level", {"level": level}) for level in (0, 1, 2)]
    variants += [("fixed_scale", {"layer": AWKWARD, "limit": limit}) for limit in (None, "1.5e+05")]
    variants += [("qint16", {"layer": AWKWARD}),
                 ("lut_bisect", {"ops": f"{AWKWARD},backbone.exp"}), ("lut_bisect", {}),
                 ("convert_analysis", {}), ("bc_editor", {}), ("qdq_compare", {}),
                 ("user_side_checks", {}), ("export_state_check", {}),
                 ("probe_fix_trials", {"analysis_model_type": "fake_quant", "baseline": "float",
                                       "analysis": "qat"})]
    # a qconfig change before QAT has run is calibrated again (knowledge.md §17 R4.6)
    variants += [(snippet, {**action, "cost": "recalibrate"}) for snippet, action in variants
                 if snippet in ("fixed_scale", "qint16")]
    variants += [("measured_fix", {"fix": fix, "layers": AWKWARD, "cost": cost})
                 for fix in ("fixed_scale", "per_channel", "int16") for cost in ("recalibrate", "retrain")]
    for snippet, action in variants:
        _compiles(render_snippet(snippet, {"id": snippet, **action}, context), snippet)


def test_fix_code_uses_the_documented_names():
    """knowledge.md §6 fix code: QconfigSetter + ModuleNameTemplate, nothing invented."""
    for snippet in ("qint16", "fixed_scale"):
        code = render_snippet(snippet, {"layer": "head.cls", "limit": "130925"}, CONTEXTS[0])
        assert "QconfigSetter(" in code and "ModuleNameTemplate({" in code
        assert "check them" in code
        for invented in ("ModuleNameQconfigSetter", "default_qat_qconfig_setter",
                         "quantization.qconfig import"):
            assert invented not in code
    fixed = render_snippet("fixed_scale", {"layer": "head.cls", "limit": "130925"}, CONTEXTS[0])
    assert '"head.cls": {"threshold": threshold}' in fixed and "threshold = 130925" in fixed
    # an observer's scale and dtype agree: 128 steps for qint8, 32768 for qint16
    assert "threshold / 128, zero_point=0, dtype=qint8" in fixed
    assert "threshold / 32768, zero_point=0, dtype=qint16" in fixed


def _order(code: str, *needles: str) -> list[int]:
    return [code.index(n) for n in needles]


def test_level_0_is_the_whole_flow_on_the_existing_checkpoint():
    code = render_snippet("consistency_level", {"level": 0}, CONTEXTS[0])
    steps = _order(code, "set_consistency_level(0)", "prepare(float_model",
                   "load_state_dict(checkpoint)", "qat_pt.eval()",
                   "set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)", "pre_export(qat_pt)",
                   "export(qat_pt, example_inputs)", 'convert(qat_bc, "nash-e")',
                   "evaluate(quantized_bc)", '"_high_precision_qpp", "_fuse_requantize"')
    assert steps == sorted(steps)
    assert "train_qat" not in code
    retrain = render_snippet("consistency_level", {"level": 1}, CONTEXTS[0])
    assert "train_qat(qat_pt)" in retrain and "load_state_dict" not in retrain


def test_float_diagnostic_ends_back_in_validation_with_rebuilt_models():
    code = render_snippet("user_side_checks", {}, CONTEXTS[0])
    after = code[code.index("FakeQuantState._FLOAT"):]
    assert after.index("pre_export(qat_pt)") < after.index("compare_outputs")   # rebuilt
    restored = after[after.index("FakeQuantState.VALIDATION"):]
    assert "qat_export_pt = pre_export(qat_pt)" in restored and "qat_bc = export(" in restored
    assert code.rstrip().endswith("qat_bc = export(qat_pt, example_inputs)")


@pytest.mark.parametrize("snippet,action,model", [
    ("quant_analysis", {"analysis_model_type": "fake_quant", "baseline": "float",
                        "analysis": "calib"}, "calib_model"),
    ("quant_analysis", {"analysis_model_type": "fake_quant", "baseline": "float",
                        "analysis": "qat"}, "qat_pt"),
    ("evaluate_stage", {"stage_to_evaluate": "calib"}, "calib_model"),
])
def test_fake_quant_side_is_in_validation_before_it_runs(snippet, action, model):
    code = render_snippet(snippet, action, CONTEXTS[0])
    assert f"{model}.eval()" in code
    assert code.index(f"set_fake_quantize({model}, FakeQuantState.VALIDATION)") < \
        code.index("QuantAnalysis(" if snippet == "quant_analysis" else "evaluate(")


def test_bc_without_quantize_is_fed_integer_tensors():
    code = render_snippet("qdq_compare", {}, CONTEXTS[0])
    assert ".to(dtype)" in code and "dtype=torch.int8" in code and "torch.int16" in code
    namespace: dict = {}
    exec(code.split("\n\nref =")[0], namespace)      # the helpers alone run without a model
    import torch
    q = namespace["quantize"](torch.tensor([0.3, -5.0, 9.0]), 0.05)
    assert q.dtype == torch.int8 and q.tolist() == [6, -100, 127]
    assert namespace["quantize"](torch.tensor([9.0]), 0.05, torch.int16).tolist() == [180]
