"""Benchmark: qcdoctor probe over several architectures, each an unfused float model
against its FX QAT copy on one small input, without sensitivity.

Architectures: pytorchcv mobilenetv2_w1 (depthwise), resnet18 (residual), seresnet18
(squeeze-excitation), efficientnet_b0 (Swish, traced through by FX) and a small
ViT-style transformer block stack (tests/probe_nets.TinyViT; pytorchcv has none).
Random weights, BN statistics from data (tests/probe_nets.network); torch ops on one
thread (--threads). The probe may still compute the rows of very large outputs on a
worker thread of its own where the machine has a second CPU (none at --size 128), and runs
the analysis model's fake-quant-off pass beside the baseline's recorded run where a core
is spare (with --threads 1 on two CPUs: probe/beside.py); the old files a rerun replaces
are freed on a thread too (common/background_free.py).

Baseline, measured in the same run on the same models: one plain forward of each model
(float, then QAT) under ``torch.inference_mode``. The ratio is probe time / that pair
of forwards, the probe's whole call (both models run with every layer output recorded,
the metrics, the files written). The plain forwards run torch's fake-quant kernels; the
probe computes the same values in place (probe/fast_quant.py), which on CPU costs a
fraction of the kernel: that saving is the probe's, and part of its ratio. Both are timed
in turns (so both see the same load on a busy machine), ``--runs`` times each at least and
as many more as make the timed calls of an architecture last about ``--seconds`` (a model
of a few milliseconds gets tens of runs: its median then spans as much of the machine's
load as a large model's does), after one warm-up call of each: the times
printed are medians, "ratio median" is median probe time / median forwards time, "min"
fastest / fastest. Target: the median ratio under 2x on every architecture (the exit
status). The timed probes run the same models again into the same folder, as a rerun
does: what the probe keeps per model (the FX plan, the eager model's layers, the file
list of the probe_run.yaml it wrote there) comes from the warm-up, whose own time is
printed as the first probe (it includes one-time costs such as torch's kernel warm-up
and lazy imports). The probe without the own error (timed to price the own error) writes
into a folder of its own: sharing one, each probe would find the other's files (one file
fewer or more, the manifest written twice), which no rerun does.

Memory (``--memory``, resnet18 at 224): in a fresh process per step, the peak resident
size reached during the step minus the resident size before it (torch's allocations
are invisible to tracemalloc); the kernel's peak is reset just before the step
(/proc/self/clear_refs). The probe keeps baseline outputs in memory up to a budget and
spills the rest to disk.

Run: python bench/bench_probe.py [--size 128] [--runs 7] [--seconds 10] [--only resnet18,...]
     [--memory]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from timing import interleaved  # noqa: E402

from qcdoctor.collectors.reading.own_error import OWN_ERROR_FILE  # noqa: E402
from qcdoctor.probe import capture, compare_models, fused  # noqa: E402
from tests.probe_nets import network, quantize  # noqa: E402

ARCHS = ("mobilenetv2_w1", "resnet18", "seresnet18", "efficientnet_b0", "tinyvit")
TARGET = 2.0
OWN_ERROR_TARGET = 1.0      # the own error may cost one more forward of the analysis model


def models(arch: str, size: int):
    example = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))
    float_model = network(arch, size)
    _, qat = quantize(float_model, example, batches=1, batch_size=4)
    return float_model, qat, example


def kernel_line() -> str:
    """Whether the row statistics were measured with the C kernel: without it (no C
    compiler at install) the probe falls back to torch's reductions, a different, slower
    probe, so every probe bench says which one it measured."""
    return "fused kernel: " + ("built" if fused.available() else
                               f"NOT used: {fused.why_not()} (torch's reductions measured)")


def measure(arch: str, size: int, runs: int, seconds: float = 0.0) -> tuple[float, float, float]:
    """(median ratio, min ratio, own-error cost in analysis forwards) of the probe against
    the two forwards."""
    baseline, qat, example = models(arch, size)

    def forwards():
        with torch.inference_mode():
            baseline(example)
            qat(example)

    def analysis_forward():
        with torch.inference_mode():
            qat(example)

    with tempfile.TemporaryDirectory() as tmp:
        def probe(folder="p"):
            return compare_models(baseline, qat, example, Path(tmp) / folder, sensitivity=False)

        def probe_without_own_error():
            capture.MEASURE_OWN_ERROR = False
            try:
                return probe("without-own-error")   # its own folder: each one a rerun
            finally:
                capture.MEASURE_OWN_ERROR = True
        forwards()
        start = time.perf_counter()
        found = probe()                               # warm-up (the models' first probe)
        first = time.perf_counter() - start
        rows = len(found.rows)
        own_file = Path(tmp) / "p" / OWN_ERROR_FILE
        measured = len(own_file.read_text(encoding="utf-8").splitlines()) - 1 \
            if own_file.exists() else 0
        # one round of the four timed calls (the last warm-up of each): short models get
        # more rounds, so every median spans about as much of the machine's load
        start = time.perf_counter()
        for call in (forwards, probe, probe_without_own_error, analysis_forward):
            call()
        rounds = max(runs, math.ceil(seconds / (time.perf_counter() - start)))
        (base_min, base_med), (probe_min, probe_med), (_, plain_med), (_, qat_med) = \
            interleaved(forwards, probe, probe_without_own_error, analysis_forward, runs=rounds)
    own_cost = (probe_med - plain_med) / qat_med
    print(f"{arch:16s} {size:4d}  median: forwards {base_med * 1e3:8.1f} ms  probe "
          f"{probe_med * 1e3:8.1f} ms  ratio median {probe_med / base_med:5.2f}x  "
          f"min {probe_min / base_min:5.2f}x  own error {own_cost:4.2f} analysis forwards "
          f"({measured} of {rows} rows; first probe {first * 1e3:.0f} ms; {rounds} runs)",
          flush=True)
    return probe_med / base_med, probe_min / base_min, own_cost


_PEAK = """import sys, tempfile
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/bench"]
import torch
from peak_memory import peak_mib, reset_peak
from bench_probe import models
from qcdoctor.probe import compare_models
baseline, qat, x = models("resnet18", 224)
with torch.inference_mode():                    # warm-up: kernels and allocator caches
    baseline(x); qat(x)
