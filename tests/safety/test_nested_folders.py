"""A case folder nested a thousand levels deep: every command that walks a case (triage,
audit, collect, pack, intake) and the Python API read it, never a RecursionError; the
walk lists what os.walk lists, in the same order, without following a symlinked folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import qcdoctor
from qcdoctor.collectors.files import list_case_files, walk
from qcdoctor.engine.commands.cli import main

DEPTH = 1000


def _nested(root: Path) -> Path:
    """``root`` with a case.yaml and DEPTH folders nested under it, a file at the bottom."""
    root.mkdir()
    (root / "case.yaml").write_text("symptom: accuracy drops\nplatform: {chip: J6E}\n",
                                    encoding="utf-8")
    deepest = root
    for _ in range(DEPTH):              # os.makedirs recurses once per level
        deepest = deepest / "d"
        deepest.mkdir()
    (deepest / "notes.txt").write_text("deep\n", encoding="utf-8")
    return root


def _remove(root: Path) -> None:
    """Remove a nested tree bottom-up without recursion (shutil.rmtree recurses)."""
    folders = [root]
    while (folders[-1] / "d").is_dir():
        folders.append(folders[-1] / "d")
    for folder in reversed(folders):
        for entry in folder.iterdir():
            if not entry.is_dir() or entry.is_symlink():
                entry.unlink()
        folder.rmdir()


@pytest.fixture(scope="module")
def deep_case(tmp_path_factory) -> Path:
    root = _nested(tmp_path_factory.mktemp("nested") / "case")
    yield root
    _remove(root)


def test_the_walk_reaches_the_bottom_without_recursion(deep_case):
    listed = list_case_files(deep_case)
    assert "case.yaml" in listed
    assert any(p.endswith("/d/notes.txt") and p.count("/") == DEPTH for p in listed)


@pytest.mark.parametrize("command", [["triage"], ["audit"], ["collect"],
                                     ["triage", "--format", "html"]])
def test_commands_read_a_deeply_nested_case(deep_case, command, capsys):
    assert main([*command, str(deep_case)]) == 0
    out, err = capsys.readouterr()
    assert "RecursionError" not in out + err and "internal error" not in err


def test_pack_bundles_a_deeply_nested_case(deep_case, tmp_path, capsys):
    bundle = tmp_path / "bundle.tar.gz"
    assert main(["pack", str(deep_case), "-o", str(bundle)]) == 0
    assert bundle.stat().st_size > 0
    assert "internal error" not in capsys.readouterr().err


def test_intake_in_a_deeply_nested_folder(tmp_path, capsys):
    folder = _nested(tmp_path / "case")
    (folder / "case.yaml").unlink()
    answers = tmp_path / "answers.yaml"
    answers.write_text("symptom: mAP drops after convert\nplatform.chip: J6E\n",
                       encoding="utf-8")
    try:
        code = main(["intake", str(folder), "--answers", str(answers)])
        err = capsys.readouterr().err
        assert "RecursionError" not in err and "internal error" not in err
        assert code in (0, 1) and (folder / "case.yaml").is_file()
    finally:
        _remove(folder)


def test_the_api_reads_a_deeply_nested_case(deep_case):
    report = qcdoctor.triage(deep_case)
    assert report.to_markdown().strip()


def test_the_walk_is_os_walk_without_symlinked_folders(tmp_path):
    root = tmp_path / "tree"
    for folder in ("b/y", "a/x/z", "a/w", ".git/objects", "c"):
        (root / folder).mkdir(parents=True)
    for file in ("b/y/1.txt", "a/x/z/2.txt", "a/3.txt", "4.txt", ".git/objects/5"):
        (root / file).write_text("x", encoding="utf-8")
    (root / "c" / "outside").symlink_to(tmp_path, target_is_directory=True)
    (root / "link.txt").symlink_to(root / "4.txt")
    ours = [(r.relative_to(root).as_posix(), list(d), f) for r, d, f in walk(root)]
    expected = []
    for r, d, f in os.walk(root, followlinks=False):
        d[:] = sorted(x for x in d if x != ".git")
        expected.append((Path(r).relative_to(root).as_posix(), list(d), sorted(f)))
    assert sorted(ours) == sorted(expected)
    assert [r for r, _, _ in ours] == [".", "a", "a/w", "a/x", "a/x/z", "b", "b/y", "c"]
    # a symlinked folder is listed as a name, never entered
    assert ("c", ["outside"], []) in ours
    assert [r.relative_to(root).as_posix() for r, _, _ in walk(root, max_depth=1)] \
        == [".", "a", "b", "c"]
