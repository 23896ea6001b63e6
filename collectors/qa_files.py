"""The file names QuantAnalysis writes (knowledge.md §8), for discovery and the readers."""

from __future__ import annotations

import re

COMPARE_NAMES = ("compare_per_layer_out.txt", "compare_per_layer_out.csv")
ADVISOR_NAMES = ("abnormal_layer_advisor.txt", "abnormal_layer_advisor.csv")
BADCASE_NAMES = ("badcase.txt", "all_badcase_info.pt")
SENSITIVITY_RE = re.compile(r"^output_(?P<output>.+?)(?:_case_(?P<case>\d+))?_(?P<metric>L1|ATOL|"
                            r"Cosine|MSE|KL|SQNR)_sensitive_ops\.(?P<ext>txt|pt)$", re.IGNORECASE)
# written by ``qcdoctor probe`` beside its tables: where the numbers came from
PROBE_MANIFEST = "probe_run.yaml"
# written beside it by ``qcdoctor probe --try-fixes``: the remedies it measured
FIX_TRIALS = "fix_trials.yaml"
# written beside it by a probe over many samples: each sample's error on each output
SAMPLE_ERRORS = "sample_errors.csv"


def load_probe_manifest(path):
    """A probe_run.yaml as plain values, through the bounded YAML loader (the file comes
    from a case folder: its size, depth and aliases are limited like any case file's).
    QcdoctorError when it is not YAML."""
    from pathlib import Path

    from qcdoctor.collectors.yaml_schema import load_plain
    return load_plain(Path(path).read_text(encoding="utf-8"), str(path))


def run_for(runs, folder: str) -> dict | None:
    """The analyses_run entry whose out_dir is ``folder`` (compared as normalised paths),
    or None."""
    import os
    for run in runs or []:
        if isinstance(run, dict) and run.get("out_dir") and \
                os.path.normpath(str(run["out_dir"])) == os.path.normpath(folder):
            return run
    return None
