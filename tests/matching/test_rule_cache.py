"""The parsed-rule cache: exactly the rules of a fresh parse, rebuilt when a rule file
changes (found by stamps, checked by content while a change is recent), and never trusted
when corrupt or foreign."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

from qcdoctor import cache_files
from qcdoctor.engine.matching import rule_cache
from qcdoctor.engine.matching.rulebook import load_rules_from


def _cache_files(folder: Path) -> list[Path]:
    return sorted((folder.parent / "cache" / "rules").glob("rules-*.pickle"))


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


def _same_length_edit(rules_copy: Path) -> Path:
    """ST050's priority 50 -> 51: same size; the modification time put back as it was."""
    path = next(rules_copy.glob("stage/ST050-*.yaml"))
    status = path.stat()
    text = path.read_text(encoding="utf-8")
    assert "\npriority: 50\n" in text
    path.write_text(text.replace("\npriority: 50\n", "\npriority: 51\n"), encoding="utf-8")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    return path


def test_a_change_the_stamps_miss_is_caught_while_it_is_recent(rules_copy, monkeypatch):
    # a rewrite inside the file system's clock tick keeps size and mtime: with stamps
    # reduced to those two, only the content check of recently changed files can see it
    monkeypatch.setattr(rule_cache, "stamp", lambda status: (status.st_size,
                                                             status.st_mtime_ns, 0, 0))
    monkeypatch.setattr(rule_cache, "SETTLED_NS", 10**18)     # (copytree kept old mtimes)
    assert {r.id: r for r in load_rules_from(rules_copy)}["ST050"].priority == 50
    _same_length_edit(rules_copy)
    assert {r.id: r for r in load_rules_from(rules_copy)}["ST050"].priority == 51


def test_a_settled_cache_opens_no_rule_file(rules_copy, monkeypatch):
    from qcdoctor.engine.matching import rulebook
    expected = load_rules_from(rules_copy, cached=False)
    monkeypatch.setattr(rule_cache, "SETTLED_NS", 10**18)     # everything is recent
    load_rules_from(rules_copy)
    [cache] = _cache_files(rules_copy)
    assert pickle.loads(cache.read_bytes())["settled"] is False
    opened = []
    monkeypatch.setattr(rulebook, "_read", lambda sources: opened.append(1) or [
        (group, where, read()) for group, where, read, _ in sources])
    assert load_rules_from(rules_copy) == expected and opened == [1]    # checked by content
    monkeypatch.setattr(rule_cache, "SETTLED_NS", -10**18)    # now old enough: rewritten
    assert load_rules_from(rules_copy) == expected and opened == [1, 1]
    assert pickle.loads(cache.read_bytes())["settled"] is True
    assert load_rules_from(rules_copy) == expected and opened == [1, 1]  # stamps alone


def test_each_copy_of_the_rules_keeps_its_own_cache(rules_copy, tmp_path):
    other = tmp_path / "other" / "rules"
    shutil.copytree(rules_copy, other)
    load_rules_from(rules_copy)
    load_rules_from(other)
    assert len(_cache_files(rules_copy)) == 2
    assert load_rules_from(rules_copy) == load_rules_from(other)


def test_a_cache_folder_others_can_write_to_is_not_used(rules_copy, tmp_path):
    expected = load_rules_from(rules_copy, cached=False)
    folder = tmp_path / "cache" / "rules"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert load_rules_from(rules_copy) == expected
    assert _cache_files(rules_copy) == []


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
    assert cache_files.cache_dir() is None
    assert load_rules_from(rules_copy) == expected


def test_a_zipped_install_loads_its_rules_and_caches_them_by_content(tmp_path):
    """A package imported from a zip has no file stamps: its rules are found by content."""
    import importlib.util
    import subprocess
    import sys
    import zipfile
    archive = tmp_path / "qcdoctor.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for name in ("qcdoctor", "qcdoctor.engine", "qcdoctor.collectors", "qcdoctor.rules",
                     "qcdoctor.templates"):
            [folder] = importlib.util.find_spec(name).submodule_search_locations
            for path in sorted(Path(folder).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    out.write(path, "/".join([*name.split("."), *path.relative_to(folder).parts]))
    script = ("import sys; sys.path[:0] = sys.argv[1:3]\n"
              "from qcdoctor.engine.matching import rulebook\n"
              "assert '.zip' in rulebook.__file__, rulebook.__file__\n"
              "print(len(rulebook.load_rules()))\n")
    env = {**os.environ, "QCDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    import yaml  # wherever it is installed (a venv may see the system's site-packages)
    run = [sys.executable, "-S", "-c", script, str(archive),
           str(Path(yaml.__file__).resolve().parent.parent)]
    first = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    [cache] = (tmp_path / "cache" / "rules").glob("rules-anywhere-*.pickle")
    second = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert int(first.stdout) == int(second.stdout) == len(load_rules_from(
        Path(importlib.util.find_spec("qcdoctor.rules").submodule_search_locations[0]),
        cached=False))
    assert pickle.loads(cache.read_bytes())["key"].startswith("anywhere-")
