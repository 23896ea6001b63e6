"""A case without QuantAnalysis tables or dumps is triaged without numpy or pandas: only
the collectors that read tables load them. Checked in a fresh process, counting the
children it forks (the case reader, the engine worker), which inherit the recorder."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.paths import REPO

# records every import of numpy or pandas, in this process and in the ones it forks
RUN = textwrap.dedent('''
    import os, sys
    log = sys.argv[1]

    class Recorder:
        def find_spec(self, name, path=None, target=None):
            if name in ("numpy", "pandas"):
                with open(log, "a", encoding="utf-8") as out:
                    out.write(f"{name} in process {os.getpid()}\\n")
            return None
    sys.meta_path.insert(0, Recorder())
    from qcdoctor.engine.commands.cli import main
    code = main(["triage", "--example", sys.argv[2], "--format", "md", "--lang", "en"])
    sys.stdout.flush()
    sys.exit(code)
''')


def _triage(tmp_path, example: str) -> tuple[str, list[str]]:
    """(the report, the numpy / pandas imports) of a cold triage of ``example``."""
    log = tmp_path / f"{example}.imports"
    done = subprocess.run([sys.executable, "-c", RUN, str(log), example], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_a_triage_without_tables_imports_neither_numpy_nor_pandas(tmp_path):
    report, imported = _triage(tmp_path, "board_only")
    assert report.startswith("# ") and "board" in report.lower()
    assert imported == []


def test_the_recorder_sees_what_the_forked_reader_imports(tmp_path):
    """The same check on an example with tables: numpy and pandas are recorded, in the
    forked child that reads the case (the command's own process never loads them)."""
    _, imported = _triage(tmp_path, "convert_quant_analysis")
    assert {line.split()[0] for line in imported} == {"numpy", "pandas"}
