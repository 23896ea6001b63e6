"""Benchmark: qcdoctor's bad-case search over N samples, each architecture an unfused float
model against its FX QAT copy, as the search runs inside ``compare_models``.

Architectures: those of bench/bench_probe.py (pytorchcv mobilenetv2_w1, resnet18,
seresnet18, efficientnet_b0 and tests/probe_nets.TinyViT), built the same way (random
weights, BN statistics from data); N random samples ``torch.randn(1, 3, size, size)`` from
a seeded generator; torch ops on one thread (--threads).

Measured: the time spent in ``qcdoctor.probe.compare.search_samples`` during a call
``compare_models(baseline, qat, Samples(samples), out, sensitivity=False)``: both models
over every sample under ``torch.inference_mode``, no hooks, each output's errors in the 6
metrics kept per sample, and the QAT model a third time per sample with every value
rounded to its steps and none clipped (the clean model's error a sample must pass to
show the error). The bench wraps that module attribute with a timer (restored
after), so the rest of the probe (the layer reading on the worst sample, the files) is
not counted. The search runs with the models in eval mode, observers frozen and the fake
quants computed in place (probe/fast_quant.py), as compare_models sets them up.

Baseline, measured in the same run on the same models and samples: the two models' plain
forwards over the N samples under ``torch.inference_mode`` (float, then QAT, per sample),
which run torch's fake-quant kernels. Forwards and probe calls are timed in turns (so both
see the same load on a busy machine), ``--runs`` times each after one warm-up call of
each (the warm-up probe also pays one-time costs: lazy imports, the FX plan). The times
printed are medians; "ratio median" is median search time / median forwards time, "min"
fastest / fastest. Target: the median ratio at most 1.3x on every architecture (the exit
status).

Run: python bench/bench_badcase.py [--size 64] [--samples 64] [--runs 5] [--only resnet18,...]
     [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from bench_probe import ARCHS, kernel_line, models  # noqa: E402
from timing import min_median  # noqa: E402

import qcdoctor.probe.compare as probe_compare  # noqa: E402
from qcdoctor.probe import Samples, compare_models  # noqa: E402

TARGET = 1.3


class _SearchTimer:
    """Stands in for ``probe_compare.search_samples`` (compare_models looks it up in its
    module at each call) and records the wall time of each call."""

    def __init__(self, search):
        self.search = search
        self.times: list[float] = []

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.search(*args, **kwargs)
        finally:
            self.times.append(time.perf_counter() - start)


def measure(arch: str, size: int, count: int, runs: int) -> tuple[float, float]:
    """(median ratio, min ratio) of the search against the two models' plain forwards."""
    baseline, qat, _ = models(arch, size)
    generator = torch.Generator().manual_seed(3)
    samples = [torch.randn(1, 3, size, size, generator=generator) for _ in range(count)]

    def forwards():
        with torch.inference_mode():
            for sample in samples:
                baseline(sample)
                qat(sample)

    timer = _SearchTimer(probe_compare.search_samples)
    with tempfile.TemporaryDirectory() as tmp:
        def probe():
            compare_models(baseline, qat, Samples(samples), Path(tmp) / "p", sensitivity=False)

        probe_compare.search_samples = timer
        try:
            forwards()
            probe()                 # warm-up: one-time costs, and the folder a rerun replaces
            first = timer.times[-1]
            base_times, search_times = [], []
            # in turns, not in blocks: a load change on the machine hits both alike
            for _ in range(runs):
                start = time.perf_counter()
                forwards()
                base_times.append(time.perf_counter() - start)
                probe()
                search_times.append(timer.times[-1])
        finally:
            probe_compare.search_samples = timer.search
    (base_min, base_med), (search_min, search_med) = \
        min_median(base_times), min_median(search_times)
    print(f"{arch:16s} {size:4d} x{count:<4d} median: forwards {base_med * 1e3:8.1f} ms  "
          f"search {search_med * 1e3:8.1f} ms  ratio median {search_med / base_med:5.2f}x  "
          f"min {search_min / base_min:5.2f}x  (first search {first * 1e3:.0f} ms; "
          f"{runs} runs)", flush=True)
    return search_med / base_med, search_min / base_min


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=64, help="N, the samples searched")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="comma-separated architectures")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(kernel_line(), flush=True)
    archs = args.only.split(",") if args.only else ARCHS
    found = {arch: measure(arch, args.size, args.samples, args.runs) for arch in archs}
    ratios = {arch: numbers[0] for arch, numbers in found.items()}
    worst = max(ratios, key=ratios.get)
    ok = ratios[worst] <= TARGET
    print(f"worst median ratio: {worst} {ratios[worst]:.2f}x  target <= {TARGET:g}x: "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
