"""Benchmark: comparing 1 GiB of float32 dumps (two 512 MiB outputs).

Baseline, measured in the same run on the same files: the time numpy needs just to read
them (``numpy.fromfile`` of both). Target: the comparison <= 2x the baseline, in memory
bounded by the chunk size. Both are timed warm (files in the page cache), best of 3.

Run: python bench/bench_dumps.py [MIB_PER_FILE]
"""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import best  # noqa: E402

from qcdoctor.collectors.dumps import compare, open_dump  # noqa: E402


def write(path: Path, mib: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    block = 1 << 24
    total = mib * (1 << 20) // 4
    with open(path, "wb") as handle:
        for start in range(0, total, block):
            rng.standard_normal(min(block, total - start), dtype=np.float32).tofile(handle)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
        baseline = best(read_both, runs=3)
        before = rss_mb()
        ours = best(lambda: compare(open_dump(a), open_dump(b)), runs=3)
        growth = rss_mb() - before
    ratio = ours / baseline
    print(f"dumps: 2 x {mib} MiB float32; baseline numpy read of both: {baseline:.2f} s")
    print(f"compare: {ours:.2f} s = {ratio:.2f}x baseline  target <= 2x: "
          f"{'OK' if ratio <= 2 else 'MISSED'}; peak RSS above the baseline's: {max(growth, 0):.0f} MiB")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
