"""common/atomic.py's replacement of a file a rerun rewrites (``durable=False``): where the
system can, the new file and the old one swap names atomically (Linux's renameat2), the
old one then removed; elsewhere a rename. Either way the name holds the whole old file or
the whole new one, with the mode asked for, a link at the name is replaced and never
followed, a folder at the name is never moved, and no temporary file is left."""

from __future__ import annotations

import os
import sys

import pytest

from qcdoctor import atomic
from qcdoctor.atomic import put_in_place, temporary_beside, write_text_atomic

SWAPS = [True, False] if sys.platform.startswith("linux") else [False]


@pytest.fixture(params=SWAPS, ids=lambda swap: "swap" if swap else "rename")
def swap(request, monkeypatch):
    if not request.param:
        monkeypatch.setattr(atomic, "_renameat2", False)
    return request.param


def _staged(folder, text: str) -> str:
    fd, name = temporary_beside(folder / "staged")        # its folder is what counts
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return name


def test_a_rerun_replaces_the_file_whole_and_leaves_no_temporary(tmp_path, swap):
    target = tmp_path / "out.csv"
    target.write_text("old\n", encoding="utf-8")
    put_in_place(_staged(tmp_path, "new\n"), target, 0o640, durable=False)
    assert target.read_text(encoding="utf-8") == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    if swap:
        assert atomic._renameat2, "the system's swap was not found on Linux"


def test_a_first_write_renames_into_an_empty_name(tmp_path, swap):
    target = tmp_path / "out.csv"
    put_in_place(_staged(tmp_path, "first\n"), target, 0o644, durable=False)
    assert target.read_text(encoding="utf-8") == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_link_at_the_name_is_replaced_and_its_target_untouched(tmp_path, swap):
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("someone else's\n", encoding="utf-8")
    target = tmp_path / "out.csv"
    target.symlink_to(elsewhere)
    put_in_place(_staged(tmp_path, "new\n"), target, 0o644, durable=False)
    assert not target.is_symlink() and target.read_text(encoding="utf-8") == "new\n"
    assert elsewhere.read_text(encoding="utf-8") == "someone else's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.csv", "out.csv"]


def test_a_folder_at_the_name_is_never_moved(tmp_path, swap):
    target = tmp_path / "out.csv"
    target.mkdir()
    (target / "inside").write_text("kept\n", encoding="utf-8")
    staged = _staged(tmp_path, "new\n")
    with pytest.raises(OSError):
        put_in_place(staged, target, 0o644, durable=False)
    assert (target / "inside").read_text(encoding="utf-8") == "kept\n"


def test_write_text_atomic_keeps_the_files_mode(tmp_path, swap):
    target = tmp_path / "probe_run.yaml"
    target.write_text("a: 1\n", encoding="utf-8")
    target.chmod(0o600)
    write_text_atomic(target, "a: 2\n", durable=False)
    assert target.read_text(encoding="utf-8") == "a: 2\n"
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["probe_run.yaml"]
