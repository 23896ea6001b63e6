"""The bad-case search's files: ``badcase.txt`` in the profiler's three-table layout
(collectors/badcase.py reads its first table) and ``sample_errors.csv``, every sample's
error on every output in every metric (docs/probe.md, The probe over many samples)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from qcdoctor.collectors.qa_writers import psql
from qcdoctor.probe.badcase_search import METRIC_NAMES, SampleSearch, badness

BADCASE_FILE = "badcase.txt"
SAMPLE_ERRORS_FILE = "sample_errors.csv"
SAMPLE_ERRORS_COLUMNS = ("sample", "output", *METRIC_NAMES, "shown", "rounding_Cosine")


def badcase_text(search: SampleSearch) -> str:
    """Three psql tables, a metric a row: the worst sample's index per output; that
    sample's value; the worst output (its name, the sample, the value)."""
    worst = {metric: [search.worst_index(o, metric) for o in range(len(search.outputs))]
             for metric in METRIC_NAMES}
    indices = [[metric] + [str(i) for i in worst[metric]] for metric in METRIC_NAMES]
    values = [[metric] + [_number(search.value(i, o, metric))
                          for o, i in enumerate(worst[metric])] for metric in METRIC_NAMES]
    header = ["metric", *search.outputs]
    rows = []
    for metric in METRIC_NAMES:
        o = _worst_output(search, worst[metric], metric)
        sample = worst[metric][o]
        rows.append([metric, search.outputs[o], str(sample),
                     _number(search.value(sample, o, metric))])
    return ("The bad case input index of each output:\n" + psql(header, indices, index=False)
            + "\nThe metric results of each bad case:\n" + psql(header, values, index=False)
            + "\nThe bad output of each metric:\n"
            + psql(["metric", "output", "index", "value"], rows, index=False))


def sample_errors_text(search: SampleSearch) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SAMPLE_ERRORS_COLUMNS)
    for sample, row in enumerate(search.errors):
        for o, (name, values) in enumerate(zip(search.outputs, row, strict=True)):
            steps = search.rounding[sample][o] if search.rounding else float("nan")
            writer.writerow([sample, name, *(_number(v) for v in values),
                             int(search.shows(sample, o)), _number(steps)])
    return out.getvalue()


def write_badcase(folder: Path, search: SampleSearch) -> Path:
    path = Path(folder) / BADCASE_FILE
    path.write_text(badcase_text(search), encoding="utf-8")
    return path


def write_sample_errors(folder: Path, search: SampleSearch) -> Path:
    path = Path(folder) / SAMPLE_ERRORS_FILE
    path.write_text(sample_errors_text(search), encoding="utf-8")
    return path


def _worst_output(search: SampleSearch, worst: list[int], metric: str) -> int:
    return min(range(len(worst)),
               key=lambda o: (badness(search.value(worst[o], o, metric), metric), o))


def _number(value: float) -> str:
    if value != value:
        return "nan"
    return f"{value:.7f}" if abs(value) < 1e15 else repr(value)
