"""The probe compares like with like (knowledge.md R3.12): fused analysis modules against
the end of the same float pattern, function nodes by their module path, rows without a
counterpart flagged and never read as error, replaced quantizers still reported, the
graph written for the graph-aware reading, tables free of None and <class ...> text, and
model outputs the model changes in place read as they were."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.collectors.qa_files import load_probe_manifest  # noqa: E402
from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers  # noqa: E402
from qcdoctor.collectors.reading.fx_graph import load_graph  # noqa: E402
from qcdoctor.probe import ProbeWarning, compare_models  # noqa: E402
from tests.paths import REPO  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    ToyNet,
    observer_of,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
    toy,
)

EXAMPLE = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
EXACT = 1 - 1e-9            # the same computation in another order of operations



@pytest.fixture(scope="module")
def models():
    """(unfused float ToyNet, fuse_fx float copy, calibrated FX QAT copy)."""
    float_model = toy()
    fused, qat = quantize(float_model, EXAMPLE)
    return float_model, fused, qat


def without_fake_quant(qat):
    from torch.ao.quantization import disable_fake_quant
    copied = copy.deepcopy(qat)
    copied.apply(disable_fake_quant)
    return copied


def probe(tmp_path, baseline, analysis, name="p", **options):
    options.setdefault("sensitivity", False)
    result = compare_models(baseline, analysis, EXAMPLE, tmp_path / name, **options)
    return result, {row["mod_name"]: row for row in result.rows}


def manifest(tmp_path, name="p"):
    return load_probe_manifest(tmp_path / name / "probe_run.yaml")


def test_fused_modules_are_compared_with_the_end_of_the_float_pattern(tmp_path, models):
    float_model, _, qat = models
    # fake quant off: the QAT model computes what the float one does, fused or not, so
    # every aligned row is the same computation (unaligned, the conv of conv-bn-relu
    # against the float conv before BN and ReLU gave Cosine 0.45-0.77)
    result, rows = probe(tmp_path, float_model, without_fake_quant(qat))
    assert all(r["cosine"] >= EXACT for r in result.rows), \
        [(r["mod_name"], r["cosine"]) for r in result.rows]
    expected = {"stem": "stem_relu", "block.conv1": "block.relu1", "block.conv2": "block.bn2",
                "fc": "fc_relu"}
    assert result.aligned == expected
    for name, end in expected.items():
        row = rows[name]
        assert (row["match"], row["base_mod_name"]) == ("pattern_end", end)
        assert row["analy_op_type"].startswith("torch.ao.nn.intrinsic.qat.")
    assert rows["stem"]["base_op_type"] == "torch.nn.modules.activation.ReLU"
    assert not result.baseline_only and not result.analysis_only and not result.unaligned
    assert result.matched_share == 1.0 and not result.warnings
    # the float outputs inside those patterns were used (absorbed), not left unmatched
    assert {"stem", "stem_bn", "block.conv1", "block.bn1", "block.conv2", "fc"} <= \
        set(result.absorbed)
    written = manifest(tmp_path)
    assert written["alignment"]["pattern_end"] == expected
    assert written["unmatched"] == {"baseline_only": [], "analysis_only": []}
    assert written["mostly_unmatched"] is False and written["matched_share"] == 1.0
    # with fake quant on: 8-bit noise on every row, none at 0.45-0.77 as unaligned
    quantized, _ = probe(tmp_path, float_model, qat, name="q")
    assert min(r["cosine"] for r in quantized.rows) > 0.98


def test_a_baseline_fused_the_same_way_matches_by_name(tmp_path, models):
    _, fused, qat = models
    result, rows = probe(tmp_path, fused, without_fake_quant(qat))
    assert {r["match"] for r in result.rows} == {"name"} and not result.aligned
    assert all(r["cosine"] >= EXACT for r in result.rows)
    assert rows["stem"]["base_op_type"] == "torch.ao.nn.intrinsic.modules.fused.ConvReLU2d"


def test_eager_fused_qat_aligns_and_its_identity_placeholders_give_no_rows(tmp_path):
    from torch.ao.quantization import (
        disable_fake_quant,
        fuse_modules_qat,
        get_default_qat_qconfig,
        prepare_qat,
    )
    float_model = toy()
    qat = copy.deepcopy(float_model).train()
    fuse_modules_qat(qat, [["stem", "stem_bn", "stem_relu"],
                           ["block.conv1", "block.bn1", "block.relu1"],
                           ["block.conv2", "block.bn2"], ["fc", "fc_relu"]], inplace=True)
    qat.qconfig = get_default_qat_qconfig("qnnpack")
    prepare_qat(qat, inplace=True)
    qat.eval()
    with torch.no_grad():
        qat(EXAMPLE)
    qat.apply(disable_fake_quant)
    result, rows = probe(tmp_path, float_model, qat)
    assert all(r["cosine"] >= EXACT for r in result.rows)
    assert result.aligned == {"stem": "stem_relu", "block.conv1": "block.relu1",
                              "block.conv2": "block.bn2", "fc": "fc_relu"}
    assert not {"stem_bn", "stem_relu", "block.bn1", "fc_relu"} & set(rows)   # Identity
    assert not result.analysis_only and not result.baseline_only


def test_rows_without_a_counterpart_are_flagged_and_never_read(tmp_path, models):
    """The float model itself against a fuse_fx baseline (BN folded into the convs):
    a conv before its BN and ReLU has no counterpart (unaligned), a conv before its BN
    is inside a pattern the baseline computes as one op (fused intermediate); both rows
    keep their ranges and leave the metrics empty, as the profiler writes fused
    intermediates."""
    float_model, fused, _ = models
    result, rows = probe(tmp_path, fused, float_model)
    assert result.unaligned == ["stem", "block.conv1", "fc"]
    assert result.fused_intermediates == ["block.conv2"]
    assert {n: rows[n]["match"] for n in ("stem", "block.conv2", "block.bn2")} == \
        {"stem": "unaligned", "block.conv2": "fused_intermediate", "block.bn2": "pattern_end"}
    assert rows["block.bn2"]["base_mod_name"] == "block.conv2"
    assert all(r["cosine"] >= EXACT for r in result.rows if "cosine" in r)
    layers = load_compare(tmp_path / "p" / "compare_per_layer_out.txt")
    frame = layers.frame
    flagged = [s.strip() in ("stem", "block.conv1", "block.conv2", "fc")
               for s in frame["mod_name"]]
    assert all(math.isnan(c) for c, f in zip(frame["cosine"], flagged, strict=True) if f)
    assert not any(math.isnan(v) for v, f in zip(frame["analy_model_max"], flagged,
                                                  strict=True) if f)
    reading = read_layers(layers)
    assert reading.origin is None and reading.compared == len(frame) - 4
    csv = (tmp_path / "p" / "compare_per_layer_out.csv").read_text(encoding="utf-8")
    assert "unaligned" in csv and "fused_intermediate" in csv
    written = manifest(tmp_path)["alignment"]
    assert written["unaligned"] == ["stem", "block.conv1", "fc"]
    assert written["fused_intermediates"] == ["block.conv2"]


class Renamed(nn.Module):
    """ToyNet's computation under other module names."""

    def __init__(self, source: ToyNet):
        super().__init__()
        self.a = nn.Sequential(source.stem, source.stem_bn, source.stem_relu)
        self.b = source.block
        self.c = nn.Sequential(source.pool, nn.Flatten(), source.fc, source.fc_relu, source.head)

    def forward(self, x):
        return self.c(self.b(self.a(x)))


