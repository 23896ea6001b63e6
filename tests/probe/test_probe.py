"""qcdoctor probe on small models: the numbers, the files (read back by our own readers),
the output folder's safety, the restored model state, the quantizer adapter, triage."""

from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from torch import nn  # noqa: E402

from qcdoctor.collectors.case_file import load_case  # noqa: E402
from qcdoctor.collectors.reading.compare_layers import load_compare  # noqa: E402
from qcdoctor.collectors.sensitivity import load_sensitivity  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402
from qcdoctor.engine.reports.formats import render  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import ProbeWarning, Quantizer, compare_models  # noqa: E402
from qcdoctor.probe.stats import PAIR_METRICS, flatten_output, pair_stats  # noqa: E402
from tests.probe_nets import eager_qat  # noqa: E402
from tests.qa.scenarios import case_yaml  # noqa: E402


class Net(nn.Module):
    """conv -> relu -> the same linear twice (a shared module) -> two named outputs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.pool(self.relu(self.conv(x))).flatten(1)
        return {"logits": self.fc(y), "again": self.fc(y * 2.0)}


def models():
    """(float model, eager-mode QAT copy calibrated on random data)."""
    torch.manual_seed(0)
    base = Net().eval()
    return base, eager_qat(base)


EXAMPLE = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))
NUMERIC = ("qscale", "cosine", "mse", "l1", "kl", "sqnr", "atol", "rtol", "base_model_min",
           "analy_model_min", "base_model_max", "analy_model_max", "base_model_mean",
           "analy_model_mean", "max_atol_diff", "max_qscale_diff")


def test_pair_stats_known_values():
    b = torch.tensor([1.0, 2.0, 3.0, 4.0])
    a = torch.tensor([1.0, 2.0, 3.0, 5.0])
    got = pair_stats(b, a)
    assert got["atol"] == 1.0 and got["l1"] == 0.25 and got["mse"] == 0.25
    assert got["rtol"] == pytest.approx(0.25)
    assert got["sqnr"] == pytest.approx(10 * math.log10(30 / 1))
    assert got["cosine"] == pytest.approx(34 / math.sqrt(30 * 39))
    p, q = torch.softmax(b.double(), 0), torch.softmax(a.double(), 0)
    assert got["kl"] == pytest.approx(float(torch.sum(p * torch.log(p / q))))
    same = pair_stats(b, b.clone())
    assert same["cosine"] == 1.0 and same["atol"] == 0.0 and same["kl"] == 0.0
    assert same["sqnr"] is None                       # no noise: nothing to measure


@pytest.mark.parametrize("base, analy", [
    ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0]),
    ([0.0, -2.0, 0.5], [0.1, -1.0, 0.5]),
    ([0.0, 0.0], [0.0, 0.0]),
    ([], []),
])
def test_one_metric_asked_is_the_same_number_as_among_all(base, analy):
    b, a = torch.tensor(base), torch.tensor(analy)
    every = pair_stats(b, a)
    assert list(every) == list(PAIR_METRICS)
    for name in PAIR_METRICS:
        assert pair_stats(b, a, (name,)) == {name: every[name]}
    with pytest.raises(ValueError):
        pair_stats(b, a, ("cosin",))


def test_outputs_flattened_to_named_tensors():
    q = torch.quantize_per_tensor(torch.tensor([0.5, 1.0]), 0.5, 0, torch.quint8)

    class Wrapped:                                    # any type with dequantize()
        def dequantize(self):
            return torch.ones(3)
    got = flatten_output((torch.zeros(2), {"a": q, "b": [Wrapped(), "text"]}), "m")
    assert [name for name, _ in got] == ["m[0]", "m[1][a]", "m[1][b][0]"]
    assert got[1][1].tolist() == [0.5, 1.0] and not got[1][1].is_quantized


def test_round_trip_through_our_readers(tmp_path):
    base, qat = models()
    result = compare_models(base, qat, EXAMPLE, tmp_path / "probe", sensitivity=False)
    names = [r["mod_name"] for r in result.rows]
    # execution order; the shared linear's second call named as the profiler names it
    assert names == ["conv", "relu", "pool", "fc", "mul", "fc(1)"]
    assert result.rows[0]["analy_op_type"] == "torch.ao.nn.qat.modules.conv.Conv2d"
    assert result.rows[0]["quant_dtype"] == "quint8" and result.rows[0]["qscale"] > 0
    csv_text = (tmp_path / "probe" / "compare_per_layer_out.csv").read_text(encoding="utf-8")
    header = csv_text.splitlines()[0].split(", ")
    assert header[0] == "mod_name" and len(header) == 25            # no index column
    assert header[23:] == ["base_mod_name", "match"]    # beyond the profiler's 23 columns
    assert "None" not in csv_text and "<class" not in csv_text
    assert "torch.Size([2* 4* 8* 8])" in csv_text
    for name in ("compare_per_layer_out.csv", "compare_per_layer_out.txt"):
        table = load_compare(tmp_path / "probe" / name)
        assert table.layout == "23" and not table.table.problems
        frame = table.frame
        assert [s.strip() for s in frame["mod_name"]] == names
        for i, row in enumerate(result.rows):
            for column in NUMERIC:
                value = row[column]
                read = frame[column].iat[i]
                if value is None:
                    assert math.isnan(read), (name, i, column)
                else:                                  # printed with 7 decimals
                    assert read == pytest.approx(value, abs=6e-8), (name, i, column)


def test_unmatched_layers_are_reported(tmp_path):
    base, qat = models()
    base.extra = nn.Identity()                         # never called: no output either
    qat.conv = nn.Sequential(qat.conv)                 # renamed: conv.0
    result = compare_models(base, qat, EXAMPLE, tmp_path / "p", sensitivity=False)
    assert "conv.0" in result.analysis_only and "conv" in result.baseline_only
    assert [r["mod_name"] for r in result.rows] == ["relu", "pool", "fc", "mul", "fc(1)"]
    manifest = (tmp_path / "p" / "probe_run.yaml").read_text(encoding="utf-8")
    assert "conv.0" in manifest and "origin: probe" in manifest


def test_models_left_as_they_were(tmp_path):
    base, qat = models()
    qat.train()
    qat.conv.activation_post_process.enable_observer()
    scale = qat.conv.activation_post_process.scale.clone()
    compare_models(base, qat, EXAMPLE, tmp_path / "p", sensitivity=True)
    assert qat.training and qat.conv.training and not base.training
    assert bool(qat.conv.activation_post_process.observer_enabled[0])
    assert bool(qat.fc.weight_fake_quant.fake_quant_enabled[0])
    assert torch.equal(qat.conv.activation_post_process.scale, scale)   # observers frozen


def test_sensitivity_files_read_back(tmp_path):
    base, qat = models()
    result = compare_models(base, qat, EXAMPLE, tmp_path / "p", names=["logits", "again"])
    assert set(result.sensitivity) == {"logits", "again"}
    rows = result.sensitivity["logits"]
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)
    # eager prepare_qat quantizes the conv and the linear: outputs and weights
    assert {(r[0], r[1]) for r in rows} == {("conv", "activation"), ("conv", "weight"),
                                           ("fc", "activation"), ("fc", "weight")}
    txt = load_sensitivity(tmp_path / "p" / "output_logits_L1_sensitive_ops.txt")
    pt_path = tmp_path / "p" / "output_logits_L1_sensitive_ops.pt"
    plain = torch.load(pt_path, weights_only=True)
    assert isinstance(plain, list) and len(plain) == len(rows)
    pt = load_sensitivity(pt_path)
    assert [(r.op_name, r.sensitive_type) for r in txt.rows] == [r[:2] for r in rows]
    assert [r.value for r in pt.rows] == [r[3] for r in rows]
    assert [r.value for r in txt.rows] == pytest.approx([r[3] for r in rows], rel=1e-5)


def test_a_toolkit_plugs_in_through_the_adapter(tmp_path):
    class Switch(nn.Module):                           # another toolkit's quantizer
        def __init__(self):
            super().__init__()
            self.on = True

        def forward(self, x):
            return torch.round(x * 4) / 4 if self.on else x

    class Adapter:
        def quantizers(self, model):
            return [Quantizer(name.rpartition(".")[0] or name, "activation", "Switch", "qint8", m)
                    for name, m in model.named_modules() if isinstance(m, Switch)]

        def is_enabled(self, q):
            return q.module.on

        def set_enabled(self, q, enabled):
            q.module.on = enabled

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)).eval()
    analysis = nn.Sequential(nn.Linear(4, 8), Switch(), nn.Linear(8, 2), Switch()).eval()
    analysis[0].load_state_dict(base[0].state_dict())
    analysis[2].load_state_dict(base[1].state_dict())
    # by name only 0 is compared (1 is a Switch against a Linear: shapes differ), so the
    # probe warns that the table is no layer-by-layer comparison; sensitivity still runs
    with pytest.warns(ProbeWarning, match="only 1 of 4"):
        result = compare_models(base, analysis, torch.randn(3, 4), tmp_path / "p",
                                adapter=Adapter(), metric="MSE")
    assert result.mostly_unmatched and result.analysis_only == ["2", "3"]
    rows = result.sensitivity["0"]
    assert {r[0] for r in rows} == {"1", "3"} and all(r[3] > 0 for r in rows)
    assert analysis[1].on and analysis[3].on                     # switches restored
    assert (tmp_path / "p" / "output_0_MSE_sensitive_ops.txt").is_file()


def test_output_folder_never_overwrites_user_files(tmp_path):
    base, qat = models()
    out = tmp_path / "p"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(QcdoctorError, match="did not write"):
        compare_models(base, qat, EXAMPLE, out, sensitivity=False)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_second_run_replaces_the_first(tmp_path):
    base, qat = models()
    out = tmp_path / "p"
    compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
    compare_models(base, qat, EXAMPLE, out, names=["c", "d"], metric="Cosine")
    names = sorted(p.name for p in out.iterdir())
    # exactly the second run's files, each listed in its manifest (the first run's gone)
    assert names == ["compare_per_layer_out.csv", "compare_per_layer_out.txt",
                     "layer_calls.csv", "layer_own_error.csv",
                     "output_c_Cosine_sensitive_ops.pt", "output_c_Cosine_sensitive_ops.txt",
                     "output_d_Cosine_sensitive_ops.pt", "output_d_Cosine_sensitive_ops.txt",
                     "probe_run.yaml"]
    listed = yaml.safe_load((out / "probe_run.yaml").read_text(encoding="utf-8"))["files"]
    assert sorted(listed + ["probe_run.yaml"]) == names
    rows = load_sensitivity(out / "output_c_Cosine_sensitive_ops.txt").rows
    assert [r.value for r in rows] == sorted(r.value for r in rows)       # worst first


@pytest.mark.parametrize("bad, match", [({"metric": "l2"}, "unknown metric"),
                                        ({"analysis_model_type": "calib"}, "analysis_model_type"),
                                        ({"names": ["only_one"]}, "output name")])
def test_bad_arguments_are_one_clear_error(tmp_path, bad, match):
    base, qat = models()
    with pytest.raises(QcdoctorError, match=match):
        compare_models(base, qat, EXAMPLE, tmp_path / "p", **bad)


def _case(tmp_path, folder="qa_probe", **extra):
    case = tmp_path / "case"
    case_yaml(case, stages={"float": {"status": "normal"}, "calib": {"status": "abnormal"}},
              **extra)
    base, qat = models()
    compare_models(base, qat, EXAMPLE, case / folder, sensitivity=False,
                   analysis_model_type="pre_export")
    return case


def _qa_folder(case):
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    return report, next(f for f in report["facts"] if f["type"] == "qa_folder")


def test_triage_says_where_the_numbers_came_from(tmp_path):
    report, folder = _qa_folder(_case(tmp_path))
    assert (folder["origin"], folder["known_from"], folder["comparison"]) == \
        ("probe", "probe", "pre_export")
    assert (folder["baseline"], folder["analysis_stage"]) == ("qat", "qat_export")
    assert "measured by qcdoctor probe with torch forward hooks" in render(report, "md")
    zh = triage_case(load_case(tmp_path / "case"), lang="zh", environ={}, installed={},
                     cwd=tmp_path / "case")
    assert "这些数字由 qcdoctor probe 用 torch 前向钩子测得" in render(zh, "md")


def test_a_qat_model_against_a_float_one_is_named_qat_never_calib(tmp_path):
    """knowledge.md §17 R4.4: the stages given are the ones probe_run.yaml and the report
    name; without them a fake_quant probe keeps the type's float vs calib."""
    case = tmp_path / "case"
    case_yaml(case, stages={"float": {"status": "normal"}, "qat": {"status": "abnormal"}})
    base, qat = models()
    result = compare_models(base, qat, EXAMPLE, case / "qa_probe", sensitivity=False,
                            stages=("float", "qat"))
    assert result.stages == ("float", "qat")
    manifest = yaml.safe_load((case / "qa_probe" / "probe_run.yaml").read_text("utf-8"))
    assert (manifest["type"], manifest["baseline"], manifest["analysis"]) == \
        ("fake_quant", "float", "qat")
    report, folder = _qa_folder(case)
    assert (folder["baseline"], folder["analysis_stage"]) == ("float", "qat")
    text = render(report, "md")
    assert "`qa_probe` (fake_quant: float.pt vs qat.pt;" in text
    assert "float.pt vs calib.pt" not in text
    plain = compare_models(base, qat, EXAMPLE, tmp_path / "plain", sensitivity=False)
    assert plain.stages == ("float", "calib")


