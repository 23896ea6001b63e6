"""Write QuantAnalysis outputs in the exact formats horizon_plugin_profiler uses.

Tests build their fixtures with these: the compare and sensitivity tables come from the
product's own writer (the one ``qcdoctor probe`` uses); the rest follows the real samples.
"""

from __future__ import annotations

import math
from pathlib import Path

from qcdoctor.collectors.qa_writers import (  # noqa: F401 - re-exported for the tests
    COMPARE_FORMATS,
    LAYOUTS,
    compare_rows,
    write_compare,
    write_sensitivity,
)
from qcdoctor.collectors.qa_writers import psql as _psql


def layer(name: str, cosine: float | None, *, op="torch.nn.modules.conv.Conv2d",
          analy_op="horizon_plugin_pytorch.nn.qat.conv2d.Conv2d", dtype="qint8",
          qscale=0.0082740, base=(-1.0, 1.0), analy=None, atol=None, shape="torch.Size([1, 8, 4, 4])"):
    analy = analy or base
    if atol is None and cosine is not None:
        atol = max(1e-6, (1.0 - cosine) * 2.0)
    return {"mod_name": name, "base_op_type": op, "analy_op_type": analy_op, "shape": shape,
            "quant_dtype": dtype, "qscale": qscale, "cosine": cosine,
            "l1": None if cosine is None else (1.0 - cosine) / 3, "atol": atol,
            "max_qscale_diff": None if atol is None or qscale is None else atol / qscale,
            "base_model_min": base[0], "analy_model_min": analy[0], "base_model_max": base[1],
            "analy_model_max": analy[1], "base_model_mean": 0.01, "analy_model_mean": 0.011,
            "mse": None if cosine is None else (1.0 - cosine) / 10, "kl": 0.0,
            "sqnr": None if cosine is None else 30.0, "rtol": 0.5, "base_model_var": 0.3,
            "analy_model_var": 0.31, "max_atol_diff": atol, "advice": ""}