before = reset_peak()                           # the peak starts again from here
if sys.argv[1] == "probe":
    with tempfile.TemporaryDirectory() as out:
        compare_models(baseline, qat, x, out + "/p", sensitivity=False)
else:
    with torch.inference_mode():
        baseline(x); qat(x)
print(peak_mib() - before)
"""


def peak(step: str) -> float:
    done = subprocess.run([sys.executable, "-c", _PEAK, step, str(ROOT)], capture_output=True,
                          text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--runs", type=int, default=7, help="at least this many runs")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="and enough runs for the timed calls of each architecture to "
                             "take about this long")
    parser.add_argument("--only", help="comma-separated architectures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--memory", action="store_true", help="also the peak memory")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(kernel_line(), flush=True)
    archs = args.only.split(",") if args.only else ARCHS
    found = {arch: measure(arch, args.size, args.runs, args.seconds) for arch in archs}
    ratios = {arch: numbers[0] for arch, numbers in found.items()}
    costs = {arch: numbers[2] for arch, numbers in found.items()}
    worst, dearest = max(ratios, key=ratios.get), max(costs, key=costs.get)
    print(f"worst median ratio: {worst} {ratios[worst]:.2f}x  target < {TARGET:g}x: "
          f"{'OK' if ratios[worst] < TARGET else 'MISSED'}")
    print(f"dearest own error: {dearest} {costs[dearest]:.2f} analysis forwards  target "
          f"<= {OWN_ERROR_TARGET:g}: {'OK' if costs[dearest] <= OWN_ERROR_TARGET else 'MISSED'}")
    if args.memory:
        forward_peak, probe_peak = peak("forwards"), peak("probe")
        print(f"peak memory above the loaded models (resnet18, 224): forwards "
              f"{forward_peak:.1f} MiB, probe {probe_peak:.1f} MiB")
    return 0 if ratios[worst] < TARGET and costs[dearest] <= OWN_ERROR_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
