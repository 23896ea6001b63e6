"""case.yaml as the user wrote it: comments, key order and unrelated keys survive edits.

Edits go through ruamel.yaml's round-trip mode; every save is validated against the
case schema first and written atomically, so an interrupted intake never leaves a
half-written or invalid file, and nothing the user wrote is lost.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from qcdoctor.atomic import write_text_atomic
from qcdoctor.collectors import limits
from qcdoctor.collectors.case_file import CASE_FILE, SCHEMA_ID, parse_case
from qcdoctor.errors import QcdoctorError

HEADER = ("qcdoctor case file: edit freely; `qcdoctor intake` keeps your comments and keys.\n"
          "Reference: docs/case-file.md.")


def _yaml() -> YAML:
    yaml = YAML()                       # round-trip
    yaml.preserve_quotes = True
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


class CaseDocument:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.path = self.folder / CASE_FILE
        if os.path.islink(self.path):
            # it is rewritten by replacing it: the link would become a file, and one leading
            # out of the folder would have been read as this case's
            raise QcdoctorError("case.yaml is a symlink: the intake edits only a case.yaml of "
                                "the folder's own", file=str(self.path),
                                fix="replace the link with a copy of the file it points to")
        self.existed = self.path.is_file()
        if self.existed:
            size = self.path.stat().st_size
            if size > limits.CASE_FILE_BYTES:
                raise QcdoctorError(f"{size:,} bytes: larger than the "
                                    f"{limits.size_text(limits.CASE_FILE_BYTES)} limit for "
                                    f"{CASE_FILE}", file=str(self.path),
                                    fix="keep only the keys qcdoctor reads")
            text = self.path.read_text(encoding="utf-8")
            parse_case(text, self.path, self.folder)        # refuse a broken file as it is
            try:
                self.data = _yaml().load(text) or CommentedMap()
            except Exception as exc:  # noqa: BLE001 - ruamel raises many kinds
                raise QcdoctorError(f"cannot edit this YAML: {exc}", file=str(self.path)) from None
            if not isinstance(self.data, CommentedMap):
                raise QcdoctorError("case.yaml must hold a mapping", file=str(self.path))
        else:
            self.data = CommentedMap()
            self.data["schema"] = SCHEMA_ID
            self.data.yaml_set_start_comment(HEADER)

    def get(self, key: str):
        node = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def has(self, key: str) -> bool:
        value = self.get(key)
        return value is not None and value != "" and value != {}

    def set(self, key: str, value, comment: str | None = None) -> None:
        parts = key.split(".")
        node = self.data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = CommentedMap()
            node = node[part]
        node[parts[-1]] = _flow(value)
        if comment:
            node.yaml_add_eol_comment(comment, parts[-1])

    def append(self, key: str, value) -> None:
        """Add ``value`` to the list at ``key`` (an existing list keeps its style)."""
        self.get(key).append(_flow(value))

    def text(self) -> str:
        stream = io.StringIO()
        _yaml().dump(self.data, stream)
        return stream.getvalue()

    def save(self) -> None:
        text = self.text()
        parse_case(text, self.path, self.folder)        # never write what would not load
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, text)
        except OSError as exc:
            # a full disk, a file-size limit, a read-only folder: the earlier case.yaml is
            # left as it was (the write is atomic), and the answers are shown, not lost
            raise QcdoctorError(f"cannot save {CASE_FILE}: {exc.strerror or exc}",
                                file=str(self.path),
                                fix="free space or lift the limit (ulimit -f unlimited), then "
                                    "run the intake again; the answers so far:\n" + text
                                ) from None


def _flow(value):
    """Short lists and stage entries read best on one line, as the examples write them."""
    if isinstance(value, list):
        seq = CommentedSeq(value)
        seq.fa.set_flow_style()
        return seq
    if isinstance(value, dict):
        mapping = CommentedMap(value)
        mapping.fa.set_flow_style()
        return mapping
    return value
