"""A model whose output is a sparse or a nested (jagged) tensor runs through the probe as
any other: the sparse one compared densely, the nested one component by component (the
probe's own hooks once failed on them, and the probe blamed the model). Eager QAT models,
with sensitivity and fix trials."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import eager_qat, one_thread  # noqa: E402,F401


class SparseHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu().to_sparse()


class NestedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.nested.nested_tensor([y[0, 0], y[0, 1, :3]])


@pytest.mark.parametrize("model", [SparseHead, NestedHead])
def test_sparse_and_nested_outputs_are_compared(tmp_path, model):
    torch.manual_seed(0)
    float_model = model().eval()
    qat = eager_qat(float_model)
    inputs = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    result = compare_models(float_model, qat, inputs, tmp_path / "qa", sensitivity=True,
                            try_fixes=True, stages=("float", "calib"))
    conv = next(r for r in result.rows if r["mod_name"] == "conv")
    assert 0.9 < conv["cosine"] <= 1.0
    assert result.sensitivity and result.fix_trials
    assert (tmp_path / "qa" / "compare_per_layer_out.csv").is_file()
