"""Input limits: what one input may cost in time and memory before it is refused.

Each limit is far above any real case and far below what makes a run hang or swap; an
input past one is refused with exit 2 and a message naming the file and the limit.
docs/case-file.md ("Input limits") lists them; the numbers live only here.
"""

from __future__ import annotations

CASE_FILE_BYTES = 1 << 20       # case.yaml and intake --answers files (1 MiB)
YAML_DEPTH = 32                 # nesting levels of lists and mappings in a YAML document
YAML_NODES = 100_000            # values in a YAML document, aliases expanded ("billion laughs")
LIST_ITEMS = 1_000              # items in one YAML list
TEXT_CHARS = 10_000             # characters in one YAML value
NUMBER_DIGITS = 308             # digits of one integer in YAML or JSON (no float holds more)
SCRIPT_FOLLOWED_CALLS = 10_000  # calls of a compile script's own functions that are followed
SCRIPT_LIST_ITEMS = 100_000     # items of a list constant in a compile script ([0.0] * n)
# QuantAnalysis and profiler tables (compare_per_layer, sensitivity, statistic, fx_graph...):
# the widest real one has 26 columns and lines of a few hundred bytes; past these a table
# is no such output, and reading it on would cost time and memory by its width
TABLE_COLUMNS = 500             # columns in a table's header
TABLE_LINE_BYTES = 65_536       # bytes in one line of a table, header or row
# sample_errors.csv (the probe's bad-case search): a line per sample and output, each
# sample two forward passes; a million lines is far past any search one waits for, and
# the chosen output's Cosine of each sample is held for the report's plot
SAMPLE_ERROR_LINES = 1_000_000


def size_text(count: int) -> str:
    """1048576 -> '1 MiB'; other counts with thousands separators."""
    if count >= 1 << 20 and count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    return f"{count:,}"
