"""Benchmark: a triage through the Python API in a warm process against the command line's
path run in the same process (``main(["triage", CASE, "-o", FILE])``), measured in the
same run, in turns. Figures are min and median over rounds (each round: every bundled
example, each from a copy of its folder); targets are judged on the median.

- API triage + Markdown saved (``qcdoctor.triage(CASE).save(FILE)``: the work the
  command does) vs the command line in process, target <= 1.0x (no slower);
- for information: the API triage alone (a Report, nothing rendered), and the other
  language of a report already made (``report.in_language``: no case read again);
- a built case (``qcdoctor.Case(...).triage()``, read as a case.yaml alone in a folder of
  its own) vs the same case saved and triaged from its folder, for information;
- many triages: this process's memory and child processes over 500 API triages after a
  warm-up, target < 20 MB and one engine worker (two while a successor starts).

Run: python bench/bench_api.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved  # noqa: E402

import qcdoctor  # noqa: E402
from qcdoctor.engine.commands.cli import main as cli_main  # noqa: E402
from qcdoctor.engine.commands.examples import copy_example, example_names  # noqa: E402
from qcdoctor.engine.matching.worker_memory import resident_mb as rss_mb  # noqa: E402

TARGET_RATIO = 1.0
MEMORY_MB = 20
NUMBERS = dict(chip="J6E", metric="mAP", evidence=["dataset_eval"],
               stages={"qat": 0.449, "qat_bc": 0.447, "quantized_bc": 0.391, "board": 0.30})


def children() -> int:
    import os
    me, count = str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    count += handle.read().rsplit(")", 1)[1].split()[1] == me
            except OSError:
                pass
    return count


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def line(name: str, measured: tuple[float, float], cases: int) -> str:
    lo, med = measured
    return (f"{name:34s} min {lo / cases * 1e3:6.2f} ms, median {med / cases * 1e3:6.2f} ms"
            f" a case ({cases / med:5.0f} cases/s)")


def main() -> int:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = [copy_example(name, str(root / name)) for name in example_names()]
        out = root / "report.md"
        cases = len(folders)

        def api_saved():
            for folder in folders:
                qcdoctor.triage(folder).save(out)

        def cli_in_process():
            for folder in folders:
                cli_main(["triage", str(folder), "-o", str(out)])

        def api_only():
            for folder in folders:
                qcdoctor.triage(folder)
        api_saved()                         # warm: imports, rules compiled, caches filled
        cli_in_process()
        cli, api = interleaved(cli_in_process, api_saved, runs=9)
        cli_again, alone = interleaved(cli_in_process, api_only, runs=5)
        ratio = api[1] / cli[1]
        results.append(ratio <= TARGET_RATIO)
        print(line("command line in process (-o md)", cli, cases))
        print(line("API triage + save md", api, cases) +
              f" = {ratio:.2f}x  target <= {TARGET_RATIO}x: {verdict(ratio <= TARGET_RATIO)}")
        print(line("API triage alone", alone, cases) + f" = {alone[1] / cli_again[1]:.2f}x")

        rounds = []
        for _ in range(5):                  # each round on reports not yet asked for it
            made = [qcdoctor.triage(folder, lang="zh") for folder in folders]
            start = time.perf_counter()
            for report in made:
                report.in_language("en")
            rounds.append(time.perf_counter() - start)
        print(line("the other language of a report", (min(rounds), statistics.median(rounds)),
                   cases))

        saved = qcdoctor.Case(**NUMBERS).save(root / "built")

        def built():
            qcdoctor.Case(**NUMBERS).triage()

        def from_folder():
            qcdoctor.triage(saved.parent)
        built_folder, built_case = interleaved(from_folder, built, runs=15)
        print(line("saved case from its folder", built_folder, 1))
        print(line("built case (Case(...).triage())", built_case, 1) +
              f" = {built_case[1] / built_folder[1]:.2f}x")

        for folder in folders * 5:          # warm-up before measuring memory
            qcdoctor.triage(folder)
        before = rss_mb()
        start = time.perf_counter()
        latencies = []
        for i in range(500):
            t = time.perf_counter()
            qcdoctor.triage(folders[i % cases])
            latencies.append(time.perf_counter() - t)
        spent = time.perf_counter() - start
        grown, workers = rss_mb() - before, children()
        ok = grown < MEMORY_MB and workers <= 2
        results.append(ok)
        print(f"500 API triages: {500 / spent:.0f} cases/s, p50 "
              f"{statistics.median(latencies) * 1e3:.1f} ms; this process +{grown:.1f} MB, "
              f"{workers} child process(es)  target < {MEMORY_MB} MB and <= 2 children: "
              f"{verdict(ok)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
