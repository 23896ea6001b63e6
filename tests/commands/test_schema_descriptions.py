"""The case schema describes every key, each description read from the table "Keys of
case.yaml" of docs/case-file.md: one text for the page and the editor's hover."""

from __future__ import annotations

import json
import re

import jsonschema
import yaml

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.commands.schema import KeyDescriptions, key_descriptions, schema_of
from tests.paths import REPO

PAGE = REPO / "docs" / "case-file.md"


def _keys(schema: dict, path: str = "") -> dict[str, dict]:
    """Key path (``analyses_run[].type``) -> its property schema, every key of ``schema``."""
    found = {}
    for name, prop in schema.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        found[key] = prop
        found.update(_inner(prop, key))
    return found


def _inner(schema: dict, key: str) -> dict[str, dict]:
    found = {}
    for part in schema.get("anyOf", ()):
        found.update(_inner(part, key))
    if isinstance(schema.get("items"), dict):
        found.update(_inner(schema["items"], key + "[]"))
    if "properties" in schema:
        found.update(_keys(schema, key))
    return found


def _printed_case_schema(capsys) -> dict:
    assert main(["schema", "case"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_key_of_the_case_schema_has_a_description(capsys):
    keys = _keys(_printed_case_schema(capsys))
    assert len(keys) > 100                     # every level: stages, deploy sides, thresholds
    undescribed = [key for key, prop in keys.items() if not prop.get("description", "").strip()]
    assert not undescribed, f"add rows for these keys to docs/case-file.md: {undescribed}"


def test_every_row_of_the_page_describes_a_key_of_the_schema(capsys):
    keys = list(_keys(_printed_case_schema(capsys)))
    rows = key_descriptions(PAGE.read_text(encoding="utf-8"))
    stale = [row for row in rows if not any(KeyDescriptions({row: "x"}).of(k) for k in keys)]
    assert not stale, f"rows of docs/case-file.md naming no key of the case schema: {stale}"


def test_the_descriptions_are_the_pages_words(capsys):
    rows = key_descriptions(PAGE.read_text(encoding="utf-8"))
    keys = _keys(_printed_case_schema(capsys))
    # divisor, on both sides, by its <side> row: the hover says what it is and its default
    for side in ("train", "board"):
        text = keys[f"deploy.{side}.divisor"]["description"]
        assert text == rows["deploy.<side>.divisor"]
        assert "(x / divisor - mean) / std (default 1)" in text and "255" in text
    assert keys["stages.quantized_bc.value"]["description"] == rows["stages.<stage>.value"]
    assert keys["analyses_run[].origin"]["description"].startswith("The tool that wrote out_dir")
    # a key's own row wins over a placeholder's
    assert keys["deploy.board.stride"]["description"] == rows["deploy.board.stride"]


def test_the_table_is_read_from_its_section_with_code_marks_dropped():
    page = ("# Case\n\n| key | what it holds |\n|---|---|\n| `ignored` | another table |\n\n"
            "## Keys of case.yaml\n\n| key | what it holds |\n|---|---|\n"
            "| `title` | The `title` \\| heading. |\n| `deploy.<side>.color` | Colour. |\n\n"
            "## Next\n\n| `later` | not a key |\n")
    rows = key_descriptions(page)
    assert rows == {"title": "The title | heading.", "deploy.<side>.color": "Colour."}
    described = KeyDescriptions(rows)
    assert described.of("deploy.train.color") == described.of("deploy.board.color") == "Colour."
    assert described.of("deploy.train") is None and described.of("deploy.x.y.color") is None


def test_the_described_schema_is_valid_and_takes_the_examples(capsys):
    schema = schema_of("case")
    jsonschema.Draft7Validator.check_schema(schema)
    with example_path("board_nv12_deploy") as folder:
        case = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(case))


def test_the_page_ships_with_the_package():
    """The descriptions are read from the installed docs at run time."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^"qcdoctor\.docs" = \["\*\.md"\]', pyproject, re.M)
    assert re.search(r'^"qcdoctor\.docs" = "docs"', pyproject, re.M)
