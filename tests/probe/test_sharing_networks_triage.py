"""What real networks do, read end to end (knowledge.md §18 R5.1-R5.5): the probe's folder
triaged as a user's case, one planted fault each, torch.ao FX and eager QAT models built
here (random weights, seconds each). A module called twice, a head shared by two levels,
a quantizer shared by a conv and its ReLU6 or by a pool and its input, keyword-argument
edges, a concat of 70 branches, an eager ResNet, post-processing inside the model: each
reads one origin at the planted quantizer or weight, of its kind, or says borderline.

Each case is read through ``triage_path`` (the command's own reading, from files alone),
and its report rendered in every format and both languages."""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.engine.reports.formats import render_output  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe.test_graph_reading_real_networks import Clamp  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    eager_qat,
    fixed_quantizer,
    inject,
    observer_of,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
)


def _input(size: int = 16, seed: int = 7) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())


def _built(model: nn.Module, size: int = 16):
    torch.manual_seed(0)
    return quantize(model.eval(), _input(size))


def triaged(tmp_path, baseline, analysis, inputs, **options) -> tuple[dict, dict]:
    """(the English report, facts by type) of a case holding the probe's folder; every
    format rendered in both languages on the way."""
    case = tmp_path / "case"
    compare_models(baseline, analysis, inputs, case / "qa_probe", sensitivity=False,
                   **options)
    report, facts = triaged_case(case, "accuracy drops after QAT")
    return report, facts


def one_origin(facts: dict) -> dict:
    origins = facts.get("layer_origin", [])
    assert len(origins) == 1, origins
    return origins[0]


def origin_kind(facts: dict) -> str:
    kinds = [k for k in facts.get("error_kind", []) if k["order"] == 1]
    return kinds[0]["kind"] if kinds else ""


def assert_single_source(facts: dict, layer: str, kinds: set[str]):
    origin = one_origin(facts)
    assert origin["layer"] == layer, (origin["layer"], origin.get("second_layer"),
                                      origin["pattern"], origin.get("fired"))
    if not origin.get("borderline"):
        assert not origin.get("second_layer"), origin
    assert origin_kind(facts) in kinds, facts.get("error_kind")


# --- a module called twice ---------------------------------------------------------------

class UNetish(nn.Module):
    """Encoder levels 1 and 2 share one MaxPool2d module; a ReLU6 module reused after both
    decoder convs (two calls, in eager mode one quantizer)."""

    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.mid = _conv(3, 8), _conv(8, 8), _conv(8, 8)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2)
        self.dec2, self.dec1 = nn.Conv2d(16, 8, 3, padding=1), nn.Conv2d(16, 8, 3, padding=1)
        self.act = nn.ReLU6()
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.act(self.dec2(torch.cat([self.up(m), e2], 1)))
        d1 = self.act(self.dec1(torch.cat([self.up(d2), e1], 1)))
        return self.out(d1)


def _node(qat, target: str, call: int):
    return [n for n in qat.graph.nodes if n.op == "call_module" and n.target == target][call]


@pytest.mark.parametrize("where, layer", [
    ("before", "enc1.0"),           # before the pool's first call
    ("between", "enc2.0"),          # between its two calls
    ("after", "mid.0"),             # after the second call
])
def test_a_pool_called_twice_reads_one_origin_at_the_faulty_conv(tmp_path, where, layer):
    baseline, qat = _built(UNetish())
    faulty = inject(qat, _node(qat, layer, 0), scale_factor=0.2)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    assert_single_source(facts, layer, {"truncation"})
    rows = (tmp_path / "case/qa_probe/compare_per_layer_out.csv").read_text()
    assert "pool(1)" in rows                 # the pool's second call is its own row


def test_the_second_call_of_a_reused_activation_is_the_origin(tmp_path):
    baseline, qat = _built(UNetish())
    second = _node(qat, "act", 1)
    faulty = inject(qat, second, scale_factor=0.15)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    assert_single_source(facts, "act(1)", {"truncation"})
    own = (tmp_path / "case/qa_probe/layer_own_error.csv").read_text()
    assert "act(1)" in own                   # the second call measured on its own inputs


# --- a head shared by two pyramid levels --------------------------------------------------

class SharedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.down = _conv(3, 8), nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.head = nn.Conv2d(8, 6, 1)

    def forward(self, x):
        a = self.stem(x)
        b = self.down(a)
        return self.head(a), self.head(b)


def test_a_head_shared_by_two_levels_with_the_fault_in_its_second_call(tmp_path):
    baseline, qat = _built(SharedHead())
    faulty = inject(qat, _node(qat, "head", 1), scale_factor=0.2)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    assert_single_source(facts, "head(1)", {"truncation"})
    own = [line.split(",")[0] for line in
           (tmp_path / "case/qa_probe/layer_own_error.csv").read_text().splitlines()[1:]]
    assert {"head", "head(1)"} <= set(own)