@pytest.mark.parametrize("stages", [("float", "qat_bc"), ("qat", "float"), ("float",), "qat"])
def test_stages_that_name_no_comparison_of_the_type_are_refused(tmp_path, stages):
    base, qat = models()
    with pytest.raises(QcdoctorError, match="do not name a fake_quant comparison") as caught:
        compare_models(base, qat, EXAMPLE, tmp_path / "p", stages=stages)
    assert "float,qat" in caught.value.fix and not (tmp_path / "p").exists()


def test_analyses_run_entry_names_the_probe(tmp_path):
    case = _case(tmp_path, folder="layers", analyses_run=[
        {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
         "out_dir": "layers", "origin": "probe"}])
    (case / "layers" / "probe_run.yaml").unlink()
    _, folder = _qa_folder(case)
    assert (folder["origin"], folder["known_from"], folder["comparison"]) == \
        ("probe", "analyses_run", "convert")


def test_a_probe_folder_by_name_alone(tmp_path):
    case = _case(tmp_path, folder="my_probe")
    (case / "my_probe" / "probe_run.yaml").unlink()
    # float modules against torch.ao qat ones: the content tells fake_quant
    _, folder = _qa_folder(case)
    assert (folder["origin"], folder["known_from"], folder["comparison"]) == \
        ("probe", "content", "fake_quant")


