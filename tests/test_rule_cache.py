"""The parsed-rule cache: exactly the rules of a fresh parse, rebuilt when a rule file
changes, and never trusted when corrupt or foreign."""

from __future__ import annotations

import os
import pickle
import shutil
from importlib import resources
from pathlib import Path

import pytest

from qcdoctor.engine import rule_cache
from qcdoctor.engine.rulebook import load_rules_from


@pytest.fixture
def rules_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    with resources.as_file(resources.files("qcdoctor.rules")) as src:
        shutil.copytree(src, tmp_path / "rules", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "rules"


def _cache_files(folder: Path) -> list[Path]:
    return sorted((folder.parent / "cache").glob("rules-*.pickle"))


def test_cached_rules_are_the_rules_of_a_fresh_parse(rules_copy):
    fresh = load_rules_from(rules_copy, cached=False)
    first = load_rules_from(rules_copy)            # parses and writes the cache
    assert len(_cache_files(rules_copy)) == 1
    second = load_rules_from(rules_copy)           # reads it
    assert fresh == first == second
    assert [r.stratum for r in fresh] == [r.stratum for r in second]
    assert [r.raw for r in fresh] == [r.raw for r in second]


def test_a_changed_rule_file_rebuilds_the_cache(rules_copy):
    load_rules_from(rules_copy)
    old = _cache_files(rules_copy)
    path = next(rules_copy.glob("stage/ST050-*.yaml"))
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("priority:", "priority: 7\n# was:", 1)
                    if "\npriority:" in text else text, encoding="utf-8")
    rules = {r.id: r for r in load_rules_from(rules_copy)}
    assert rules["ST050"].priority == 7
    assert _cache_files(rules_copy) != old and len(_cache_files(rules_copy)) == 1


def test_a_corrupt_cache_file_is_ignored(rules_copy):
    expected = load_rules_from(rules_copy, cached=False)
    load_rules_from(rules_copy)
    [cache] = _cache_files(rules_copy)
    cache.write_bytes(cache.read_bytes()[:1000])
    assert load_rules_from(rules_copy) == expected
    cache.write_bytes(b"\x00garbage")
    assert load_rules_from(rules_copy) == expected


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch payload-ran",))


def test_a_foreign_cache_file_never_runs_and_is_ignored(rules_copy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = load_rules_from(rules_copy, cached=False)
    load_rules_from(rules_copy)
    [cache] = _cache_files(rules_copy)
    key = pickle.loads(cache.read_bytes())["key"]
    cache.write_bytes(pickle.dumps({"key": key, "rules": (_Payload(),)}))
    assert load_rules_from(rules_copy) == expected
    assert not (tmp_path / "payload-ran").exists()
    cache.write_bytes(pickle.dumps({"key": "another version", "rules": tuple(expected[:3])}))
    assert load_rules_from(rules_copy) == expected


def test_an_unwritable_or_disabled_cache_only_costs_time(rules_copy, tmp_path, monkeypatch):
    expected = load_rules_from(rules_copy, cached=False)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(blocker / "cache"))
    assert load_rules_from(rules_copy) == expected
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", "off")
    assert rule_cache.cache_dir() is None
    assert load_rules_from(rules_copy) == expected
