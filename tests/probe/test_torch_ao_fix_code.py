"""Fix code in the flow the models come from: for a torch.ao model the report's measured
fix is torch.ao code (apply_fix, QConfig with FixedQParamsFakeQuantize), never Horizon's;
run as written on a torch.ao model, it gives the figure the trial measured. A Horizon
model's folder (the profiler's tables) keeps Horizon's code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.ao.quantization import disable_observer  # noqa: E402

from qcdoctor.engine.diagnosis.triage import triage_path  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe.test_fix_apply import cosine  # noqa: E402
from tests.probe.test_probe_case_report import INPUTS, Net, models  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402

ALTERNATIVE = "# Or in the qconfig, before prepare"


def measured_fix(folder, lang: str = "en") -> dict:
    report = triage_path(folder, use_env=False, lang=lang)
    return next(a for a in report["next_actions"] if a["rule"] == "FX030")


@pytest.fixture
def case(tmp_path, monkeypatch):
    base, qat = models(clip=True)
    result = compare_models(base, qat, INPUTS, tmp_path / "qa_probe", try_fixes=True,
                            sensitivity=False)
    triaged_case(tmp_path, "accuracy drops after calibration")     # every format, both languages
    monkeypatch.chdir(tmp_path)                  # the code reads ./qa_probe, as a user runs it
    return tmp_path, base, qat, result


def test_a_torch_ao_model_gets_torch_ao_code(case):
    folder, *_ = case
    for lang in ("en", "zh"):
        code = measured_fix(folder, lang)["code"]
        assert "from qcdoctor.probe import apply_fix" in code
        assert "FixedQParamsFakeQuantize" in code and "prepare_qat(" in code
        assert "horizon_plugin_pytorch" not in code and "QconfigSetter" not in code


def test_the_apply_fix_lines_give_the_measured_figure(case):
    folder, base, qat, result = case
    code = measured_fix(folder)["code"]
    first = code.split(ALTERNATIVE)[0]
    namespace = {"qat_pt": qat}
    exec(compile(first, "fix.py", "exec"), namespace)           # noqa: S102 - the report's code
    assert namespace["qat_pt"] is not qat                       # a copy
    assert cosine(base, namespace["qat_pt"], INPUTS) == result.fix_trials["trials"][0]["after"]


def test_the_qconfig_lines_prepare_the_measured_quantizer(case):
    """The QConfig form, run on the float model as written (its qconfig the one the model was
    prepared with): the layer gets torch.ao's fixed-qparams fake quant with the measured
    scale and zero point; with the rest of the QAT model's state, the output is the one
    the trial measured."""
    folder, base, qat, result = case
    code = measured_fix(folder)["code"]
    alternative = ALTERNATIVE + code.split(ALTERNATIVE)[1]
    alternative = alternative.replace("get_default_qat_qconfig()",
                                      'get_default_qat_qconfig("qnnpack")')
    trained = []
    torch.manual_seed(0)
    namespace = {"float_model": Net(), "train_qat": trained.append}
    exec(compile(alternative, "fix.py", "exec"), namespace)     # noqa: S102 - the report's code
    prepared = namespace["qat_pt"]
    assert trained == [prepared]
    fixed = prepared.block2[0].activation_post_process
    setting = result.fix_trials["trials"][0]["settings"][0]
    assert type(fixed).__name__ == "FixedQParamsFakeQuantize"
    assert float(fixed.scale) == setting["scale"][0]
    assert int(fixed.zero_point) == setting["zero_point"][0]
    # the QAT model's own state everywhere else (its calibration), then measured
    own = {k: v for k, v in qat.state_dict().items()
           if not k.startswith("block2.0.activation_post_process")}
    prepared.load_state_dict(own, strict=False)
    prepared.eval()
    prepared.apply(disable_observer)
    assert cosine(base, prepared, INPUTS) == result.fix_trials["trials"][0]["after"]


def test_a_profiler_folder_keeps_horizon_code(tmp_path):
    from tests.diagnosis.test_sensitivity_validity import convert_case, rows
    from tests.qa.scenarios import truncation_rows
    folder = convert_case(tmp_path, truncation_rows(), rows([("head.reciprocal", 0.5),
                                                             ("pre.0", 0.01)]))
    report = triage_path(folder, use_env=False, lang="en")
    code = next(a for a in report["next_actions"] if a["rule"] == "LY030")["code"]
    assert "QconfigSetter" in code and "torch.ao" not in code


def test_an_fx_model_gets_qconfig_mapping_code_that_gives_the_measured_figure(tmp_path,
                                                                             monkeypatch):
    """An FX-prepared model: QConfigMapping.set_module_name on the layer, prepare_qat_fx;
    with the QAT model's own state elsewhere, the output is the one the trial measured."""
    import copy

    from torch.ao.quantization import disable_observer as off

    from tests.probe_nets import inject, network, quantize
    pytest.importorskip("pytorchcv")
    example = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    model = network("resnet10", 32)
    base, qat = quantize(model, example)
    node = next(n for n in qat.graph.nodes if n.op == "call_module"
                and n.target.endswith("stage2.unit1.body.conv1.conv"))
    faulty = inject(qat, node, scale_factor=0.25)
    result = compare_models(base, faulty, example, tmp_path / "qa_probe", try_fixes=True,
                            sensitivity=False, fix_budget=40)
    recommended = result.fix_trials.recommended()
    assert recommended["fix"] == "fixed_scale"
    triaged_case(tmp_path, "accuracy drops after calibration")
    monkeypatch.chdir(tmp_path)
    code = measured_fix(tmp_path)["code"]
    assert "set_module_name" in code and "prepare_qat_fx" in code
    from qcdoctor.engine.reports.formats import render_output
    report = triage_path(tmp_path, use_env=False, lang="en")
    assert "quantized by torch.ao in FX mode" in render_output(report, "md")
    alternative = ALTERNATIVE + code.split(ALTERNATIVE)[1]
    alternative = alternative.replace("get_default_qat_qconfig_mapping()",
                                      'get_default_qat_qconfig_mapping("qnnpack")')
    namespace = {"float_model": copy.deepcopy(model), "example_inputs": (example,),
                 "train_qat": lambda prepared: None}
    exec(compile(alternative, "fix.py", "exec"), namespace)     # noqa: S102 - the report's code
    prepared = namespace["qat_pt"]
    fixed_name = recommended["settings"][0]["quantizer"]
    fixed = prepared.get_submodule(fixed_name)
    assert type(fixed).__name__ == "FixedQParamsFakeQuantize"
    assert float(fixed.scale) == recommended["settings"][0]["scale"][0]
    own = {k: v for k, v in faulty.state_dict().items() if not k.startswith(fixed_name + ".")}
    prepared.load_state_dict(own, strict=False)
    prepared.eval()
    prepared.apply(off)
    assert cosine(base, prepared, example) == recommended["after"]
