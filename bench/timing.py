"""Shared by the benchmarks: wall times over repeats, reported as min and median."""

from __future__ import annotations

import statistics
import time


def times(fn, runs: int = 5) -> list[float]:
    """Wall time of each of ``runs`` calls, in seconds."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def best(fn, runs: int = 5) -> float:
    """The fastest of ``runs`` calls, in seconds (the least disturbed by the machine)."""
    return min(times(fn, runs))


def spread(fn, runs: int = 5) -> tuple[float, float]:
    """(min, median) of ``runs`` calls, in seconds."""
    return min_median(times(fn, runs))


def min_median(values: list[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


def interleaved(*calls, runs: int = 7) -> tuple[tuple[float, float], ...]:
    """(min, median) of each call, measured in turns so that all see the same load on a
    busy machine."""
    measured: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        for fn, out in zip(calls, measured, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return tuple(min_median(values) for values in measured)


def byte_compiled() -> int:
    """Compile qcdoctor's modules to bytecode, as ``pip install`` does: a cold start measured
    on an editable install under PYTHONDONTWRITEBYTECODE would otherwise time the compiler.
    Returns how many package folders were compiled."""
    import compileall
    import importlib.util
    try:
        import tomllib
    except ImportError:                     # Python 3.10
        import tomli as tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                            .read_text(encoding="utf-8"))
    folders = set()
    for name in project["tool"]["setuptools"]["packages"]:
        spec = importlib.util.find_spec(name)
        folders.update(spec.submodule_search_locations or ())
    for folder in sorted(folders):
        compileall.compile_dir(folder, maxlevels=0, quiet=2)
    return len(folders)
