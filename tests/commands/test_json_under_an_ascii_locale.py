"""Under a locale whose encoding cannot hold the report's characters (``PYTHONUTF8=0
LC_ALL=POSIX``), every JSON the commands print on stdout is still JSON: characters the
encoding lacks are written as JSON's ``\\uXXXX`` escapes (a surrogate pair beyond the BMP),
never Python's ``\\U0001f680``, and read back as the characters they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TITLE = "🚀 中文 é"


def _run(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONUTF8": "0", "LC_ALL": "POSIX", "LANG": "POSIX"}
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run([sys.executable, "-m", "qcdoctor", *args], capture_output=True,
                          env=env, cwd=cwd, timeout=120)
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    out = done.stdout
    assert out.isascii()                      # the locale's encoding: nothing else passes
    return out.decode("ascii")


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ascii") / "case"
    folder.mkdir()
    (folder / "case.yaml").write_text(f'title: "{TITLE}"\nsymptom: mAP drops\n'
                                      "platform: {chip: J6E}\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_triage_json_is_json(case, fmt):
    text = _run("triage", str(case), "--format", fmt, "--lang", "zh", cwd=case.parent)
    document = json.loads(text)
    if fmt == "json":
        assert document["case"]["title"] == TITLE
    assert "\\U0001f680" not in text


def test_a_jsonl_batch_is_one_json_document_a_line(case):
    text = _run("triage", str(case), str(case), "--format", "jsonl", cwd=case.parent)
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert len(lines) == 2 and "\\U0001f680" not in text
    assert TITLE in json.dumps(lines, ensure_ascii=False)


def test_collect_json_is_json(case):
    facts = json.loads(_run("collect", str(case), "--format", "json", cwd=case.parent))
    assert any(TITLE in json.dumps(f, ensure_ascii=False) for f in facts) or facts


def test_compare_and_rules_json_are_json(tmp_path):
    (tmp_path / "中").mkdir()
    np.save(tmp_path / "中" / "a.npy", np.ones(4, dtype=np.float32))
    np.save(tmp_path / "中" / "b.npy", np.ones(4, dtype=np.float32))
    results = json.loads(_run("compare", "中/a.npy", "中/b.npy", "--format", "json",
                              cwd=tmp_path))
    assert results[0]["left"].endswith("a.npy") and results[0]["identical"]
    rules = json.loads(_run("rules", "list", "--format", "json", "--lang", "zh",
                            cwd=tmp_path))
    assert rules and any(any("\u4e00" <= c <= "\u9fff" for c in json.dumps(r,
                                                                          ensure_ascii=False))
                         for r in rules)


def test_markdown_reads_the_same_escapes(case):
    text = _run("triage", str(case), "--format", "md", "--lang", "en", cwd=case.parent)
    assert "\\ud83d\\ude80" in text and "\\U0001f680" not in text