def write_advisor(folder: Path, rows: list[tuple]) -> Path:
    """rows: (mod_name, op_type, abnormal_info, advice)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "abnormal_layer_advisor.txt"
    path.write_text(_psql(["mod_name", "op_type", "abnormal_info", "advice"],
                          [list(r) for r in rows]), encoding="utf-8")
    return path


def write_badcase(folder: Path, worst: dict[str, dict[str, int]]) -> Path:
    """worst: metric -> output -> dataloader index (the first of badcase.txt's tables)."""
    folder.mkdir(parents=True, exist_ok=True)
    outputs = sorted({o for per in worst.values() for o in per})
    first = _psql(["metric"] + outputs,
                  [[m] + [str(per.get(o, "")) for o in outputs] for m, per in worst.items()],
                  index=False)
    values = _psql(["metric"] + outputs, [[m] + ["0.5" for _ in outputs] for m in worst], index=False)
    path = folder / "badcase.txt"
    path.write_text("The bad case input index of each output:\n" + first +
                    "\nThe metric results of each bad case:\n" + values, encoding="utf-8")
    return path


def write_fx_graph(path: Path, nodes: list[tuple[str, str, str, str]]) -> Path:
    """nodes: (opcode, name, target, args)."""
    header = ["opcode", "name", "target", "args", "kwargs"]
    rows = [list(n) + ["{}"] for n in nodes]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    line = lambda cs: "  ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)).rstrip()  # noqa: E731
    text = "Graph:\n" + "\n".join([line(header), "  ".join("-" * w for w in widths)] +
                                  [line(r) for r in rows]) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def write_model_check(path: Path, *, unfused=(), called=(), dequant_qint8=(), averaging=()) -> Path:
    parts = []
    if unfused:
        w = max(len(n) for n in unfused) + 2
        parts.append("Fusable modules are listed below:\nname".ljust(w + 33) + "type\n" +
                     "-" * w + "  " + "-" * 40 + "\n" +
                     "\n".join(f"{n.ljust(w)}  <class 'horizon_plugin_pytorch.nn.qat.conv2d.Conv2d'>"
                               for n in unfused) + "\n")
    else:
        parts.append("All fusable modules are fused in model!\n")
    if called:
        w = max(len(n) for n, _ in called) + 2
        parts.append("Each module called times:\n" + "name".ljust(w) + "  called times\n" +
                     "-" * w + "  " + "-" * 14 + "\n" +
                     "\n".join(f"{n.ljust(w)}  {t:>14}" for n, t in called) + "\n")
    else:
        parts.append("All modules in the model run exactly once.\n")
    rows = [["quant", "<class 'horizon_plugin_pytorch.nn.qat.stubs.QuantStub'>", "[torch.float32]",
             "['qint8']", "-1", "MinMaxObserver"]]
    rows += [[n, "<class 'horizon_plugin_pytorch.nn.qat.stubs.DeQuantStub'>", "['qint8']",
              "[torch.float32]", "qconfig = None", ""] for n in dequant_qint8]
    rows += [[n, "<class 'horizon_plugin_pytorch.nn.qat.conv2d.Conv2d'>", "['qint8']", "['qint8']",
              "-1", f"MinMaxObserver(averaging_constant={a})"] for n, a in averaging]
    parts.append("Each layer out qconfig:\n" + _psql(["Module Name", "Module Type", "Input dtype",
                                                      "out dtype", "ch_axis", "observer"],
                                                     rows, index=False))
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# the probe's bad-case search (probe/badcase_files.py, probe/badcase_search.py): the
# metrics of sample_errors.csv in its column order, and how each is made from a sample's
# Cosine here (an error falls as the Cosine rises, so the worst by L1 has the lowest Cosine)
SAMPLE_METRICS = ("L1", "MSE", "KL", "ATOL", "Cosine", "SQNR")
_FROM_COSINE = {"L1": lambda c: 3.0 * (1.0 - c), "MSE": lambda c: 10.0 * (1.0 - c),
                "KL": lambda c: 0.5 * (1.0 - c), "ATOL": lambda c: 7.0 * (1.0 - c),
                "Cosine": lambda c: c, "SQNR": lambda c: 40.0 * c - 30.0}
_ASCENDING = ("Cosine", "SQNR")                 # smaller is worse


def _cell(value: float) -> str:
    """A number as the probe writes it: 7 decimals, ``nan`` for NaN."""
    if value != value:
        return "nan"
    return f"{value:.7f}" if abs(value) < 1e15 else repr(value)


ROUNDING_FACTOR = 10.0          # the probe's (probe/badcase_search.py)


def _shows(cosine: float, tolerance: float, steps: float | None) -> bool:
    """The probe's rule: below the tolerance and, where the clean model's Cosine
    ``steps`` was measured, past ROUNDING_FACTOR times its error."""
    if cosine >= tolerance:
        return False
    return steps is None or not (1.0 - cosine) <= ROUNDING_FACTOR * max(1.0 - steps, 0.0)


def sample_errors_text(cosines: dict[str, list[float]], tolerance: float = 0.999,
                       rounding: dict[str, list[float]] | None = None) -> str:
    """sample_errors.csv as qcdoctor probe writes it: ``cosines`` is output name -> that
    output's Cosine of each sample (every output the same number of samples); ``rounding``
    likewise the clean model's Cosines (None: not measured)."""
    import csv
    import io
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("sample", "output", *SAMPLE_METRICS, "shown", "rounding_Cosine"))
    count = len(next(iter(cosines.values())))
    for sample in range(count):
        for name, values in cosines.items():
            cosine = values[sample]
            steps = None if rounding is None else rounding[name][sample]
            writer.writerow([sample, name, *(_cell(_FROM_COSINE[m](cosine)) for m in SAMPLE_METRICS),
                             int(_shows(cosine, tolerance, steps)),
                             _cell(math.nan if steps is None else steps)])
    return out.getvalue()


