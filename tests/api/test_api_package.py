"""The API from the package root: loaded on first use (``import qcdoctor`` stays light),
listed by ``__all__`` and ``dir()``, shipped in the wheel with its ``py.typed`` marker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

import qcdoctor
from tests.paths import REPO


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = (f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))")
    with tempfile.TemporaryDirectory() as empty:    # no folder there to shadow a package
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True, timeout=300, cwd=empty)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _loaded(modules: set[str], names) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names)


def _imported(code: str) -> set[str]:
    """The modules ``python -X importtime -c code`` reports importing."""
    with tempfile.TemporaryDirectory() as empty:    # no folder there to shadow a package
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                              capture_output=True, text=True, check=True, timeout=300,
                              cwd=empty)
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and not line.endswith("| package")}


def test_import_qcdoctor_loads_nothing_else():
    assert _imported("import qcdoctor") - _imported("pass") == {"qcdoctor"}
    assert _modules_after("import qcdoctor") - _modules_after("pass") == {"qcdoctor"}


def test_the_api_loads_without_the_heavy_libraries():
    after = _modules_after("import qcdoctor\nqcdoctor.Report, qcdoctor.triage, qcdoctor.Case")
    assert "qcdoctor.engine.api" in after
    assert not _loaded(after, ("pandas", "numpy", "torch", "durable", "matplotlib"))
    # a triage matches its rules in the engine worker: durable_rules never loads here, nor
    # torch for a case without .pt files
    after = _modules_after("import qcdoctor\nqcdoctor.triage(example='convert_j6e_no_retrain')")
    assert not _loaded(after, ("torch", "durable"))


def test_the_root_lists_the_api():
    for name in qcdoctor.__all__:
        assert getattr(qcdoctor, name) is not None, name
    assert set(qcdoctor.__all__) <= set(dir(qcdoctor))
    assert qcdoctor.Report is qcdoctor.engine.api.Report
    # every name of the API is reachable from the root (the root lists them for laziness)
    assert set(qcdoctor.engine.api.__all__) <= set(qcdoctor.__all__)
    assert issubclass(qcdoctor.CaseError, qcdoctor.QcdoctorError)
    with pytest.raises(AttributeError, match="no attribute 'tirage'"):
        qcdoctor.tirage         # noqa: B018
    from qcdoctor import fact_types, triage  # submodules are still found
    assert triage is qcdoctor.triage and fact_types.STAGES
    namespace: dict = {}
    exec("from qcdoctor import *", namespace)
    assert {"triage", "audit", "Case", "Report", "CaseError"} <= set(namespace)
    assert set(qcdoctor.list_examples()) >= {"convert_j6e_no_retrain", "board_only"}


def test_the_wheel_ships_the_api_and_its_type_marker(tmp_path):
    source, wheels, target = tmp_path / "src", tmp_path / "wheels", tmp_path / "site"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(wheels)], check=True,
                   capture_output=True, timeout=600)
    wheel = next(wheels.glob("qcdoctor-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"qcdoctor/py.typed", "qcdoctor/engine/api/__init__.py", "qcdoctor/docs/python.md",
            "qcdoctor/examples/python_api.ipynb"} <= names
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if "BOARD_TYPE" not in k}
    env["PYTHONPATH"] = str(target)
    done = subprocess.run(
        [sys.executable, "-c", "import qcdoctor, sys\n"
         "r = qcdoctor.triage(example='board_only', lang='en')\n"
         "print(r.conclusion.stage, qcdoctor.engine.api.__file__.startswith(sys.argv[1]))",
         str(target)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.stdout.split() == ["user_side", "True"], done.stderr
