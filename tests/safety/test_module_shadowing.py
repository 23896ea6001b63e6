"""Run inside a case folder someone sent, qcdoctor imports none of the folder's modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

MODULES = ("yaml", "jinja2", "markdown", "durable", "pandas", "numpy")


def _shadowing_folder(tmp_path: Path) -> Path:
    case = tmp_path / "case"
    shutil.copytree(REPO / "examples" / "convert_j6p", case)
    for name in MODULES:
        (case / f"{name}.py").write_text(
            f"open({str(tmp_path / 'imported')!r}, 'a').write({name!r} + '\\n')\n"
            "raise SystemExit('shadowed')\n", encoding="utf-8")
    return case


def _run(command: list[str], case: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run(command + ["triage", ".", "--lang", "en"], cwd=case, env=env,
                          capture_output=True, text=True, timeout=120)


def test_python_m_does_not_import_the_working_directory(tmp_path):
    case = _shadowing_folder(tmp_path)
    result = _run([sys.executable, "-m", "qcdoctor"], case)
    assert result.returncode == 0, result.stderr
    assert "Most likely stage" in result.stdout
    assert not (tmp_path / "imported").exists()


def test_the_console_script_does_not_import_the_working_directory(tmp_path):
    script = Path(sys.executable).with_name("qcdoctor")
    if not script.exists():
        pytest.skip("qcdoctor is not installed as a console script here")
    case = _shadowing_folder(tmp_path)
    result = _run([str(script)], case)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "imported").exists()
