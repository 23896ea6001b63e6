"""Compiled report templates are kept between runs, in a folder private to the user; a
shared or foreign folder is never used, and a damaged entry is compiled afresh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qcdoctor import cache_files

_RENDER = ("import sys\nfrom qcdoctor.engine.commands.examples import example_path\n"
           "from qcdoctor.engine.reports.formats import render\n"
           "from qcdoctor.engine.diagnosis.triage import triage_path\n"
           "with example_path('convert_j6e_no_retrain') as p:\n"
           "    r = triage_path(p, lang='en', environ={}, installed={}, display_path='x')\n"
           "sys.stdout.write(render(r, 'md'))\n")


def _render(cache: str) -> str:
    env = dict(os.environ, QCDOCTOR_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", _RENDER], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_templates_are_compiled_once_and_reports_stay_identical(tmp_path):
    cache = tmp_path / "cache"
    uncached = _render("off")
    assert _render(str(cache)) == uncached                    # compiles and stores
    stored = sorted((cache / "templates").iterdir())
    assert stored and (cache / "templates").stat().st_mode & 0o777 == 0o700
    for entry in stored:                                      # damage every entry
        entry.write_bytes(entry.read_bytes()[:40] + b"\x00garbage")
    assert _render(str(cache)) == uncached                    # recompiled, same report


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_folder_others_can_write_to_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(tmp_path))
    shared = tmp_path / "templates"
    shared.mkdir()
    shared.chmod(0o777)
    assert cache_files.private_dir("templates") is None
    shared.chmod(0o700)
    assert cache_files.private_dir("templates") == shared
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", "off")
    assert cache_files.private_dir("templates") is None
