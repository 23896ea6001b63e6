"""sample_errors.csv (written by qcdoctor probe over many samples, beside its tables):
``sample,output,L1,MSE,KL,ATOL,Cosine,SQNR,shown``, a line per sample and output, samples
from 0 in order, each listing the outputs of sample 0 in the same order; floats with 7
decimals or ``nan``; ``shown`` 1 where that output's Cosine is below the search's tolerance.

Read a line at a time, holding one Cosine per sample (of one output) and the counts; the
first line at fault refuses the file, naming it (TableRefused), since a sample left out
would change on how many samples the error shows.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.key_checks import shown_value
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import TableRefused, check_columns
from qcdoctor.fact_types import SAMPLE_METRICS

COLUMNS = ("sample", "output", *SAMPLE_METRICS, "shown")
_INDEX = re.compile(r"[0-9]{1,18}")
_COSINE_END = 1.001             # a Cosine's magnitude, rounding aside


@dataclass
class SampleErrors:
    """What sample_errors.csv says: the outputs (as sample 0 lists them), the samples, on
    how many the error shows (on any output, on each), the Cosine of one output per sample,
    in sample order (NaN kept), and whether one sample shows the error on it (None: the
    file has no such sample)."""
    outputs: list[str]
    count: int
    shown_on: int
    shown_per_output: list[int]
    cosines: array
    chosen_shown: bool | None


def load_sample_errors(path: Path, output: str, chosen: int) -> SampleErrors:
    """sample_errors.csv, its Cosine kept for ``output`` (and whether sample ``chosen``
    shows the error there). TableRefused at the first line at fault (a missing column, a
    cell that is no number, a sample out of order or cut short, past the line caps),
    ValueError for a file with no data."""
    from qcdoctor.collectors.reading.own_error import csv_cells, data_lines, read_line
    with Path(path).open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        header = [h.strip() for h in csv_cells(read_line(handle, path, 1))]
        check_columns(len(header), 1, str(path))
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise _refused(reason("no {column} column (columns: {columns})", column=missing[0],
                                  columns=", ".join(header[:20])), 1)
        read = _Lines(header, output, chosen)
        for number, cells in data_lines(handle, path):
            if read.lines >= limits.SAMPLE_ERROR_LINES:
                raise _refused(reason("more than {cap} lines: past the lines a bad-case "
                                      "search is read with",
                                      cap=f"{limits.SAMPLE_ERROR_LINES:,}"), number)
            problem = read.line(cells)
            if problem:
                raise _refused(problem, number)
    if read.lines == 0:
        raise ValueError(reason("no data lines after the header"))
    problem = read.ended()
    if problem:
        raise _refused(problem, number)
    return SampleErrors(read.outputs, read.sample + 1, read.shown_on, read.shown_per_output,
                        read.cosines, read.chosen_shown)


def _refused(problem, line: int) -> TableRefused:
    """A bad line's refusal (the line itself is named by it), with what to do."""
    return TableRefused(problem, line=line, fix=reason(
        "write the file again with qcdoctor probe over the same samples, or remove it: "
        "triage then reads the search from probe_run.yaml alone"))


class _Lines:
    """The file's lines one at a time: each sample's lines together, samples from 0 in
    order, each listing sample 0's outputs in the same order."""

    def __init__(self, header: list[str], output: str, chosen: int):
        self.width = len(header)
        self.at = {name: header.index(name) for name in COLUMNS}
        self.output, self.chosen = output, chosen
        self.chosen_shown: bool | None = None
        self.outputs: list[str] = []
        self.sample, self.seen, self.lines = -1, 0, 0       # seen: lines of this sample
        self.shown_on, self.shown_here = 0, False
        self.shown_per_output: list[int] = []
        self.cosines = array("d")

    def line(self, cells: list[str]):
        """Take one line; the reason it cannot be read, or None."""
        if len(cells) != self.width:
            return reason("{cells} cells where the header has {header}", cells=len(cells),
                          header=self.width)
        text = cells[self.at["sample"]].strip()
        if not _INDEX.fullmatch(text):
            return reason("sample {value} is not a whole number of 0 or more",
                          value=shown_value(text))
        sample, name = int(text), cells[self.at["output"]].strip()
        problem = self._place(sample, name)
        if problem:
            return problem
        values = {}
        for metric in SAMPLE_METRICS:
            cell = cells[self.at[metric]].strip()
            try:
                values[metric] = float(cell)
            except ValueError:
                return reason("the {column} cell {value} is not a number", column=metric,
                              value=shown_value(cell))
        if abs(values["Cosine"]) > _COSINE_END:        # NaN passes: the probe writes it
            return reason("the Cosine cell {value} is outside -1 to 1",
                          value=shown_value(cells[self.at["Cosine"]].strip()))
        shown = cells[self.at["shown"]].strip()
        if shown not in ("0", "1"):
            return reason("shown is {value}, not 0 or 1", value=shown_value(shown))
        if shown == "1":
            self.shown_per_output[self.seen - 1] += 1
            self.shown_here = True
        if name == self.output:
            self.cosines.append(values["Cosine"])
            if sample == self.chosen:
                self.chosen_shown = shown == "1"
        self.lines += 1
        return None

    def _place(self, sample: int, name: str):
        """Where the line stands among the samples and outputs; the reason it is out of
        place, or None."""
        if sample == self.sample + 1 and (self.sample < 1 or self.seen == len(self.outputs)):
            self.shown_on += self.shown_here
            self.sample, self.seen, self.shown_here = sample, 0, False
        elif sample != self.sample:
            return self._out_of_order(sample)
        if self.sample == 0:
            if name in self.outputs:
                return reason("output {name} is listed twice for sample 0",
                              name=shown_value(name))
            self.outputs.append(name)
            self.shown_per_output.append(0)
        elif self.seen >= len(self.outputs):
            return reason("sample {sample} has more than the {expected} output lines sample "
                          "0 has", sample=sample, expected=len(self.outputs))
        elif name != self.outputs[self.seen]:
            return reason("output {name} where sample 0 lists {expected} (each sample lists "
                          "the outputs of sample 0, in its order)", name=shown_value(name),
                          expected=shown_value(self.outputs[self.seen]))
        self.seen += 1
        return None

    def _out_of_order(self, sample: int):
        if self.sample < 0:
            return reason("the first line is of sample {sample}, not 0", sample=sample)
        if sample == self.sample + 1:
            return self._cut_short()
        return reason("sample {sample} follows sample {previous} (the samples are listed "
                      "from 0, one after another)", sample=sample, previous=self.sample)

    def _cut_short(self):
        return reason("sample {sample} has {found} of the {expected} output lines sample 0 "
                      "has", sample=self.sample, found=self.seen, expected=len(self.outputs))

    def ended(self):
        """The reason the file ends where it does not end a sample, or None."""
        if self.sample > 0 and self.seen != len(self.outputs):
            return self._cut_short()
        self.shown_on += self.shown_here
        self.shown_here = False
        return None
