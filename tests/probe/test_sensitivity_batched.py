"""Sensitivity measured many quantizers per forward (probe/sensitivity_batched.py): the
same tables as one forward per quantizer, in far fewer forwards, and the pass one at a
time wherever the model does not keep the copies of its input apart.

Real networks: pytorchcv resnet10 (FX QAT), the ViT-style TinyViT (its position
embedding is a parameter with a quantizer of its own: a constant the batch does not
reach, measured alone) and an eager-mode QAT model (hooks of torch.ao's own).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")

from torch import nn  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from qcdoctor.probe import sensitivity as sensitivity_module  # noqa: E402
from qcdoctor.probe.quantizers import TorchAoAdapter  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    eager_qat,
    network,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
    toy,
)

SIZE = 32


def example(size: int = SIZE) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(5))


def built(arch: str):
    if arch == "eager_toy":
        base = toy(8)
        return base, eager_qat(base, 8), example(8)
    base, qat = quantize(network(arch, SIZE), example())
    return base, qat, example()


class Counted:
    """Counts the calls of the analysis model's weighted modules (a batch is one call):
    the work the pass does, whether through the model's forward or node by node."""

    def __init__(self, model: nn.Module):
        self.calls = 0
        self.handles = [m.register_forward_pre_hook(self._count) for m in model.modules()
                        if hasattr(m, "weight_fake_quant")]

    def _count(self, module, args):
        self.calls += 1

    def remove(self):
        for handle in self.handles:
            handle.remove()


def tables(base, qat, x, out, metric, batched: bool, monkeypatch) -> tuple[dict, int]:
    with monkeypatch.context() as patch:
        if not batched:
            def refuse(*args, **kwargs):
                raise sensitivity_module.sensitivity_batched.NotBatched("off for the test")
            patch.setattr(sensitivity_module, "batched_values", refuse)
        counted = Counted(qat)
        try:
            result = compare_models(base, qat, x, out, metric=metric, sensitivity=True)
        finally:
            counted.remove()
    return result.sensitivity, counted.calls


def figures(rows: list[tuple]) -> dict:
    """A sensitivity table's values by (op, sensitive type)."""
    return {(r[0], r[1]): r[3] for r in rows}


def whole_model_runs(monkeypatch) -> list:
    """A list that gets an entry each time the copies go through the whole model (the
    hooks of sensitivity_batched) instead of over the graph."""
    from qcdoctor.probe import sensitivity_batched
    runs = []
    real = sensitivity_batched._Hooks.__init__

    def spy(self, *args, **kwargs):
        runs.append(True)
        real(self, *args, **kwargs)
    monkeypatch.setattr(sensitivity_batched._Hooks, "__init__", spy)
    return runs


@pytest.mark.parametrize("arch", ["resnet10", "tinyvit", "eager_toy"])
@pytest.mark.parametrize("metric", ["L1", "Cosine"])
def test_batched_tables_are_the_one_at_a_time_tables(tmp_path, monkeypatch, arch, metric):
    base, qat, x = built(arch)
    count = len(TorchAoAdapter().quantizers(qat))
    alone, alone_calls = tables(base, qat, x, tmp_path / "alone", metric, False, monkeypatch)
    batched, batched_calls = tables(base, qat, x, tmp_path / "batched", metric, True,
                                    monkeypatch)
    assert set(alone) == set(batched)
    for name, rows in alone.items():
        got, want = figures(batched[name]), figures(rows)
        assert got.keys() == want.keys() and len(rows) == count
        top = max(abs(v) for v in want.values())
        # the same figures but for the order float sums run in (a batch takes other
        # kernels): far below any difference between quantizers
        assert all(math.isclose(got[k], want[k], rel_tol=1e-3, abs_tol=1e-4 * top)
                   for k in want), name
        assert [r[:2] for r in batched[name][:3]] == [r[:2] for r in rows[:3]]
    # one forward per quantizer against a few batches: most of the calls saved
    assert batched_calls * 2 <= alone_calls, (alone_calls, batched_calls, count)


def test_every_switch_is_as_it_was(monkeypatch):
    """A quantizer the user had switched off stays off; every other one back on."""
    from qcdoctor.probe.fast_quant import FastQuantizers
    from qcdoctor.probe.sensitivity import sensitivity
    from qcdoctor.probe.stats import flatten_output
    base, qat, x = built("resnet10")
    adapter = TorchAoAdapter()
    quantizers = adapter.quantizers(qat)
    adapter.set_enabled(quantizers[3], False)
    before = [adapter.is_enabled(q) for q in quantizers]
    reference = [t for _, t in flatten_output(base(x))]
    fast = FastQuantizers(list(qat.modules()))
    try:
        rows = sensitivity(qat, adapter, lambda m: m(x), reference, "L1", call=((x,), {}))
    finally:
        fast.close()
    assert [adapter.is_enabled(q) for q in quantizers] == before
    assert len(rows[0]) == len(quantizers)


class ConvHead(nn.Module):
    """A conv and a linear head; each test model below calls them its own way."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)


class MixesCopies(ConvHead):
    """Subtracts the batch mean: the copies of one input are no longer apart."""

    def forward(self, x):
        y = self.conv(x)
        y = y - y.mean(0, keepdim=True) + y.mean()
        return self.head(y.mean((2, 3)))


class FirstRowOnly(ConvHead):
    """Keeps the batch's first row only: its output does not grow with a batch."""

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3))[:1])


