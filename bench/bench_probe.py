"""Benchmark: qcdoctor probe of a pytorchcv resnet18 (float, fused) against its FX QAT
copy on one 1x3x224x224 input, without sensitivity.

Baseline, measured in the same run on the same models: the two plain forward passes
(baseline model, then analysis model) under ``torch.inference_mode``. Target: the probe
<= 3x the baseline (min and median of 7, measured in turns). Memory: in a fresh process
per step, the peak resident size reached during the step minus the resident size before
it (torch's allocations are invisible to tracemalloc); the kernel's peak is reset just
before the step (/proc/self/clear_refs), so calibration and warm-up before it cannot
stand in for it. Probe beside the two forward passes; the probe spills baseline
activations to disk, so its peak should stay near the forwards'.

Run: python bench/bench_probe.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from timing import interleaved  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import quantize, zoo_model  # noqa: E402

SIZE = 224


def models():
    example = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    baseline, qat = quantize(zoo_model("resnet18", SIZE), example, batches=1, batch_size=4)
    return baseline, qat, example


_PEAK = """import resource, sys, tempfile
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/bench"]
import torch
from bench_probe import models
from qcdoctor.probe import compare_models
baseline, qat, x = models()
with torch.inference_mode():                    # warm-up: kernels and allocator caches
    baseline(x); qat(x)
def rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20
def peak():
    with open("/proc/self/status") as handle:
        return next(int(l.split()[1]) for l in handle if l.startswith("VmHWM:")) / 1024
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")                           # the peak starts again from here
before = rss()
if sys.argv[1] == "probe":
    with tempfile.TemporaryDirectory() as out:
        compare_models(baseline, qat, x, out + "/p", sensitivity=False)
else:
    with torch.inference_mode():
        baseline(x); qat(x)
print(peak() - before)
"""


def peak(step: str) -> float:
    done = subprocess.run([sys.executable, "-c", _PEAK, step, str(ROOT)], capture_output=True,
                          text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    baseline, qat, example = models()

    def forwards():
        with torch.inference_mode():
            baseline(example)
            qat(example)

    with tempfile.TemporaryDirectory() as tmp:
        def probe():
            compare_models(baseline, qat, example, Path(tmp) / "p", sensitivity=False)
        forwards()
        probe()                                   # warm-up
        (base_min, base_med), (probe_min, probe_med) = interleaved(forwards, probe, runs=7)
    print(f"two forward passes: min {base_min * 1e3:.1f} ms, median {base_med * 1e3:.1f} ms")
    print(f"probe (no sensitivity): min {probe_min * 1e3:.1f} ms, median {probe_med * 1e3:.1f} ms")
    ratio = probe_med / base_med
    print(f"ratio: min {probe_min / base_min:.2f}x, median {ratio:.2f}x  target <= 3x: "
          f"{'OK' if ratio <= 3 else 'MISSED'}")
    forward_peak, probe_peak = peak("forwards"), peak("probe")
    print(f"peak memory above the loaded models: forwards {forward_peak:.1f} MiB, "
          f"probe {probe_peak:.1f} MiB")
    return 0 if ratio <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
