"""The probe's compiled kernel; everything else about the package is in pyproject.toml.

probe/fused_stats.c: the per-layer sums in one pass (probe/fused.py loads it through
ctypes). Optional: without a C compiler the install goes on and torch computes them."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("qcdoctor.probe._fused_stats", sources=["probe/fused_stats.c"],
              # no FMA contraction: the same float64 sums on every machine
              extra_compile_args=["-O2", "-ffp-contract=off"],
              optional=True),
])