def _badness(value: float, metric: str) -> float:
    if value != value:
        return -math.inf
    return value if metric in _ASCENDING else -value


def samples_summary(cosines: dict[str, list[float]], *, metric: str = "L1",
                    tolerance: float = 0.999, badcase: int | None = None,
                    keep: int = 3, replayable: bool = True,
                    rounding: dict[str, list[float]] | None = None) -> dict:
    """probe_run.yaml's ``samples`` for those Cosines, computed as the probe does: the
    worst sample by ``metric`` per output, the chosen output (its worst the largest), the
    chosen sample (the worst, or ``badcase``) and its rank there, where the error shows."""
    names = list(cosines)
    count = len(cosines[names[0]])

    def value(sample, name):
        return _FROM_COSINE[metric](cosines[name][sample])

    def key(sample, name):
        return (_badness(value(sample, name), metric), sample)
    worst = {name: min(range(count), key=lambda s, n=name: key(s, n)) for name in names}
    output = min(names, key=lambda n: (_badness(value(worst[n], n), metric), names.index(n)))
    chosen = worst[output] if badcase is None else badcase
    mine = _badness(value(chosen, output), metric)
    rank = 1 + sum(_badness(value(s, output), metric) < mine for s in range(count))

    def shows(sample, names_=names):
        return any(_shows(cosines[n][sample], tolerance,
                          None if rounding is None else rounding[n][sample]) for n in names_)

    def below(sample, names_=names):
        return any(not cosines[n][sample] >= tolerance for n in names_)

    def median(values):
        finite = sorted(v for v in values if v == v)
        if not finite:
            return None
        middle = len(finite) // 2
        found = finite[middle] if len(finite) % 2 else (finite[middle - 1] + finite[middle]) / 2
        return round(found, 7)
    per_output = {name: {"worst": worst[name],
                         "worst_value": None if value(worst[name], name) != value(worst[name], name)
                         else round(value(worst[name], name), 7),
                         "median_cosine": median(cosines[name]),
                         "shown_on": sum(shows(s, [name]) for s in range(count)),
                         "below_tolerance": sum(below(s, [name]) for s in range(count))}
                  for name in names}
    ranked = sorted(range(count), key=lambda s: key(s, output))
    return {"count": count, "metric": metric, "tolerance_cosine": tolerance, "chosen": chosen,
            "chosen_by": "worst" if badcase is None else "given", "output": output,
            "rank": rank, "shown_on": sum(shows(s) for s in range(count)),
            "below_tolerance": sum(below(s) for s in range(count)),
            "rounding_factor": None if rounding is None else ROUNDING_FACTOR,
            "spread": len(set(worst.values())) > 1, "outputs": per_output,
            "kept_worst": ranked[:keep], "replayable": replayable}


def write_probe_search(folder: Path, cosines: dict[str, list[float]], *,
                       samples: dict | None = None, errors_text: str | None = None,
                       **options) -> Path:
    """A probe folder's bad-case search: ``samples`` (default: ``samples_summary`` of the
    Cosines with ``options``) into its probe_run.yaml (written with the probe's keys if
    there is none), and sample_errors.csv (``errors_text`` as it is, when given)."""
    import yaml
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "probe_run.yaml"
    manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8")) \
        if manifest_path.exists() else {"origin": "probe", "type": "fake_quant",
                                        "baseline": "float", "analysis": "calib"}
    manifest["samples"] = samples if samples is not None else samples_summary(cosines, **options)
    files = set(manifest.get("files") or []) | {"sample_errors.csv"}
    manifest["files"] = sorted(files)
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    text = errors_text if errors_text is not None else sample_errors_text(
        cosines, manifest["samples"]["tolerance_cosine"]
        if isinstance(manifest["samples"], dict) else 0.999, rounding=options.get("rounding"))
    (folder / "sample_errors.csv").write_text(text, encoding="utf-8")
    return folder
