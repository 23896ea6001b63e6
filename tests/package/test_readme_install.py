"""The README's first command on a stock distribution Python: one that refuses
`pip install` outside a virtual environment (PEP 668, Debian's and Ubuntu's), run from a
copy of the checkout as a new user would, with that Python first on PATH.

The second command runs this suite itself: its venv part is the first command's, and
.ci/run runs it whole."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

# a distribution's own Python, not the one running the tests (which may be a pyenv or a
# venv Python that pip installs into freely)
STOCK_PYTHONS = ("/usr/bin/python3",)


def _stock_python() -> str | None:
    for path in STOCK_PYTHONS:
        if not os.access(path, os.X_OK):
            continue
        # its standard library holds the PEP 668 marker, and its headers are there for
        # durable-rules' C engine
        found = subprocess.run([path, "-c", "import sysconfig, venv; print(sysconfig."
                                "get_path('stdlib')); print(sysconfig.get_path('include'))"],
                               capture_output=True, text=True)
        lines = found.stdout.split()
        if found.returncode == 0 and len(lines) == 2 and \
                (Path(lines[0]) / "EXTERNALLY-MANAGED").is_file() and \
                (Path(lines[1]) / "Python.h").is_file():
            return path
    return None


def _readme_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()


def _checkout_copy(target: Path) -> Path:
    """The files git tracks, as a clone has them (no .venv, no build outputs)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_the_first_command_works_on_a_python_that_refuses_pip_install(tmp_path):
    python = _stock_python()
    if python is None:
        pytest.skip("no externally managed distribution Python here")
    if not shutil.which("gcc"):
        pytest.skip("no compiler for durable-rules")
    checkout = _checkout_copy(tmp_path / "qcdoctor")
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python3").symlink_to(python)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_USER"):
        env.pop(name, None)
    # what the venv spares the user: that Python refuses a plain install
    plain = subprocess.run(["python3", "-m", "pip", "install", "--dry-run", "."],
                           cwd=checkout, env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "externally-managed-environment" in plain.stderr + plain.stdout
    first = _readme_commands()[0]
    done = subprocess.run(["bash", "-c", first], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "qcdoctor" in done.stdout and "convert" in done.stdout, done.stdout[:2000]
    assert (checkout / ".venv" / "bin" / "qcdoctor").exists()
