"""The probe's compiled kernel; everything else about the package is in pyproject.toml.

probe/fused_stats.c: the per-layer sums in one pass, built as a plain shared library that
probe/fused.py loads through ctypes. It uses no Python API, so it is no Python module: it
is named so that no import system takes it for one (``libqcdfused.so.1``, which pkgutil
does not list), and the wheel is tagged for any Python 3 on the platform, not for the
CPython that built it. Optional: without a C compiler (or where CFLAGS asks for fast
math, which would fold away its NaN tests) the install goes on without it and torch
computes the same numbers."""

import os
import shlex
import sysconfig

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

KERNEL_FILE = "libqcdfused.so.1"        # probe/fused.py loads this name
# flags under which the kernel's sums and NaN tests would not be the ones it is written for
FAST_MATH = ("-ffast-math", "-Ofast", "-ffinite-math-only", "-funsafe-math-optimizations",
             "-fassociative-math", "-fno-honor-nans")


def _fast_math_flags() -> list[str]:
    given = " ".join(os.environ.get(name, "") for name in ("CFLAGS", "CPPFLAGS", "CC"))
    given += " " + (sysconfig.get_config_var("CFLAGS") or "")
    return [flag for flag in shlex.split(given) if flag in FAST_MATH]


class BuildPlainLibrary(build_ext):
    """Extensions built as plain shared libraries: no ABI tag, no Python module name."""

    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")[:-1], KERNEL_FILE)

    def get_export_symbols(self, ext):
        return []                       # no PyInit_ function: it is no module

    def build_extension(self, ext):
        refused = _fast_math_flags()
        if refused:
            print(f"warning: the probe's kernel is not built: the compiler flags ask for "
                  f"{' '.join(refused)}, which would fold away its NaN tests and reorder its "
                  f"sums; qcdoctor probe computes the same numbers with torch")
            return
        super().build_extension(ext)


class AnyPython(bdist_wheel):
    """The library calls no Python: one wheel serves every Python 3 on the platform."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    ext_modules=[
        Extension("qcdoctor.probe.libqcdfused", sources=["probe/fused_stats.c"],
                  # no FMA contraction: the same float64 sums on every machine; no fast
                  # math whatever CFLAGS say (the source refuses to build under it too)
                  extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
                  optional=True),
    ],
    cmdclass={"build_ext": BuildPlainLibrary, "bdist_wheel": AnyPython},
)