class SequenceFirst(nn.Module):
    """A linear over a sequence-first layout (length, batch, width): the first dimension
    of what its quantizers see is no batch."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        seq = x.flatten(2).permute(2, 0, 1)            # (64, batch, 3)
        return self.head(self.proj(seq).mean(0))


@pytest.mark.parametrize("model_class", [MixesCopies, FirstRowOnly])
def test_a_model_that_does_not_keep_copies_apart_is_measured_one_at_a_time(
        tmp_path, monkeypatch, model_class):
    torch.manual_seed(0)
    base = model_class().eval()
    qat = eager_qat(base, 8)
    x = example(8)
    count = len(TorchAoAdapter().quantizers(qat))
    alone, alone_calls = tables(base, qat, x, tmp_path / "alone", "L1", False, monkeypatch)
    batched, batched_calls = tables(base, qat, x, tmp_path / "batched", "L1", True,
                                    monkeypatch)
    assert batched == alone                      # the very same figures: the same passes
    # the batch was tried (a forward or two) and given up
    assert alone_calls < batched_calls <= alone_calls + 2 * (alone_calls // count + 1)


def test_a_sequence_first_layout_is_measured_alone_where_it_is(tmp_path, monkeypatch):
    """The projection sees (length, batch, width): its first dimension does not grow
    with the copies, so its quantizers are measured one at a time (the same figures);
    the head's, batched."""
    torch.manual_seed(0)
    base = SequenceFirst().eval()
    qat = eager_qat(base, 8)
    x = example(8)
    alone, _ = tables(base, qat, x, tmp_path / "alone", "L1", False, monkeypatch)
    batched, _ = tables(base, qat, x, tmp_path / "batched", "L1", True, monkeypatch)
    want, got = figures(alone["0"]), figures(batched["0"])
    assert got.keys() == want.keys()
    assert all(got[k] == want[k] for k in want if k[0] == "proj")
    assert all(math.isclose(got[k], want[k], rel_tol=1e-4) for k in want)


class WritesInPlace(ConvHead):
    """Adds to a value in place after another node read it: the graph's values depend on
    the order the nodes run in."""

    def forward(self, x):
        y = self.conv(x)
        z = y * 2
        y.add_(1.0)
        return self.head((y + z).mean((2, 3)))


@pytest.mark.parametrize("model_class", [WritesInPlace, MixesCopies])
def test_a_graph_whose_copies_cannot_run_from_their_quantizers_gives_the_same_figures(
        tmp_path, monkeypatch, model_class):
    """An FX graph with a value written in place, or mixing the copies: the run over the
    graph is refused (the value kept is not what a later node reads; the control copy
    moves), and the figures are still those of one forward per quantizer."""
    from qcdoctor.probe import sensitivity_batched
    torch.manual_seed(0)
    base = model_class().eval()
    _, qat = quantize(base, example(8))
    x = example(8)
    refused = []
    real = sensitivity_batched._over_graph

    def spy(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except sensitivity_batched.NotBatched as exc:
            refused.append(str(exc))
            raise
    monkeypatch.setattr(sensitivity_batched, "_over_graph", spy)
    alone, _ = tables(base, qat, x, tmp_path / "alone", "L1", False, monkeypatch)
    batched, _ = tables(base, qat, x, tmp_path / "batched", "L1", True, monkeypatch)
    assert refused, "the run over the graph should have been refused"
    want, got = figures(alone["0"]), figures(batched["0"])
    assert got.keys() == want.keys()
    assert all(math.isclose(got[k], want[k], rel_tol=1e-4, abs_tol=1e-9) for k in want)


@pytest.mark.parametrize("arch", ["resnet10", "tinyvit"])
def test_fx_models_run_their_copies_over_the_graph(tmp_path, monkeypatch, arch):
    """resnet10 (an in-place ReLU after each residual add) and TinyViT (attention laid
    out heads first: its quantizers there are measured one at a time): the run over the
    graph is taken, not the whole model per batch."""
    base, qat, x = built(arch)
    whole = whole_model_runs(monkeypatch)
    tables(base, qat, x, tmp_path / arch, "L1", True, monkeypatch)
    assert not whole


def test_a_graph_too_large_to_keep_runs_its_copies_whole(tmp_path, monkeypatch):
    """Beyond KEPT_BYTES of kept values the graph run is refused before any copy runs;
    the copies then go through the whole model, with the same figures."""
    from qcdoctor.probe import sensitivity_graph
    base, qat, x = built("resnet10")
    batched, _ = tables(base, qat, x, tmp_path / "graph", "L1", True, monkeypatch)
    monkeypatch.setattr(sensitivity_graph, "KEPT_BYTES", 1024)
    whole = whole_model_runs(monkeypatch)
    capped, _ = tables(base, qat, x, tmp_path / "whole", "L1", True, monkeypatch)
    assert whole
    want, got = figures(batched["0"]), figures(capped["0"])
    top = max(abs(v) for v in want.values())
    assert got.keys() == want.keys()
    assert all(math.isclose(got[k], want[k], rel_tol=1e-3, abs_tol=1e-4 * top) for k in want)
