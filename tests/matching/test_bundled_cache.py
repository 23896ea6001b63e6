"""The bundled data files kept as marshal data between runs: exactly what the YAML says,
rebuilt when the file changes, and ignored when damaged or written by anything else."""

from __future__ import annotations

import os
from importlib import resources

import pytest
import yaml

from qcdoctor import package_data as bundled

FILES = [("qcdoctor.templates", "labels.yaml"), ("qcdoctor.templates", "checklist_items.yaml"),
         ("qcdoctor.rules", "questions.yaml")]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "bundled"


def _fresh(package: str, name: str):
    return yaml.safe_load((resources.files(package) / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(("package", "name"), FILES)
def test_the_cached_data_is_the_data_of_the_yaml(cache, package, name):
    first = bundled.load_yaml(package, name)               # parses and writes the cache
    assert len(list(cache.iterdir())) == 1
    second = bundled.load_yaml(package, name)              # reads it
    assert first == second == _fresh(package, name)


def test_a_changed_file_is_read_again(cache, tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    data = package / "data.yaml"
    data.write_text("a: 1\n", encoding="utf-8")
    monkeypatch.setattr(bundled, "package_files", lambda _: package)
    assert bundled.load_yaml("pkg", "data.yaml") == {"a": 1}
    data.write_text("a: 2\n", encoding="utf-8")
    assert bundled.load_yaml("pkg", "data.yaml") == {"a": 2}
    assert bundled.load_yaml("pkg", "data.yaml") == {"a": 2}


def test_a_damaged_or_foreign_entry_is_ignored_and_rewritten(cache):
    expected = bundled.load_yaml("qcdoctor.templates", "labels.yaml")
    [entry] = cache.iterdir()
    good = entry.read_bytes()
    for damaged in (good[:40], good[:32] + b"\xff\x00garbage", b"", b"x" * 32 + good[32:]):
        entry.write_bytes(damaged)
        assert bundled.load_yaml("qcdoctor.templates", "labels.yaml") == expected
        assert entry.read_bytes() == good                  # written again, whole


def test_without_a_usable_cache_folder_it_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(blocker / "cache"))
    assert bundled.load_yaml("qcdoctor.templates", "labels.yaml") == _fresh(
        "qcdoctor.templates", "labels.yaml")
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", "off")
    assert bundled.load_yaml("qcdoctor.templates", "labels.yaml") == _fresh(
        "qcdoctor.templates", "labels.yaml")
    assert not os.path.exists(blocker / "cache")


def test_without_a_package_folder_the_data_comes_through_importlib_resources(cache,
                                                                              monkeypatch):
    """A zipped install has no folder: importlib.resources reads the same files."""
    import importlib.resources
    expected = bundled.load_yaml("qcdoctor.templates", "labels.yaml")
    asked = []
    real = importlib.resources.files

    def files(package):
        asked.append(package)
        return real(package)
    monkeypatch.setattr(importlib.resources, "files", files)
    monkeypatch.setattr(bundled.os.path, "isdir", lambda _: False)
    bundled.package_files.cache_clear()
    try:
        assert bundled.load_yaml("qcdoctor.templates", "labels.yaml") == expected
        assert asked == ["qcdoctor.templates"]
    finally:
        bundled.package_files.cache_clear()
