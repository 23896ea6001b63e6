"""``qcdoctor schema case|report``: the JSON Schema of case.yaml or of the JSON report.

Every key of the case schema carries a description (what an editor shows on hover), read
from the table "Keys of case.yaml" of docs/case-file.md, which ships with the package: the
page is the one place each key is described.
"""

from __future__ import annotations

import re
import sys

from qcdoctor.errors import EXIT_OK

ABOUT = dict(help="the JSON Schema of case.yaml (case-v1) or of the JSON report (report-v1)")
# each schema by its short name, its versioned name (as the help and the files say it) and
# its full id
_NAMES = {"case": "case", "case-v1": "case", "qcdoctor/case-v1": "case",
          "report": "report", "report-v1": "report", "qcdoctor/report-v1": "report"}

KEYS_PAGE, KEYS_HEADING = "case-file.md", "## Keys of case.yaml"
# a row of the table: `key` | description (a '|' inside a cell is written '\|')
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
_CELL_END = re.compile(r"(?<!\\)\|")
# <stage>, <side>: any one key in that place
_PLACEHOLDER = re.compile(r"<[a-z_]+>")


def declare(command) -> None:
    command.add_argument("which", choices=tuple(_NAMES), metavar="{case,report}",
                         help="case (also case-v1) or report (also report-v1)")


def run(args, parser) -> int:
    import json
    sys.stdout.write(json.dumps(schema_of(_NAMES[args.which]), ensure_ascii=False, indent=2)
                     + "\n")
    return EXIT_OK


def schema_of(name: str) -> dict:
    """The schema ``name`` (case or report) as the command prints it."""
    from qcdoctor.engine.reports.json_schemas import SCHEMAS
    schema = SCHEMAS[name]()
    if name == "case":
        described(schema, KeyDescriptions(key_descriptions()))
    return schema


def key_descriptions(text: str | None = None) -> dict[str, str]:
    """Key (``deploy.<side>.divisor``) -> its description, from the table under
    KEYS_HEADING of docs/case-file.md (``text``: that page's text)."""
    if text is None:
        from qcdoctor.package_data import read_text
        text = read_text("qcdoctor.docs", KEYS_PAGE)
    section = text.partition("\n" + KEYS_HEADING + "\n")[2].partition("\n## ")[0]
    found = {}
    for line in section.splitlines():
        row = _ROW.match(line)
        if row:
            cell = _CELL_END.split(row.group(2))[0]
            found[row.group(1)] = cell.replace("\\|", "|").replace("`", "").strip()
    return found


class KeyDescriptions:
    """The description of a key path: its own row, else the row whose placeholders
    (``<stage>``) match it."""

    def __init__(self, rows: dict[str, str]):
        self.rows = rows
        # re.escape leaves < and > as they are: the placeholders survive it
        self._patterns = [(re.compile(_PLACEHOLDER.sub("[^.]+", re.escape(key)) + r"\Z"), text)
                          for key, text in rows.items() if _PLACEHOLDER.search(key)]

    def of(self, path: str) -> str | None:
        if path in self.rows:
            return self.rows[path]
        return next((text for pattern, text in self._patterns if pattern.match(path)), None)


def described(schema: dict, descriptions: KeyDescriptions, path: str = "") -> None:
    """``description`` set on every property of ``schema`` that ``descriptions`` knows,
    through nullable wrappers (anyOf) and list entries (``analyses_run[].type``)."""
    for name, prop in schema.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        text = descriptions.of(key)
        if text:
            prop["description"] = text
        _nested(prop, key, descriptions)


def _nested(schema: dict, key: str, descriptions: KeyDescriptions) -> None:
    for part in schema.get("anyOf", ()):
        _nested(part, key, descriptions)
    if isinstance(schema.get("items"), dict):
        _nested(schema["items"], key + "[]", descriptions)
    if "properties" in schema:
        described(schema, descriptions, key)
