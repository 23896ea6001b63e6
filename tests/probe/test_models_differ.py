"""Models that differ beyond quantization (knowledge.md §18 R5.3), read end to end: a float
model against its QAT model trained a few steps (weights and BN statistics moved), with and
without a planted fault, the quantization-only comparison (``--baseline self``), and an
untouched calibration. torch.ao FX QAT models built here (random weights, seconds each);
each case is triaged from its files as a user's case and rendered in every format and both
languages."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from torch import nn  # noqa: E402

from qcdoctor.engine.diagnosis.triage import triage_path  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from qcdoctor.probe.model_match import RELATIVE_TOLERANCE  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    inject,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
    settle_batchnorm,
)

SIZE = 16


def example() -> torch.Tensor:
    return torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(7))


class Plain(nn.Module):
    """Three conv-bn-relu blocks, a pool and a linear head: a network whose clean
    calibration reads quantization noise."""

    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.b3 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.pool(self.b3(self.b2(self.b1(x)))).flatten(1))


def built():
    """(fused float model, calibrated clean FX QAT model)."""
    torch.manual_seed(0)
    model = Plain()
    settle_batchnorm(model, SIZE)
    return quantize(model.eval(), example())


def trained(qat: nn.Module, steps: int = 3) -> nn.Module:
    """A copy of ``qat`` after a few optimizer steps in train mode on random data: its
    weights and BN statistics move, as after QAT training."""
    from torch.ao.quantization import disable_observer, enable_observer
    model = copy.deepcopy(qat).train()
    model.apply(enable_observer)
    generator = torch.Generator().manual_seed(5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(8, 3, SIZE, SIZE, generator=generator)
        loss = (model(x) - torch.randn(8, 10, generator=generator)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.apply(disable_observer)
    return model


def triaged(tmp_path, baseline, analysis, **options) -> tuple[dict, dict, object]:
    """(the English report, facts by type, the probe's result) of a case holding the
    probe's folder; every format rendered in both languages on the way."""
    case = tmp_path / "case"
    result = compare_models(baseline, analysis, example(), case / "qa_probe",
                            stages=("float", "qat"), **options)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    return report, facts, result


def manifest(result) -> dict:
    return yaml.safe_load((result.out_dir / "probe_run.yaml").read_text("utf-8"))


def rules(report: dict) -> list[str]:
    return [f["rule"] for f in report["findings"]]


def located(facts: dict) -> list[dict]:
    return [o for o in facts.get("layer_origin", []) if o["located"]]


@pytest.fixture(scope="module")
def models():
    baseline, qat = built()
    return baseline, qat, trained(qat)


def test_a_trained_qat_model_against_its_float_one_is_said_first(tmp_path, models):
    baseline, _, qat = models
    report, facts, result = triaged(tmp_path, baseline, qat)
    matched = result.models_match
    assert matched["match"] is False and matched["fake_quant_off_relative"] > RELATIVE_TOLERANCE
    assert manifest(result)["models_match"] == matched
    assert manifest(result)["baseline_model"] == "given"
    assert any("differ beyond quantization" in w for w in result.warnings)
    assert rules(report)[0] == "LY110", rules(report)
    assert report["findings"][0]["severity"] == "error"
    assert "--baseline self" in report["findings"][0]["text"]
    assert 'compare_models("self"' in report["findings"][0]["text"]
    # weights that differ are never weight precision; the sensitivity is not read
    assert "LY038" not in rules(report)
    assert not any(a.get("fix") == "per_channel" for a in report["next_actions"])
    summaries = facts.get("sensitivity_summary", [])
    assert summaries and all(s["models_differ"] and not s["usable"] for s in summaries)
    assert "LY111" in rules(report)
    assert not {"LY041", "LY042", "LY043", "LY048"} & set(rules(report))


def test_the_same_model_against_itself_reads_noise(tmp_path, models):
    _, _, qat = models
    before = {k: v.clone() for k, v in qat.state_dict().items()}
    switches = [bool(m.fake_quant_enabled[0]) for m in qat.modules()
                if hasattr(m, "fake_quant_enabled")]
    report, facts, result = triaged(tmp_path, "self", qat)
    assert result.baseline_model == "self" and result.models_match["match"] is True
    assert manifest(result)["baseline_model"] == "self"
    assert not located(facts), facts.get("layer_origin")
    assert "LY110" not in rules(report) and "LY112" in rules(report)
    # the model itself is untouched: its state and every fake quant switch
    assert all(torch.equal(v, before[k]) for k, v in qat.state_dict().items())
    assert switches == [bool(m.fake_quant_enabled[0]) for m in qat.modules()
                        if hasattr(m, "fake_quant_enabled")]


def test_against_itself_the_planted_fault_is_located(tmp_path, models):
    _, _, qat = models
    faulty = inject(qat, "b2.0", scale_factor=0.05)     # the conv's output range cut 20x
    report, facts, result = triaged(tmp_path, "self", faulty)
    origins = located(facts)
    assert origins and origins[0]["layer"] == "b2.0", origins
    assert "LY110" not in rules(report)


def test_an_untouched_calibration_says_nothing(tmp_path, models):
    baseline, qat, _ = models
    report, facts, result = triaged(tmp_path, baseline, qat)
    assert result.models_match["match"] is True
    assert result.models_match["fake_quant_off_relative"] < 1e-5
    assert "models_differ" not in facts and facts["models_match"][0]["match"] is True
    assert not {"LY110", "LY111", "LY112"} & set(rules(report))
    assert not any("differ beyond quantization" in w for w in result.warnings)


def test_the_fix_trials_name_the_models_difference(tmp_path, models):
    baseline, _, qat = models
    report, facts, result = triaged(tmp_path, baseline, qat, sensitivity=False,
                                    try_fixes=True, fix_budget=60)
    notes = result.fix_trials["notes"]
    assert any(n.startswith("models_differ:") for n in notes), notes
    assert not any("look-up table" in n for n in notes), notes
    summary = facts["fix_trials"][0]
    assert summary["models_differ"] and not summary["reached"], summary
    assert "FX041" in rules(report)


def test_a_text_other_than_self_is_refused(tmp_path, models):
    _, qat, _ = models
    with pytest.raises(QcdoctorError, match="neither a model nor 'self'"):
        compare_models("float", qat, example(), tmp_path / "qa_probe")
    assert not (tmp_path / "qa_probe").exists()


def test_cli_baseline_self_end_to_end(tmp_path, monkeypatch, capsys):
    from qcdoctor.engine.commands.cli import main
    (tmp_path / "cli_self_models.py").write_text(
        "from tests.probe.test_models_differ import built, trained\n\n\n"
        "def build_qat():\n    return trained(built()[1])\n", encoding="utf-8")
    torch.save(example(), tmp_path / "in.pt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["probe", "--baseline", "self", "--analysis", "cli_self_models:build_qat",
                 "--inputs", "in.pt", "--out", "qa_self", "--lang", "en"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "baseline: the analysis model itself with every fake quant off" in out
    written = yaml.safe_load((tmp_path / "qa_self" / "probe_run.yaml").read_text("utf-8"))
    assert written["baseline_model"] == "self" and written["models_match"]["match"] is True
    assert (written["baseline"], written["analysis"]) == ("float", "qat")   # --analysis: qat


def _triage_rewritten(tmp_path, models, change) -> dict:
    """Facts by type of a probe folder whose probe_run.yaml ``change`` rewrote."""
    baseline, qat, _ = models
    case = tmp_path / "case"
    compare_models(baseline, qat, example(), case / "qa_probe", sensitivity=False)
    path = case / "qa_probe" / "probe_run.yaml"
    written = yaml.safe_load(path.read_text("utf-8"))
    change(written)
    path.write_text(yaml.safe_dump(written, sort_keys=False), encoding="utf-8")
    (case / "case.yaml").write_text("symptom: accuracy drops\nplatform: {chip: J6E}\n",
                                    encoding="utf-8")
    facts: dict = {}
    for fact in triage_path(case, use_env=False, lang="en")["facts"]:
        facts.setdefault(fact["type"], []).append(fact)
    return facts


def test_a_malformed_models_match_is_one_problem_naming_its_key(tmp_path, models):
    facts = _triage_rewritten(tmp_path, models, lambda m: m["models_match"].update(
        fake_quant_off_cosine="high"))
    problems = [p["problem"] for p in facts.get("artifact_problem", [])]
    assert any("models_match.fake_quant_off_cosine" in p for p in problems), problems
    assert "models_match" not in facts and "models_differ" not in facts


def test_a_manifest_of_an_earlier_probe_says_nothing_of_it(tmp_path, models):
    facts = _triage_rewritten(tmp_path, models, lambda m: m.pop("models_match"))
    assert "models_match" not in facts and "models_differ" not in facts
    assert not facts.get("artifact_problem")
