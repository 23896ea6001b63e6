"""The analysis model's fake-quant-off pass (R5.3) runs on a thread of its own beside the
baseline's recorded run where a core is spare (probe/beside.py): every file the probe
writes is the same byte for byte as when it runs first in the caller's thread, for an
eager baseline (whose recording hooks are global and must not take the other thread's
module calls for its own), a traced one, and a quantized baseline (whose own pass runs
after its recorded run, never beside it). Models that share a module never run beside
each other."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.probe import compare as compare_module  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    eager_qat,
    inject,
    network,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
)

SIZE = 32


def example() -> torch.Tensor:
    return torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(5))


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def probed(monkeypatch, tmp_path, baseline, analysis, concurrent: bool, name: str, **options):
    started = []
    real = compare_module.Beside.around

    def around(self):
        started.append(self.concurrent)
        return real(self)
    monkeypatch.setattr(compare_module, "spare_core", lambda: concurrent)
    monkeypatch.setattr(compare_module.Beside, "around", around)
    result = compare_models(baseline, analysis, example(), tmp_path / name,
                            sensitivity=False, **options)
    assert started == [concurrent]
    return result, files(tmp_path / name)


def scenarios():
    torch.manual_seed(0)
    eager_float = Small().eval()
    eager = eager_qat(eager_float, SIZE)
    resnet = network("resnet10", SIZE)
    fused, fx_qat = quantize(resnet, example(), batches=1, batch_size=8)
    faulty = inject(copy.deepcopy(fx_qat), "features.stage2.unit1.body.conv1.conv",
                    scale_factor=0.25)
    return {"eager baseline": (eager_float, eager),
            "traced baseline": (fused, fx_qat),
            "quantized baseline": (fx_qat, faulty)}


@pytest.mark.parametrize("name", ["eager baseline", "traced baseline", "quantized baseline"])
def test_the_files_are_the_same_whether_the_pass_runs_beside_or_first(monkeypatch, tmp_path,
                                                                       name):
    baseline, analysis = scenarios()[name]
    first, first_files = probed(monkeypatch, tmp_path, baseline, analysis, False, "first")
    beside, beside_files = probed(monkeypatch, tmp_path, baseline, analysis, True, "beside")
    assert first_files.keys() == beside_files.keys()
    for file in first_files:
        assert beside_files[file] == first_files[file], file
    assert beside.models_match == first.models_match
    assert beside.rows == first.rows
    if name == "quantized baseline":
        assert first.models_match["match"]          # the copy differs by its quantizer only


def test_models_sharing_a_module_never_run_beside_each_other():
    shared = nn.Conv2d(3, 3, 1)
    one, other = nn.Sequential(shared, nn.ReLU()), nn.Sequential(shared, nn.Sigmoid())
    every = [compare_module._modules(one), compare_module._modules(other)]
    apart = [compare_module._modules(nn.Sequential(nn.Conv2d(3, 3, 1))),
             compare_module._modules(nn.Sequential(nn.Conv2d(3, 3, 1)))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compare_module, "spare_core", lambda: True)
        assert not compare_module._may_run_beside(every, "cpu")
        assert compare_module._may_run_beside(apart, "cpu")
        assert not compare_module._may_run_beside(apart, "meta")
