"""Load and validate the rule files (one rule per YAML file under rules/<group>/)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

from qcdoctor.engine.matching import rule_cache
from qcdoctor.engine.matching.patterns import Pattern, parse_when
from qcdoctor.errors import RuleError
from qcdoctor.package_data import package_files, safe_yaml
from qcdoctor.rule_outputs import PRODUCES_FACT, bilingual, check_then
from qcdoctor.vocabulary import (
    GROUPS,
    SEVERITIES,
)

ID_RE = re.compile(r"^[A-Z]{2}\d{3}$")
FILE_RE = re.compile(r"^(?P<id>[A-Z]{2}\d{3})-[a-z0-9]+(?:-[a-z0-9]+)*\.yaml$")
REQUIRED = ("id", "title", "message", "severity", "priority", "references", "rationale",
            "when", "then", "examples")
OPTIONAL = ("fix", "spec")
# a reference a user can open: a page of the project's documentation (shipped with the
# package) at one of its sections, or a public web page
REFERENCE_RE = re.compile(r"^(docs/[a-z0-9_-]+\.md#[a-z0-9-]+|https://\S+)$")


@dataclass(frozen=True)
class Rule:
    id: str
    group: str
    path: str
    title: dict
    message: dict
    severity: str
    priority: int
    references: tuple
    rationale: dict
    when: tuple[Pattern, ...]
    then: dict
    examples: dict
    fix: dict | None = None
    spec: tuple = ()            # the knowledge-base items it encodes (traceability only)
    stratum: int = 0
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def reads(self) -> set[str]:
        return {p.type for p in self.when}

    @property
    def produces(self) -> set[str]:
        return {PRODUCES_FACT[k] for k in self.then if k in PRODUCES_FACT}


def _check_examples(examples, where: str) -> dict:
    ok = isinstance(examples, dict) and all(
        isinstance(examples.get(k), list) and examples[k] and all(
            isinstance(case, list) and all(isinstance(f, dict) for f in case)
            for case in examples[k]) for k in ("fires", "quiet"))
    if not ok:
        raise RuleError("examples need 'fires' and 'quiet', each a list of fact lists",
                        file=where, key="examples")
    return examples


def parse_rule(data, where: str, group: str) -> Rule:
    if not isinstance(data, dict):
        raise RuleError("a rule file holds one mapping", file=where)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise RuleError(f"missing keys {missing}", file=where)
    unknown = set(data) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise RuleError(f"unknown keys {sorted(unknown)}", file=where)
    rid = data["id"]
    if not isinstance(rid, str) or not ID_RE.match(rid):
        raise RuleError("id must be two capitals and three digits, e.g. ST040", file=where,
                        key="id")
    if GROUPS.get(group) != rid[:2]:
        raise RuleError(f"rules in {group}/ have ids starting {GROUPS.get(group)}", file=where,
                        key="id")
    if data["severity"] not in SEVERITIES:
        raise RuleError(f"severity must be one of {SEVERITIES}", file=where, key="severity")
    if not isinstance(data["priority"], int):
        raise RuleError("priority must be an integer", file=where, key="priority")
    if not isinstance(data["references"], list) or not data["references"]:
        raise RuleError("references must list where a user reads about the rule", file=where,
                        key="references", fix="e.g. [\"docs/method.md#reading-the-chain\"]")
    for i, ref in enumerate(data["references"]):
        if not isinstance(ref, str) or not REFERENCE_RE.match(ref):
            raise RuleError("a reference is a section of the project's docs or a public page",
                            file=where, key=f"references[{i}]",
                            fix="docs/<page>.md#<section-anchor> or an https:// address")
    spec = data.get("spec", [])
    if not isinstance(spec, list) or not all(isinstance(item, str) for item in spec):
        raise RuleError("spec lists the knowledge-base items the rule encodes, as text",
                        file=where, key="spec")
    fix = bilingual(data["fix"], "fix", where) if "fix" in data else None
    return Rule(id=rid, group=group, path=where,
                title=bilingual(data["title"], "title", where),
                message=bilingual(data["message"], "message", where),
                severity=data["severity"], priority=data["priority"],
                references=tuple(data["references"]),
                rationale=bilingual(data["rationale"], "rationale", where),
                when=parse_when(data["when"], where), then=check_then(data["then"], where),
                examples=_check_examples(data["examples"], where), fix=fix,
                spec=tuple(spec), raw=data)


def _stratify(rules: list[Rule]) -> list[Rule]:
    """Order rules so a rule reading a derived fact runs after every rule producing it."""
    producers: dict[str, list[str]] = {}
    for r in rules:
        for t in r.produces:
            producers.setdefault(t, []).append(r.id)
    level = {r.id: 0 for r in rules}
    by_id = {r.id: r for r in rules}
    for _ in range(len(rules) + 1):
        changed = False
        for r in rules:
            need = max((level[p] + 1 for t in r.reads for p in producers.get(t, ())), default=0)
            if need > level[r.id]:
                level[r.id], changed = need, True
        if not changed:
            break
    else:
        raise RuleError("rules read what they produce in a cycle",
                        fix="a derived fact cannot feed back into its own producers")
    return [Rule(**{**r.__dict__, "stratum": level[r.id]}) for r in
            sorted(by_id.values(), key=lambda r: r.id)]


def _rule_sources(root) -> list[tuple[str, str, Callable[[], bytes], tuple | None]]:
    """(group, where, reader of its bytes, stamp or None) of every rule file under ``root``,
    checking folder and file names. Files are opened only when the cache cannot answer."""
    sources = []
    for group, entries in _rule_folders(root):
        if group not in GROUPS:
            raise RuleError(f"unknown rule group folder {group!r}", file=f"rules/{group}")
        for name, read, stamp in entries:
            if not name.endswith((".yaml", ".yml")):
                continue
            where = f"rules/{group}/{name}"
            if not FILE_RE.match(name):
                raise RuleError("rule files are named <ID>-<slug>.yaml", file=where)
            sources.append((group, where, read, stamp))
    return sources


def _rule_folders(root):
    """(group, [(file name, reader, stamp)]) per rule folder, sorted by name; plain folders
    through os.scandir (a third of the time of pathlib on every run), with their stamps;
    others (a zipped install) as resources, without."""
    def reader(path):
        def read() -> bytes:
            with open(path, "rb") as handle:
                return handle.read()
        return read
    if isinstance(root, Path):
        with os.scandir(root) as listing:
            groups = sorted((e for e in listing if e.is_dir() and not e.name.startswith(("_", "."))),
                            key=lambda e: e.name)
        for group in groups:
            with os.scandir(group.path) as listing:
                files = sorted((e.name, reader(e.path), rule_cache.stamp(e.stat()))
                               for e in listing)
            yield group.name, files
        return
    for group_dir in sorted(root.iterdir(), key=lambda p: p.name):
        if group_dir.is_dir() and not group_dir.name.startswith(("_", ".")):
            yield group_dir.name, [(p.name, p.read_bytes, None)
                                   for p in sorted(group_dir.iterdir(), key=lambda p: p.name)]


def _parse_sources(sources: list[tuple[str, str, bytes]]) -> list[Rule]:
    import yaml  # here: with the rule cache warm, no rule is parsed
    rules, seen = [], {}
    for group, where, data in sources:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RuleError(f"not UTF-8 text (byte {exc.start})", file=where,
                            fix="save the rule file as UTF-8") from None
        try:
            data = safe_yaml(text)
        except yaml.YAMLError as exc:
            raise RuleError(f"invalid YAML: {exc}", file=where) from None
        rule = parse_rule(data, where, group)
        file_id = FILE_RE.match(where.rsplit("/", 1)[-1]).group("id")
        if rule.id != file_id:
            raise RuleError(f"file name says {file_id} but id is {rule.id}", file=where)
        if rule.id in seen:
            raise RuleError(f"id {rule.id} also used by {seen[rule.id]}", file=where)
        seen[rule.id] = where
        rules.append(rule)
    return _stratify(rules)


def load_rules_from(root, *, cached: bool = True) -> list[Rule]:
    """Every rule under ``root`` (a folder, or an importlib.resources Traversable), checked;
    from the rule cache when it matches the files."""
    sources = _rule_sources(root)
    if not cached or not rule_cache.enabled():
        return _parse_sources(_read(sources))
    read_from = time.time_ns()          # no rule file is read before this moment

    @cache
    def contents_and_key() -> tuple[list, str]:
        contents = _read(sources)
        return contents, rule_cache.cache_key([(where, data) for _, where, data in contents])
    stamps = [(where, stamp) for _, where, _, stamp in sources]
    try:
        if any(stamp is None for _, stamp in stamps):
            raise OSError("no stamps")
        key, newest = rule_cache.stamp_key(str(root), stamps)
    except OSError:                     # a zipped install: found by the files' contents
        key, newest = rule_cache.content_file_key(contents_and_key()[1]), read_from
    now_settled = rule_cache.settled(read_from, newest)
    rules = rule_cache.read(key, lambda: contents_and_key()[1], now_settled)
    if rules is None:
        contents, content = contents_and_key()
        rules = tuple(_parse_sources(contents))
        rule_cache.write(key, rules, content, now_settled)
    return list(rules)


def _read(sources) -> list[tuple[str, str, bytes]]:
    return [(group, where, read()) for group, where, read, _ in sources]


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """The bundled rule book, loaded once per process."""
    return tuple(load_rules_from(package_files("qcdoctor.rules")))


def rule_by_id(rule_id: str) -> Rule | None:
    return next((r for r in load_rules() if r.id == rule_id.upper()), None)
