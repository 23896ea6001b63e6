"""The rule catalogue: ids, files, required keys, examples, message fields, coverage."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
import yaml

from qcdoctor.engine.matching.rulebook import FILE_RE, REQUIRED, load_rules, load_rules_from
from qcdoctor.engine.reports.method_docs import sections
from qcdoctor.engine.reports.rule_docs import explain_rule, list_rules
from qcdoctor.errors import RuleError
from qcdoctor.vocabulary import GROUPS, MISSING_IDS, PITFALL_IDS
from tests.paths import REPO

RULE_FILES = sorted((REPO / "rules").glob("*/*.yaml"))


def test_every_rule_file_is_loaded_once():
    rules = load_rules()
    assert len(rules) == len(RULE_FILES)
    assert len({r.id for r in rules}) == len(rules)


@pytest.mark.parametrize("path", RULE_FILES, ids=[p.name for p in RULE_FILES])
def test_rule_file_shape(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    m = FILE_RE.match(path.name)
    assert m and m.group("id") == data["id"]
    assert data["id"].startswith(GROUPS[path.parent.name])
    for key in REQUIRED:
        assert key in data, f"{path.name} lacks {key}"
    assert data["examples"]["fires"] and data["examples"]["quiet"]
    # what a user reads: a section of the shipped docs that exists, or a public page
    for ref in data["references"]:
        assert ref.startswith(("docs/", "https://")), f"{path.name}: {ref} cannot be opened"
        if ref.startswith("docs/"):
            page, _, anchor = ref[len("docs/"):].partition("#")
            assert anchor in sections(page), f"{path.name}: {ref} names no section of {page}"
    # the knowledge-base items it encodes, for the coverage tests
    assert all(item.startswith(("knowledge.md", "seed")) for item in data.get("spec", []))


def _fields(template: str) -> set[str]:
    return {f.split(".")[0].split("!")[0] for _, f, _, _ in string.Formatter().parse(template) if f}


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.id)
def test_messages_only_read_bound_patterns(rule):
    """A {name.field} in a message must name one of the rule's positive patterns."""
    names = {p.name for p in rule.when if not p.negated}
    for text in [*rule.message.values(), *rule.rationale.values()]:
        assert _fields(text) <= names, f"{rule.id}: {_fields(text) - names} not bound"


def test_knowledge_ids_are_all_covered():
    rules = load_rules()
    missing = {r.then["missing"] for r in rules if "missing" in r.then}
    # every §12 id is reported: as a mistake the case shows, or one it is close to
    pitfalls = {r.then[k] for r in rules for k in ("pitfall", "caution") if k in r.then}
    assert missing == set(MISSING_IDS)
    assert pitfalls == set(PITFALL_IDS)
    conclusions = {r.then["conclusion"]["stage"] for r in rules if "conclusion" in r.then}
    assert conclusions == {"calibration", "qat_training", "pre_export", "export", "convert",
                           "nv12_insertion", "qdq_removal", "compile", "user_side", "none",
                           "undetermined"}


KNOWLEDGE = REPO.parent / "shared" / "docs" / "knowledge.md"
# rev 2 items whose rules are not on this branch yet; empty this list when they land
EXPECTED_MISSING_AT_MERGE: set[str] = set()


def rev2_references(text: str) -> list[str]:
    """The rev 2 items listed in knowledge.md's summary, as rules reference them.

    The summary reads "**Revision 2** (...): item, item (§5); item (§6); ...": an item
    becomes "knowledge.md §5 rev2: item" (sections as written, e.g. "§12, §13").
    """
    start = text.index("**Revision 2**")
    paragraph = " ".join(text[start:text.index("\n\n", start)].split())
    listing = paragraph.split("*rev 2*):", 1)[1].strip().rstrip(".")
    refs = []
    for group in listing.split(";"):
        m = re.fullmatch(r"\s*(.+?)\s*\((§[^)]*)\)\s*", group)
        assert m, f"unreadable rev 2 group in knowledge.md: {group!r}"
        refs += [f"knowledge.md {m.group(2)} rev2: {item.strip()}" for item in m.group(1).split(",")]
    return refs


