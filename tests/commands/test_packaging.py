"""A built wheel carries everything the code reads (rules, templates, labels, examples)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.paths import REPO


def test_wheel_install_runs_an_example(tmp_path):
    wheels, target, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "src"
    # build from a copy: the build writes build/ and *.egg-info next to the sources; what
    # .gitignore keeps out of the sources (a checkout's virtual environment: gigabytes of
    # torch) stays out of the copy
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
        ".ruff_cache", ".benchmarks", ".venv", "venv", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(wheels)], check=True,
                   capture_output=True)
    wheel = next(wheels.glob("qcdoctor-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if "BOARD_TYPE" not in k}
    env["PYTHONPATH"] = str(target)
    result = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", "--example",
                             "board_only", "--format", "json"], capture_output=True, text=True,
                            cwd=tmp_path, env=env, check=True)
    report = json.loads(result.stdout)
    assert report["conclusion"]["stage"] == "user_side"
    platform = next(f for f in report["facts"] if f["type"] == "platform")
    assert platform["march"] == "nash-m"                 # the hidden .env.board shipped
    assert str(target) in subprocess.run(
        [sys.executable, "-c", "import qcdoctor.engine as e; print(e.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    # the probe package ships too (it imports torch, which the test environment has)
    probe = subprocess.run(
        [sys.executable, "-c", "import qcdoctor.probe.compare as c; print(c.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env)
    assert str(target) in probe.stdout, probe.stderr
