"""qcdoctor probe: layer metrics straight from two torch models, in the profiler's formats.

Importing this package imports torch; the rest of qcdoctor never imports it.
"""

from qcdoctor.probe.compare import ProbeResult, ProbeWarning, compare_models
from qcdoctor.probe.quantizers import Quantizer, QuantizerAdapter, TorchAoAdapter

__all__ = ["ProbeResult", "ProbeWarning", "Quantizer", "QuantizerAdapter", "TorchAoAdapter", "compare_models"]