@pytest.mark.skipif(not KNOWLEDGE.is_file(), reason="knowledge.md is not beside the repository")
def test_every_rev2_item_of_the_knowledge_is_referenced_by_a_rule():
    items = rev2_references(KNOWLEDGE.read_text(encoding="utf-8"))
    assert len(items) >= 15 and "knowledge.md §5 rev2: tolerance boundary" in items
    referenced = {item for rule in load_rules() for item in rule.spec}
    missing = [item for item in items if item not in referenced]
    assert sorted(missing) == sorted(EXPECTED_MISSING_AT_MERGE), \
        f"not referenced by any rule: {sorted(set(missing) - EXPECTED_MISSING_AT_MERGE)}; " \
        f"referenced now, drop from the expected-missing list: " \
        f"{sorted(EXPECTED_MISSING_AT_MERGE - set(missing))}"
    unknown = sorted(ref for ref in referenced if " rev2:" in ref and ref not in items)
    assert not unknown, f"rules name rev 2 items knowledge.md does not list: {unknown}"


def test_rule_docs_generate_for_every_rule():
    listing = list_rules("md", "zh")
    for rule in load_rules():
        assert rule.id in listing
        doc = explain_rule(rule.id.lower(), "en")
        assert doc.startswith(f"## {rule.id}: {rule.title['en']}")
        assert "When (all of)" in doc
        for ref in rule.references:          # printed with its section and a page that exists
            page, _, anchor = ref.removeprefix("docs/").partition("#")
            if ref.startswith("docs/"):
                assert f"{ref} (“{sections(page)[anchor]}”, " in doc
                assert Path(doc.split(f"{ref} (“", 1)[1].split("”, ", 1)[1].split(")", 1)[0]).is_file()


def _write_rule(tmp_path: Path, group: str, name: str, text: str) -> Path:
    folder = tmp_path / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return tmp_path


GOOD = (REPO / "rules" / "stage" / "ST050-qat-bc-to-quantized-bc.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("change,needle", [
    (("from: qat_bc,", "from: {gt: 10},"), "compares numbers"),
    (("gap: 0}\nthen", "gap: 1e-5}\nthen"), "decimal point"),
    (("  - {type: transition,", "  - {type: case, retrain: no}\n  - {type: transition,"), "quote them"),
    (("from: qat_bc, to: quantized_bc, gap: 0}\nthen", "from: qat_bc, to: quantised_bc, gap: 0}\nthen"), "must be one of"),
    (("  - {type: transition,", "  - {type: transitions,"), "unknown fact type"),
    (("gap: 0}\nthen", "gapp: 0}\nthen"), "has no field"),
    (("severity: error", "severity: fatal"), "severity"),
    (("id: ST050", "id: AN050"), "ids starting ST"),
    (("  quiet:\n", "  silent:\n"), "examples need"),
    (("references: [", 'references: ["knowledge.md §5", '), "section of the project's docs"),
    (("references: [", 'references: ["docs/method.md", '), "section of the project's docs"),
])
def test_broken_rules_are_rejected_with_the_file_named(tmp_path, change, needle):
    root = _write_rule(tmp_path, "stage", "ST050-broken.yaml", GOOD.replace(*change))
    with pytest.raises(RuleError) as err:
        load_rules_from(root)
    assert needle in str(err.value)
    assert "ST050-broken.yaml" in str(err.value)


def test_absence_only_rules_are_refused(tmp_path):
    text = GOOD.replace("  - {type: transition, from: qat_bc, to: quantized_bc, gap: 0}",
                        "  - not: {type: transition}")
    with pytest.raises(RuleError, match="positive pattern"):
        load_rules_from(_write_rule(tmp_path, "stage", "ST050-x.yaml", text))


def test_rules_feeding_back_into_themselves_are_refused(tmp_path):
    text = GOOD.replace("  - {type: transition, from: qat_bc, to: quantized_bc, gap: 0}",
                        "  - {type: conclusion, stage: convert}")
    with pytest.raises(RuleError, match="cycle"):
        load_rules_from(_write_rule(tmp_path, "stage", "ST050-x.yaml", text))
