"""The probe's kernel as a library: a plain shared library (no Python module, in no wheel
tied to one CPython), used only where its version number is the one fused.py was written
for (a stale, foreign, broken or missing library falls back to torch, saying why), never
built under fast math, and called only on tensors it cannot read or write past: an axis
in range, CPU float32 numbers, outputs that share no byte with what it reads."""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from qcdoctor.probe import fused  # noqa: E402
from tests.package.test_readme_install import _checkout_copy  # noqa: E402
from tests.paths import REPO  # noqa: E402

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="no C compiler")
SOURCE = REPO / "probe" / "fused_stats.c"


def test_the_kernel_is_a_plain_library_of_this_version():
    assert fused.available(), fused.why_not()
    import qcdoctor.probe as probe
    assert (Path(probe.__file__).parent / fused.KERNEL_FILE).is_file()
    names = {m.name for m in pkgutil.iter_modules(probe.__path__)}
    assert not any("fused_stats" in n or "qcdfused" in n for n in names), names
    assert f"qcd_fused_version = {fused.KERNEL_VERSION};" in SOURCE.read_text()


def _library(tmp_path: Path, body: str, name: str = "lib.so.1") -> Path:
    source, library = tmp_path / "k.c", tmp_path / name
    source.write_text("#include <stdint.h>\n" + body, encoding="utf-8")
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@needs_gcc
def test_a_stale_library_is_never_called(tmp_path):
    stale = _library(tmp_path, "const int32_t qcd_fused_version = 1;\n"
                               "void qcd_side_f32(const float *x, int64_t n) {}\n")
    library, why = fused._load(stale)
    assert library is None and "another version" in why and "reinstall" in why


@needs_gcc
def test_a_library_without_the_version_or_a_function_is_not_used(tmp_path):
    no_version = _library(tmp_path, "void qcd_side_f32(void) {}\n", "a.so.1")
    assert fused._load(no_version)[0] is None
    missing = _library(tmp_path, f"const int32_t qcd_fused_version = "
                                 f"{fused.KERNEL_VERSION};\n", "b.so.1")
    library, why = fused._load(missing)
    assert library is None and "incomplete" in why


def test_a_broken_or_missing_file_is_not_used(tmp_path):
    broken = tmp_path / "broken.so.1"
    broken.write_bytes(b"\x7fELF" + os.urandom(64))
    library, why = fused._load(broken)
    assert library is None and "not loadable" in why
    library, why = fused._load(tmp_path / "absent.so.1")
    assert library is None and "not built" in why


@needs_gcc
@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast", "-ffinite-math-only"])
def test_the_source_refuses_fast_math(tmp_path, flag):
    done = subprocess.run([GCC, "-shared", "-fPIC", flag, "-o", str(tmp_path / "k.so"),
                           str(SOURCE)], capture_output=True, text=True)
    assert done.returncode != 0 and "must not be built with -ffast-math" in done.stderr


@needs_gcc
def test_setup_skips_the_kernel_when_cflags_ask_for_fast_math(tmp_path):
    checkout = _checkout_copy(tmp_path / "qcdoctor")
    env = {**os.environ, "CFLAGS": "-O2 -ffast-math"}
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib",
                           str(tmp_path / "lib"), "--build-temp", str(tmp_path / "tmp")],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kernel is not built" in done.stdout + done.stderr
    assert not list((tmp_path / "lib").rglob(fused.KERNEL_FILE))


@needs_gcc
def test_the_wheel_is_for_any_python_3(tmp_path):
    checkout = _checkout_copy(tmp_path / "qcdoctor")      # its build outputs stay there
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path), str(checkout)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("qcdoctor-*.whl")
    assert "-py3-none-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert f"qcdoctor/probe/{fused.KERNEL_FILE}" in names
    assert not [n for n in names if n.endswith(".so") and "probe" in n]


def _x(n: int = 24) -> torch.Tensor:
    return torch.linspace(-3, 3, n, dtype=torch.float32).reshape(2, 3, 4)


def _numbers(channels: int, **options) -> list[torch.Tensor]:
    make = dict(dtype=torch.float32, **options)
    return [torch.full((channels,), 10.0, **make), torch.full((channels,), 0.1, **make),
            torch.full((channels,), -128.0, **make), torch.full((channels,), 127.0, **make)]


def test_a_negative_axis_counts_from_the_end():
    x = _x()
    forward, backward = torch.empty_like(x), torch.empty_like(x)
    assert fused.fake_quant_channels(x, forward, 2, *_numbers(4))
    assert fused.fake_quant_channels(x, backward, -1, *_numbers(4))
    assert torch.equal(forward, backward)


@pytest.mark.parametrize("axis", [3, -4, 99])
def test_an_axis_out_of_range_is_refused(axis):
    x = _x()
    with pytest.raises(ValueError, match="axis"):
        fused.fake_quant_channels(x, torch.empty_like(x), axis, *_numbers(4))


@pytest.mark.parametrize("make", [
    lambda: _numbers(4, device="meta"),
    lambda: [t.double() for t in _numbers(4)],
    lambda: [t.repeat(2)[::2] for t in _numbers(4)],           # not contiguous
    lambda: _numbers(3),                                        # another channel count
])
def test_per_channel_numbers_the_kernel_cannot_read_are_refused(make):
    x = _x()
    with pytest.raises(ValueError):
        fused.fake_quant_channels(x, torch.empty_like(x), 2, *make())


def test_an_output_sharing_memory_with_an_input_is_refused():
    x = _x().reshape(-1)
    with pytest.raises(ValueError, match="shares memory"):
        fused.fake_quant(x, x, 10.0, 0.1, -128.0, 127.0)
    buffer = torch.zeros(40)
    with pytest.raises(ValueError, match="shares memory"):
        fused.fake_quant(buffer[:24], buffer[8:32], 10.0, 0.1, -128.0, 127.0)
    base, analysis = torch.ones(24), torch.zeros(24)
    with pytest.raises(ValueError, match="shares memory"):
        fused.pair(base, analysis, base)
    fused.fake_quant(buffer[:16], buffer[16:32], 10.0, 0.1, -128.0, 127.0)     # apart: fine