def test_a_damaged_manifest_is_reported_not_fatal(tmp_path):
    case = _case(tmp_path)
    (case / "qa_probe" / "probe_run.yaml").write_text("origin: probe\ntype: nonsense\n",
                                                      encoding="utf-8")
    report, folder = _qa_folder(case)
    problems = [f for f in report["facts"] if f["type"] == "artifact_problem"]
    assert any(p["file"] == "qa_probe/probe_run.yaml" and "nonsense" in p["problem"]
               for p in problems)
    assert folder["known_from"] == "content" and folder["origin"] == "probe"


def test_a_hostile_manifest_meets_the_case_file_limits(tmp_path):
    """probe_run.yaml comes from someone's folder: an alias bomb is refused by the bounded
    loader (a problem naming the file), never expanded; the probe's own check of an output
    folder holding it treats it as foreign, not as ours."""
    case = _case(tmp_path)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
    (case / "qa_probe" / "probe_run.yaml").write_text(bomb, encoding="utf-8")
    report, folder = _qa_folder(case)
    problems = [f for f in report["facts"] if f["type"] == "artifact_problem"
                and f["file"] == "qa_probe/probe_run.yaml"]
    assert problems and "alias" in problems[0]["problem"].lower()
    assert folder["known_from"] == "content"
    from qcdoctor.errors import QcdoctorError
    from qcdoctor.probe.compare import _check_out_dir
    with pytest.raises(QcdoctorError, match="did not write"):
        _check_out_dir(case / "qa_probe")