# --- shared quantizers --------------------------------------------------------------------

class ConvReLU6Pool(nn.Module):
    """conv -> ReLU6 -> pool -> flatten -> fc: torch.ao gives the conv, the ReLU6, the pool
    and the flatten one output quantizer."""

    def __init__(self):
        super().__init__()
        self.stem = _conv(3, 8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.activ = nn.ReLU6()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = self.pool(self.activ(self.conv2(self.stem(x))))
        return self.fc(torch.flatten(y, 1))


def test_a_quantizer_shared_by_a_conv_and_its_relu6_is_one_source(tmp_path):
    baseline, qat = _built(ConvReLU6Pool())
    faulty = copy.deepcopy(qat)
    name = observer_of(faulty, "conv2")
    shared = getattr(faulty, name)
    assert sum(m is shared for _, m in faulty.named_modules(remove_duplicate=False)) >= 3
    clamp = Clamp(0.3 * float(baseline(_input()).abs().max()) + 0.05)
    # every slot holding that quantizer object gets the clamp: still one quantizer
    for node in faulty.graph.nodes:
        if node.op == "call_module" and faulty.get_submodule(node.target) is shared:
            setattr(faulty, node.target, clamp)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    origin = one_origin(facts)
    assert origin["layer"] == "conv2" and not origin.get("second_layer"), origin
    calls = (tmp_path / "case/qa_probe/layer_calls.csv").read_text()
    assert "activ" in calls and "pool" in calls


# --- keyword-argument edges and a wide concat -----------------------------------------------

class KeywordAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.a, self.b = _conv(3, 8), _conv(8, 8), _conv(8, 8)
        self.tail = _conv(8, 8)

    def forward(self, x):
        s = self.stem(x)
        return self.tail(torch.add(input=self.a(s), other=self.b(s)))


def test_keyword_argument_edges_are_read(tmp_path):
    baseline, qat = _built(KeywordAdd())
    faulty = inject(qat, _node(qat, "b.0", 0), scale_factor=0.2)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    assert_single_source(facts, "b.0", {"truncation"})


class WideConcat(nn.Module):
    def __init__(self, branches: int = 70):
        super().__init__()
        self.stem = _conv(3, 4)
        self.branches = nn.ModuleList(nn.Conv2d(4, 1, 1) for _ in range(branches))
        self.fuse = nn.Conv2d(branches, 4, 1)

    def forward(self, x):
        s = self.stem(x)
        return self.fuse(torch.cat([b(s) for b in self.branches], 1))


def test_a_concat_of_70_branches_reads_the_faulty_branch(tmp_path):
    baseline, qat = _built(WideConcat(), size=8)
    faulty = inject(qat, _node(qat, "branches.68", 0), scale_factor=0.1)
    report, facts = triaged(tmp_path, qat, faulty, _input(8))
    assert_single_source(facts, "branches.68", {"truncation"})


# --- an eager ResNet ----------------------------------------------------------------------

class EagerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        from torch.ao.quantization import QuantStub
        self.quant = QuantStub()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.shortcut = nn.Conv2d(3, 8, 1)
        self.relu = nn.ReLU()
        self.add = torch.ao.nn.quantized.FloatFunctional()
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = self.quant(x)
        y = self.conv2(self.relu(self.conv1(x)))
        return self.head(self.add.add(y, self.shortcut(x)))


def test_an_eager_resnet_reads_by_its_data_flow(tmp_path):
    torch.manual_seed(0)
    model = EagerBlock().eval()
    qat = eager_qat(model)
    faulty = copy.deepcopy(qat)
    calibrated = faulty.conv2.activation_post_process
    faulty.conv2.activation_post_process = fixed_quantizer(calibrated, scale_factor=1 / 50)
    inputs = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    report, facts = triaged(tmp_path, qat, faulty, inputs)
    assert_single_source(facts, "conv2", {"truncation"})
    origin = one_origin(facts)
    assert origin["reading"] == "graph"      # the probe's recorded data flow, not row order


# --- post-processing inside the model ------------------------------------------------------

class ArgmaxClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(_conv(3, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.body(x)).argmax(1)


def test_fc_then_argmax_reads_a_cliff_at_fc_and_says_post_processing(tmp_path):
    baseline, qat = _built(ArgmaxClassifier())
    faulty = inject(qat, _node(qat, "fc", 0), scale_factor=0.2)
    report, facts = triaged(tmp_path, qat, faulty, _input())
    assert_single_source(facts, "fc", {"truncation"})
    assert facts.get("layer_postprocess"), "the post-processing inside the model is said"


class Select(nn.Module):
    """The detector's post-processing: the top scores and their boxes."""

    def forward(self, scores, boxes):
        top, index = scores.flatten(1).topk(5, dim=1)
        boxes = boxes.flatten(2).transpose(1, 2)
        return top, torch.gather(boxes, 1, index.unsqueeze(-1).expand(-1, -1, 4))


class TopkDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.neck = _conv(3, 8), nn.Conv2d(8, 8, 3, padding=1)
        self.score, self.box = nn.Conv2d(8, 1, 1), nn.Conv2d(8, 4, 1)
        self.select = Select()

    def forward(self, x):
        f = torch.relu(self.neck(self.stem(x)))
        return self.select(self.score(f), self.box(f))


def _built_without_quantizing(model: nn.Module, module: str):
    """(float, calibrated FX QAT model) with ``module`` left in float, as a detector's
    post-processing is (its integer indices take no fake quant)."""
    from torch.ao.quantization import (
        disable_observer,
        enable_observer,
        get_default_qat_qconfig_mapping,
    )
    from torch.ao.quantization.quantize_fx import prepare_qat_fx
    torch.manual_seed(0)
    mapping = get_default_qat_qconfig_mapping("qnnpack").set_module_name(module, None)
    qat = prepare_qat_fx(copy.deepcopy(model).train(), mapping, (_input(),))
    qat.eval()
    qat.apply(enable_observer)
    with torch.no_grad():
        qat(torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(1)))
    qat.apply(disable_observer)
    return model.eval(), qat


def test_a_detector_with_topk_and_gather_measures_its_fix_before_them(tmp_path):
    baseline, qat = _built_without_quantizing(TopkDetector(), "select")
    faulty = inject(qat, _node(qat, "neck", 0), scale_factor=0.01)
    report, facts = triaged(tmp_path, qat, faulty, _input(), try_fixes=True)
    origin = one_origin(facts)
    assert origin["layer"] in ("neck", "relu"), origin
    assert facts.get("layer_postprocess")
    trials = report.get("fix_trials") or []
    assert trials, "the fixes were measured"
    best = trials[0]["trials"][0]
    assert best["reaches"], best
    assert "post" in json.dumps(trials[0]).lower()    # measured before post-processing


# --- float against a trained QAT model -----------------------------------------------------

def _trained(qat: nn.Module, steps: int = 3) -> nn.Module:
    """A QAT model trained a few steps: its weights and BN statistics move."""
    trained = copy.deepcopy(qat).train()
    optimiser = torch.optim.SGD(trained.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(11)
    for _ in range(steps):
        optimiser.zero_grad()
        trained(torch.randn(8, 3, 16, 16, generator=generator)).square().mean().backward()
        optimiser.step()
    return trained.eval()


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.body(x))


def test_float_against_a_trained_qat_model_says_the_models_differ(tmp_path):
    baseline, qat = _built(Plain())
    trained = _trained(qat)
    report, facts = triaged(tmp_path, baseline, trained, _input(), stages=("float", "qat"))
    text = render_output(report, "md").lower()
    assert "differ beyond quantization" in text
    assert all(k["kind"] != "weight" for k in facts.get("error_kind", []))


def test_a_trained_qat_model_against_itself_reads_the_planted_fault(tmp_path):
    baseline, qat = _built(Plain())
    trained = _trained(qat)
    faulty = inject(trained, _node(trained, "body.3", 0), scale_factor=0.2)
    report, facts = triaged(tmp_path / "self", "self", faulty, _input())
    assert_single_source(facts, "body.3", {"truncation"})
    clean_report, clean = triaged(tmp_path / "clean", "self", trained, _input())
    assert "layer_origin" not in clean or not one_origin(clean)["located"]


# --- the memory budget ---------------------------------------------------------------------

def test_past_the_memory_budget_no_own_error_is_measured_on_the_analysis_inputs(
        tmp_path, monkeypatch):
    baseline, qat = _built(UNetish())
    faulty = inject(qat, _node(qat, "mid.0", 0), scale_factor=0.2)
    from qcdoctor.probe import capture
    monkeypatch.setattr(capture, "ram_budget", lambda: 1 << 10)
    case = tmp_path / "case"
    result = compare_models(qat, faulty, _input(), case / "qa_probe", sensitivity=False)
    lines = (case / "qa_probe/layer_own_error.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert "own_status" in header, header
    status = header.index("own_status")
    unmeasured = [line.split(",") for line in lines[1:]
                  if line.split(",")[status] != "measured"]
    assert unmeasured and all(cells[1] == "" for cells in unmeasured)
    assert any("own" in w for w in map(str, result.warnings))
