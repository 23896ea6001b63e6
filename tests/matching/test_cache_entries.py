"""Whatever is found in the user's cache folder, a run never executes it, never blocks on it
and never reads more than an entry's size: it is a miss, rebuilt and rewritten."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from qcdoctor.cache_files import read_entry

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")

_TRIAGE = [sys.executable, "-m", "qcdoctor", "triage", "--example", "convert_j6e_no_retrain",
           "--format", "md", "--lang", "en"]
KINDS = ("rules", "bundled", "templates")


class _Marker:
    """Unpickled, it would create ``path``: a planted entry's payload."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _triage(cache: Path) -> str:
    env = dict(os.environ, QCDOCTOR_CACHE_DIR=str(cache))
    done = subprocess.run(_TRIAGE, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A cache folder as a run leaves it, and the report that run wrote."""
    cache = tmp_path_factory.mktemp("cache")
    report = _triage(cache)
    for kind in KINDS:
        assert any((cache / kind).iterdir()), f"the run stored no {kind} entry"
    return cache, report


def _replace_entries(cache: Path, make) -> list[Path]:
    replaced = []
    for kind in KINDS:
        for entry in sorted((cache / kind).iterdir()):
            entry.unlink()
            make(entry)
            replaced.append(entry)
    return replaced


def _copy(cache: Path, tmp_path: Path) -> Path:
    import shutil
    target = tmp_path / "cache"
    shutil.copytree(cache, target)
    return target


def test_fifos_in_place_of_entries_are_misses(filled, tmp_path):
    cache, report = filled
    cache = _copy(cache, tmp_path)
    replaced = _replace_entries(cache, os.mkfifo)
    assert _triage(cache) == report            # not blocked (the timeout would fire), same
    assert all(path.is_file() for path in replaced)          # rewritten as plain entries


def test_links_to_endless_devices_are_misses(filled, tmp_path):
    cache, report = filled
    cache = _copy(cache, tmp_path)
    _replace_entries(cache, lambda entry: entry.symlink_to("/dev/zero"))
    assert _triage(cache) == report
    assert read_entry("/dev/zero") is None


def test_planted_pickles_never_run(filled, tmp_path):
    cache, report = filled
    cache = _copy(cache, tmp_path)
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Marker(str(marker)))
    # the same payload behind every header a reader might skip before unpickling
    _replace_entries(cache, lambda entry: entry.write_bytes(
        entry.name.encode()[:20] + payload if "templates" in str(entry) else payload))
    for entry in (cache / "templates").iterdir():      # Jinja's own layout: magic, pickle
        import jinja2.bccache
        entry.write_bytes(jinja2.bccache.bc_magic + payload)
    assert _triage(cache) == report
    assert not marker.exists()


def test_entries_of_another_user_or_writable_by_others_are_misses(tmp_path):
    entry = tmp_path / "entry"
    entry.write_bytes(b"data")
    entry.chmod(0o600)
    assert read_entry(entry) == b"data"
    entry.chmod(0o666)
    assert read_entry(entry) is None
    entry.chmod(0o600)
    assert read_entry(entry, limit=3) is None                # larger than any entry we write
    assert read_entry(tmp_path / "missing") is None
    assert read_entry(tmp_path) is None                      # a folder
