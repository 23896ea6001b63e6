"""A removed file's name is gone when the call returns, and its descriptor (which holds the
space until it closes) is closed by a worker that ends once idle (common/
background_free.py): nothing is left in the folder, nothing held open, no thread left."""

from __future__ import annotations

import os
import threading
import time

import pytest

from qcdoctor.background_free import remove_freeing_later

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="reads the open descriptors from /proc")


def held_open(path) -> bool:
    """Whether this process still holds ``path`` open (an unlinked file shows '(deleted)')."""
    target = str(path)
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(target):
                return True
        except OSError:
            continue
    return False


def worker_running() -> bool:
    return any(t.name == "qcdoctor-free" for t in threading.enumerate())


def settled(test, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if test():
            return True
        time.sleep(0.02)
    return False


def test_a_file_is_gone_at_once_and_its_space_released_by_a_worker_that_ends(tmp_path):
    path = tmp_path / "old.csv"
    path.write_bytes(b"x" * 100_000)
    remove_freeing_later(path)
    assert not os.path.lexists(path)
    assert os.listdir(tmp_path) == []
    assert settled(lambda: not held_open(path)), "the unlinked file is still held open"
    assert settled(lambda: not worker_running()), "the worker did not end once idle"


def test_many_files_are_all_released(tmp_path):
    paths = [tmp_path / f"f{i}" for i in range(200)]
    for path in paths:
        path.write_bytes(b"y" * 4096)
    for path in paths:
        remove_freeing_later(path)
    assert os.listdir(tmp_path) == []
    assert settled(lambda: not any(held_open(p) for p in paths))


def test_a_link_is_removed_never_its_target(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("kept", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    remove_freeing_later(link)
    assert not os.path.lexists(link)
    assert target.read_text(encoding="utf-8") == "kept"


def test_an_empty_folder_is_removed_a_full_one_refused_and_kept(tmp_path):
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "inside").write_text("kept", encoding="utf-8")
    remove_freeing_later(empty, folder=True)
    assert not empty.exists()
    with pytest.raises(OSError):
        remove_freeing_later(full, folder=True)
    assert (full / "inside").read_text(encoding="utf-8") == "kept"
    assert settled(lambda: not held_open(full) and not held_open(empty))


def test_a_missing_file_raises_as_unlink_does(tmp_path):
    with pytest.raises(FileNotFoundError):
        remove_freeing_later(tmp_path / "absent")