def test_mostly_unmatched_is_said_not_tabled_as_a_reading(tmp_path, models):
    float_model, _, qat = models
    with pytest.warns(ProbeWarning, match="no layer-by-layer comparison"):
        result, _ = probe(tmp_path, Renamed(copy.deepcopy(float_model)), qat)
    assert result.mostly_unmatched and result.matched_share < 0.5
    written = manifest(tmp_path)
    assert written["mostly_unmatched"] is True and written["warnings"] == result.warnings
    assert "stem" in written["unmatched"]["analysis_only"]


MODELS_PY = '''
import torch
from tests.probe_nets import ToyNet, quantize, toy
from tests.probe.test_probe_alignment import EXAMPLE, Renamed


def float_model():
    return toy()


def renamed():
    return Renamed(toy())


def qat():
    return quantize(toy(), EXAMPLE)[1]
'''


def test_the_cli_prints_the_warning(tmp_path):
    root = REPO
    (tmp_path / "toy_models.py").write_text(MODELS_PY, encoding="utf-8")
    torch.save(EXAMPLE, tmp_path / "in.pt")
    done = subprocess.run(
        [sys.executable, "-m", "qcdoctor", "probe", "--baseline", "toy_models:renamed",
         "--analysis", "toy_models:qat", "--inputs", "in.pt", "--out", "out",
         "--no-sensitivity", "--lang", "en"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path) + ":" + str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no layer-by-layer comparison" in done.stderr
    assert "mostly_unmatched: true" in (tmp_path / "out" / "probe_run.yaml").read_text()


def test_function_nodes_are_named_by_their_module_path(tmp_path, models):
    float_model, _, qat = models
    result, rows = probe(tmp_path, float_model, qat, sensitivity=True)
    for name, analysis_type, base_type in (("block.add", "operator.add", "torch.Tensor.add"),
                                           ("block.mul", "operator.mul", "torch.Tensor.mul"),
                                           ("block.cat", "torch.cat", "torch.cat")):
        row = rows[name]
        assert (row["analy_op_type"], row["base_op_type"]) == (analysis_type, base_type)
        assert row["match"] == "name" and row["cosine"] > 0.98 and row["quant_dtype"]
    assert not any(n.startswith(("add", "mul", "cat")) for n in rows)     # no FX names
    # the sensitivity rows name a function node's fake quant the same way
    assert "block.add" in {r[0] for r in result.sensitivity["0"]}


class OwnQuantizer(nn.Module):
    """Another toolkit's fake quant (no torch.ao base class), 8-bit unsigned."""

    def __init__(self, scale: float, zero_point: int):
        super().__init__()
        self.scale, self.zero_point = scale, zero_point
        self.quant_min, self.quant_max, self.dtype = 0, 255, torch.quint8

    def forward(self, x):
        return torch.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point, 0, 255)


