"""Load the profiler's .pt files safely; torch is imported only here, only when needed."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.errors import QcdoctorError


class UnsafePickle(QcdoctorError):
    """The file needs arbitrary unpickling, which was not allowed."""


def load_pt(path: Path, trust_pickles: bool = False):
    """``torch.load(weights_only=True)``; with ``trust_pickles`` a full unpickle is allowed."""
    try:
        import torch
    except ImportError:
        raise QcdoctorError(reason("reading .pt files needs torch"), file=str(path),
                            fix=reason("pip install torch==2.13.0 (CPU build is enough)")
                            ) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        unpickling = "weights_only" in str(exc) or "Unsupported global" in str(exc) \
            or "UnpicklingError" in type(exc).__name__
        if not unpickling:
            raise QcdoctorError(reason("cannot read this .pt file ({error})",
                                       error=f"{type(exc).__name__}: "
                                             f"{str(exc).splitlines()[0][:200]}"),
                                file=str(path),
                                fix=reason("check the file is complete (not truncated) and was "
                                           "written by torch.save")) from None
        if not trust_pickles:
            raise UnsafePickle(reason("this .pt file needs arbitrary unpickling (it stores "
                                      "Python objects, not only tensors), which can run code"),
                               file=str(path),
                               fix=reason("if you trust where it came from, pass "
                                          "--trust-pickles")) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001
        raise QcdoctorError(reason("cannot read this .pt file even with --trust-pickles "
                                   "({error})", error=type(exc).__name__), file=str(path),
                            fix=reason("the classes it references may need the Horizon "
                                       "packages; send the .txt variant instead")) from None
