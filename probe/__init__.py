"""qcdoctor probe: layer metrics straight from two torch models, in the profiler's formats,
and remedies measured on a copy of the analysis model (fix_trials.yaml).

Importing this package imports torch; the rest of qcdoctor never imports it.
"""

from qcdoctor.probe.compare import ProbeResult, ProbeWarning, compare_models
from qcdoctor.probe.fix_apply import FixTrials, apply_fix
from qcdoctor.probe.quantizers import QParams, Quantizer, QuantizerAdapter, TorchAoAdapter
from qcdoctor.probe.samples import Samples

__all__ = ["FixTrials", "ProbeResult", "ProbeWarning", "QParams", "Quantizer", "Samples",
           "QuantizerAdapter", "TorchAoAdapter", "apply_fix", "compare_models"]