MODELS_PY = '''
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def build_rounded():
    model = build()
    with torch.no_grad():
        model[0].weight.copy_(torch.round(model[0].weight * 8) / 8)
    return model


not_a_model = 3
'''


def _cli_case(tmp_path, monkeypatch, name):
    (tmp_path / f"{name}.py").write_text(MODELS_PY, encoding="utf-8")
    torch.save(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), tmp_path / "in.pt")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("options, analysis, lang, first", [
    ([], "build_rounded", "en",
     "compared float.pt (--baseline) with calib.pt (--analysis): the fake_quant probe's "
     "default pair; if the analysis model is another stage, give --stages"),
    ([], "build_qat_rounded", "en",
     "compared float.pt (--baseline) with qat.pt (--analysis): assumed because --analysis "
     "names qat; give --stages float,calib if it is another stage"),
    (["--stages", "calib,qat"], "build_rounded", "en",
     "compared calib.pt (--baseline) with qat.pt (--analysis), as --stages gives"),
    ([], "build_rounded", "zh", "对比 float.pt（--baseline）与 calib.pt（--analysis）：fake_quant "
                                "探查的默认阶段对"),
])
def test_cli_probe_says_first_which_stages_it_compared(tmp_path, monkeypatch, capsys, options,
                                                       analysis, lang, first):
    from qcdoctor.engine.commands.cli import main
    name = f"cli_models_stages_{len(options)}_{analysis}_{lang}"
    _cli_case(tmp_path, monkeypatch, name)
    (tmp_path / f"{name}.py").write_text(MODELS_PY + "\nbuild_qat_rounded = build_rounded\n",
                                         encoding="utf-8")
    code = main(["probe", "--baseline", f"{name}:build", "--analysis", f"{name}:{analysis}",
                 "--inputs", "in.pt", "--out", "qa_probe", "--no-sensitivity", "--lang", lang,
                 *options])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines()[0].startswith(first), out
    manifest = yaml.safe_load((tmp_path / "qa_probe" / "probe_run.yaml").read_text("utf-8"))
    baseline, analysis = re.findall(r"[a-z_]+\.pt", first)
    assert (baseline, analysis) == (f"{manifest['baseline']}.pt", f"{manifest['analysis']}.pt")


