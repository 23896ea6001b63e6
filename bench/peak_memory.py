"""A process's memory, as the memory benchmarks read it from /proc (Linux): the resident
size now, the peak since the last reset, and the reset itself."""

from __future__ import annotations

from qcdoctor.engine.matching.worker_memory import resident_mb as rss_mib


def peak_mib() -> float:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1024


def reset_peak() -> float:
    """The peak starts again from here; returns the resident size it starts from."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    return rss_mib()
