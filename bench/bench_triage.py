"""Benchmark: triage throughput, memory growth, and CLI start-up, each beside a baseline
measured in the same run.

- throughput: cases per second over 1,000 varied cases in one process; baseline: the
  same cases only loaded and turned into facts (no rules), so the ratio shows what the
  engine adds. Target >= 100 cases/s.
- memory: RSS growth over the 1,000 cases after a warm-up; baseline: growth over 1,000
  plain fact collections. Target < 20 MB.
- start-up: ``qcdoctor --help`` wall time; baseline: ``python -c pass``. Target: the
  help path imports neither torch nor pandas.

Run: python bench/bench_triage.py
"""

from __future__ import annotations

import random
import resource
import subprocess
import sys
import time

import yaml

from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.collectors.case_file import parse_case
from qcdoctor.engine.triage import triage_case

STAGES = ["float", "calib", "qat", "qat_export", "qat_bc", "quantized_bc", "hbm_x86", "board"]


def varied_cases(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        chosen = sorted(rng.sample(range(len(STAGES)), rng.randint(0, 5)))
        value, stages = 0.45, {}
        for i in chosen:
            value -= rng.choice([0.0, 0.001, 0.03])
            stages[STAGES[i]] = {"metric": "mAP", "value": round(value, 4)}
        texts.append(yaml.safe_dump({
            "schema": "qcdoctor/case-v1", "symptom": "drop",
            "evidence": [rng.choice(["dataset_eval", "single_frame", "reproducible_badcase"])],
            "badcase": rng.choice(["available", "dataset_only", "none"]),
            "platform": {"chip": rng.choice(["J6E", "J6M", "J6P", "J6B"])},
            "versions": {"hbdk4-compiler": rng.choice(["4.4.1", "4.4.2", "4.9.0"])},
            "retrain": rng.choice(["yes", "no", "unknown"]),
            "consistency_levels_tried": rng.sample([0, 1, 2], rng.randint(0, 2)),
            "tolerance": {"abs": rng.choice([0.005, 1e-5, 0.01])},
            "stages": stages}))
    return texts


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def timed(fn, texts):
    start = time.perf_counter()
    for text in texts:
        fn(text)
    return time.perf_counter() - start


def only_facts(text):
    return collect_facts(parse_case(text, None, None), environ={}, installed={})


def full_triage(text):
    return triage_case(parse_case(text, None, None), environ={}, installed={})


def startup(cmd: list[str], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    texts = varied_cases(1000)
    for text in texts[:100]:                      # warm-up: caches, rules compiled
        full_triage(text)
        only_facts(text)

    base_mem = rss_mb()
    base_time = timed(only_facts, texts)
    base_growth = rss_mb() - base_mem
    mem = rss_mb()
    triage_time = timed(full_triage, texts)
    growth = rss_mb() - mem

    rate = len(texts) / triage_time
    print(f"throughput: {rate:8.0f} cases/s triage, {len(texts) / base_time:8.0f} cases/s facts only"
          f" (triage takes {triage_time / base_time:.2f}x the fact collection)"
          f"  target >= 100 cases/s: {'OK' if rate >= 100 else 'MISSED'}")
    print(f"memory:     {growth:8.1f} MB growth over 1,000 triages, {base_growth:.1f} MB for"
          f" facts only  target < 20 MB: {'OK' if growth < 20 else 'MISSED'}")

    help_time = startup([sys.executable, "-m", "qcdoctor", "--help"])
    bare_time = startup([sys.executable, "-c", "pass"])
    probe = subprocess.run([sys.executable, "-c",
                            "import sys\nfrom qcdoctor.engine.cli import main\n"
                            "try: main(['--help'])\nexcept SystemExit: pass\n"
                            "print('HEAVY:' + ','.join(m for m in ('torch', 'pandas') "
                            "if m in sys.modules))"],
                           capture_output=True, text=True, check=True)
    heavy = probe.stdout.rsplit("HEAVY:", 1)[-1].strip()
    print(f"start-up:   {help_time * 1000:8.0f} ms qcdoctor --help, {bare_time * 1000:.0f} ms bare"
          f" python ({help_time / bare_time:.2f}x); heavy imports: {heavy or 'none'}"
          f"  target no torch/pandas: {'OK' if not heavy else 'MISSED'}")
    ok = rate >= 100 and growth < 20 and not heavy
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