def test_cli_probe_writes_the_folder(tmp_path, monkeypatch, capsys):
    from qcdoctor.engine.commands.cli import main
    _cli_case(tmp_path, monkeypatch, "cli_models_ok")
    code = main(["probe", "--baseline", "cli_models_ok:build", "--analysis",
                 "cli_models_ok:build_rounded", "--inputs", "in.pt", "--out", "qa_probe",
                 "--no-sensitivity", "--lang", "en", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and "compared 3 layer outputs; written to qa_probe" in out
    assert "next: put qa_probe in the case folder" in out      # no case.yaml around it
    table = load_compare(tmp_path / "qa_probe" / "compare_per_layer_out.txt")
    assert [s.strip() for s in table.frame["mod_name"]] == ["0", "1", "2"]
    assert table.frame["cosine"].iat[0] < 1.0
    assert not list((tmp_path / "qa_probe").glob("output_*"))


def test_cli_probe_inside_a_case_folder_says_to_triage_it(tmp_path, monkeypatch, capsys):
    from qcdoctor.engine.commands.cli import main
    _cli_case(tmp_path, monkeypatch, "cli_models_in_case")
    case_yaml(tmp_path / "pcase")
    code = main(["probe", "--baseline", "cli_models_in_case:build", "--analysis",
                 "cli_models_in_case:build_rounded", "--inputs", "in.pt", "--out",
                 "pcase/qa_probe", "--no-sensitivity", "--lang", "en"])
    out = capsys.readouterr().out
    assert code == 0 and "next: run qcdoctor triage pcase (the outputs are in that case " \
        "folder already)" in out and "put pcase/qa_probe" not in out


@pytest.mark.parametrize("extra, stages", [
    ([], ("float", "calib")),
    (["--stages", "float,qat"], ("float", "qat")),
    ([], ("float", "qat")),                 # --analysis names qat: models:qat_model
])
def test_cli_probe_names_the_stages(tmp_path, monkeypatch, capsys, extra, stages):
    from qcdoctor.engine.commands.cli import main
    module = f"cli_models_stages_{len(extra)}_{stages[1]}"     # imported once a name
    _cli_case(tmp_path, monkeypatch, module)
    analysis = f"{module}:build_rounded"
    if not extra and stages[1] == "qat":
        (tmp_path / f"{module}.py").write_text(
            MODELS_PY + "\nqat_model = build_rounded\n", encoding="utf-8")
        analysis = f"{module}:qat_model"
    code = main(["probe", "--baseline", f"{module}:build", "--analysis", analysis,
                 "--inputs", "in.pt", "--out", "qa_probe", "--no-sensitivity", *extra])
    assert code == 0, capsys.readouterr().err
    manifest = yaml.safe_load((tmp_path / "qa_probe" / "probe_run.yaml").read_text("utf-8"))
    assert (manifest["baseline"], manifest["analysis"]) == stages


@pytest.mark.parametrize("args, message", [
    (["--stages", "float,board"], "--stages"),
    (["--baseline", "cli_models_bad:missing"], "has no missing"),
    (["--baseline", "cli_models_bad:not_a_model"], "not a torch nn.Module"),
    (["--baseline", "no_such_module_here:build"], "cannot import"),
    (["--baseline", "cli_models_bad"], "is not MOD:ATTR"),
    (["--inputs", "missing.pt"], "file not found"),
    (["--inputs", "bad.pt"], "cannot load the inputs"),
])
def test_cli_probe_bad_input_is_one_clear_error(tmp_path, monkeypatch, capsys, args, message):
    from qcdoctor.engine.commands.cli import main
    _cli_case(tmp_path, monkeypatch, "cli_models_bad")
    torch.save({"model": nn.Linear(1, 1)}, tmp_path / "bad.pt")      # needs full unpickling
    given = {"--baseline": "cli_models_bad:build", "--analysis": "cli_models_bad:build",
             "--inputs": "in.pt", "--out": "out"}
    given.update(dict(zip(args[::2], args[1::2], strict=True)))
    code = main(["probe", *[x for pair in given.items() for x in pair]])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_shape_mismatch_is_a_row_without_metrics(tmp_path):
    from qcdoctor.collectors.reading.compare_layers import read_layers
    torch.manual_seed(0)
    base, analysis = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(4, 6))
    with pytest.warns(ProbeWarning, match="no layer-by-layer comparison"):
        result = compare_models(base, analysis, torch.randn(2, 4), tmp_path / "p",
                                sensitivity=False)
    assert result.rows[0]["shape"] == "mismatch shape" and "cosine" not in result.rows[0]
    manifest = (tmp_path / "p" / "probe_run.yaml").read_text(encoding="utf-8")
    assert "mostly_unmatched: true" in manifest and "no layer-by-layer" in manifest
    reading = read_layers(load_compare(tmp_path / "p" / "compare_per_layer_out.txt"))
    assert reading.mismatch_rows == 1 and reading.compared == 0
    with pytest.raises(QcdoctorError, match="differ in number or shape"):
        compare_models(base, analysis, torch.randn(2, 4), tmp_path / "q")


def test_a_result_shows_itself_in_a_notebook(tmp_path, monkeypatch):
    """_repr_html_: the summary and the per-layer chart a triage of the folder draws, as SVG
    with no script or link; _repr_markdown_ the summary alone; in the locale's language."""
    import re
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    base, qat = models()
    result = compare_models(base, qat, EXAMPLE, tmp_path / "probe", sensitivity=False)
    shown = result._repr_html_()
    assert shown.startswith('<div class="qcdoctor-probe"><p>compared 6 layer outputs')
    assert shown.count("<svg") == 1 and "<script" not in shown and "http" not in re.sub(
        r'xmlns(:xlink)?="[^"]*"|"http://www.w3.org/[^"]*"', "", shown)
    assert "compare_per_layer_out.csv" in shown          # the chart's title names its table
    assert result._repr_markdown_().startswith("compared 6 layer outputs")
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert "已比较 6 个层输出" in result._repr_html_()
