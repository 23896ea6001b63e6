"""A measured fix set on the model again (``result.fix_trials.apply(model)``,
``qcdoctor.probe.apply_fix``, ``qcdoctor probe --save-fixed``): the patched copy computes
exactly what its trial measured (the same figure, to the last bit), for every trial, on
eager and FX models; the user's model is never changed; bad input is one clear error."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")
yaml = pytest.importorskip("yaml")

from torch import nn  # noqa: E402

from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import FixTrials, apply_fix, compare_models  # noqa: E402
from qcdoctor.probe.sensitivity import METRICS  # noqa: E402
from qcdoctor.probe.stats import pair_stats  # noqa: E402
from tests.probe.test_probe_case_report import INPUTS, models  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    inject,
    network,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
)


def cosine(base: nn.Module, model: nn.Module, inputs) -> float:
    """The figure the trials measure (the probe's own Cosine of the model output)."""
    key = METRICS["Cosine"]
    with torch.inference_mode():
        return pair_stats(base(inputs), model(inputs), (key,))[key]


def state(model: nn.Module) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def same_state(model: nn.Module, before: dict) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in after)


def check_every_trial(result, base, qat, inputs) -> None:
    trials = result.fix_trials
    before = state(qat)
    for index, trial in enumerate(trials["trials"]):
        fixed = trials.apply(qat, trial=index)
        assert cosine(base, fixed, inputs) == trial["after"], (index, trial["fix"])
    if trials["greedy"]:
        assert cosine(base, trials.apply(qat, trial="greedy"), inputs) == \
            trials["greedy"]["after"]
    assert same_state(qat, before)


def test_every_trial_of_an_eager_model_is_set_again_exactly(tmp_path):
    base, qat = models(clip=True)
    result = compare_models(base, qat, INPUTS, tmp_path / "p", try_fixes=True,
                            sensitivity=False)
    assert isinstance(result.fix_trials, FixTrials)
    check_every_trial(result, base, qat, INPUTS)
    recommended = result.fix_trials.recommended()
    assert (recommended["fix"], recommended["layers"]) == ("fixed_scale", ["block2.0"])
    fixed = result.fix_trials.apply(qat)
    assert cosine(base, fixed, INPUTS) == recommended["after"] > 0.9999
    # read back from the file and from its folder: the same fix
    for source in (tmp_path / "p" / "fix_trials.yaml", tmp_path / "p"):
        again = apply_fix(qat, source)
        with torch.inference_mode():
            assert torch.equal(again(INPUTS), fixed(INPUTS))


def test_every_trial_of_an_fx_model_is_set_again_exactly(tmp_path):
    example = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    base, qat = quantize(network("resnet10", 32), example)
    node = next(n for n in qat.graph.nodes if n.op == "call_module"
                and n.target.endswith("stage2.unit1.body.conv1.conv"))
    faulty = inject(qat, node, scale_factor=0.25)
    result = compare_models(base, faulty, example, tmp_path / "p", try_fixes=True,
                            sensitivity=False, fix_budget=40)
    check_every_trial(result, base, faulty, example)


def test_a_model_without_the_quantizers_is_one_clear_error(tmp_path):
    base, qat = models(clip=True)
    result = compare_models(base, qat, INPUTS, tmp_path / "p", try_fixes=True,
                            sensitivity=False)
    with pytest.raises(QcdoctorError, match="has no quantizer named block2.0"):
        result.fix_trials.apply(base)                 # the float model: nothing to set
    with pytest.raises(QcdoctorError, match="is not one of the"):
        result.fix_trials.apply(qat, trial=999)
    with pytest.raises(QcdoctorError, match="is not one of the"):
        result.fix_trials.apply(qat, trial=True)


def test_a_file_without_settings_or_with_broken_ones_is_one_clear_error(tmp_path):
    base, qat = models(clip=True)
    result = compare_models(base, qat, INPUTS, tmp_path / "p", try_fixes=True,
                            sensitivity=False)
    document = copy.deepcopy(dict(result.fix_trials))
    for trial in document["trials"]:
        del trial["settings"]
    if document["greedy"] is not None:          # none where a located remedy reached it
        document["greedy"].pop("settings")
    with pytest.raises(QcdoctorError, match="records no settings"):
        apply_fix(qat, document)
    broken = copy.deepcopy(dict(result.fix_trials))
    broken["trials"][0]["settings"][0]["scale"] = [0.0]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    with pytest.raises(QcdoctorError, match=r"trials\[0\]\.settings\[0\]: as many zero points"):
        apply_fix(qat, path)
    path.write_text("schema: [", encoding="utf-8")
    with pytest.raises(QcdoctorError, match="not valid YAML"):
        apply_fix(qat, path)
    with pytest.raises(QcdoctorError, match="cannot read"):
        apply_fix(qat, tmp_path / "nowhere")


