"""qcdoctor probe: layer metrics straight from two torch models, in the profiler's formats,
and remedies measured on a copy of the analysis model (fix_trials.yaml).

Importing this package imports torch; the rest of qcdoctor never imports it.
"""

from qcdoctor.probe.compare import ProbeResult, ProbeWarning, compare_models
from qcdoctor.probe.quantizers import QParams, Quantizer, QuantizerAdapter, TorchAoAdapter

__all__ = ["ProbeResult", "ProbeWarning", "QParams", "Quantizer", "QuantizerAdapter",
           "TorchAoAdapter", "compare_models"]
