"""Benchmark: comparing 1 GiB of float32 dumps (two 512 MiB outputs).

Baseline, measured in the same run on the same files: the time numpy needs just to read
them (``numpy.fromfile`` of both). Target: the comparison <= 2x the baseline (min and
median of 3, warm page cache). Memory: the peak the comparison itself allocates, traced
with ``tracemalloc`` (numpy reports its buffers to it) in a fresh process, beside what
reading one output whole takes (``ru_maxrss`` is a high-water mark that an earlier step
may already have set, so it cannot show this). Target: < 128 MiB at any dump size.

Run: python bench/bench_dumps.py [MIB_PER_FILE]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import spread  # noqa: E402

from qcdoctor.collectors.dumps import compare, open_dump  # noqa: E402


def write(path: Path, mib: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    block = 1 << 24
    total = mib * (1 << 20) // 4
    with open(path, "wb") as handle:
        for start in range(0, total, block):
            rng.standard_normal(min(block, total - start), dtype=np.float32).tofile(handle)


_PEAK = """import sys, tracemalloc
from pathlib import Path
import numpy as np
from qcdoctor.collectors.dumps import compare, open_dump
a, b = open_dump(Path(sys.argv[1])), open_dump(Path(sys.argv[2]))
tracemalloc.start()                    # numpy reports its buffers to tracemalloc
if sys.argv[3] == "compare":
    compare(a, b)
else:
    np.fromfile(sys.argv[1], dtype=np.float32).sum()
print(tracemalloc.get_traced_memory()[1] / 2**20)
"""


def peak_mib(a: Path, b: Path, step: str) -> float:
    """Peak memory allocated by one step, traced in a fresh process of its own."""
    done = subprocess.run([sys.executable, "-c", _PEAK, str(a), str(b), step],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> int:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        a, b = Path(tmp) / "x86.bin", Path(tmp) / "board.bin"
        write(a, mib, 1)
        write(b, mib, 2)

        def read_both():
            np.fromfile(a, dtype=np.float32).sum()
            np.fromfile(b, dtype=np.float32).sum()
        read_both()                                   # warm the page cache
        base_min, baseline = spread(read_both, runs=3)
        ours_min, ours = spread(lambda: compare(open_dump(a), open_dump(b)), runs=3)
        whole = peak_mib(a, b, "read")      # reading one whole output at once, for scale
        added = peak_mib(a, b, "compare")
    ratio = ours / baseline
    print(f"dumps: 2 x {mib} MiB float32; baseline numpy read of both: min {base_min:.2f} s,"
          f" median {baseline:.2f} s")
    print(f"compare: min {ours_min:.2f} s, median {ours:.2f} s = {ratio:.2f}x baseline"
          f"  target <= 2x: {'OK' if ratio <= 2 else 'MISSED'}")
    print(f"memory: the comparison allocates at most {added:.0f} MiB (traced in a fresh"
          f" process); reading one output whole takes {whole:.0f} MiB  target < 128 MiB at any"
          f" dump size: {'OK' if added < 128 else 'MISSED'}")
    return 0 if ratio <= 2 and added < 128 else 1


if __name__ == "__main__":
    sys.exit(main())