def test_a_replaced_quantizer_still_gives_its_row(tmp_path, models):
    float_model, _, qat = models
    analysis = copy.deepcopy(qat)
    setattr(analysis, observer_of(analysis, "block.conv1"), nn.Identity())
    add = next(n for n in analysis.graph.nodes if n.op == "call_function"
               and n.target.__name__ == "add")
    setattr(analysis, observer_of(analysis, add), OwnQuantizer(0.05, 128))
    _, rows = probe(tmp_path, float_model, analysis)
    identity, own = rows["block.conv1"], rows["block.add"]
    assert identity["quant_dtype"] is None and identity["qscale"] is None
    assert identity["cosine"] > 0.99                      # no quantization there now
    assert (own["quant_dtype"], own["qscale"]) == ("quint8", 0.05)
    assert not {n for n in rows if "activation_post_process" in n}
    # eager: a replaced activation_post_process is still the layer's, not a layer
    from torch.ao.quantization import get_default_qat_qconfig, prepare_qat
    eager = copy.deepcopy(float_model).train()
    eager.qconfig = get_default_qat_qconfig("qnnpack")
    prepare_qat(eager, inplace=True)
    eager.eval()
    eager.stem.activation_post_process = nn.Identity()
    _, rows = probe(tmp_path, float_model, eager, name="eager")
    assert "stem" in rows and "stem.activation_post_process" not in rows


def test_the_graph_is_written_for_the_graph_aware_reading(tmp_path, models):
    float_model, _, qat = models
    result, _ = probe(tmp_path, float_model, qat)
    path = tmp_path / "p" / "fx_graph.txt"
    # the data flow is layer_calls.csv's; fx_graph.txt is still written for a traced model
    assert path in result.files and manifest(tmp_path)["graph"] == "layer_calls.csv"
    assert "fx_graph.txt" in manifest(tmp_path)["files"]
    graph, _ = load_graph(path)
    assert graph.node_for_layer("block.conv1") == "block_conv1"
    assert graph.node_for_layer("x") == "x"
    conv = graph.producers["block_conv2"]
    assert conv and conv[0].startswith("activation_post_process")  # the data flow
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "Graph:" and lines[1].split() == ["opcode", "name", "target", "args",
                                                         "kwargs", "mod_name"]
    add = next(line for line in lines if line.startswith("call_function") and " add " in line)
    assert add.rstrip().endswith("block.add")             # the row that node reports as
    # no traced model on either side: no fx_graph.txt, the data flow in layer_calls.csv
    eager, _ = probe(tmp_path, float_model, copy.deepcopy(float_model), name="eager")
    assert not (tmp_path / "eager" / "fx_graph.txt").exists()
    assert manifest(tmp_path, "eager")["graph"] == "layer_calls.csv"