def test_no_fix_reaching_the_target_is_recommended(tmp_path):
    base, qat = models(clip=False)                      # clean: nothing to remove
    result = compare_models(base, qat, INPUTS, tmp_path / "p", try_fixes=True,
                            sensitivity=False, fix_target=1.0)
    assert result.fix_trials.recommended() is None
    with pytest.raises(QcdoctorError, match="no measured fix reaches the target"):
        result.fix_trials.apply(qat)


MODELS_PY = '''
from tests.probe.test_probe_case_report import models


def build_float():
    return models(clip=True)[0]


def build_broken():
    return models(clip=True)[1]
'''


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_cli_saves_the_fixed_model_as_measured(tmp_path, monkeypatch, capsys, lang):
    from qcdoctor.engine.commands.cli import main
    name = f"save_fixed_models_{lang}"
    (tmp_path / f"{name}.py").write_text(MODELS_PY, encoding="utf-8")
    torch.save(INPUTS, tmp_path / "in.pt")
    monkeypatch.chdir(tmp_path)
    code = main(["probe", "--baseline", f"{name}:build_float", "--analysis",
                 f"{name}:build_broken", "--inputs", "in.pt", "--out", "qa_probe",
                 "--no-sensitivity", "--try-fixes", "--save-fixed", "fixed.pt",
                 "--lang", lang])
    out = capsys.readouterr().out
    assert code == 0 and "fixed.pt" in out
    fixed = torch.load(tmp_path / "fixed.pt", weights_only=False)
    document = yaml.safe_load((tmp_path / "qa_probe" / "fix_trials.yaml").read_text("utf-8"))
    base, _ = models(clip=True)
    assert cosine(base, fixed, INPUTS) == document["trials"][0]["after"]
    # the eager model's qconfig attributes cannot be pickled: left out, and said
    assert "qconfig" in out and not hasattr(fixed.block2[0], "qconfig")
    # a rerun replaces the model it saved before, as -o replaces a report
    (tmp_path / "fixed.pt").write_bytes(b"an earlier save")
    assert main(["probe", "--baseline", f"{name}:build_float", "--analysis",
                 f"{name}:build_broken", "--inputs", "in.pt", "--out", "qa_probe",
                 "--no-sensitivity", "--try-fixes", "--save-fixed", "fixed.pt"]) == 0
    assert cosine(base, torch.load(tmp_path / "fixed.pt", weights_only=False), INPUTS) == \
        document["trials"][0]["after"]


@pytest.mark.parametrize("extra, message", [
    (["--save-fixed", "fixed.pt"], "there is none without --try-fixes"),
    (["--try-fixes", "--save-fixed", "in.pt"], "refusing to overwrite an input of this run"),
    (["--try-fixes", "--save-fixed", "no/such/folder/fixed.pt"], "no/such/folder"),
])
def test_cli_save_fixed_refuses_before_any_work(tmp_path, monkeypatch, capsys, extra, message):
    from qcdoctor.engine.commands.cli import main
    name = f"save_fixed_refused_{len(extra)}_{len(message)}"
    (tmp_path / f"{name}.py").write_text(MODELS_PY, encoding="utf-8")
    torch.save(INPUTS, tmp_path / "in.pt")
    kept = (tmp_path / "in.pt").read_bytes()
    monkeypatch.chdir(tmp_path)
    code = main(["probe", "--baseline", f"{name}:build_float", "--analysis",
                 f"{name}:build_broken", "--inputs", "in.pt", "--out", "qa_probe",
                 "--no-sensitivity", *extra])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "qa_probe").exists()
    assert (tmp_path / "in.pt").read_bytes() == kept


def test_a_result_shows_itself_in_one_line(tmp_path):
    base, qat = models(clip=True)
    result = compare_models(base, qat, INPUTS, tmp_path / "p", try_fixes=True,
                            sensitivity=False)
    shown = repr(result)
    assert "\n" not in shown and len(shown) < 300
    assert f"rows={len(result.rows)}" in shown and "stages=float vs calib" in shown
    assert "fix_trials=fixed_scale on block2.0" in shown
    assert not any(str(row.get("cosine")) in shown for row in result.rows)
