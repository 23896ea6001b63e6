"""Benchmark: the HTML report with all its plots against the Markdown report of the same
case, measured in the same run. Figures are min and median over repeats; targets are
judged on the median.

The case: a 50,000-row compare_per_layer table (23 columns, CSV without index, as the
profiler writes it), a sensitivity table, and x86/board dumps of four outputs, so the
report plots the stage chain, the per-layer curve, the sensitivity bars and the dumps.

- cold CLI: ``qcdoctor triage CASE --format html -o F`` vs ``--format md -o F`` (in turns),
  target <= 3x;
- in process (after a warm-up, in turns): triage + HTML rendering vs triage + Markdown
  rendering, target <= 3x;
- the HTML file: target <= 2 MB, and each inline plot <= 300 KB.

Run: python bench/bench_html_report.py
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the fixture writers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_triage import QCDOCTOR, big_table_case, run, verdict  # noqa: E402
from timing import byte_compiled, interleaved  # noqa: E402

from qcdoctor.collectors.case_file import load_case  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402
from qcdoctor.engine.reports.formats import render  # noqa: E402

LUT = "horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT"
CONV = "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d"


def plotted_case(folder: Path) -> Path:
    """bench_triage's 50,000-row case, plus sensitivity and dumps of four outputs."""
    from tests.qa.writers import write_sensitivity
    case, _ = big_table_case(folder)
    write_sensitivity(case / "qa_convert", [(f"model.block{i}.layer7.conv", "activation",
                                             LUT if i % 7 == 0 else CONV, 0.9 / (i + 1), "qint8")
                                            for i in range(200)])
    rng = np.random.default_rng(7)
    for i in range(4):
        base = rng.standard_normal(100_000).astype(np.float32)
        for side, values in (("x86", base), ("board", base * (1 - 0.1 * i) + 0.01 * i)):
            out = case / "dumps" / side
            out.mkdir(parents=True, exist_ok=True)
            np.save(out / f"model_infer_output_{i}.npy", values)
    with (case / "case.yaml").open("a", encoding="utf-8") as handle:
        handle.write("  hbm_x86: {status: abnormal}\n  board: {status: abnormal}\n"
                     "artifacts:\n  dumps: {hbm_x86: dumps/x86, board: dumps/board}\n")
    return case


def main() -> int:
    results = []
    print(f"bytecode: {byte_compiled()} package folders compiled, as an install does")
    with tempfile.TemporaryDirectory() as tmp:
        case = plotted_case(Path(tmp) / "case")
        out = Path(tmp) / "report"
        md, html = interleaved(
            run(QCDOCTOR + ["triage", str(case), "--format", "md", "-o", f"{out}.md"]),
            run(QCDOCTOR + ["triage", str(case), "--format", "html", "-o", f"{out}.html"]), runs=5)
        page = Path(f"{out}.html").read_text(encoding="utf-8")

        loaded = load_case(case)

        def report():
            return triage_case(loaded, environ={}, installed={}, cwd=case)
        render(report(), "html")                                  # warm: imports, rules
        warm_md, warm_html = interleaved(lambda: render(report(), "md"),
                                         lambda: render(report(), "html"), runs=7)
    for name, (lo, med), base in (("cold CLI", html, md), ("in process", warm_html, warm_md)):
        ratio = med / base[1]
        results.append(ratio <= 3.0)
        print(f"{name:10s} HTML min {lo * 1e3:6.0f} ms, median {med * 1e3:6.0f} ms = {ratio:4.2f}x"
              f" Markdown (min {base[0] * 1e3:.0f} ms, median {base[1] * 1e3:.0f} ms)"
              f"  target <= 3x: {verdict(ratio <= 3.0)}")
    plots = re.findall(r'(?s)<figure class="plot" id="([^"]+)">\s*(<svg\b.*?</svg>)', page)
    size = len(page.encode())
    results.append(size <= 2 * 2**20)
    print(f"HTML file: {size / 2**10:.0f} KB with {len(plots)} plots  target <= 2048 KB:"
          f" {verdict(size <= 2 * 2**20)}")
    for plot_id, svg in plots:
        kb = len(svg.encode()) / 2**10
        results.append(kb <= 300)
        print(f"  {plot_id:22s} {kb:6.0f} KB  target <= 300 KB: {verdict(kb <= 300)}")
    expected = {"plot-stages", "plot-layers-0", "plot-sensitivity-0", "plot-dumps-0"}
    results.append(expected <= {p for p, _ in plots})
    print(f"plots drawn: {', '.join(p for p, _ in plots)}  expected {', '.join(sorted(expected))}:"
          f" {verdict(expected <= {p for p, _ in plots})}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