def test_tables_hold_no_none_or_class_text(tmp_path, models):
    float_model, _, qat = models
    probe(tmp_path, float_model, qat)                      # unquantized rows: no dtype
    for name in ("compare_per_layer_out.csv", "compare_per_layer_out.txt"):
        text = (tmp_path / "p" / name).read_text(encoding="utf-8")
        assert "None" not in text and "<class" not in text, name
        assert not load_compare(tmp_path / "p" / name).table.problems


class InPlace(nn.Module):
    """Outputs the model changes in place after they were reported: BN before an
    in-place ReLU, a product before ``+=``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.scale = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        z = self.scale(y)
        z += 1.0
        return z.relu_()


@pytest.mark.parametrize("threads", [1, 2])
def test_outputs_changed_in_place_are_read_as_they_were(tmp_path, monkeypatch, threads):
    monkeypatch.setattr("os.cpu_count", lambda: threads)   # worker thread or not
    torch.manual_seed(0)
    model = InPlace().eval()
    with torch.no_grad():
        model.bn.running_mean.fill_(0.3)
    with torch.no_grad():
        expected_min = float(model.bn(model.conv(EXAMPLE)).min())
    assert expected_min < 0
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    for name, analysis in (("eager", copy.deepcopy(model)), ("traced", traced)):
        result, rows = probe(tmp_path, model, analysis, name=name)
        assert rows["bn"]["base_model_min"] == pytest.approx(expected_min, rel=1e-5), name
        assert rows["bn"]["analy_model_min"] == pytest.approx(expected_min, rel=1e-5), name
        assert rows["scale"]["base_model_min"] < 1.0 + rows["scale"]["base_model_max"]
        assert all(r["cosine"] >= EXACT for r in result.rows), name
        assert not result.changed_in_place and not result.warnings, name


def test_a_long_manifest_stays_within_the_case_file_limits(tmp_path):
    """1,100 unmatched layers: probe_run.yaml lists 500 of each and counts them all, so
    it reads back through the bounded loader and a second run may replace the folder."""
    torch.manual_seed(0)
    base = nn.Sequential(*[nn.Linear(2, 2) for _ in range(1100)])
    analysis = nn.Sequential(nn.Sequential(*[nn.Linear(2, 2) for _ in range(1100)]))
    for _ in range(2):
        with pytest.warns(ProbeWarning):
            compare_models(base, analysis, torch.randn(1, 2), tmp_path / "p", sensitivity=False)
    written = manifest(tmp_path)
    assert len(written["unmatched"]["analysis_only"]) == 500
    assert written["counts"]["analysis_only"] == written["counts"]["baseline_only"] == 1100


def test_rows_measured_on_the_worker_thread_equal_the_rows_measured_inline(
        tmp_path, models, monkeypatch):
    """Large rows are measured on a worker thread while the models run on; the small
    inputs of the tests never reach it, so every row is sent there once here."""
    from qcdoctor.probe import rows
    float_model, _, qat = models
    inline, _ = probe(tmp_path, float_model, qat, name="inline")
    monkeypatch.setattr(rows.RowMaker, "INLINE", 0)
    monkeypatch.setattr(rows.os, "cpu_count", lambda: 2)    # a worker even on one CPU
    threaded, _ = probe(tmp_path, float_model, qat, name="threaded")
    assert [r["mod_name"] for r in threaded.rows] == [r["mod_name"] for r in inline.rows]
    for a, b in zip(inline.rows, threaded.rows, strict=True):
        for key, value in a.items():
            other = b[key]
            same = (value == other or (isinstance(value, float) and math.isnan(value)
                                       and math.isnan(other)))
            assert same, (a["mod_name"], key, value, other)
    assert (tmp_path / "inline" / "compare_per_layer_out.csv").read_bytes() == \
        (tmp_path / "threaded" / "compare_per_layer_out.csv").read_bytes()
